"""Neos' adaptive mixed-group sampler (Neos Appendix B) as an event-driven state machine; no verl, Ray or torch.

Why: filter-and-resample (DAPO) samples whole groups, drops the homogeneous ones and waits for every trajectory it
started; a batch then takes as long as its slowest trajectory. Here an active window of questions is sampled at once,
every trajectory is judged as it ends, the next free slot goes where it helps most, and the batch closes the moment
B mixed-outcome groups exist: the slow tail of the other groups is cancelled instead of waited for.

The caller (the trainer adapter) drives it with events, one policy version per batch:

    admissions = sampler.admit(free_slots)             # start these trajectories now
    status = sampler.finish(qid, session, success)     # each judged trajectory, as it ends (abort(): no outcome)
    if sampler.ready():                                # B mixed groups exist
        selection = sampler.select()                   # exactly B x G trajectories; cancel selection.cancel

Rules (paper text; where it is terse, the reading taken is said here):

- Admission: at most ``admission_limit`` (2BG) trajectories are in flight at once, over an active window of at most
  ``window`` (2B) questions. The paper's "admit up to 2BG trajectories" and "released slots replenish groups" describe
  slots: a per-batch total of 2BG would be used up by the window's first G samples each (2B x G), leaving nothing for
  the extra samples the same paragraph grants, and a mostly homogeneous window could then never reach B mixed groups.
  The caller's ``free_slots`` (inference capacity) bounds each call further.
- Which trajectory a free slot starts, first match wins (ties: fewest completed, then queue order):
  (1) a group whose G or more completed outcomes are all the same: an extra sample, up to ``max_per_group`` (1.5G)
  started; (2) a group with fewer than G started: its next initial sample, so the window fills question by question
  in queue order, G each; (3) the group with the fewest completed samples (then fewest started): a further sample, up
  to ``max_per_group``. (3) is the paper's "released slots replenish groups with the fewest completed samples" once
  every window question has its G: free slots go to the groups whose completions lag (the long tail).
- A group is eligible once it has >= G completed outcomes with both a success and a failure. A group that can get no
  more samples (``max_per_group`` started, none in flight) and is not eligible is deferred: it leaves the window, and a
  new question takes its place. Deferred questions are not sampled again from this pass over the source.
- ``select()`` (once B groups are eligible) takes the first B eligible groups in queue order. A group with more than G
  completed keeps its lowest-session-index success and lowest-session-index failure, then fills the remaining places
  by session index (no forced balance). Every trajectory still in flight is to be cancelled; completed ones not kept
  are discarded; the window's other questions go back to the front of the queue, in queue order, to be sampled afresh
  under the next policy (no old-policy trajectory crosses the update).
- Session indices count up over the whole run (not per batch), so a report about a trajectory cancelled in an earlier
  batch is recognised as stale and ignored, even when its question has been admitted again.

Source and epoch end: questions are pulled lazily from the iterable given to the constructor, behind the carried
questions. When it runs dry the window drains; if the questions left cannot make B mixed groups, ``exhausted()``
turns true and that partial batch is dropped (like a data loader with ``drop_last``). Multi-epoch training passes an
iterable that repeats the (reshuffled) dataset; deferred questions come back with the next epoch. A question id that is
already in the window when it comes up again waits in the queue for a later batch.

Checkpoints: ``state_dict()`` is JSON-serialisable (queue, window, counters, number of questions taken from the
source). ``load_state_dict()`` goes into a fresh sampler; it skips that many questions of its source (pass a source
at the same starting point), or none with ``source_positioned=True``. Trajectories that were in flight when the state
was saved are listed by ``in_flight()``; after a crash they no longer exist and the caller ``abort()``s them.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

STATE_VERSION = 1
_END = object()  # end-of-source sentinel


class SamplerError(ValueError):
    """A call the sampler cannot honour (unknown trajectory, double report, select before ready, bad state)."""


class SamplerConfig(BaseModel):
    """Neos Table 12 defaults (B=64, G=8, 12 samples/group, window 128, 1,024 in flight); derived ones follow B and G."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    groups: int = Field(64, ge=1, description="B: mixed groups per update")
    group_size: int = Field(8, ge=2, description="G: trajectories per selected group")
    max_per_group: int = Field(12, description="samples a group may start in one batch (default G + G//2 = 1.5G)")
    window: int = Field(128, description="active questions at once (default 2B)")
    admission_limit: int = Field(1024, ge=1, description="trajectories in flight at once (default 2BG)")

    @model_validator(mode="before")
    @classmethod
    def _derive_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        b, g = data.get("groups", 64), data.get("group_size", 8)
        if isinstance(b, int) and isinstance(g, int):
            derived = {"max_per_group": g + g // 2, "window": 2 * b, "admission_limit": 2 * b * g}
            for key, value in derived.items():
                if data.get(key) is None:
                    data[key] = value
        return data

    @model_validator(mode="after")
    def _check(self) -> SamplerConfig:
        if self.max_per_group < self.group_size:
            raise ValueError(f"max_per_group ({self.max_per_group}) must be >= group_size ({self.group_size})")
        if self.window < self.groups:
            raise ValueError(f"window ({self.window}) must be >= groups ({self.groups}): B groups must fit in it")
        return self


@dataclass(frozen=True, order=True)
class Admission:
    """One trajectory to start (or cancel): its question and its run-wide session index."""

    question_id: str
    session_index: int


class GroupStatus(str, Enum):
    """The trajectory's group after ``finish``/``abort``.

    ELIGIBLE is returned for every report on an eligible group, not only the one that made it eligible: a failure
    that completes later may still be selected, so the caller assesses each new failure of an eligible group.
    """

    SAMPLING = "sampling"
    ELIGIBLE = "eligible"
    DEFERRED = "deferred"
    STALE = "stale"  # the trajectory belonged to an earlier batch (cancelled): ignored


class BatchStats(BaseModel):
    """Per-batch counters for metrics; reset by ``select()``."""

    admitted: int = 0
    extra_admitted: int = 0  # admissions beyond a group's first G
    finished: int = 0
    aborted: int = 0
    late: int = 0  # reports about trajectories of an earlier batch
    questions: int = 0  # questions that entered the window
    reached_g: int = 0  # groups whose completed count reached G
    homogeneous_at_g: int = 0  # ... with all G outcomes the same
    rescued: int = 0  # homogeneous at G, mixed later thanks to extra samples
    deferred: int = 0
    mixed_groups: int = 0  # eligible groups at selection
    cancelled: int = 0
    discarded: int = 0
    selected: int = 0

    @property
    def homogeneous_share(self) -> float:
        return self.homogeneous_at_g / self.reached_g if self.reached_g else 0.0

    def metrics(self, prefix: str = "sampler/") -> dict[str, float]:
        values: dict[str, float] = {f"{prefix}{k}": float(v) for k, v in self.model_dump().items()}
        values[f"{prefix}homogeneous_share"] = self.homogeneous_share
        return values


@dataclass(frozen=True)
class SelectedGroup:
    """One group of the batch: exactly G session indices (ascending) and their outcomes."""

    question_id: str
    sessions: tuple[int, ...]
    outcomes: tuple[bool, ...]


@dataclass(frozen=True)
class Selection:
    """The batch and what to do with everything else sampled under the current policy."""

    groups: list[SelectedGroup]
    cancel: list[Admission]  # still in flight: cancel
    discarded: list[Admission]  # completed but not selected: drop
    carried: list[str]  # back to the front of the queue, sampled afresh next batch
    deferred: list[str]  # deferred during this batch
    stats: BatchStats


@dataclass
class _Group:
    question_id: str
    order: int
    in_flight: set[int] = field(default_factory=set)
    outcomes: dict[int, bool] = field(default_factory=dict)
    aborted: int = 0

    @property
    def completed(self) -> int:
        return len(self.outcomes)

    @property
    def started(self) -> int:
        return len(self.in_flight) + len(self.outcomes) + self.aborted

    @property
    def mixed(self) -> bool:
        successes = sum(self.outcomes.values())
        return 0 < successes < len(self.outcomes)

    def eligible(self, group_size: int) -> bool:
        return self.completed >= group_size and self.mixed


class _GroupState(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question_id: str = Field(min_length=1)
    order: int = Field(ge=0)
    in_flight: list[int]
    outcomes: list[tuple[int, bool]]
    aborted: int = Field(0, ge=0)


class _State(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: int
    config: SamplerConfig
    consumed: int = Field(ge=0)
    source_exhausted: bool
    queue: list[str]
    window: list[_GroupState]
    next_order: int = Field(ge=0)
    next_session: int = Field(ge=0)
    batch: int = Field(ge=0)
    batch_first_session: int = Field(ge=0)
    deferred: list[str]
    stats: BatchStats


class MixedGroupSampler:
    """Adaptive mixed-group sampling for one run; see the module docstring for the rules and the event protocol."""

    def __init__(self, config: SamplerConfig, questions: Iterable[str]) -> None:
        self.config = config
        self._source: Iterator[str] = iter(questions)
        self._source_exhausted = False
        self._consumed = 0
        self._queue: deque[str] = deque()
        self._window: dict[str, _Group] = {}  # insertion order == queue order
        self._in_flight = 0
        self._next_order = 0
        self._next_session = 0
        self._batch = 0
        self._batch_first_session = 0
        self._deferred: list[str] = []
        self.stats = BatchStats()

    # ---------------------------------------------------------------- queries

    @property
    def batch(self) -> int:
        """Number of batches selected so far."""
        return self._batch

    def in_flight(self) -> list[Admission]:
        return [Admission(q, s) for q, g in self._window.items() for s in sorted(g.in_flight)]

    def eligible(self) -> list[str]:
        """Eligible question ids in queue order."""
        return [q for q, g in self._window.items() if g.eligible(self.config.group_size)]

    def ready(self) -> bool:
        return sum(g.eligible(self.config.group_size) for g in self._window.values()) >= self.config.groups

    def outcomes(self, question_id: str) -> dict[int, bool]:
        """Completed outcomes of a window question by session index (for credit assessment once it is eligible)."""
        return dict(self._group(question_id).outcomes)

    def exhausted(self) -> bool:
        """True when the source ran dry and the questions left cannot complete a batch (it is dropped)."""
        if self.ready() or self._in_flight:
            return False
        self._fill_window()
        return not any(self._slot_key(g) is not None for g in self._window.values())

    # ----------------------------------------------------------------- events

    def admit(self, free_slots: int) -> list[Admission]:
        """Trajectories to start now, at most ``free_slots`` and within the admission limit."""
        if free_slots < 0:
            raise SamplerError(f"free_slots must be >= 0, got {free_slots}")
        budget = min(free_slots, self.config.admission_limit - self._in_flight)
        if budget <= 0:
            return []
        self._fill_window()
        heap = [(key, q) for q, g in self._window.items() if (key := self._slot_key(g)) is not None]
        heapq.heapify(heap)
        admitted: list[Admission] = []
        while heap and len(admitted) < budget:
            _, question_id = heapq.heappop(heap)
            group = self._window[question_id]
            if group.started >= self.config.group_size:
                self.stats.extra_admitted += 1
            group.in_flight.add(self._next_session)
            admitted.append(Admission(question_id, self._next_session))
            self._next_session += 1
            if (key := self._slot_key(group)) is not None:
                heapq.heappush(heap, (key, question_id))
        self._in_flight += len(admitted)
        self.stats.admitted += len(admitted)
        return admitted

    def finish(self, question_id: str, session_index: int, success: bool) -> GroupStatus:
        """Record a judged trajectory; the status says whether its group is eligible (assess its failures now)."""
        if not isinstance(success, bool):
            raise SamplerError(f"success must be a bool, got {type(success).__name__}")
        group = self._take_in_flight(question_id, session_index)
        if group is None:
            return GroupStatus.STALE
        was_homogeneous_at_g = group.completed >= self.config.group_size and not group.mixed
        group.outcomes[session_index] = success
        self.stats.finished += 1
        if group.completed == self.config.group_size:
            self.stats.reached_g += 1
            self.stats.homogeneous_at_g += not group.mixed
        elif was_homogeneous_at_g and group.mixed:
            self.stats.rescued += 1
        return self._settle(group)

    def abort(self, question_id: str, session_index: int) -> GroupStatus:
        """A trajectory ended without a judgeable outcome (crash, lost after a restart): free its slot, count nothing.

        It still counts against the group's ``max_per_group``, so a question whose trajectories keep failing is
        deferred rather than retried forever.
        """
        group = self._take_in_flight(question_id, session_index)
        if group is None:
            return GroupStatus.STALE
        group.aborted += 1
        self.stats.aborted += 1
        return self._settle(group)

    def select(self) -> Selection:
        """Close the batch: B eligible groups in queue order, G trajectories each; everything else cancelled/carried."""
        if not self.ready():
            raise SamplerError(
                f"select() before ready(): {len(self.eligible())} of {self.config.groups} mixed groups eligible"
            )
        size = self.config.group_size
        chosen = [g for g in self._window.values() if g.eligible(size)][: self.config.groups]
        groups = [self._retain(g) for g in chosen]
        kept = {(s.question_id, i) for s in groups for i in s.sessions}
        cancel = self.in_flight()
        discarded = [
            Admission(q, i) for q, g in self._window.items() for i in sorted(g.outcomes) if (q, i) not in kept
        ]
        selected_ids = {g.question_id for g in chosen}
        carried = [q for q in self._window if q not in selected_ids]
        self._queue.extendleft(reversed(carried))

        stats = self.stats.model_copy(
            update={
                "mixed_groups": len(self.eligible()),
                "cancelled": len(cancel),
                "discarded": len(discarded),
                "selected": len(kept),
            }
        )
        selection = Selection(groups, cancel, discarded, carried, list(self._deferred), stats)
        self._window.clear()
        self._in_flight = 0
        self._deferred.clear()
        self._batch += 1
        self._batch_first_session = self._next_session
        self.stats = BatchStats()
        return selection

    # ------------------------------------------------------------- checkpoint

    def state_dict(self) -> dict[str, Any]:
        state = _State(
            version=STATE_VERSION,
            config=self.config,
            consumed=self._consumed,
            source_exhausted=self._source_exhausted,
            queue=list(self._queue),
            window=[
                _GroupState(
                    question_id=q,
                    order=g.order,
                    in_flight=sorted(g.in_flight),
                    outcomes=sorted(g.outcomes.items()),
                    aborted=g.aborted,
                )
                for q, g in self._window.items()
            ],
            next_order=self._next_order,
            next_session=self._next_session,
            batch=self._batch,
            batch_first_session=self._batch_first_session,
            deferred=list(self._deferred),
            stats=self.stats,
        )
        return state.model_dump(mode="json")

    def load_state_dict(self, state: dict[str, Any], source_positioned: bool = False) -> None:
        """Restore a ``state_dict()`` into this fresh sampler (see the module docstring for the source position)."""
        if self._consumed or self._window or self._queue or self._next_session:
            raise SamplerError("load_state_dict() needs a fresh sampler (nothing admitted or taken from the source)")
        try:
            saved = _State.model_validate(state)
        except ValidationError as exc:
            raise SamplerError(f"invalid sampler state: {exc}") from exc
        if saved.version != STATE_VERSION:
            raise SamplerError(f"sampler state version {saved.version}, this code reads {STATE_VERSION}")
        if saved.window and saved.config != self.config:
            raise SamplerError(f"mid-batch state was saved with {saved.config}, this sampler has {self.config}")
        if not source_positioned:
            for _ in range(saved.consumed):
                if next(self._source, _END) is _END:
                    raise SamplerError(f"the source has fewer than the {saved.consumed} questions the state consumed")
        self._consumed = saved.consumed
        self._source_exhausted = saved.source_exhausted
        self._queue = deque(saved.queue)
        for g in saved.window:
            self._window[g.question_id] = _Group(g.question_id, g.order, set(g.in_flight), dict(g.outcomes), g.aborted)
        self._in_flight = sum(len(g.in_flight) for g in self._window.values())
        self._next_order = saved.next_order
        self._next_session = saved.next_session
        self._batch = saved.batch
        self._batch_first_session = saved.batch_first_session
        self._deferred = list(saved.deferred)
        self.stats = saved.stats.model_copy()

    # -------------------------------------------------------------- internals

    def _group(self, question_id: str) -> _Group:
        group = self._window.get(question_id)
        if group is None:
            raise SamplerError(f"question {question_id!r} is not in the active window")
        return group

    def _take_in_flight(self, question_id: str, session_index: int) -> _Group | None:
        """The group of an in-flight trajectory, now no longer in flight; None for a stale (earlier-batch) report."""
        if session_index < 0:
            raise SamplerError(f"session indices are >= 0, got {session_index}")
        if session_index < self._batch_first_session:
            self.stats.late += 1
            return None
        group = self._group(question_id)
        if session_index not in group.in_flight:
            state = "already reported" if session_index in group.outcomes else "not in flight"
            raise SamplerError(f"trajectory {question_id!r}/{session_index} is {state}")
        group.in_flight.discard(session_index)
        self._in_flight -= 1
        return group

    def _settle(self, group: _Group) -> GroupStatus:
        if group.eligible(self.config.group_size):
            return GroupStatus.ELIGIBLE
        if not group.in_flight and group.started >= self.config.max_per_group:
            del self._window[group.question_id]
            self._deferred.append(group.question_id)
            self.stats.deferred += 1
            return GroupStatus.DEFERRED
        return GroupStatus.SAMPLING

    def _retain(self, group: _Group) -> SelectedGroup:
        """G of the group's completed trajectories: lowest-index success and failure, then the rest by index."""
        done = sorted(group.outcomes)
        keep = done
        if len(done) > self.config.group_size:
            first_success = next(i for i in done if group.outcomes[i])
            first_failure = next(i for i in done if not group.outcomes[i])
            rest = [i for i in done if i not in (first_success, first_failure)]
            keep = sorted([first_success, first_failure, *rest[: self.config.group_size - 2]])
        return SelectedGroup(group.question_id, tuple(keep), tuple(group.outcomes[i] for i in keep))

    def _slot_key(self, group: _Group) -> tuple[int, ...] | None:
        """Priority of a group for the next free slot (smaller first); None when it takes no more samples."""
        size = self.config.group_size
        if group.started >= self.config.max_per_group:
            return None
        if group.completed >= size:
            return None if group.mixed else (0, group.completed, group.order)  # eligible: done; homogeneous: extras
        if group.started < size:
            return (1, group.completed, group.order)  # initial samples, question by question
        return (2, group.completed, group.started, group.order)  # lagging groups

    def _fill_window(self) -> None:
        while len(self._window) < self.config.window:
            question_id = self._take_question()
            if question_id is None:
                return
            self._window[question_id] = _Group(question_id, self._next_order)
            self._next_order += 1
            self.stats.questions += 1

    def _take_question(self) -> str | None:
        """Next question in queue order that is not in the window; pulls from the source when the queue has none."""
        for i, question_id in enumerate(self._queue):
            if question_id not in self._window:
                del self._queue[i]
                return question_id
        if self._source_exhausted:
            return None
        question_id = next(self._source, _END)
        if question_id is _END:
            self._source_exhausted = True
            return None
        self._consumed += 1
        if not isinstance(question_id, str) or not question_id:
            raise SamplerError(f"question ids must be non-empty strings, the source gave {question_id!r}")
        if question_id in self._window:
            self._queue.append(question_id)  # a repeat of a window question waits for a later batch
            return None
        return question_id
