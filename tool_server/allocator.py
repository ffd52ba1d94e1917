"""glibc's allocator set up for a server whose large buffers (decoded images, bodies, PNGs) come and go.

Two measured faults of glibc's defaults (2-core box, Pillow 13):

- its mmap threshold rises to the size of the last large block freed (up to 32 MiB), so after the first 25 Mpx image
  is freed, the next one's 16 MiB blocks come from the heap, and Pillow's ``calloc`` must clear them: ``Image.core.new``
  of 5000x5000 RGB took 15-131 ms holding the GIL (0.1 ms on fresh pages), an event-loop stall per large image;
- memory freed on the heap stays in the process: RSS after freeing two such images stayed at 204 MiB (13 MiB with a
  fixed threshold), and after an attack at its peak.

:func:`configure` fixes the threshold at :data:`MMAP_THRESHOLD` (blocks at least that large are mapped on their own,
cleared by the kernel as they are first touched, off the GIL, and unmapped when freed). What smaller buffers leave on
the heap (a thousand tool-call bodies just under 1 MiB) is given back by :class:`Trimmer` (``malloc_trim(0)``) once
:data:`TRIM_BYTES` of client data were released. Neither exists off glibc (musl, macOS): counted as unavailable, the
server runs with the platform's allocator.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD = 2**20
TRIM_BYTES = 64 * 2**20


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None  # glibc's; musl has neither


_LIBC = _glibc()


def configure(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold for this process (and the workers forked from it); False where it cannot."""
    if _LIBC is None or _LIBC.mallopt(M_MMAP_THRESHOLD, threshold) != 1:
        log.warning("not glibc: the allocator's mmap threshold stays dynamic and freed memory is not trimmed")
        return False
    return True


class Trimmer:
    """Counts released bytes of client data; :meth:`due` once :data:`TRIM_BYTES` were released since the last
    :meth:`trim`, which gives the heap's free memory back to the OS (run it off the event loop: it walks the heap)."""

    def __init__(self, trim_bytes: int = TRIM_BYTES) -> None:
        self.trim_bytes = trim_bytes
        self.released = 0  # since the last trim
        self.trims = 0
        self.unavailable = 0  # trims due where malloc_trim does not exist

    def released_bytes(self, n: int) -> None:
        self.released += n

    def due(self) -> bool:
        return self.released >= self.trim_bytes

    def trim(self) -> None:
        self.released = 0
        if _LIBC is None:
            self.unavailable += 1
            return
        _LIBC.malloc_trim(0)
        self.trims += 1
