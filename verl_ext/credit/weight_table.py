"""Eq. 3 turn weights of every assessed failure of a batch at once, in numpy over a (failures x turns) grid.

The estimator needs weights for ~2k failures per step; ``turn_weights`` costs tens of microseconds of Python per
failure, which alone took most of the estimator's time. Eq. 3 is sequential only through "which branch is open":
that is the last branch-changing event (a penalised critical event or a recovery) at or before a turn, one forward
fill of turn indices along each row. Everything else is elementwise.

``WeightTable.weights`` equals ``turn_weights`` float for float (a property test pins it, every ablation row). The
input rules are checked here too, vectorised; the first failure that breaks one is handed to ``turn_weights``, so
the error (type and message) is the reference's own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from verl_ext.credit.params import CreditAblation, CreditParams
from verl_ext.credit.weights import EVENT_TYPES, JudgeEvent, turn_weights

_RECOVERY = EVENT_TYPES.index("recovery")
_CRITICAL_CODES = np.array([t != "recovery" for t in EVENT_TYPES])  # per event type code: critical?


class EventLike(Protocol):
    """A judge event as ``JudgeEvent`` and the labels' ``LabelEvent`` both carry it."""

    turn: int
    type: str
    severity: float
    confidence: float


Failure = tuple[int, Sequence[EventLike], Mapping[int, float]]  # (num_turns, events, productive)


