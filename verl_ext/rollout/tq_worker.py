"""verl v1 agent-loop worker and manager that assess each group's failures while the rollout goes on.

verl's ``AgentLoopWorkerTQ`` runs all ``rollout.n`` trajectories of a prompt in one ``_run_prompt`` and, for each
finished trajectory, ``_agent_loop_postprocess`` scores it (the reward loop) and puts it into TransferQueue; the group
is marked finished only after all of them are in. Our override scores first, hands the trajectory to a
:class:`~verl_ext.credit.group.GroupAssessor`, and puts it with ``extra_fields["neos_credit"]`` once the group's
failures are judged, so the labels are in TransferQueue before the trainer can see the group, and judging one group
overlaps with every other group's generation. ``TurnCreditAdvantageMixin`` then delivers them to ``neos_turn_credit``.

Select it with ``actor_rollout_ref.rollout.agent.agent_loop_manager_class=verl_ext.rollout.tq_worker.NeosAgentLoopManagerTQ``
and configure the judge under ``actor_rollout_ref.rollout.custom.neos_credit_judge``: ``{kind: offline}`` (the task's
``extra_info.reasoning_path`` and ground truth, ``OfflinePathJudge``) or ``{kind: llm, url: ..., model: ...}``
(``JudgeConfig`` fields, ``CreditJudge``). Validation rollouts are not judged.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import ray
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ

from verl_ext.credit.group import GroupAssessor
from verl_ext.credit.judge import CreditJudge
from verl_ext.credit.labels import CREDIT_KEY, CreditLabels
from verl_ext.credit.offline_judge import OfflinePathJudge, TaskPath
from verl_ext.reward.judge import JudgeConfig
from verl_ext.rollout.record import RECORD_KEY, TrajectoryRecord

log = logging.getLogger(__name__)
JUDGE_KEY = "neos_credit_judge"

_VerlWorker = AgentLoopWorkerTQ.__ray_metadata__.modified_class.__mro__[1]  # the class under verl's @ray.remote


def _ground_truth_answer(reward_model: Any) -> str:
    truth = (reward_model or {}).get("ground_truth", "")
    if isinstance(truth, dict):
        truth = truth.get("target", truth.get("answer", ""))
    if isinstance(truth, (list, tuple)):
        truth = truth[0] if truth else ""
    return str(truth)


class NeosAgentLoopWorker(_VerlWorker):
    """``AgentLoopWorkerTQ`` + group credit assessment before each trajectory is put."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        rollout = self.config.actor_rollout_ref.rollout
        self.judge_config = dict((rollout.get("custom") or {}).get(JUDGE_KEY) or {"kind": "offline"})
        kind = self.judge_config.pop("kind", "offline")
        if kind not in ("offline", "llm"):
            raise ValueError(f"{JUDGE_KEY}.kind must be offline or llm, got {kind!r}")
        self.llm_judge = CreditJudge(JudgeConfig(**self.judge_config)) if kind == "llm" else None
        self.assessor = GroupAssessor(size=int(rollout.n))
        self._warned = False

    def _assess_group(self, kwargs: dict[str, Any]):
        if self.llm_judge is not None:
            return self.llm_judge.assess_group
        path = (kwargs.get("extra_info") or {}).get("reasoning_path")
        answer = _ground_truth_answer(kwargs.get("reward_model"))

        async def offline(reference: TrajectoryRecord, failures: Sequence[TrajectoryRecord]) -> list[CreditLabels]:
            """The task's own verified path; a row without one falls back (no_task_path) to the outcome advantage."""
            paths = [TaskPath(question=reference.question, evidence=list(path), answer=answer)] if path else []
            return await OfflinePathJudge(paths).assess_group(reference, failures)

        return offline

    async def _agent_loop_postprocess(self, output: Any, validate: bool, **kwargs: Any) -> None:
        outputs = output if isinstance(output, list) else [output]
        final = outputs[-1]
        if not validate and RECORD_KEY in final.extra_fields:
            await self._compute_score(outputs, kwargs=kwargs)  # verl's own scoring; the later call sees it is done
            if final.reward_score is None:
                if not self._warned:
                    log.warning("no reward before TransferQueue (no async reward loop): credit is not assessed here")
                    self._warned = True
            else:
                record = TrajectoryRecord.model_validate(final.extra_fields[RECORD_KEY])
                labels = await self.assessor.submit(
                    str(kwargs["uid"]),
                    str(kwargs["session_id"]),
                    record,
                    float(final.reward_score),
                    self._assess_group(kwargs),
                )
                if labels is not None:
                    final.extra_fields[CREDIT_KEY] = labels.model_dump(mode="json")
        return await super()._agent_loop_postprocess(output, validate, **kwargs)


NeosAgentLoopWorkerTQ = ray.remote(NeosAgentLoopWorker)


class NeosAgentLoopManagerTQ(AgentLoopManagerTQ):
    """verl's v1 agent-loop manager with :class:`NeosAgentLoopWorker` as its workers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.agent_loop_workers_class = NeosAgentLoopWorkerTQ
