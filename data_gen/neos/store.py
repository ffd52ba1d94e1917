"""Append-only, crash-safe results: one JSON line per processed candidate, flushed and fsynced as it is written.

On open, a torn last line (a crash mid-write) is cut off and the keys already present form the done-set, so a
restart redoes exactly the unfinished work: nothing lost, nothing written twice. Infrastructure errors are not
added to the done-set, so they are retried.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from data_gen.neos.schema import Outcome


class ResultLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.done: set[str] = set()
        if path.exists():
            self._repair()
            self.done = {o.key for o in self.read() if o.status != "error"}
        self._fh = path.open("a", encoding="utf-8")

    def _repair(self) -> None:
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            with self.path.open("r+b") as fh:
                fh.truncate(data.rfind(b"\n") + 1)

    def read(self) -> Iterator[Outcome]:
        with self.path.open(encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    yield Outcome.model_validate_json(line)

    def outcomes(self) -> list[Outcome]:
        """The latest outcome per key (an error later retried successfully counts once, as the retry)."""
        latest: dict[str, Outcome] = {}
        for outcome in self.read():
            latest[outcome.key] = outcome
        return list(latest.values())

    def append(self, outcome: Outcome) -> None:
        if outcome.key in self.done:
            raise ValueError(f"{outcome.key} is already recorded")
        self._fh.write(json.dumps(outcome.model_dump(mode="json"), ensure_ascii=False) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        if outcome.status != "error":
            self.done.add(outcome.key)

    def close(self) -> None:
        self._fh.close()
