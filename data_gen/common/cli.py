"""What both pipelines' command lines share: the common flags, the world check that runs before anything is
written, the progress bar under ``--limit`` and the closing line that says where the output went."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tqdm import tqdm

from neos_core.usage import nonnegative_int, positive_int
from neos_core.world.store import World, WorldError


def add_common_flags(p: argparse.ArgumentParser, unit: str, kg: bool = False) -> None:
    """``--world/--out/--limit/--seed``, worded the same for both pipelines; ``unit`` names what ``--limit``
    counts ("tasks", "questions"); ``kg``: ``--kg DUMP`` may replace ``--world``."""
    source = p.add_mutually_exclusive_group(required=True) if kg else p
    source.add_argument("--world", required=not kg, type=Path, metavar="DIR",
                        help="a built offline world (python -m data_gen world build --size small --out DIR)")
    if kg:
        source.add_argument("--kg", type=Path, metavar="DUMP",
                            help="a Wikidata dump instead of the world: truthy N-Triples (.nt) or the JSON dump "
                            "(.json), plain, .gz or .bz2; its world is written to OUT/kg_world (see --kg-images)")
    p.add_argument("--out", required=True, type=Path, metavar="DIR",
                   help="output directory; created if missing, and a run into an existing one resumes from its "
                   "results.jsonl, redoing only what is missing")
    p.add_argument("--limit", type=positive_int, default=None, metavar="N",
                   help=f"stop once N {unit} are verified, counting those already in --out (default: no limit)")
    p.add_argument("--seed", type=nonnegative_int, default=0, metavar="S",
                   help="seed of every random choice; the same world and seed give the same output (default: 0)")


def add_teacher_flags(p: argparse.ArgumentParser) -> None:
    """``--teacher-url/--teacher-model/--teacher-max-turns``, the same for both pipelines."""
    p.add_argument("--teacher-url", default=None, metavar="URL",
                   help="OpenAI-compatible base URL of a teacher model that runs each verified task's expert episode "
                   "with the tools; unusable episodes fall back to the programmatic expert, counted by reason "
                   "(default: the programmatic expert alone, no model)")
    p.add_argument("--teacher-model", default="teacher", metavar="NAME",
                   help="model name sent to --teacher-url (default: teacher)")
    p.add_argument("--teacher-max-turns", type=positive_int, default=None, metavar="N",
                   help="assistant turns of a teacher episode, the last without tools (default: the protocol's, 50 "
                   "for Neos, 46 for ModalSearch)")


def load_world(path: Path) -> World:
    """The world at ``path``, or :class:`WorldError` (one line) when it is missing, unreadable or holds nothing to
    build tasks from."""
    world = World.load(path)
    if not world.entities or not world.pages:
        raise WorldError(f"{path} holds no entities or no pages: rebuild it (python -m data_gen world build)")
    return world


def input_error(command: str, message: str) -> int:
    """A value that passed the parser but cannot be used (a missing world, a dead URL): one line on stderr worded
    as argparse's own errors (``python -m data_gen COMMAND: error: ...``); returns the exit code, 2."""
    print(f"python -m data_gen {command}: error: {message}", file=sys.stderr)
    return 2


def world_or_exit(path: Path, command: str) -> World | None:
    """:func:`load_world`, printing its error as one line on stderr (None) so the caller exits 2 before it writes
    anything."""
    try:
        return load_world(path)
    except WorldError as err:
        input_error(command, f"--world: {err}")
        return None


def progress(limit: int | None, done: int, total: int, desc: str, unit: str) -> tqdm:
    """The bar: under ``--limit`` it counts verified items towards the limit (``done`` already there), else the
    ``total`` units of work (seeds, path draws). Callers ``update`` it accordingly, see :func:`counts_work`."""
    if limit is not None:
        return tqdm(total=limit, initial=min(done, limit), desc=desc, unit="verified")
    return tqdm(total=total, desc=desc, unit=unit)


def counts_work(limit: int | None) -> bool:
    """Whether the bar of :func:`progress` advances per unit of work (True) or per verified item (False)."""
    return limit is None


def report_output(out: Path, verified: int, unit: str, files: list[str]) -> None:
    """The closing line: how many items and where they are (stderr, beside the progress bar; stdout keeps the
    statistics JSON)."""
    present = [f for f in files if (out / f).exists()]
    print(f"{verified} verified {unit} in {out.resolve()} ({', '.join(present)})", file=sys.stderr)