@dataclass(frozen=True)
class WeightTable:
    """Judge labels of F failures as flat arrays: event e belongs to failure ``event_row[e]`` (0..F-1), and so on."""

    num_turns: NDArray[np.int64]  # (F,)
    event_row: NDArray[np.int64]
    event_turn: NDArray[np.int64]
    event_code: NDArray[np.int64]  # index into EVENT_TYPES
    event_severity: NDArray[np.float64]
    event_confidence: NDArray[np.float64]
    productive_row: NDArray[np.int64]
    productive_turn: NDArray[np.int64]
    productive_confidence: NDArray[np.float64]
    source: Sequence[Failure] = field(repr=False, compare=False)  # the input, for the reference's error messages

    @classmethod
    def from_labels(cls, failures: Sequence[Failure]) -> WeightTable:
        """From ``(num_turns, events, productive)`` per failure, as ``turn_weights`` takes them."""
        failures = tuple(failures)
        codes = {name: i for i, name in enumerate(EVENT_TYPES)}
        events = [e for _, evs, _ in failures for e in evs]
        counts = [len(evs) for _, evs, _ in failures]
        sizes = [len(prod) for _, _, prod in failures]
        try:
            return cls(
                num_turns=_column([n for n, _, _ in failures], np.int64),
                event_row=np.repeat(np.arange(len(failures)), counts),
                event_turn=_column([e.turn for e in events], np.int64),
                event_code=_column([codes.get(e.type, -1) for e in events], np.int64),
                event_severity=_column([e.severity for e in events], np.float64),
                event_confidence=_column([e.confidence for e in events], np.float64),
                productive_row=np.repeat(np.arange(len(failures)), sizes),
                productive_turn=_column([t for _, _, prod in failures for t in prod], np.int64),
                productive_confidence=_column([c for _, _, prod in failures for c in prod.values()], np.float64),
                source=failures,
            )
        except (TypeError, ValueError, OverflowError):  # a value of the wrong type: let the reference name it
            for one in failures:
                _reference(one)
            raise

    def invalid_rows(self) -> NDArray[np.int64]:
        """Failures that break an input rule of ``turn_weights`` (ascending)."""
        bad = np.zeros(self.num_turns.size, dtype=bool)
        bad[self.num_turns < 0] = True
        ev_bad = _out_of_range(self.event_turn, self.num_turns[self.event_row]) | (self.event_code < 0)
        ev_bad |= ~_unit(self.event_severity) | ~_unit(self.event_confidence)
        ev_bad |= (self.event_code == _RECOVERY) & (self.event_severity != 0)
        bad[self.event_row[ev_bad]] = True
        pr_bad = _out_of_range(self.productive_turn, self.num_turns[self.productive_row])
        pr_bad |= ~_unit(self.productive_confidence)
        bad[self.productive_row[pr_bad]] = True
        width = max(int(self.num_turns.max(initial=0)), 1)  # out-of-range turns are flagged above; clip the rest
        ev_key = self.event_row * width + np.clip(self.event_turn, 0, width - 1)
        pr_key = self.productive_row * width + np.clip(self.productive_turn, 0, width - 1)
        # One label per turn, events and productive turns together.
        keys = np.sort(np.concatenate([ev_key, pr_key]))
        bad[keys[1:][keys[1:] == keys[:-1]] // width] = True
        # A recovery follows an unrecovered critical event: the event just before it (by turn) is critical.
        order = np.argsort(ev_key, kind="stable")
        rows, codes = self.event_row[order], self.event_code[order]
        recovery = np.flatnonzero(codes == _RECOVERY)
        prev = np.maximum(recovery - 1, 0)
        orphan = (recovery == 0) | (rows[prev] != rows[recovery]) | (codes[prev] == _RECOVERY)
        bad[rows[recovery[orphan]]] = True
        return np.flatnonzero(bad)

    def weights(self, params: CreditParams = CreditParams()) -> NDArray[np.float64]:
        """(F, max turns) Eq. 3 weights under ``params``; row f holds ``turn_weights`` of failure f, NaN after it.

        Raises ``turn_weights``' own ``ValueError`` for the first failure whose labels break an input rule.
        """
        invalid = self.invalid_rows()
        if invalid.size:
            f = int(invalid[0])
            _reference(self.source[f])
            raise ValueError(f"labels of failure {f} break an input rule of turn_weights")  # our checks, not its
        count = self.num_turns.size
        width = int(self.num_turns.max(initial=0))
        turn = np.arange(width)
        ablation = params.ablation
        productive = self._grid(self.productive_row, self.productive_turn, params.lambda_p * self.productive_confidence)
        is_productive = self._grid(self.productive_row, self.productive_turn, True, False)
        if ablation is CreditAblation.OUTCOME_ONLY:
            out = np.zeros((count, width))
        elif ablation is CreditAblation.PRODUCTIVE_ONLY:
            out = np.where(is_productive, productive, -1.0)
        else:
            out = self._eq3(turn, is_productive, productive, params)
        return np.where(turn < self.num_turns[:, None], out, np.nan)

    def _grid(self, row: NDArray[np.int64], turn: NDArray[np.int64], values: object, fill: object = 0.0) -> NDArray:
        """(F, max turns) grid with ``values`` at (row, turn) and ``fill`` elsewhere."""
        width = int(self.num_turns.max(initial=0))
        grid = np.full((self.num_turns.size, width), fill)
        grid.ravel()[row * width + turn] = values
        return grid

    def _eq3(
        self,
        turn: NDArray[np.int64],
        is_productive: NDArray[np.bool_],
        productive: NDArray[np.float64],
        params: CreditParams,
    ) -> NDArray[np.float64]:
        """The Eq. 3 rows (first_error .. full) on the (F, width) grid, with ``turn_weights``' branch precedence."""
        ablation = params.ablation
        row, at = self.event_row, self.event_turn
        code = self._grid(row, at, self.event_code, -1)
        strength = self._grid(row, at, self.event_severity * self.event_confidence)  # s·c of each event
        confidence = self._grid(row, at, self.event_confidence)
        critical = (code >= 0) & _CRITICAL_CODES[code]
        if ablation.includes(CreditAblation.FULL):
            opens = critical  # every critical event (re)starts a branch
        else:
            opens = critical & (np.cumsum(critical, axis=1) == 1)  # only the first one is penalised
        recovery = code == _RECOVERY
        last = np.maximum.accumulate(np.where(opens | recovery, turn, -1), axis=1)  # last branch change at or before t
        source = np.arange(code.shape[0])[:, None] * turn.size + np.maximum(last, 0)  # flat index of that change
        inside = (last >= 0) & opens.ravel()[source] & ablation.includes(CreditAblation.DOWNSTREAM)
        decay = np.array([params.gamma**d for d in range(turn.size)])  # Python's pow, as turn_weights uses
        distance = np.clip(turn - last - 1, 0, None)
        downstream = -params.lambda_d * np.maximum(params.kappa_d, strength.ravel()[source]) * decay[distance]
        corrective = params.lambda_c * confidence if ablation.includes(CreditAblation.CORRECTIVE) else 0.0
        out = np.where(inside, downstream, 0.0)  # unannotated turns (and unpenalised critical events) in a branch
        out = np.where(is_productive, productive, out)
        out = np.where(recovery, corrective, out)
        return np.where(opens, -np.maximum(params.kappa_e, strength), out)


def _column(values: list[object], dtype: type) -> NDArray:
    column = np.array(values, dtype=dtype)
    if column.ndim != 1:
        raise ValueError("label fields must be numbers")
    return column


def _out_of_range(turns: NDArray[np.int64], num_turns: NDArray[np.int64]) -> NDArray[np.bool_]:
    return (turns < 0) | (turns >= num_turns)


def _unit(values: NDArray[np.float64]) -> NDArray[np.bool_]:
    return (values >= 0) & (values <= 1)  # False for NaN


def _reference(failure: Failure) -> None:
    """Run the reference on one failure for its error: events rebuilt as ``JudgeEvent``s, whose own checks run
    first, as in ``CreditLabels.weights``."""
    num_turns, events, productive = failure
    turn_weights(num_turns, [JudgeEvent(e.turn, e.type, e.severity, e.confidence) for e in events], productive)
