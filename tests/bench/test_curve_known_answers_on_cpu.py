"""``bench/curve_known_answers.py``: a second export's questions that the warm start's export never asked and whose
answers its SFT split taught, split into RL and held-out rows with their expert episodes. Both exports are written by
``data_gen neos``' own export of real tasks of the small world (the warm one with answer-swapped SFT copies, as the
curve's exports have); the second export's questions are the first's tasks re-asked, or reworded."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

from data_gen.neos.export import export, splits

from .verified import solved

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import curve_known_answers as known  # noqa: E402


def reworded(task, n: int):
    """The same answer asked another way: a question the first export never asked."""
    return task.model_copy(update={"id": f"{task.id}-new{n}", "question": f"{task.question} (asked anew {n})"})


@pytest.fixture(scope="module")
def exports(small_world_tasks, small_world, tmp_path_factory):
    root = tmp_path_factory.mktemp("exports")
    (root / "warm").mkdir()
    (root / "new").mkdir()
    export([solved(t) for t in small_world_tasks], small_world, root / "warm", answer_swap_copies=2)
    split = splits(small_world_tasks)
    taught = [t for t in small_world_tasks if split[t.id] == "train"]
    untaught = [t for t in small_world_tasks if split[t.id] != "train"]
    assert len(taught) >= 2 and untaught
    new_tasks = [taught[0],  # asked by the warm export: dropped
                 *(reworded(t, 1) for t in taught),  # new, taught: kept
                 reworded(untaught[0], 1)]  # new, its answer only in the warm RL or benchmark split: dropped
    export([solved(t) for t in new_tasks], small_world, root / "new")
    want = {reworded(t, 1).id for t in taught}
    return root / "warm", root / "new", want


def test_only_new_questions_with_taught_answers_are_kept(exports, small_world_tasks):
    warm, new, want = exports
    split = splits(small_world_tasks)
    assert known.taught(warm) == {t.answer for t in small_world_tasks if split[t.id] == "train"}
    rows = known.known_answer_rows(warm, new)
    assert {info["task_id"] for info in rows["extra_info"]} == want


def test_the_split_holds_out_the_asked_number_and_labels_each_row(exports, tmp_path):
    warm, new, want = exports
    out = tmp_path / "out"
    assert known.main(["--warm", str(warm), "--new", str(new), "--out", str(out), "--benchmark", "1"]) == 0
    rl, held = pd.read_parquet(out / "rl.parquet"), pd.read_parquet(out / "benchmark.parquet")
    rl_ids = [info["task_id"] for info in rl["extra_info"]]
    held_ids = [info["task_id"] for info in held["extra_info"]]
    assert len(held_ids) == 1 and len(rl_ids) == len(want) - 1 and set(rl_ids) | set(held_ids) == want
    assert {info["split"] for info in rl["extra_info"]} == {"rl"}
    assert {info["split"] for info in held["extra_info"]} == {"benchmark"}
    # the expert episodes of the kept tasks that the new export has one of (its train and RL splits)
    episodes = pd.concat([pd.read_parquet(new / f"{name}.parquet") for name in known.EXPERTS])
    assert sorted(pd.read_parquet(out / "rl_expert.parquet")["id"]) == sorted(set(episodes["id"]) & want)
    again = tmp_path / "again"
    known.main(["--warm", str(warm), "--new", str(new), "--out", str(again), "--benchmark", "1"])
    assert [i["task_id"] for i in pd.read_parquet(again / "benchmark.parquet")["extra_info"]] == held_ids  # seeded


def test_bad_input_is_one_line_naming_the_flag(exports, tmp_path, capsys):
    warm, new, _ = exports
    with pytest.raises(SystemExit):
        known.main(["--warm", str(warm), "--new", str(tmp_path), "--out", str(tmp_path / "o")])
    assert f"--new: {tmp_path / 'train'}.parquet not found" in capsys.readouterr().err


def test_holding_out_every_question_is_refused(exports, tmp_path, capsys):
    warm, new, want = exports
    with pytest.raises(SystemExit):
        known.main(["--warm", str(warm), "--new", str(new), "--out", str(tmp_path / "o"), "--benchmark",
                    str(len(want))])
    assert f"--benchmark: {len(want)} of {len(want)} known-answer questions leaves none for RL" in \
        capsys.readouterr().err
