"""Turn credit for the walkthrough's groups: judge each mixed group's failures, then compute advantages with verl.

Judging: :class:`~verl_ext.credit.group.GroupAssessor` with the offline credit judge
(:class:`~verl_ext.credit.offline_judge.OfflinePathJudge`, the task's verified path), exactly as the rollout worker
does when a group's last trajectory is scored. Advantages: verl's own ``compute_advantage`` with the registered
``neos_turn_credit`` estimator (labels handed over through ``credit_inputs``, as ``TurnCreditAdvantageMixin`` does)
and, for comparison, with verl's ``grpo`` estimator on the same batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import asdict

import numpy as np
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage

from verl_ext.advantage.estimator import ESTIMATOR
from verl_ext.advantage.inputs import CreditRow, credit_inputs
from verl_ext.credit import CreditParams
from verl_ext.credit.group import GroupAssessor
from verl_ext.credit.labels import CreditLabels
from verl_ext.credit.offline_judge import OfflinePathJudge
from verl_ext.rollout.record import TrajectoryRecord


async def assess_group(
    judge: OfflinePathJudge, uid: str, records: Sequence[TrajectoryRecord], rewards: Sequence[float]
) -> list[CreditLabels | None]:
    """Labels per member (None for successes and for groups without both outcomes); every member submits
    concurrently and the last arrival runs the judge, as in ``NeosAgentLoopWorker``."""
    assessor = GroupAssessor(size=len(records))
    return list(
        await asyncio.gather(
            *(
                assessor.submit(uid, str(i), record, reward, judge.assess_group)
                for i, (record, reward) in enumerate(zip(records, rewards))
            )
        )
    )


def _batch(masks: Sequence[Sequence[int]], rewards: Sequence[float], uids: Sequence[str]) -> DataProto:
    """Right-padded responses; the outcome reward on each row's last policy token, as verl's reward step puts it."""
    width = max(len(m) for m in masks)
    mask = torch.zeros(len(masks), width, dtype=torch.int64)
    scores = torch.zeros(len(masks), width)
    for i, (m, r) in enumerate(zip(masks, rewards)):
        mask[i, : len(m)] = torch.tensor(m)
        scores[i, int(np.flatnonzero(m)[-1])] = r
    return DataProto.from_dict(
        tensors={"token_level_rewards": scores, "response_mask": mask},
        non_tensors={"uid": np.array(uids, dtype=object)},
    )


def advantages(
    masks: Sequence[Sequence[int]],
    rewards: Sequence[float],
    uids: Sequence[str],
    labels: Sequence[CreditLabels | None],
    params: CreditParams,
) -> tuple[list[np.ndarray], list[np.ndarray], dict[str, float]]:
    """Per row: ``neos_turn_credit`` token advantages, verl's GRPO token advantages (both over the row's own
    response length), and the estimator's ``neos_credit/*`` metrics."""
    algorithm = OmegaConf.create(
        {
            "adv_estimator": ESTIMATOR,
            "norm_adv_by_std_in_grpo": True,
            "neos_credit": {**asdict(params), "ablation": params.ablation.value},
        }
    )
    rows = [CreditRow(uid, label) for uid, label in zip(uids, labels)]
    with credit_inputs(rows) as inputs:
        credited = compute_advantage(
            _batch(masks, rewards, uids), adv_estimator=ESTIMATOR, norm_adv_by_std_in_grpo=True, config=algorithm
        ).batch["advantages"]
    grpo = compute_advantage(_batch(masks, rewards, uids), adv_estimator="grpo", norm_adv_by_std_in_grpo=True).batch[
        "advantages"
    ]
    cut = [len(m) for m in masks]
    return (
        [credited[i, :n].numpy() for i, n in enumerate(cut)],
        [grpo[i, :n].numpy() for i, n in enumerate(cut)],
        dict(inputs.metrics),
    )
