"""Injected judge faults reach the trainer as counted fallbacks and one warning (silent GRPO is the failure to catch).

Four mixed groups (one success, one failure each) are judged by the real ``CreditJudge`` against a real local chat
server whose model answers validly (g1), with prose instead of JSON (g2), too slowly for ``timeout_s`` (g3) and with a
200 HTML page (g4). The labels travel as the worker writes them (``extra_fields`` in a real TransferQueue) into
verl's real v1 ``PPOTrainerSync._compute_advantage`` under ``TurnCreditAdvantageMixin``: three of four judged
failures fall back, so the metrics say so by reason and the estimator logs one warning naming the threshold.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import verl_ext.advantage.estimator  # noqa: F401  (registers neos_turn_credit)
from verl_ext.credit.judge import CreditJudge, CreditJudgeConfig
from verl_ext.credit.labels import CREDIT_KEY

from ..advantage.test_trainer_mixin_on_cpu import _row, credit_trainer
from ..credit.conftest import candidate, credit_server, reference

MODELS = {"g1": "valid", "g2": "invalid", "g3": "slow", "g4": "html"}
FAIL_MASK = [1, 0] * 8  # the candidate's 8 turns, one observation token after each
SUCC_MASK = [1, 1, 0, 1] + [0] * 12


def _judge_all() -> dict[str, dict]:
    async def main() -> dict[str, dict]:
        async with credit_server() as (url, _, _):
            out = {}
            for group, model in MODELS.items():
                config = CreditJudgeConfig(url=url, model=model, timeout_s=0.3, max_retries=1, retry_backoff_s=0.0)
                (labels,) = await CreditJudge(config).assess_group(reference(), [candidate()])
                out[group] = labels.model_dump(mode="json")
            return out

    return asyncio.run(main())


def test_garbage_and_timeouts_show_as_fallback_metrics_and_one_warning(transfer_queue, caplog) -> None:
    from transfer_queue import KVBatchMeta
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    labels = _judge_all()
    assert {g: l["fallback_reason"] for g, l in labels.items()} == {
        "g1": None, "g2": "invalid", "g3": "timeout", "g4": "bad_body"
    }
    rows = {}
    for group in MODELS:
        rows[f"f{group}_0_0"] = _row(f"f{group}", SUCC_MASK, 1.0, {})
        rows[f"f{group}_1_0"] = _row(f"f{group}", FAIL_MASK, 0.0, {CREDIT_KEY: labels[group]})
    tags = [{"status": "success"} for _ in rows]
    tq = transfer_queue
    tq.kv_batch_put(keys=list(rows), fields=list_of_dict_to_tensordict(list(rows.values())), tags=tags,
                    partition_id="train")

    trainer = credit_trainer({})  # the shipped defaults: full credit, max_fallback_share 0.1
    metrics: dict = {}
    with caplog.at_level("WARNING", logger="verl_ext.advantage.estimator"):
        trainer._compute_advantage(KVBatchMeta(partition_id="train", keys=list(rows), tags=tags), metrics)

    assert metrics["neos_credit/judged_failures"] == 4
    assert metrics["neos_credit/fallback_share"] == pytest.approx(3 / 4)
    for reason in ("invalid", "timeout", "bad_body"):
        assert metrics[f"neos_credit/fallback/{reason}"] == pytest.approx(1 / 4)
    assert metrics["neos_credit/assessed_share"] == pytest.approx(1 / 8)
    warnings = [r.getMessage() for r in caplog.records if r.name == "verl_ext.advantage.estimator"]
    assert len(warnings) == 1
    assert "3 of 4 judged failures (75% > algorithm.neos_credit.max_fallback_share = 10%)" in warnings[0]
    assert all(reason in warnings[0] for reason in ("invalid 1", "timeout 1", "bad_body 1"))
    # the fallen-back failures train on plain GRPO: A_i = -0.5 on each policy token
    got = tq.kv_batch_get(keys=["fg2_1_0"], partition_id="train", select_fields=["advantages"])["advantages"]
    np.testing.assert_allclose(got.to_padded_tensor(0.0).numpy()[0], -0.5 * np.array(FAIL_MASK), rtol=1e-6)
    tq.kv_clear(keys=list(rows), partition_id="train")
