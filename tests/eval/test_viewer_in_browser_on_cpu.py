"""The trajectory viewer in a real headless Chromium (Debian's ``chromium``), opened from the file system: one run of
the harness (scripted stand-in policy, real tool server) rendered, screenshotted, and its DOM checked for every turn
and every image decoded. Also the report of trajectories exported during training, with credit labels."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from verl_ext.eval.__main__ import main
from verl_ext.rollout.record import CallRecord, ImageEntry, TrajectoryRecord, TurnRecord

from .conftest import QUESTIONS, scripted_policy

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")


def _browser(page: Path, *args: str) -> str:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
           "--virtual-time-budget=5000", *args, page.resolve().as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout


def test_viewer_shows_turns_and_images(tmp_path, threaded_chat, tool_server, benchmark_files) -> None:
    threaded_chat.reply = scripted_policy({QUESTIONS[0]: "Aruba", QUESTIONS[1]: "Angola"})
    out = tmp_path / "run"
    assert main(["run", "--bench", f"neos=verl:{benchmark_files['neos']}", "--out", str(out), "--policy-url",
                 threaded_chat.url, "--tool-server", tool_server, "--runs", "1", "--limit", "1", "--max-turns", "4",
                 "--no-progress", "--no-embeddings"]) == 0
    page = out / "report" / "viewer.html"
    dom = _browser(page, "--dump-dom")
    # one neos episode: TextSearch, TextSearch, FetchImage, answer; question image img_1 and the fetched img_2
    assert len(re.findall(r'class="turn ', dom)) == 4
    assert 'data-images-loaded="2"' in dom and 'data-images-missing="0"' in dom
    assert "FetchImage" in dom and "flag of Aruba" in dom and ">correct<" in dom
    shot = tmp_path / "viewer.png"
    _browser(page, f"--screenshot={shot}", "--window-size=1200,1800")
    assert shot.stat().st_size > 10_000
    shutil.copy(shot, out / "report" / "viewer_screenshot.png")  # kept beside the report for a reader


def test_exported_training_trajectories_with_credit_labels(tmp_path) -> None:
    call = CallRecord(tool_name="TextSearch", arguments={"query": ["x"]}, ok=True, observation="1. X — https://a")
    turns = [TurnRecord(index=0, span=(0, 5), text="search", outcome="call_ok", calls=[call]),
             TurnRecord(index=1, span=(5, 9), text="Lyon", outcome="answer", tools_enabled=True)]
    record = TrajectoryRecord(protocol="neos", question="Capital?", session_id="s", group_id="g", mei_version=None,
                              termination_reason="answer", final_answer="Lyon", turns=turns,
                              images=[ImageEntry(ref="img_1", source="question", turn=None, in_context=True)])
    labels = {"assessed": True, "judge": "offline_path", "num_turns": 2, "productive": {"0": 0.8},
              "events": [{"turn": 1, "type": "causal_error", "severity": 1.0, "confidence": 1.0}]}
    path = tmp_path / "trajectories.jsonl"
    path.write_text(json.dumps({"neos_trajectory": record.model_dump(mode="json"), "neos_credit": labels, "acc": 0})
                    + "\n")
    assert main(["report", "--trajectories", str(path), "--out", str(tmp_path / "r"), "--no-embeddings"]) == 0
    dom = _browser(tmp_path / "r" / "viewer.html", "--dump-dom")
    assert 'class="label productive"' in dom and 'class="label causal_error"' in dom and ">incorrect<" in dom
    assert "img_1 (no pixels kept)" in dom
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["behaviour"]["tool_calls"]["by_tool"] == {"TextSearch": 1}
    # a bad line names file and line
    path.write_text(path.read_text() + '{"neos_trajectory": {"turns": 3}}\n')
    with pytest.raises(SystemExit) as exit_:
        main(["report", "--trajectories", str(path), "--out", str(tmp_path / "r2"), "--no-embeddings"])
    assert exit_.value.code == 2
