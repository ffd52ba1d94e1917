"""Per-entry locks for caches that several processes share (the world's source cache, an MEI buffer directory).

``flock`` locks on a lock file beside the entry: released when the holder closes it or its process ends, however it
ends, so a killed process never leaves a stale lock. Lock files are never deleted: removing one while another process
opens it would let two processes lock different files for one entry.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


@contextmanager
def exclusive(lock_path: Path) -> Iterator[None]:
    """Hold ``lock_path`` exclusively for the block, waiting for any other holder."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def hold_or_none(lock_path: Path) -> IO[bytes] | None:
    """The open lock file, held exclusively until the caller closes it, or None when another process holds it."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = open(lock_path, "a+b")  # noqa: SIM115 (the lock lives as long as the caller keeps it open)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return None
    return lock
