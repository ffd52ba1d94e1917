"""Run ``python -m tool_server`` as a subprocess and hand back its address: the one way the demo tour, the tests that
need a real server process and the Ray deployment (``tool_server.ray_fleet``) start one (the CLI prints
``tool_server listening on URL ...`` when ready)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path


def start(
    argv: Sequence[str], *, stderr: int | None = subprocess.DEVNULL, preexec_fn: Callable[[], None] | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[subprocess.Popen, str]:
    """``python -m tool_server ARGV`` once it listens: the process and the URL it announced. ``stderr``: where its
    log goes (default: discarded; None: this process's stderr); ``env``: its environment (default: this process's)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tool_server", *argv],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        preexec_fn=preexec_fn,
        env=env,
    )
    line = proc.stdout.readline() if proc.stdout else ""
    if "listening on " not in line:
        proc.kill()
        raise RuntimeError(f"tool server did not start (exit {proc.wait(timeout=30)}); run it directly for its log")
    return proc, line.split("listening on ", 1)[1].split()[0]


@contextmanager
def served(world: Path, *args: str) -> Iterator[str]:
    """Serve ``world`` on a free loopback port with extra CLI ``args``; yields the base URL, stops the server after."""
    proc, url = start(["--world", str(world), "--port", "0", *args])
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
