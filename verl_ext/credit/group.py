"""Assess a rollout group's failures the moment the group is complete (no verl import).

Each trajectory of a group arrives with its outcome as soon as it finishes; when the last of the group's ``size``
arrives, its failures go to the judge against one success of the same group (the reference), while other groups
keep generating. Every member awaits the group's one assessment and gets its own labels (None for successes and
for groups that are all successes or all failures, which keep the plain outcome advantage). A judge that raises
labels the group's failures unassessed (reason ``error``), so they are counted and no member's episode fails.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from verl_ext.credit.labels import CreditLabels, unassessed
from verl_ext.rollout.record import TrajectoryRecord

log = logging.getLogger(__name__)
AssessGroup = Callable[[TrajectoryRecord, Sequence[TrajectoryRecord]], Awaitable[list[CreditLabels]]]


@dataclass
class _Group:
    members: dict[str, tuple[TrajectoryRecord, float]] = field(default_factory=dict)
    done: asyncio.Future[dict[str, CreditLabels | None]] | None = None


class GroupAssessor:
    """One per worker process; ``assess`` is a judge's ``assess_group`` (LLM or offline)."""

    def __init__(self, size: int, success_threshold: float = 0.5) -> None:
        if size < 1:
            raise ValueError(f"group size must be >= 1, got {size}")
        self.size = size
        self.success_threshold = success_threshold
        self._groups: dict[str, _Group] = {}

    async def submit(
        self, group_id: str, member: str, record: TrajectoryRecord, reward: float, assess: AssessGroup
    ) -> CreditLabels | None:
        """Labels of ``member`` once its whole group is in (the last arrival runs the judge)."""
        group = self._groups.setdefault(group_id, _Group())
        if member in group.members:
            raise ValueError(f"trajectory {member!r} of group {group_id!r} submitted twice")
        group.members[member] = (record, reward)
        if group.done is None:
            group.done = asyncio.get_running_loop().create_future()
        if len(group.members) == self.size:
            del self._groups[group_id]
            try:
                result = await self._assess(group.members, assess)
            except BaseException as e:  # the judge's failure (or our cancellation) is every member's: none may hang
                group.done.set_exception(e if isinstance(e, Exception) else RuntimeError("group assessment cancelled"))
                raise
            group.done.set_result(result)
        return (await asyncio.shield(group.done))[member]

    async def _assess(
        self, members: dict[str, tuple[TrajectoryRecord, float]], assess: AssessGroup
    ) -> dict[str, CreditLabels | None]:
        labels: dict[str, CreditLabels | None] = dict.fromkeys(members)
        successes = [m for m, (_, r) in members.items() if r >= self.success_threshold]
        failures = [m for m, (_, r) in members.items() if r < self.success_threshold]
        if not successes or not failures:
            return labels
        reference = members[successes[0]][0]
        records = [members[m][0] for m in failures]
        try:
            assessed = await assess(reference, records)
        except Exception:  # a judge that raises costs its group the labels, never its members' episodes
            log.exception("credit judge raised for group of %r: its failures fall back to GRPO", reference.group_id)
            assessed = [unassessed("error", len(r.turns), "error") for r in records]
        labels.update(zip(failures, assessed, strict=True))
        return labels
