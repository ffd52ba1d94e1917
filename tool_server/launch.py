"""Run ``python -m tool_server`` as a subprocess and hand back its address: the one way the demo tour and the
tests that need a real server process start one (the CLI prints ``tool_server listening on URL ...`` when ready)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def served(world: Path, *args: str) -> Iterator[str]:
    """Serve ``world`` on a free loopback port with extra CLI ``args``; yields the base URL, stops the server after."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tool_server", "--world", str(world), "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # its log; run `python -m tool_server` directly to read it
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if "listening on " not in line:
            raise RuntimeError(f"tool server did not start (exit {proc.wait(timeout=30)}); run it directly for its log")
        yield line.split("listening on ", 1)[1].split()[0]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
