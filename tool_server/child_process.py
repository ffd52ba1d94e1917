"""The first thing a helper process of the server does (reverse search, image decoding): leave Ctrl-C to the server,
end when the server is gone, and run below the server's event loop should they share a core."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

HEAVY_NICE = 10  # heavy work (image pools, helper processes) runs this much below the event loop


def _exit_with(parent: int) -> None:
    """End this process once ``parent`` is gone: a killed server never stops its executor, and an idle pool process
    waits on a queue whose write end it holds itself, so it would wait forever."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def start_as_server_child() -> None:
    """Call first in a pool initializer: the server's Ctrl-C stops the server, which stops these."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with, args=(os.getppid(),), name="exit-with-server", daemon=True).start()
    with contextlib.suppress(OSError):
        os.nice(HEAVY_NICE)
