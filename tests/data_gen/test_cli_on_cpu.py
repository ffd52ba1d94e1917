"""``python -m data_gen neos|modalsearch`` as a user meets it: every option explained, bad values and a missing or
empty world refused with one line and exit code 2 before anything is written, a progress bar sized by ``--limit``,
and a closing line that says where the output is."""

import json

import pytest

from data_gen.__main__ import main
from data_gen.common.cli import progress, report_output

COMMANDS = ("neos", "modalsearch")


def _subparsers():
    import argparse

    from data_gen.modalsearch.flags import DESCRIPTION as MS_DESCRIPTION
    from data_gen.modalsearch.flags import parser as ms_parser
    from data_gen.neos.flags import DESCRIPTION as NEOS_DESCRIPTION
    from data_gen.neos.flags import parser as neos_parser
    from neos_core.usage import OneLineParser

    return {"neos": (neos_parser(OneLineParser(description=NEOS_DESCRIPTION)), NEOS_DESCRIPTION),
            "modalsearch": (ms_parser(OneLineParser(description=MS_DESCRIPTION)), MS_DESCRIPTION)}, argparse


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_has_help_and_the_command_a_description(command, capsys):
    parsers, argparse = _subparsers()
    p, description = parsers[command]
    undocumented = [a.option_strings for a in p._actions if a.help in (None, "", argparse.SUPPRESS)]
    assert undocumented == []
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    shown = capsys.readouterr().out
    assert "Sec. 3" in shown and "SPEC" not in shown
    for flag in ("--world", "--out", "--limit", "--seed"):
        assert flag in shown


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("flag, value", [("--limit", "-3"), ("--limit", "0"), ("--limit", "ten"), ("--seed", "-1")])
def test_a_bad_value_is_one_line_and_exit_2_before_anything_is_written(command, flag, value, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command, "--world", str(tmp_path), "--out", str(tmp_path / "out"), flag, value])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err.count("\n") == 1 and f"argument {flag}" in err and value in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flag", ["--max-nodes", "--benchmark-nodes", "--seeds", "--attempts"])
def test_modalsearch_budgets_must_be_positive(flag, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["modalsearch", "--world", str(tmp_path), "--out", str(tmp_path / "out"), flag, "-3"])
    assert exit_.value.code == 2 and f"argument {flag}: must be >= 1, got -3" in capsys.readouterr().err


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("world", ["missing", "empty", "no_entities"])
def test_a_missing_or_empty_world_is_one_line_and_leaves_no_output_dir(command, world, tmp_path, capsys):
    root = tmp_path / "world"
    if world != "missing":
        root.mkdir()
    if world == "no_entities":  # a manifest that agrees with empty record files
        (root / "manifest.json").write_text(json.dumps(
            {"format_version": 1, "counts": {"entities": 0, "pages": 0, "images": 0, "triples": 0}}))
        for name in ("entities", "pages", "images", "triples", "relations"):
            (root / f"{name}.jsonl").write_text("")
    out = tmp_path / "out"
    assert main([command, "--world", str(root), "--out", str(out), "--limit", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m data_gen {command}: error: --world: ") and err.count("\n") == 1
    assert str(root) in err
    assert not out.exists()


def test_the_progress_bar_counts_towards_the_limit_not_all_seeds():
    with progress(5, 2, 1438, "neos", "seed") as bar:
        assert (bar.total, bar.n, bar.unit) == (5, 2, "verified")
    with progress(None, 0, 1438, "neos", "seed") as bar:
        assert (bar.total, bar.n, bar.unit) == (1438, 0, "seed")
    with progress(3, 7, 1438, "neos", "seed") as bar:  # a resumed run already past its limit
        assert (bar.total, bar.n) == (3, 3)


def test_the_closing_line_names_the_output_directory_and_what_is_in_it(tmp_path, capsys):
    (tmp_path / "train.parquet").write_bytes(b"")
    (tmp_path / "plots").mkdir()
    report_output(tmp_path, 7, "tasks", ["train.parquet", "sft.parquet", "plots/"])
    assert capsys.readouterr().err == f"7 verified tasks in {tmp_path.resolve()} (train.parquet, plots/)\n"
