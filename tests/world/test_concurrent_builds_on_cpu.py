"""Several world builds started at once on one cold source cache, as the jobs and test sessions of one machine do
(they share ``~/.cache/neos-world``): each must succeed and build the same world. The ``logos`` adapter alone needs one
source from each registry client (npm: simple-icons, Debian: fonts-dejavu-core, PyPI: the wiki summaries), so every
fetcher and extractor runs concurrently in a few seconds."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

BUILDS = 3
STAGGER_S = 0.7  # the later builds start while the first is fetching or extracting


def test_concurrent_cold_builds_all_succeed_with_one_hash(tmp_path):
    env = {**os.environ, "NEOS_WORLD_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(Path(__file__).parents[2])}
    procs = []
    for i in range(BUILDS):
        cmd = [sys.executable, "-m", "data_gen.world", "build", "--size", "small", "--out", str(tmp_path / f"w{i}"),
               "--adapters", "logos"]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        time.sleep(STAGGER_S)
    results = [(p.wait(timeout=600), *p.communicate()) for p in procs]
    for rc, out, err in results:
        assert rc == 0, err[-3000:]
    hashes = {re.search(r"hash ([0-9a-f]{16})", out).group(1) for _, out, _ in results}
    assert len(hashes) == 1, hashes
    cache = tmp_path / "cache"
    entries = [*cache.glob("src/*"), *cache.glob("archives/*/*")]
    assert not [e.name for e in entries if e.name.startswith(".") and not e.name.endswith(".lock")]  # no temp left
