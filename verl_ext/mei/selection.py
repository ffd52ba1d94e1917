"""Which logged MEI calls become MEI SFT data (Neos §3.5, Appendix C.3): outcome- and process-filtered selection.

Rule (the paper's): correct trajectories contribute **all valid** MEI calls; failed trajectories **selected for policy
optimisation** contribute only the valid calls made at turns the credit judge labelled **productive** or
**corrective** (a ``recovery`` event). Unassessed failures (plain-GRPO fallback) have no such turns, so contribute
nothing; failures outside the selected batch contribute nothing.

"Valid" is our reading of the paper's "valid MEI calls": the model's own answer passed the strict schema and the
tool-side checks, i.e. outcome ``valid``, ``retried`` (a later attempt passed) or ``repaired`` (json-repair turned the
answer into an object that passed; the logged target is that validated object). Excluded: ``fallback`` (the logged
output is the extractive stand-in, not the MEI's), ``error`` (no output) and ``extractive`` (no model served it), and
any call without logged input ``messages`` (nothing to condition an SFT example on).

Joining goes by call id, from the trajectory's record (``TurnRecord.calls[].mei_call_ids``) to the MEI log, never by
session id: the tool server's result cache can serve one group's trajectories the same logged call, so a call id may
appear in several trajectories (it is retained once, under the first reason found in input order) and its log
record may carry another session's id.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from tool_server.mei.log import MEIRecord
from verl_ext.credit.labels import CreditLabels
from verl_ext.rollout.record import TrajectoryRecord

VALID_OUTCOMES = frozenset({"valid", "retried", "repaired"})
Reason = Literal["success", "productive", "corrective"]


@dataclass(frozen=True, slots=True)
class RolloutResult:
    """One finished trajectory as the trainer knows it after scoring and credit assessment."""

    record: TrajectoryRecord
    success: bool  # the outcome reward was 1
    selected: bool  # it is in the batch the policy is optimised on
    labels: CreditLabels | None = None  # the judge's labels of a failure; None when not assessed


@dataclass(frozen=True, slots=True)
class RetainedCall:
    call: MEIRecord  # the logged call: messages (input) and output (the SFT target)
    reason: Reason
    trajectory_session: str | None  # the trajectory that retained it (not necessarily call.session_id: cache)
    turn: int


@dataclass(slots=True)
class Selection:
    retained: list[RetainedCall] = field(default_factory=list)
    # retained_<reason>, skipped_<outcome> (invalid calls at eligible turns), skipped_no_messages,
    # missing (ids not in the log), duplicate (ids already retained), ineligible_turn, ineligible_trajectory
    counts: Counter[str] = field(default_factory=Counter)


def eligible_turns(result: RolloutResult) -> dict[int, Reason] | None:
    """Turns whose calls may be retained (``None``: every turn, a success), with the reason."""
    if result.success:
        return None
    if not result.selected or result.labels is None or not result.labels.assessed:
        return {}
    turns: dict[int, Reason] = {t: "productive" for t in result.labels.productive}
    # A turn carries at most one label (CreditLabels enforces it), so a recovery turn is never also productive.
    turns.update({e.turn: "corrective" for e in result.labels.events if e.type == "recovery"})
    return turns


def select_calls(results: Iterable[RolloutResult], calls: Mapping[str, MEIRecord] | Iterable[MEIRecord]) -> Selection:
    """Retained calls of ``results`` in trajectory then turn order; ``calls`` is the MEI log (records or by id)."""
    by_id = calls if isinstance(calls, Mapping) else {c.call_id: c for c in calls}
    out = Selection()
    seen: set[str] = set()
    for result in results:
        turns = eligible_turns(result)
        if turns == {}:
            calls = (c for t in result.record.turns for c in t.calls)
            out.counts["ineligible_trajectory"] += sum(len(c.mei_call_ids) for c in calls)
            continue
        for turn in result.record.turns:
            reason: Reason | None = "success" if turns is None else turns.get(turn.index)
            ids = [i for call in turn.calls for i in call.mei_call_ids]
            if reason is None:
                out.counts["ineligible_turn"] += len(ids)
                continue
            for call_id in ids:
                logged = by_id.get(call_id)
                if logged is None:
                    out.counts["missing"] += 1
                elif call_id in seen:
                    out.counts["duplicate"] += 1
                elif logged.outcome not in VALID_OUTCOMES:
                    out.counts[f"skipped_{logged.outcome}"] += 1
                elif not logged.messages:
                    out.counts["skipped_no_messages"] += 1
                else:
                    seen.add(call_id)
                    out.retained.append(RetainedCall(logged, reason, result.record.session_id, turn.index))
                    out.counts[f"retained_{reason}"] += 1
    return out
