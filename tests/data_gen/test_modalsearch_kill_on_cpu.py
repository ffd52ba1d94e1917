"""``python -m data_gen modalsearch`` killed with SIGKILL mid-run (it and its tool server, as a machine crash would)
and run again: the resumed log keeps every record written before the kill, adds the rest once each, and ends exactly
as an uninterrupted run does; the export then holds MEI training pairs from the expert's i2i/t2i calls that tokenise
for MEI SFT."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tool_server.mei.log import BlobStore, MEILog, blobs_dir_of
from verl_ext.mei.sft import sft_example, tokenize

REPO = Path(__file__).resolve().parents[2]


def _command(world: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "data_gen", "modalsearch", "--world", str(world), "--out", str(out), "--limit", "6",
            "--max-nodes", "30", "--benchmark-nodes", "16", "--seeds", "4", "--attempts", "2000"]


def _run(world: Path, out: Path, **popen) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(_command(world, out), cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, **popen)


def _records(out: Path) -> list[tuple[str, str, str | None]]:
    lines = (out / "results.jsonl").read_text().splitlines()
    return [(r["key"], r["status"], r["filter"]) for r in map(json.loads, lines)]


def test_sigkill_mid_run_then_resume_loses_nothing_and_repeats_nothing(small_world, tmp_path, tiny_vl_processor,
                                                                       features_cached):
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    features_cached(killed / "tool_server_cache")
    results = killed / "results.jsonl"
    proc = _run(small_world, killed, start_new_session=True)  # its own process group: the tool server dies with it
    try:
        while proc.poll() is None and not (results.is_file() and results.read_bytes().count(b"\n") >= 1):
            time.sleep(0.005)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    assert not (killed / "stats.json").exists()  # killed before its export
    data = results.read_bytes()
    before = data[: data.rfind(b"\n") + 1].decode().splitlines()  # what was fully written (a torn tail is allowed)

    # beside the resumed run, the uninterrupted one, given the saved graphs (built before any path is judged, written
    # atomically, reused only when their fingerprint matches) and the tool server's feature and OCR caches, so it
    # repeats the judging, not the builds
    features_cached(whole / "tool_server_cache")
    for graph in killed.glob("graph_*.json"):
        shutil.copy(graph, whole / graph.name)
    resumed, uninterrupted = _run(small_world, killed), _run(small_world, whole)
    assert resumed.wait(timeout=300) == 0 and uninterrupted.wait(timeout=300) == 0

    after = results.read_text().splitlines()
    assert after[: len(before)] == before  # nothing written before the kill is lost or rewritten
    resumed = _records(killed)
    assert len({k for k, _, _ in resumed}) == len(resumed)  # nothing done twice
    assert resumed == _records(whole)  # the same records, in the same order, as without the crash
    stats = json.loads((killed / "stats.json").read_text())
    assert stats["verified"] == 6 and stats["splits"] == json.loads((whole / "stats.json").read_text())["splits"]

    pairs = MEILog.read(killed / "mei_sft.jsonl")
    assert pairs.skipped_lines == [] and len(pairs.records) == stats["mei_pairs"]["written"] > 0
    assert {r.tool for r in pairs.records} <= {"i2i_search", "t2i_search", "read_url"}
    blobs = BlobStore(blobs_dir_of(killed / "mei_sft.jsonl"))
    tok = tiny_vl_processor.tokenizer
    for record in pairs.records:
        example = sft_example(record, blobs)
        item = tokenize(example, tiny_vl_processor)
        assert tok.decode(item["input_ids"][item["loss_mask"] == 1]) == example.target + "<|im_end|>"
