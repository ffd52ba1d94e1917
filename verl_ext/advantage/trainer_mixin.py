"""Mixin for verl's v1 ``PPOTrainer``: deliver each row's judge labels to the ``neos_turn_credit`` estimator.

verl's ``PPOTrainer._compute_advantage`` reads ``uid, response_mask, rm_scores, ...`` from TransferQueue for
``batch.keys`` and, for any estimator but GRPO, calls it on all rows in that order. This mixin reads ``uid`` and
``extra_fields`` for the same keys (hence the same order), enters ``credit_inputs`` and runs verl's method unchanged;
the estimator checks the row uids against verl's ``index`` and the label turn counts against ``response_mask``.
"""

from __future__ import annotations

from typing import Any

import transfer_queue as tq
from transfer_queue import KVBatchMeta

from verl_ext.advantage.inputs import CreditRow, credit_inputs, credit_rows


class TurnCreditAdvantageMixin:
    """Put first in the bases: ``class NeosTrainer(TurnCreditAdvantageMixin, PPOTrainer)``."""

    def _credit_rows(self, batch: KVBatchMeta) -> list[CreditRow]:
        """One row per key of ``batch``, in key order; labels from ``extra_fields[CREDIT_KEY]``.

        Override to supply labels another way (e.g. from a judge run by the trainer); keep the order and uids.
        """
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["uid", "extra_fields"])
        padding = [bool(tag.get("is_padding", False)) for tag in batch.tags] if batch.tags else None
        return credit_rows(data.pop("uid").tolist(), data.pop("extra_fields").tolist(), padding)

    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict[str, Any]) -> KVBatchMeta:
        with credit_inputs(self._credit_rows(batch)) as inputs:
            batch = super()._compute_advantage(batch, metrics)  # type: ignore[misc]
        metrics.update(inputs.metrics)
        return batch
