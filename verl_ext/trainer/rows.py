"""The selected batch's rows, as the trainer-side hooks read them from TransferQueue."""

from __future__ import annotations

from typing import Any

import transfer_queue as tq
from transfer_queue import KVBatchMeta


def selected_rows(batch: KVBatchMeta) -> tuple[list[dict[str, Any]], list[float]]:
    """``(extra_fields, outcome reward)`` of every non-padding row of ``batch`` (verl pads a batch with copies of real
    rows, which must not count twice), in key order."""
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields", "rm_scores"])
    padding = [bool(t.get("is_padding", False)) for t in batch.tags] if batch.tags else [False] * len(batch.keys)
    extra = data["extra_fields"]  # a NonTensorStack or a plain list subclass, by TransferQueue backend
    extra = extra.tolist() if hasattr(extra, "tolist") else list(extra)
    scores = [float(s.sum()) for s in data["rm_scores"].unbind()]
    keep = [i for i, pad in enumerate(padding) if not pad]
    return [extra[i] or {} for i in keep], [scores[i] for i in keep]
