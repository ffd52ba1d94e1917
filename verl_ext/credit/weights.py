"""Turn weights of an assessed failed trajectory (Neos Eq. 3).

The judge only annotates significant turns; this module turns those sparse labels into one weight per policy turn,
with the propagation rules the judge prompt promises (Neos Fig. 18, rule 7): unannotated turns after an unrecovered
error are downstream consequences, a recovery closes the branch, a productive turn keeps its positive credit without
closing it.

Input rules (all violations raise ``ValueError``; nothing is silently dropped or merged):

- turns are 0-based and must lie in ``[0, num_turns)``;
- a turn carries at most one label: two events on one turn, or an event on a productive turn, is an error
  (the judge is told not to duplicate span ids);
- severity and confidence lie in [0, 1]; a recovery has severity 0 (the output schema says so);
- a recovery must follow an unrecovered critical event (it "repairs an earlier error"); events may come in any order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from verl_ext.credit.params import CreditAblation, CreditParams

EventType = Literal["causal_error", "recovery", "re_derailment"]
EVENT_TYPES: tuple[str, ...] = get_args(EventType)
CRITICAL_TYPES = frozenset({"causal_error", "re_derailment"})


def _check_unit(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0.0 <= value <= 1.0):
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")


def _check_turn(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"turn must be a non-negative int, got {value!r}")


@dataclass(frozen=True)
class JudgeEvent:
    """One judge event on a 0-based policy turn."""

    turn: int
    type: EventType
    severity: float
    confidence: float

    def __post_init__(self) -> None:
        _check_turn(self.turn)
        if self.type not in EVENT_TYPES:
            raise ValueError(f"event type must be one of {EVENT_TYPES}, got {self.type!r}")
        _check_unit("severity", self.severity)
        _check_unit("confidence", self.confidence)
        if self.type == "recovery" and self.severity != 0:
            raise ValueError(f"a recovery event has severity 0, got {self.severity!r} at turn {self.turn}")

    @property
    def critical(self) -> bool:
        return self.type in CRITICAL_TYPES


def _validated(num_turns: int, events: Sequence[JudgeEvent], productive: Mapping[int, float]) -> list[JudgeEvent]:
    """Check the input rules of this module; return the events in chronological order."""
    if isinstance(num_turns, bool) or not isinstance(num_turns, int) or num_turns < 0:
        raise ValueError(f"num_turns must be a non-negative int, got {num_turns!r}")
    for event in events:
        if not isinstance(event, JudgeEvent):
            raise ValueError(f"events must be JudgeEvent instances, got {event!r}")
        if event.turn >= num_turns:
            raise ValueError(f"event turn {event.turn} out of range for {num_turns} turns")
    for turn, confidence in productive.items():
        _check_turn(turn)
        if turn >= num_turns:
            raise ValueError(f"productive turn {turn} out of range for {num_turns} turns")
        _check_unit(f"productive confidence of turn {turn}", confidence)
    ordered = sorted(events, key=lambda e: e.turn)
    for prev, cur in zip(ordered, ordered[1:]):
        if prev.turn == cur.turn:
            raise ValueError(f"two events on turn {cur.turn}: {prev.type} and {cur.type}")
    both = sorted({e.turn for e in ordered} & set(productive))
    if both:
        raise ValueError(f"turns {both} are both a judge event and productive")
    active = False
    for event in ordered:
        if event.type == "recovery" and not active:
            raise ValueError(f"recovery at turn {event.turn} has no unrecovered error before it")
        active = event.critical
    return ordered


def turn_weights(
    num_turns: int,
    events: Sequence[JudgeEvent],
    productive: Mapping[int, float],
    params: CreditParams = CreditParams(),
) -> list[float]:
    """Per-turn weights ``w_t`` of Eq. 3 for one assessed failure; ``productive`` maps turn -> confidence.

    ``params.ablation`` selects a Table 5 row (see ``CreditAblation``); validation is the same for every row.
    """
    by_turn = {e.turn: e for e in _validated(num_turns, events, productive)}
    ablation = params.ablation
    if ablation is CreditAblation.OUTCOME_ONLY:
        return [0.0] * num_turns
    if ablation is CreditAblation.PRODUCTIVE_ONLY:
        return [params.lambda_p * productive[t] if t in productive else -1.0 for t in range(num_turns)]

    every_error = ablation.includes(CreditAblation.FULL)
    corrective = ablation.includes(CreditAblation.CORRECTIVE)
    downstream = ablation.includes(CreditAblation.DOWNSTREAM)
    weights: list[float] = []
    active: JudgeEvent | None = None  # the critical event whose branch is open
    penalised_one = False
    for t in range(num_turns):
        event = by_turn.get(t)
        if event is not None and event.critical and (every_error or not penalised_one):
            active, penalised_one = event, True
            weights.append(-max(params.kappa_e, event.severity * event.confidence))
        elif event is not None and event.type == "recovery":
            active = None
            weights.append(params.lambda_c * event.confidence if corrective else 0.0)
        elif t in productive:
            weights.append(params.lambda_p * productive[t])
        elif active is not None and downstream:
            strength = max(params.kappa_d, active.severity * active.confidence)
            weights.append(-params.lambda_d * strength * params.gamma ** (t - active.turn - 1))
        else:  # neutral, or a critical event this ablation row does not penalise
            weights.append(0.0)
    return weights

