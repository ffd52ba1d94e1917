"""``--bench NAME=FORMAT:PATH`` (or ``NAME=PATH`` for a known name): which loader reads which benchmark file.

Above both loader modules, the catch-all layouts (:mod:`verl_ext.eval.benchmarks`) and the upstream ones
(:mod:`verl_ext.eval.upstream`), so every format is registered before a spec is parsed, and neither loader module
imports the other back.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verl_ext.eval import upstream  # noqa: F401  (its loaders register their formats on import)
from verl_ext.eval.benchmarks import FORMATS, BenchmarkError, EvalItem

# The public sets by the loader of the layout they ship in (none can be downloaded here; point --bench at your
# copy). The named loaders live in verl_ext.eval.upstream, one per upstream layout.
KNOWN_BENCHMARKS: dict[str, str] = {
    "neos": "verl", "modalsearch": "verl",  # our splits: python -m data_gen neos|modalsearch --out DIR
    "mmsearch_r1": "mmsearch_r1", "fvqa": "mmsearch_r1", "infoseek": "mmsearch_r1",
    "simplevqa": "simplevqa", "livevqa": "livevqa", "mmsearch": "mmsearch", "browsecomp_vl": "browsecomp_vl",
    "hr_mmsearch": "hr_mmsearch", "sensenova_mars": "sensenova_mars",
}


@dataclass(frozen=True)
class BenchmarkSpec:
    """One ``--bench NAME=FORMAT:PATH``."""

    name: str
    format: str
    path: Path

    @classmethod
    def parse(cls, text: str) -> BenchmarkSpec:
        """``NAME=FORMAT:PATH``, or ``NAME=PATH`` for a name of ``KNOWN_BENCHMARKS``."""
        name, sep, rest = text.partition("=")
        fmt, sep2, path = rest.partition(":")
        if sep and not (sep2 and fmt in FORMATS) and name in KNOWN_BENCHMARKS:
            fmt, path = KNOWN_BENCHMARKS[name], rest
        elif not (sep and sep2 and name and path):
            raise ValueError(f"--bench {text!r}: expected NAME=FORMAT:PATH (formats: {', '.join(sorted(FORMATS))}) "
                             f"or NAME=PATH with NAME one of {', '.join(sorted(KNOWN_BENCHMARKS))}")
        elif fmt not in FORMATS:
            raise ValueError(f"--bench {text!r}: unknown format {fmt!r} (formats: {', '.join(sorted(FORMATS))})")
        if not Path(path).exists():
            raise ValueError(f"--bench {text!r}: no such file {path}")
        return cls(name, fmt, Path(path))

    def load(self) -> list[EvalItem]:
        """The rows, read and checked once per spec: the CLI checks them before it starts a tool server, and the
        run then uses what that read."""
        return list(self._items)

    @functools.cached_property
    def _items(self) -> tuple[EvalItem, ...]:
        items = tuple(FORMATS[self.format](self.name, self.path))
        if not items:
            raise BenchmarkError(self.path, None, "<file>", "no rows (the file is empty or holds only blank lines)")
        seen: set[str] = set()
        for item in items:
            if item.item_id in seen:
                raise BenchmarkError(self.path, None, "id", f"item id {item.item_id!r} occurs twice")
            seen.add(item.item_id)
        return items

    def layouts(self) -> dict[str, int]:
        """How many rows the loader read in each layout it detected (recorded in ``run.json``)."""
        counts: dict[str, int] = {}
        for item in self._items:
            key = item.layout or self.format
            counts[key] = counts.get(key, 0) + 1
        return counts

    def pin(self) -> dict[str, Any]:
        return {"format": self.format, "path": str(self.path), "layouts": self.layouts()}
