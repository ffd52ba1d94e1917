"""The selected batch's rows, as the trainer-side hooks read them from TransferQueue."""

from __future__ import annotations

from typing import Any

import transfer_queue as tq
from transfer_queue import KVBatchMeta


def _fetch(batch: KVBatchMeta, fields: list[str]) -> tuple[dict[str, Any], list[int]]:
    """``fields`` of every key of ``batch`` and the positions of its non-padding rows (verl pads a batch with copies
    of real rows, which must not count twice)."""
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
    padding = [bool(t.get("is_padding", False)) for t in batch.tags] if batch.tags else [False] * len(batch.keys)
    return data, [i for i, pad in enumerate(padding) if not pad]


def _scores(data: dict[str, Any]) -> list[float]:
    return [float(s.sum()) for s in data["rm_scores"].unbind()]


def _listed(values: Any) -> list[Any]:
    """A non-tensor field as a list: a NonTensorStack or a plain list subclass, by TransferQueue backend."""
    return values.tolist() if hasattr(values, "tolist") else list(values)


def selected_rows(batch: KVBatchMeta) -> tuple[list[dict[str, Any]], list[float]]:
    """``(extra_fields, outcome reward)`` of every non-padding row of ``batch``, in key order."""
    data, keep = _fetch(batch, ["extra_fields", "rm_scores"])
    extra = _listed(data["extra_fields"])
    scores = _scores(data)
    return [extra[i] or {} for i in keep], [scores[i] for i in keep]


def selected_groups(batch: KVBatchMeta) -> tuple[list[str], list[float]]:
    """``(uid, outcome reward)`` of every non-padding row of ``batch``, in key order: a uid is a question's group,
    as verl's advantage estimators read it."""
    data, keep = _fetch(batch, ["uid", "rm_scores"])
    uids = [str(u) for u in _listed(data["uid"])]
    scores = _scores(data)
    return [uids[i] for i in keep], [scores[i] for i in keep]
