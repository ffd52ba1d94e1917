"""A free loopback port, for the servers our benches, drivers and tests start as subprocesses."""

from __future__ import annotations

import socket


def free_local_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS's pick; another process may still take it first)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
