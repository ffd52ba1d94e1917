"""Built artefacts kept in a cache directory that the processes of several checkouts share at once: the test
sessions' small worlds (``<source cache>/worlds/small-<key>``) and the tiny model (``models/tiny-qwen-vl-<key>``),
each keyed by what it was built from.

Every entry has a lock file beside it (``<family><key>.lock``) that a process holds shared for as long as it uses the
entry (builders included), and a build lock (``<family><key>.build.lock``) that a process holds exclusive while it
checks for and makes the entry, so a second process with the same key waits for that build instead of starting another.
Two locks, because one cannot do both: a waiter asking to upgrade the use lock to exclusive would wait for every user
to finish (a whole test session), not for the build. Entries of other keys (older code or sources, or another checkout's) are deleted only when nobody holds their
lock (an exclusive lock taken without waiting) and nobody has used them for ``keep_unused_s`` (the lock file's mtime,
touched at each use; an entry built before these locks: its build time), so a checkout whose tests are between runs
keeps its entry. A build's temporary directory (``<family><key>.tmp-<pid>``) goes with its key. Pruning runs only
when a process builds: one that finds its entry pays one open and one lock. Locks are ``flock`` locks on open files,
released when their process ends, however it ends.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from neos_core.entry_lock import exclusive, hold_or_none

KEEP_UNUSED_S = 7 * 24 * 3600.0  # a small world is ~20 MB, the tiny model ~40 MB: a week of them costs little


def _lock_path(root: Path, name: str) -> Path:
    return root / f"{name}.lock"


def _open_lock(root: Path, name: str) -> IO[bytes]:
    return open(_lock_path(root, name), "a+b")  # noqa: SIM115 (held open by the caller: the lock lives with it)


def use_keyed_dir(root: Path, family: str, key: str, build: Callable[[Path], None], *, ready: str,
                  keep_unused_s: float = KEEP_UNUSED_S) -> tuple[Path, IO[bytes]]:
    """The entry ``root/<family><key>``, built by ``build(path)`` unless its ``ready`` file exists, and the open lock
    file that keeps it while the caller holds it (close it, or exit, to release). A build first prunes the family's
    unused entries of other keys."""
    root.mkdir(parents=True, exist_ok=True)
    name = f"{family}{key}"
    path = root / name
    lock = _open_lock(root, name)
    try:
        os.utime(_lock_path(root, name))  # last use: other processes' pruning leaves it for keep_unused_s
        fcntl.flock(lock, fcntl.LOCK_SH)  # held from here on: nobody prunes it, built or half-built
        if not (path / ready).is_file():
            with exclusive(_lock_path(root, f"{name}.build")):  # one builder per key; the others wait, then find it
                if not (path / ready).is_file():
                    prune_keyed_dirs(root, family, keep=key, keep_unused_s=keep_unused_s)
                    build(path)
    except BaseException:
        lock.close()
        raise
    return path, lock


def _key_of(entry: Path, family: str) -> str | None:
    """The key of an entry, its build's temporary directory or its lock file; None outside the family."""
    if not entry.name.startswith(family):
        return None
    return entry.name[len(family):].split(".", 1)[0] or None


def prune_keyed_dirs(root: Path, family: str, *, keep: str, keep_unused_s: float = KEEP_UNUSED_S) -> list[str]:
    """Delete the family's entries (and leftover build directories) of keys other than ``keep`` that nobody holds and
    nobody has used for ``keep_unused_s``; returns the keys deleted. Lock files stay: removing one while another
    process opens it would let two processes lock different files for one entry."""
    deleted = []
    now = time.time()
    for key in sorted({k for e in root.iterdir() if (k := _key_of(e, family)) is not None and k != keep}):
        name = f"{family}{key}"
        entries = list(root.glob(f"{name}*"))
        lock_path = _lock_path(root, name)
        stamped = [lock_path] if lock_path.exists() else entries  # no lock file: built before locks, its build time
        if now - max((e.stat().st_mtime for e in stamped), default=0.0) < keep_unused_s:
            continue  # used recently: a checkout between test runs
        lock = hold_or_none(lock_path)
        if lock is None:
            continue  # in use or being built right now
        with lock:
            for entry in entries:
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
            deleted.append(key)
    return deleted
