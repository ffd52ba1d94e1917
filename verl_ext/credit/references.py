"""Verified success references for the credit judge (Neos §3.4: "a verified successful reference"), from data
generation's ``references.jsonl``.

``python -m data_gen neos`` (and ``modalsearch``) write one line per verified task: ``{"task_id", "label":
"success", "trajectory"}``, the trajectory being the expert's episode as a ``TrajectoryRecord``, whose tool calls
reached the answer the task was built from. The dataset rows name it in ``extra_info.reference_trajectory_id``. A
group's failures are judged against that reference when the file has it; otherwise (no file configured, or a task
missing from it) against a success of the same group, which only the answer reward has checked. Which one was used
travels with the labels (``CreditLabels.reference``) and is counted by the estimator
(``neos_credit/reference/in_group_share``). No verl import.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from verl_ext.credit.labels import CreditLabels, ReferenceKind
from verl_ext.rollout.record import TrajectoryRecord

REFERENCE_ID_KEY = "reference_trajectory_id"  # extra_info key both data generators write (the task id)
AssessGroup = Callable[[TrajectoryRecord, Sequence[TrajectoryRecord]], Awaitable[list[CreditLabels]]]


def load_references(path: str | Path) -> dict[str, TrajectoryRecord]:
    """Task id -> verified success trajectory; ``ValueError`` naming the file, line and field of a bad line."""
    references: dict[str, TrajectoryRecord] = {}
    with Path(path).open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                entry = json.loads(line)
                task_id, label = str(entry["task_id"]), entry.get("label", "success")
                trajectory = TrajectoryRecord.model_validate(entry["trajectory"])
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not JSON ({e.msg})") from None
            except (KeyError, TypeError) as e:
                raise ValueError(f"{where}: needs task_id and trajectory fields (missing {e})") from None
            except ValidationError as e:
                first = e.errors()[0]
                field = ".".join(str(p) for p in first["loc"])
                raise ValueError(f"{where}: trajectory.{field}: {first['msg']}") from None
            if label == "success":
                references[task_id] = trajectory
    return references


def reference_id(extra_info: Any) -> str | None:
    """The row's reference id (``extra_info.reference_trajectory_id``), None when it has none."""
    value = extra_info.get(REFERENCE_ID_KEY) if isinstance(extra_info, Mapping) else None
    return None if value is None else str(value)


def with_reference(assess: AssessGroup, verified: TrajectoryRecord | None) -> AssessGroup:
    """``assess`` judging against ``verified`` when there is one, else against the group's own success; every
    label says which (``reference``)."""

    async def judged(in_group: TrajectoryRecord, failures: Sequence[TrajectoryRecord]) -> list[CreditLabels]:
        kind: ReferenceKind = "verified" if verified is not None else "in_group"
        labels = await assess(verified if verified is not None else in_group, failures)
        return [label.model_copy(update={"reference": kind}) for label in labels]

    return judged
