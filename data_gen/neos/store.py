"""The Neos pipeline's ``results.jsonl``: the shared crash-safe log (``neos_core.results``) bound to
:class:`~neos_core.neos_tasks.Outcome`."""

from __future__ import annotations

from pathlib import Path

from neos_core.neos_tasks import Outcome
from neos_core.results import ResultLog as _ResultLog


class ResultLog(_ResultLog[Outcome]):
    def __init__(self, path: Path) -> None:
        super().__init__(path, Outcome)
