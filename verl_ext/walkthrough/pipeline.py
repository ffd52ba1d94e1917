"""The walkthrough end to end: questions -> G scripted rollouts each -> rewards -> group credit -> advantages.

Everything here is a real part of the training path except the words the policy writes (see ``behaviour``): verl's
agent loop, the tiny Qwen2.5-VL scoring every token, the tool server over HTTP, the ``neos_answer_judge`` reward
manager, the group assessor with the offline credit judge, and verl's ``compute_advantage`` with ``neos_turn_credit``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from transformers import PreTrainedModel, ProcessorMixin

from verl_ext.credit import CreditParams
from verl_ext.credit.labels import CreditLabels
from verl_ext.credit.offline_judge import OfflinePathJudge, TaskPath
from verl_ext.rollout.hf_generate import TransformersGenerateClient
from verl_ext.rollout.record import TrajectoryRecord
from verl_ext.walkthrough.behaviour import Plan, ScriptedBehaviourPolicy, Variant, draw_plans
from verl_ext.walkthrough.credit import CreditType, advantages, assess_group, turn_types
from verl_ext.walkthrough.questions import Question
from verl_ext.walkthrough.rollouts import RolloutSettings, run_group, trainer_config
from verl_ext.walkthrough.scoring import reward_manager, score


@dataclass
class Rollout:
    """One trajectory and everything the walkthrough computed for it."""

    question_id: str
    member: int
    variant: Variant
    reward: float
    prediction: str  # the final answer the reward manager read
    record: TrajectoryRecord
    response_mask: list[int]
    logprobs: list[float]  # the model's log-probs of its (scripted) tokens, as the rollout returned them
    labels: CreditLabels | None  # judge labels (assessed failures of mixed groups), else None
    types: list[CreditType] | None  # per turn, for assessed failures
    advantages: np.ndarray  # neos_turn_credit, per response token
    grpo: np.ndarray  # verl's GRPO, per response token

    @property
    def success(self) -> bool:
        return self.reward >= 0.5

    @property
    def grpo_value(self) -> float:
        """A_i: the value GRPO gives every policy token of this trajectory."""
        policy = np.flatnonzero(self.response_mask)
        return float(self.grpo[policy[0]]) if policy.size else 0.0

    @property
    def tool_calls(self) -> int:
        return sum(len(t.calls) for t in self.record.turns)


@dataclass
class Group:
    question_id: str
    question: str
    answer: str
    rollouts: list[Rollout]

    @property
    def successes(self) -> int:
        return sum(r.success for r in self.rollouts)

    @property
    def mixed(self) -> bool:
        return 0 < self.successes < len(self.rollouts)


@dataclass
class Walkthrough:
    groups: list[Group]
    params: CreditParams
    metrics: dict[str, float]  # the estimator's neos_credit/* metrics for the whole batch

    @property
    def rollouts(self) -> list[Rollout]:
        return [r for g in self.groups for r in g.rollouts]


async def run_walkthrough(
    questions: Sequence[Question],
    model: PreTrainedModel,
    processor: ProcessorMixin,
    url: str,
    *,
    group_size: int = 4,
    seed: int = 0,
    params: CreditParams = CreditParams(),
    settings: RolloutSettings = RolloutSettings(),
) -> Walkthrough:
    """Roll out ``group_size`` scripted episodes per question against the tool server at ``url``, score, judge
    and compute advantages for the whole batch at once (as one training step would)."""
    config = trainer_config(url, settings)
    policy = ScriptedBehaviourPolicy()
    # Forced mode: the script's words, the model's log-probs; the budget only guards against an overlong script.
    client = TransformersGenerateClient(model, processor, max_new_tokens=settings.max_turn_tokens, forced=policy)
    manager = reward_manager(client.processor.tokenizer)
    judge = OfflinePathJudge(TaskPath.model_validate(q.task.task_path()) for q in questions)
    pending: list[tuple[Question, list[Plan], list, list[float], list[str], list[CreditLabels | None]]] = []
    for q in questions:
        task = q.task
        plans = draw_plans(group_size, f"{seed}:{task.id}", q.expert_calls, task.answer, task.evidence(), q.distractor)
        episodes = await run_group(client, policy, plans, q.raw_prompt(), task.id, config)
        scored = [await score(manager, out, task.question, task.ground_truth()) for out, _ in episodes]
        rewards = [reward for reward, _ in scored]
        labels = await assess_group(judge, task.id, [record for _, record in episodes], rewards)
        pending.append((q, plans, episodes, rewards, [p for _, p in scored], labels))

    flat = [(q, i, out, reward, label) for q, _, eps, rws, _, lbs in pending
            for i, ((out, _), reward, label) in enumerate(zip(eps, rws, lbs))]
    credited, grpo, metrics = advantages(
        [out.response_mask for _, _, out, _, _ in flat],
        [reward for *_, reward, _ in flat],
        [q.task.id for q, *_ in flat],
        [label for *_, label in flat],
        params,
    )
    groups, k = [], 0
    for q, plans, episodes, rewards, predictions, labels in pending:
        rollouts = []
        for i, (plan, (out, record), reward, prediction, label) in enumerate(
            zip(plans, episodes, rewards, predictions, labels)
        ):
            rollouts.append(
                Rollout(
                    question_id=q.task.id,
                    member=i,
                    variant=plan.variant,
                    reward=reward,
                    prediction=prediction,
                    record=record,
                    response_mask=list(out.response_mask),
                    logprobs=list(out.response_logprobs or []),
                    labels=label,
                    types=turn_types(label, params) if label is not None and label.assessed else None,
                    advantages=credited[k],
                    grpo=grpo[k],
                )
            )
            k += 1
        groups.append(Group(q.task.id, q.task.question, q.task.answer, rollouts))
    return Walkthrough(groups=groups, params=params, metrics=metrics)
