"""The mixin on verl's real v1 ``PPOTrainerSync._compute_advantage`` against a real TransferQueue (local Ray, CPU).

Rollout rows are put into TransferQueue the way verl's ``AgentLoopWorkerTQ`` puts them (key ``{uid}_{session}_{i}``,
variable-length responses, ``extra_fields`` dict per row); the batch's key order is shuffled, as
``_balance_batch`` may reorder it. The advantages verl writes back must be, per key, the hand-computed ones of
``test_estimator_on_cpu`` (the ``corrective`` row). Only the trainer's constructor is skipped: ``_compute_advantage``
needs ``config`` alone, and a full trainer needs GPUs.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transfer_queue as tq
from omegaconf import OmegaConf

import verl_ext.advantage.estimator  # noqa: F401  (registers neos_turn_credit)
from verl_ext.advantage.trainer_mixin import TurnCreditAdvantageMixin
from verl_ext.credit.labels import CREDIT_KEY

from .test_estimator_on_cpu import EXPECTED_FAILURE, FAIL_MASK, LABELS, POLICY, SUCC_MASK


def _row(uid: str, mask: list[int], reward: float, extra: dict) -> dict:
    scores = torch.zeros(len(mask))
    scores[max(i for i, m in enumerate(mask) if m)] = reward  # reward on the last policy token
    return {"uid": uid, "response_mask": torch.tensor(mask), "rm_scores": scores, "extra_fields": extra}


def credit_trainer(neos_credit: dict):
    """verl's real ``PPOTrainerSync`` with the mixin, only its constructor skipped (``_compute_advantage`` needs
    ``config`` alone; a full trainer needs GPUs); ``neos_credit`` is ``algorithm.neos_credit``."""
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    class Trainer(TurnCreditAdvantageMixin, PPOTrainerSync):
        pass

    trainer = object.__new__(Trainer)
    trainer.config = OmegaConf.create(
        {
            "algorithm": {
                "adv_estimator": "neos_turn_credit",
                "gamma": 1.0,
                "lam": 1.0,
                "norm_adv_by_std_in_grpo": False,
                "use_kl_in_reward": False,
                "neos_credit": neos_credit,
            },
            "actor_rollout_ref": {"rollout": {"n": 2}},
        }
    )
    return trainer


def test_labels_reach_the_estimator_in_verls_row_order(transfer_queue) -> None:
    from transfer_queue import KVBatchMeta
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    labels = LABELS.model_dump(mode="json")
    fallback = {"assessed": False, "judge": "test", "num_turns": 6, "fallback_reason": "timeout"}
    rows = {
        "g1_0_0": _row("g1", SUCC_MASK[:6], 1.0, {"termination_reason": "answer"}),
        "g1_1_0": _row("g1", FAIL_MASK, 0.0, {CREDIT_KEY: labels}),
        "g2_0_0": _row("g2", SUCC_MASK[:6], 1.0, {}),
        "g2_1_0": _row("g2", FAIL_MASK, 0.0, {CREDIT_KEY: fallback}),
        "pad0_0_0": _row("pad0", FAIL_MASK, 0.0, {CREDIT_KEY: labels}),  # verl's padding copies a real row
    }
    tags = [{"status": "success", "is_padding": key.startswith("pad")} for key in rows]
    tq.kv_batch_put(
        keys=list(rows), fields=list_of_dict_to_tensordict(list(rows.values())), tags=tags, partition_id="train"
    )

    trainer = credit_trainer({"ablation": "corrective"})
    order = ["g2_1_0", "pad0_0_0", "g1_1_0", "g2_0_0", "g1_0_0"]
    batch = KVBatchMeta(partition_id="train", keys=order, tags=[tags[list(rows).index(k)] for k in order])
    metrics: dict = {}
    trainer._compute_advantage(batch, metrics)

    got = tq.kv_batch_get(keys=order, partition_id="train", select_fields=["advantages"])["advantages"]
    adv = dict(zip(order, got.to_padded_tensor(0.0).numpy()))
    failure = np.zeros(len(FAIL_MASK))
    failure[POLICY] = EXPECTED_FAILURE["corrective"]
    np.testing.assert_allclose(adv["g1_1_0"], failure, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(adv["g1_0_0"][:6], 0.5 * np.array(SUCC_MASK[:6]), rtol=1e-6)
    np.testing.assert_allclose(adv["g2_0_0"][:6], 0.5 * np.array(SUCC_MASK[:6]), rtol=1e-6)
    np.testing.assert_allclose(adv["g2_1_0"], -0.5 * np.array(FAIL_MASK), rtol=1e-6)  # judge fell back: GRPO
    np.testing.assert_array_equal(adv["pad0_0_0"], 0.0)  # padding: its own group of one, no credit
    assert metrics["neos_credit/assessed_share"] == pytest.approx(1 / 5)
    assert metrics["neos_credit/judged_failures"] == 2  # g1_1_0 and g2_1_0; the padding copy is not counted
    assert metrics["neos_credit/fallback_share"] == pytest.approx(1 / 2)
    assert metrics["neos_credit/fallback/timeout"] == pytest.approx(1 / 2)
