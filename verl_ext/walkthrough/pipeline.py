"""The walkthrough end to end: questions -> G scripted rollouts each -> rewards -> group credit -> advantages.

Everything here is a real part of the training path except the words the policy writes (see ``behaviour``): verl's
agent loop, the tiny Qwen2.5-VL scoring every token, the tool server over HTTP, the ``neos_answer_judge`` reward
manager, the group assessor with the offline credit judge, and verl's ``compute_advantage`` with ``neos_turn_credit``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image
from transformers import PreTrainedModel, ProcessorMixin
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

from verl_ext.credit import CreditParams
from verl_ext.credit.labels import CreditLabels, CreditType
from verl_ext.credit.offline_judge import OfflinePathJudge, TaskPath
from verl_ext.rollout.hf_generate import TransformersGenerateClient
from verl_ext.rollout.record import TrajectoryRecord
from verl_ext.tools.client import close_shared_clients
from verl_ext.walkthrough.behaviour import Plan, ScriptedBehaviourPolicy, Variant, draw_plans
from verl_ext.walkthrough.credit import advantages, assess_group
from verl_ext.walkthrough.questions import Question
from verl_ext.walkthrough.rollouts import RolloutSettings, run_group, trainer_config
from verl_ext.walkthrough.scoring import reward_manager, score


@dataclass
class Rollout:
    """One trajectory and everything the walkthrough computed for it."""

    question_id: str
    member: int
    plan: Plan  # what the scripted behaviour policy wrote
    reward: float
    prediction: str  # the final answer the reward manager read
    record: TrajectoryRecord
    response_mask: list[int]
    logprobs: list[float]  # per response token as the rollout returned them: 0.0 placeholders on observations
    labels: CreditLabels | None  # judge labels (assessed failures of mixed groups), else None
    types: list[CreditType] | None  # per turn, for assessed failures
    advantages: np.ndarray  # neos_turn_credit, per response token
    grpo: np.ndarray  # verl's GRPO, per response token

    @property
    def variant(self) -> Variant:
        return self.plan.variant

    @property
    def success(self) -> bool:
        return self.reward >= 0.5

    @property
    def grpo_value(self) -> float:
        """A_i: the value GRPO gives every policy token of this trajectory."""
        policy = np.flatnonzero(self.response_mask)
        return float(self.grpo[policy[0]]) if policy.size else 0.0

    @property
    def mean_logprob(self) -> float | None:
        """Mean log-prob the model gives the policy's (scripted) tokens; observation tokens are excluded (verl's
        ``response_logprobs`` holds a 0.0 placeholder for each), else they would pull the mean towards 0."""
        policy = [lp for lp, m in zip(self.logprobs, self.response_mask) if m]
        return float(np.mean(policy)) if policy else None

    @property
    def tool_calls(self) -> int:
        return sum(len(t.calls) for t in self.record.turns)


@dataclass
class Group:
    question_id: str
    question: str
    answer: str
    images: tuple[Image.Image, ...]  # the entry images the prompt shows (img_1, ...)
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
    vocab_size: int  # of the scoring model: a random one gives each token about -ln(vocab_size)

    @property
    def rollouts(self) -> list[Rollout]:
        return [r for g in self.groups for r in g.rollouts]


def group_plans(q: Question, group_size: int, seed: int) -> list[Plan]:
    """The scripted plans of ``q``'s group under ``seed`` (reproducible; questions of one run differ)."""
    task = q.task
    return draw_plans(group_size, f"{seed}:{task.id}", q.expert_calls, task.answer, task.evidence(), q.distractor)


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
    manager = reward_manager(processor.tokenizer)
    judge = OfflinePathJudge(TaskPath.model_validate(q.task.task_path()) for q in questions)
    rows: list[_Scored] = []
    try:
        for q in questions:
            task = q.task
            plans = group_plans(q, group_size, seed)
            episodes = await run_group(client, policy, plans, q.raw_prompt(), task.id, config)
            scored = [await score(manager, out, task.question, task.ground_truth()) for out, _ in episodes]
            labels = await assess_group(judge, task.id, [record for _, record in episodes], [r for r, _ in scored])
            rows += [_Scored(q, i, *x) for i, x in enumerate(zip(plans, episodes, scored, labels))]
    finally:
        await close_shared_clients()  # the agent loop's tool-server connections belong to this event loop

    credited, grpo, metrics = advantages(
        [row.episode[0].response_mask for row in rows],
        [row.score[0] for row in rows],
        [row.question.task.id for row in rows],
        [row.labels for row in rows],
        params,
    )
    groups = {q.task.id: Group(q.task.id, q.task.question, q.task.answer, q.images, []) for q in questions}
    for row, adv, base in zip(rows, credited, grpo):
        out, record = row.episode
        groups[row.question.task.id].rollouts.append(
            Rollout(
                question_id=row.question.task.id,
                member=row.member,
                plan=row.plan,
                reward=row.score[0],
                prediction=row.score[1],
                record=record,
                response_mask=list(out.response_mask),
                logprobs=list(out.response_logprobs or []),
                labels=row.labels,
                types=row.labels.turn_types(params) if row.labels is not None and row.labels.assessed else None,
                advantages=adv,
                grpo=base,
            )
        )
    vocab_size = model.config.get_text_config().vocab_size
    return Walkthrough(groups=list(groups.values()), params=params, metrics=metrics, vocab_size=vocab_size)


@dataclass(frozen=True)
class _Scored:
    """One episode between scoring and the batch's advantage computation."""

    question: Question
    member: int
    plan: Plan
    episode: tuple[AgentLoopOutput, TrajectoryRecord]
    score: tuple[float, str]  # reward, the answer the reward manager read
    labels: CreditLabels | None
