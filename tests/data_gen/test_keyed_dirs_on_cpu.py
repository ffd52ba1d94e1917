"""The shared cache of built worlds and models (``neos_core.keyed_dirs``) on a temporary directory, never on
the real cache other checkouts use: a world in use or recently used by another session is never deleted, an unused
old one is, and one build per key however many sessions ask. Other sessions are real processes holding real
``flock`` locks."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from neos_core.keyed_dirs import prune_keyed_dirs, use_keyed_dir


def use_world(root: Path, key: str, build):
    return use_keyed_dir(root, "small-", key, build, ready="manifest.json")


def prune(root: Path, *, keep: str) -> list[str]:
    return prune_keyed_dirs(root, "small-", keep=keep)

HOLD = """
import fcntl, sys, time
lock = open(sys.argv[1], "a+b")
fcntl.flock(lock, fcntl.LOCK_SH)
print("held", flush=True)
sys.stdin.readline()
"""
WEEK = 7 * 24 * 3600


def _world(root: Path, key: str, *, age_s: float = 0.0, lock: bool = True) -> Path:
    """A built world of ``key`` (a manifest and one file), last used ``age_s`` ago."""
    path = root / f"small-{key}"
    path.mkdir(parents=True)
    (path / "manifest.json").write_text("{}")
    (path / "entities.jsonl").write_text("")
    stamp = time.time() - age_s
    entries = [path, *([root / f"small-{key}.lock"] if lock else [])]
    for entry in entries:
        entry.touch()
        os.utime(entry, (stamp, stamp))
    return path


def _make(path: Path) -> None:
    path.mkdir()
    (path / "manifest.json").write_text("{}")


def test_an_unused_old_world_is_deleted_and_the_current_one_kept(tmp_path):
    old = _world(tmp_path, "old", age_s=WEEK + 60)
    leftover = tmp_path / "small-old.tmp-999"  # a killed build of that key
    leftover.mkdir()
    os.utime(leftover, (0, 0))
    current, lock = use_world(tmp_path, "new", _make)
    with lock:
        assert current == tmp_path / "small-new" and (current / "manifest.json").is_file()
        assert not old.exists() and not leftover.exists()
        assert (tmp_path / "small-old.lock").exists()  # lock files stay: see prune()


def test_a_recently_used_world_is_kept_even_when_nobody_holds_it(tmp_path):
    recent = _world(tmp_path, "recent", age_s=3600)  # another checkout, between two test runs
    legacy = _world(tmp_path, "legacy", age_s=3600, lock=False)  # built before locks: its build time counts
    assert prune(tmp_path, keep="new") == []
    assert recent.exists() and legacy.exists()


def test_a_world_another_session_holds_is_never_deleted(tmp_path):
    held = _world(tmp_path, "held", age_s=WEEK + 60)
    other = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "small-held.lock")], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "held"
        os.utime(tmp_path / "small-held.lock", (0, 0))  # old as can be: only the lock protects it
        assert prune(tmp_path, keep="new") == []
        assert (held / "manifest.json").is_file()
    finally:
        other.stdin.close()
        other.wait(timeout=30)
    assert prune(tmp_path, keep="new") == ["held"]  # released with its process
    assert not held.exists()


def test_a_build_in_progress_of_another_key_is_left_alone(tmp_path):
    building = tmp_path / "small-other.tmp-123"
    building.mkdir()
    os.utime(building, (0, 0))
    other = subprocess.Popen([sys.executable, "-c", HOLD.replace("LOCK_SH", "LOCK_EX"),
                              str(tmp_path / "small-other.lock")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert other.stdout.readline().strip() == "held"
        os.utime(tmp_path / "small-other.lock", (0, 0))
        assert prune(tmp_path, keep="new") == [] and building.is_dir()
    finally:
        other.stdin.close()
        other.wait(timeout=30)


def test_sessions_asking_at_once_build_a_key_once(tmp_path):
    builds = []

    def slow_build(path: Path) -> None:
        builds.append(path)
        time.sleep(0.2)  # long enough for the other sessions to arrive while it builds
        _make(path)

    results, locks = [], []

    def session() -> None:
        path, lock = use_world(tmp_path, "same", slow_build)
        results.append((path / "manifest.json").is_file())
        locks.append(lock)

    threads = [threading.Thread(target=session) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    for lock in locks:
        lock.close()
    assert builds == [tmp_path / "small-same"] and results == [True, True, True]


def test_a_build_does_not_wait_for_the_sessions_holding_the_entry(tmp_path):
    """Another session holds the entry's use lock while it is not built yet (it is about to wait for the build, or it
    will use the entry for a whole test run): the build must go ahead, not wait for that session to end."""
    other = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "small-same.lock")], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "held"
        done = []
        session = threading.Thread(target=lambda: done.append(use_world(tmp_path, "same", _make)), daemon=True)
        session.start()
        session.join(timeout=30)
        assert done, "the build waited for a session that only holds the entry"
        path, lock = done[0]
        lock.close()
        assert (path / "manifest.json").is_file()
    finally:
        other.stdin.close()
        other.wait(timeout=30)


def test_a_failed_build_releases_its_lock(tmp_path):
    def broken(path: Path) -> None:
        raise RuntimeError("source archive missing")

    with pytest.raises(RuntimeError, match="source archive missing"):
        use_world(tmp_path, "bad", broken)
    path, lock = use_world(tmp_path, "bad", _make)  # would wait forever if the lock were still held
    lock.close()
    assert (path / "manifest.json").is_file()
