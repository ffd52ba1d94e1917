"""glibc's allocator set up for the server (``tool_server.allocator``): large blocks mapped on their own so freed
images leave the process, and the heap trimmed after large releases of client data."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tool_server.allocator import TRIM_BYTES, Trimmer
from tool_server.memory import MemoryBudget

_FREED_RSS = """
import sys
from PIL import Image
from tool_server import allocator
if sys.argv[1] == "configured":
    assert allocator.configure()
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
before = rss()
for _ in range(3):  # the first 100 MB image freed raised glibc's dynamic threshold; the next came from the heap
    image = Image.core.fill("RGB", (5000, 5000), (1, 2, 3))
    del image
print(rss() - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_a_configured_process_gives_freed_images_back():
    """Three 5000x5000 images made and freed: with the threshold fixed, RSS ends within 16 MiB of where it began
    (glibc's defaults left the last one's 100 MB on the heap: 204 MiB against 13 MiB measured)."""
    run = [sys.executable, "-c", _FREED_RSS, "configured"]
    grown = int(subprocess.run(run, capture_output=True, text=True, check=True, timeout=120).stdout)
    assert grown < 16 * 2**20


def test_the_memory_budget_counts_releases_toward_a_trim():
    memory = MemoryBudget(4 * TRIM_BYTES)
    assert memory.take("images", 2 * TRIM_BYTES)
    memory.give("images", TRIM_BYTES - 1)
    assert not memory.trimmer.due()
    memory.give("images", 1)
    assert memory.trimmer.due()
    memory.trimmer.trim()
    assert not memory.trimmer.due() and memory.trimmer.released == 0
    assert memory.trimmer.trims + memory.trimmer.unavailable == 1


def test_a_trim_is_counted_as_unavailable_without_glibc(monkeypatch):
    from tool_server import allocator

    monkeypatch.setattr(allocator, "_LIBC", None)
    trimmer = Trimmer(trim_bytes=10)
    trimmer.released_bytes(10)
    trimmer.trim()
    assert (trimmer.trims, trimmer.unavailable) == (0, 1)
    assert not allocator.configure()


async def test_the_server_trims_after_large_releases_and_says_so(serve, raw_http):
    from tool_server.app import MEMORY

    app, client = await serve()
    memory = app[MEMORY]
    assert memory.take("images", TRIM_BYTES)
    memory.give("images", TRIM_BYTES)
    await raw_http.until(lambda: memory.trimmer.trims + memory.trimmer.unavailable == 1)
    metrics = (await (await client.get("/metrics")).text()).splitlines()
    expected = ("done", 1) if sys.platform.startswith("linux") else ("unavailable", 1)
    assert 'memory_trims_total{result="%s"} %d' % expected in metrics
