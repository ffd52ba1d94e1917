"""Temporary files and directories a server process names after itself (``<prefix><pid>-...``), so that a later
server removes those a process killed outright (kill -9) left behind: it never ran its own clean-up."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's, alive
        return False
    return False


def remove_orphans(directory: Path, prefix: str) -> list[Path]:
    """Remove the files and directories ``<prefix><pid>-*`` in ``directory`` whose process ``pid`` is gone; those of
    live processes, and names without an owner, are left."""
    removed = []
    for path in directory.glob(f"{prefix}*-*"):
        pid = path.name[len(prefix):].split("-", 1)[0]
        if pid.isascii() and pid.isdigit() and _process_gone(int(pid)):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            removed.append(path)
    return removed
