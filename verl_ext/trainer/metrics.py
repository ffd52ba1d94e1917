"""Per-update diagnostics of the selected batch that verl does not log (Neos Figs. 6 and 9): the tool-call mix and
the credit-type composition of the judged failures' turns. verl already logs the rest of SPEC §4's list: the batch
reward (``critic/score/mean``), the dual-clipped share (``actor/pg_clipfrac_lower``), grad norm, rollout and update
time (``timing_s/gen``, ``timing_s/update_actor``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from verl_ext.credit.labels import CREDIT_KEY, CREDIT_TYPES, CreditLabels
from verl_ext.credit.params import CreditParams
from verl_ext.rollout.record import RECORD_KEY


def batch_metrics(rows: Sequence[dict[str, Any] | None], params: CreditParams) -> dict[str, float]:
    """``neos_tools/calls_per_trajectory/<tool>`` over rows with a trajectory record, and
    ``neos_credit/turn_share/<type>`` over the turns of assessed failures (absent when there are none)."""
    calls: Counter[str] = Counter()
    types: Counter[str] = Counter()
    trajectories = 0
    for extra in rows:
        extra = extra or {}
        record = extra.get(RECORD_KEY)
        if record is not None:
            trajectories += 1
            calls.update(call["tool_name"] for turn in record["turns"] for call in turn["calls"])
        labels = extra.get(CREDIT_KEY)
        if labels is not None:
            labels = CreditLabels.model_validate(labels)
            if labels.assessed:
                types.update(labels.turn_types(params))
    out = {f"neos_tools/calls_per_trajectory/{tool}": n / trajectories for tool, n in calls.items()}
    total = sum(types.values())
    if total:
        out.update({f"neos_credit/turn_share/{kind}": types[kind] / total for kind in CREDIT_TYPES})
    return out
