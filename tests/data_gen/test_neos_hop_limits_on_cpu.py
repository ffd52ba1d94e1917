"""``python -m data_gen neos --min-hops/--max-hops``: the difficulty knob. A bad value or a contradicting pair is one
line and exit code 2 before anything is written; a run capped at 2 hops writes only 2-hop tasks and says so."""

import json

import pytest

from data_gen.__main__ import main
from data_gen.neos.flags import MAX_HOPS, MIN_HOPS
from data_gen.neos.synth import SynthConfig


def test_the_flag_defaults_are_the_synthesis_defaults():
    assert (MIN_HOPS, MAX_HOPS) == (SynthConfig().structures.min_hops, SynthConfig().structures.max_hops) == (2, 5)


@pytest.mark.parametrize("flag, value", [("--max-hops", "1"), ("--min-hops", "0"), ("--max-hops", "two")])
def test_a_hop_count_under_two_is_one_line_naming_the_flag(flag, value, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["neos", "--world", str(tmp_path), "--out", str(tmp_path / "out"), flag, value])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and f"argument {flag}" in err and value in err
    assert not (tmp_path / "out").exists()


def test_min_hops_above_max_hops_is_refused_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["neos", "--world", str(tmp_path), "--out", str(out), "--min-hops", "4", "--max-hops", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--min-hops 4 exceeds --max-hops 3" in err
    assert not out.exists()


def test_a_run_capped_at_two_hops_writes_only_two_hop_tasks(small_world, tmp_path, features_cached):
    out = tmp_path / "out"
    features_cached(out / "tool_server_cache")
    assert main(["neos", "--world", str(small_world), "--out", str(out), "--limit", "3", "--max-hops", "2"]) == 0
    verified = [json.loads(line)["task"] for line in (out / "results.jsonl").read_text().splitlines()
                if json.loads(line)["status"] == "verified"]
    assert len(verified) == 3 and {len(t["steps"]) for t in verified} == {2}  # a task has at least 2 steps
    stats = json.loads((out / "stats.json").read_text())
    assert stats["hops"] == {"2": 3} and stats["hop_limits"] == {"min": 2, "max": 2}


def test_keep_closed_book_turns_the_closed_book_filter_off_and_nothing_else():
    # The learning curve's from-scratch policy knows no flag: tasks a strong model answers closed-book are learnable
    # tasks for it (issue 39). Default: the paper's filter stays on.
    import argparse

    from data_gen.neos.cli import synth_config
    from data_gen.neos.flags import parser

    default = synth_config(parser(argparse.ArgumentParser()).parse_args(["--world", "w", "--out", "o"]), kg=False)
    kept = synth_config(parser(argparse.ArgumentParser()).parse_args(
        ["--world", "w", "--out", "o", "--max-hops", "2", "--keep-closed-book"]), kg=False)
    assert default.closed_book is True and kept.closed_book is False
    assert (kept.structures.min_hops, kept.structures.max_hops) == (2, 2)
    assert (kept.variants, kept.convergent_variants) == (default.variants, default.convergent_variants)
