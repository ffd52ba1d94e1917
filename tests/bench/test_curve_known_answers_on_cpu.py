"""``bench/curve_known_answers.py``: a second export's questions that the warm start's export never asked and whose
answers its SFT split taught, split into RL and held-out rows with their expert episodes. Two exports written here
in the layouts ``data_gen neos`` writes (RL rows: ``extra_info`` with task id, question, answer; SFT rows: ``id``,
``messages`` ending in the answer)."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import curve_known_answers as known  # noqa: E402


def write_export(root: Path, splits: dict[str, list[tuple[str, str, str]]]) -> Path:
    """``splits``: split name -> (task id, question, answer); the ``train`` split's tasks also get SFT episodes."""
    root.mkdir(parents=True)
    for name in known.SPLITS:
        rows = [{"prompt": [{"role": "user", "content": q}], "extra_info": {"task_id": t, "question": q, "answer": a,
                                                                            "split": name}}
                for t, q, a in splits.get(name, [])]
        pd.DataFrame(rows, columns=["prompt", "extra_info"]).to_parquet(root / f"{name}.parquet")
    sft = [{"id": t, "messages": [{"role": "user", "content": q}, {"role": "assistant", "content": f" {a} "}]}
           for t, q, a in splits.get("train", [])]
    pd.DataFrame(sft, columns=["id", "messages"]).to_parquet(root / "sft.parquet")
    return root


@pytest.fixture
def exports(tmp_path):
    warm = write_export(tmp_path / "warm", {
        "train": [("w1", "capital of A?", "Aville"), ("w2", "capital of B?", "Bville")],
        "rl": [("w3", "capital of C?", "Cville")],  # an RL answer: never taught
        "benchmark": [("w4", "currency of A?", "A-dollar")]})
    new = write_export(tmp_path / "new", {
        "train": [("n1", "capital of A?", "Aville"),  # asked by warm: not new
                  ("n2", "capital of the land east of B?", "Aville"),  # new, taught: kept
                  ("n3", "capital of the land west of A?", "Bville"),  # new, taught: kept
                  ("n4", "capital of the land north of A?", "Cville")],  # new, answer only in warm's RL: dropped
        "rl": [("n5", "capital of the land south of A?", "Bville")],  # new, taught: kept (no expert episode)
        "benchmark": [("n6", "currency of A?", "A-dollar")]})  # asked by warm: dropped
    return warm, new


def test_only_new_questions_with_taught_answers_are_kept(exports):
    warm, new = exports
    rows = known.known_answer_rows(warm, new)
    assert [info["task_id"] for info in rows["extra_info"]] == ["n2", "n3", "n5"]


def test_the_split_holds_out_the_asked_number_and_labels_each_row(exports, tmp_path):
    warm, new = exports
    out = tmp_path / "out"
    assert known.main(["--warm", str(warm), "--new", str(new), "--out", str(out), "--benchmark", "1"]) == 0
    rl, held = pd.read_parquet(out / "rl.parquet"), pd.read_parquet(out / "benchmark.parquet")
    rl_ids = [info["task_id"] for info in rl["extra_info"]]
    held_ids = [info["task_id"] for info in held["extra_info"]]
    assert len(held_ids) == 1 and len(rl_ids) == 2 and set(rl_ids) | set(held_ids) == {"n2", "n3", "n5"}
    assert {info["split"] for info in rl["extra_info"]} == {"rl"}
    assert {info["split"] for info in held["extra_info"]} == {"benchmark"}
    # expert episodes of the kept tasks that have one (n5 came from new's RL split: none in its sft.parquet)
    assert sorted(pd.read_parquet(out / "rl_expert.parquet")["id"]) == ["n2", "n3"]
    again = tmp_path / "again"
    known.main(["--warm", str(warm), "--new", str(new), "--out", str(again), "--benchmark", "1"])
    assert [i["task_id"] for i in pd.read_parquet(again / "benchmark.parquet")["extra_info"]] == held_ids  # seeded


def test_bad_input_is_one_line_naming_the_flag(exports, tmp_path, capsys):
    warm, new = exports
    (new / "sft.parquet").unlink()
    with pytest.raises(SystemExit):
        known.main(["--warm", str(warm), "--new", str(new), "--out", str(tmp_path / "o")])
    assert f"--new: {new / 'sft'}.parquet not found" in capsys.readouterr().err


def test_holding_out_every_question_is_refused(exports, tmp_path, capsys):
    warm, new = exports
    with pytest.raises(SystemExit):
        known.main(["--warm", str(warm), "--new", str(new), "--out", str(tmp_path / "o"), "--benchmark", "3"])
    assert "--benchmark: 3 of 3 known-answer questions leaves none for RL" in capsys.readouterr().err
