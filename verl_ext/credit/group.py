"""Assess a rollout group's failures the moment the group is complete (no verl import).

Each trajectory of a group arrives with its outcome as soon as it finishes; when the last of the group's ``size``
arrives, its failures go to the judge against one success of the same group (the reference), while other groups
keep generating. Every member awaits the group's one assessment and gets its own labels (None for successes and
for groups that are all successes or all failures, which keep the plain outcome advantage). A judge that raises
labels the group's failures unassessed (reason ``error``), so they are counted and no member's episode fails.

A member whose agent loop raised has no trajectory: it is ``withdraw``n, and the group completes with the members
that did arrive (it is neither a reference nor judged), so its siblings never wait for it.
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
    withdrawn: set[str] = field(default_factory=set)
    assess: AssessGroup | None = None  # the judge of the members that arrived
    done: asyncio.Future[dict[str, CreditLabels | None]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    @property
    def arrived(self) -> int:
        return len(self.members) + len(self.withdrawn)


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
        if member in group.members or member in group.withdrawn:
            raise ValueError(f"trajectory {member!r} of group {group_id!r} submitted twice")
        group.members[member] = (record, reward)
        group.assess = assess
        await self._complete_if_in(group_id, group)
        return (await asyncio.shield(group.done))[member]

    async def withdraw(self, group_id: str, member: str) -> bool:
        """``member`` ended without a trajectory (its agent loop raised): the group no longer waits for it. When it was
        the last one awaited, the members that arrived are assessed now (a judge failure is theirs, not raised here).
        Only for a member that has not submitted: after its group completed, a withdrawal would open a new group.
        False when ``member`` had already submitted to or withdrawn from its open group."""
        group = self._groups.setdefault(group_id, _Group())
        if member in group.members or member in group.withdrawn:
            return False
        group.withdrawn.add(member)
        try:
            await self._complete_if_in(group_id, group)
        except Exception:  # noqa: BLE001  the members awaiting group.done receive it
            pass
        return True

    async def _complete_if_in(self, group_id: str, group: _Group) -> None:
        """Run the group's one assessment once every member has arrived or withdrawn."""
        if group.arrived < self.size:
            return
        del self._groups[group_id]
        if not group.members:
            group.done.set_result({})
            return
        try:
            result = await self._assess(group.members, group.assess)
        except BaseException as e:  # the judge's failure (or our cancellation) is every member's: none may hang
            group.done.set_exception(e if isinstance(e, Exception) else RuntimeError("group assessment cancelled"))
            raise
        group.done.set_result(result)

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
