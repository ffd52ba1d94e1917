"""The Neos pipeline's ``results.jsonl``: the shared crash-safe log (``data_gen.common.store``) bound to
:class:`~data_gen.neos.schema.Outcome`."""

from __future__ import annotations

from pathlib import Path

from data_gen.common.store import ResultLog as _ResultLog
from data_gen.neos.schema import Outcome


class ResultLog(_ResultLog[Outcome]):
    def __init__(self, path: Path) -> None:
        super().__init__(path, Outcome)
