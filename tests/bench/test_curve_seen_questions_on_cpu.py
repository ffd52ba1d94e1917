"""``bench/curve_seen_questions.py``: RL on an export's SFT questions less a held set, validation on that set (its own
``data_source``) and on the benchmark split, from an export written by ``data_gen neos``' own export of real
small-world tasks."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

from data_gen.neos.export import export

from .verified import solved

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import curve_seen_questions as seen  # noqa: E402


@pytest.fixture(scope="module")
def warm(small_world_tasks, small_world, tmp_path_factory):
    root = tmp_path_factory.mktemp("warm")
    export([solved(t) for t in small_world_tasks], small_world, root)
    return root


def questions(frame: pd.DataFrame) -> set[str]:
    return {info["question"] for info in frame["extra_info"]}


def test_rl_and_the_seen_set_split_the_sft_questions(warm, tmp_path):
    train, bench = pd.read_parquet(warm / "train.parquet"), pd.read_parquet(warm / "benchmark.parquet")
    assert len(train) >= 3 and len(bench) >= 1
    assert seen.main(["--warm", str(warm), "--out", str(tmp_path), "--held", "2"]) == 0
    rl, val = pd.read_parquet(tmp_path / "rl.parquet"), pd.read_parquet(tmp_path / "benchmark.parquet")
    held = val[val["data_source"] == "neos_synth_seen"]
    never = val[val["data_source"] == "neos_synth"]
    assert (len(rl), len(held), len(never)) == (len(train) - 2, 2, len(bench))
    assert questions(rl) | questions(held) == questions(train) and not questions(rl) & questions(held)
    assert questions(never) == questions(bench) and set(rl["data_source"]) == {"neos_synth"}
    assert [info["split"] for info in held["extra_info"]] == ["benchmark", "benchmark"]
    # the same seed holds the same questions
    again = tmp_path / "again"
    seen.main(["--warm", str(warm), "--out", str(again), "--held", "2"])
    assert questions(pd.read_parquet(again / "rl.parquet")) == questions(rl)


def test_verls_validation_reports_the_two_sets_apart(warm, tmp_path):
    """verl's own validation metrics (the v1 trainer's, which ``neos_curve`` runs) over the written rows, two samples
    a question, the held SFT questions all right and the never-seen ones all wrong: two curves, not one mean."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    seen.main(["--warm", str(warm), "--out", str(tmp_path), "--held", "2"])
    val = pd.read_parquet(tmp_path / "benchmark.parquet")
    sources = [source for source in val["data_source"] for _ in range(2)]
    uids = [str(i) for i in range(len(val)) for _ in range(2)]
    acc = [1.0 if source == seen.SEEN else 0.0 for source in sources]
    metrics = PPOTrainer._val_metrics_update(None, sources, uids, {"acc": acc, "reward": acc}, [])
    assert metrics["val-core/neos_synth_seen/acc/mean@2"] == 1.0
    assert metrics["val-core/neos_synth/acc/mean@2"] == 0.0


def test_holding_every_question_is_one_line(warm, tmp_path, capsys):
    train = len(pd.read_parquet(warm / "train.parquet"))
    with pytest.raises(SystemExit):
        seen.main(["--warm", str(warm), "--out", str(tmp_path), "--held", str(train)])
    assert f"--held: {train} of {train} SFT questions leaves none for RL" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
