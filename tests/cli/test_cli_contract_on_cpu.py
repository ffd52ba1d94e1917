"""Every command line of the project, held to one contract without running any job: each module with a
``__main__`` guard (in our packages and in ``bench/``) exposes ``parser()``, a :class:`OneLineParser` named as users
run it, with a description, help for every option and subcommand, and the default in the help of every option that
has one. A new option without help fails here. ``--help`` in a fresh process answers at once: nothing on stderr,
no torch, transformers or verl loaded. Then a few bad values per command: exit code 2 and one line naming the flag,
before anything is loaded or written; a busy port is one line before a server loads anything."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from neos_core.usage import OneLineParser

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("neos_core", "data_gen", "tool_server", "verl_ext", "recipes", "hydra_plugins")
GUARD = re.compile(r'^if __name__ == "__main__":', re.MULTILINE)


def _entry_points() -> list[Path]:
    files = [f for pkg in PACKAGES for f in (REPO / pkg).rglob("*.py")] + sorted((REPO / "bench").glob("*.py"))
    return sorted(f for f in files if GUARD.search(f.read_text(encoding="utf-8")))


def _module(path: Path):
    rel = path.relative_to(REPO)
    if rel.parts[0] != "bench":
        name = ".".join(rel.with_suffix("").parts)
        return importlib.import_module(name.removesuffix(".__main__") + (".__main__" if rel.name == "__main__.py"
                                                                           else ""))
    spec = importlib.util.spec_from_file_location(f"bench_cli_{rel.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the script is executed
    saved = list(sys.path)
    sys.path.insert(0, str(REPO / "bench"))  # bench scripts import their sibling helpers
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved  # some scripts put the checkout first: the rest of the suite tests the installed package
    return module


def _command(path: Path) -> str:
    rel = path.relative_to(REPO)
    if rel.parts[0] == "bench":
        return f"python {rel.as_posix()}"
    return "python -m " + ".".join(rel.with_suffix("").parts).removesuffix(".__main__")


ENTRY_POINTS = _entry_points()


def test_the_entry_points_are_found():
    """The scan sees the commands the README and docs name (guards against a scan that silently finds nothing)."""
    commands = {_command(p) for p in ENTRY_POINTS}
    assert {"python -m data_gen", "python -m data_gen.world", "python -m tool_server", "python -m tool_server.tour",
            "python -m verl_ext.eval", "python -m verl_ext.walkthrough", "python -m verl_ext.models",
            "python -m verl_ext.mei.server", "python -m verl_ext.mei.warm_start",
            "python -m verl_ext.rllm.benchmark", "python bench/bench_rollout.py"} <= commands


def _problems(p: argparse.ArgumentParser, where: str) -> list[str]:
    """What ``p`` and its subcommands miss of the contract, one string per gap."""
    found = []
    if not isinstance(p, OneLineParser):
        found.append(f"{where}: a {type(p).__name__}, not a OneLineParser (usage errors must be one line)")
    if not (p.description or "").strip():
        found.append(f"{where}: no description")
    elif "``" in p.description or "SPEC" in p.description:
        found.append(f"{where}: the description is a raw docstring or cites SPEC: {p.description[:60]!r}")
    for action in p._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        name = "/".join(action.option_strings) or action.dest
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for choice, sub in action.choices.items():
                if not (helps.get(choice) or "").strip():
                    found.append(f"{where} {choice}: subcommand without help")
                if sub.add_help:  # a forwarded subcommand (add_help=False) has its own command's parser
                    found += _problems(sub, f"{where} {choice}")
            continue
        if action.help == argparse.SUPPRESS:
            continue  # internal re-entry flags of a benchmark's own subprocesses, hidden from users
        if not (action.help or "").strip():
            found.append(f"{where} {name}: no help")
            continue
        shows_default = "default" in action.help.lower()
        if (action.option_strings and not action.required and action.default not in (None, False)
                and action.nargs != 0 and not shows_default):
            found.append(f"{where} {name}: default {action.default!r} not stated in its help")
    return found


@pytest.mark.parametrize("path", ENTRY_POINTS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_command_describes_itself_and_every_option(path):
    module = _module(path)
    assert callable(getattr(module, "parser", None)), f"{path.name}: expose parser() -> ArgumentParser"
    p = module.parser()
    assert p.prog == _command(path), "prog: the command as users type it"
    assert _problems(p, p.prog) == []


HEAVY = ("torch", "transformers", "verl")


@pytest.mark.parametrize("path", ENTRY_POINTS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_help_is_fast_and_clean(path):
    """``--help`` in a fresh process, as users type it: the help on stdout, nothing on stderr (no warnings of
    libraries), and none of torch, transformers or verl imported (seconds of loading and their notices)."""
    rel = path.relative_to(REPO)
    if rel.parts[0] == "bench":
        run = f"sys.path.insert(0, {str(path.parent)!r}); runpy.run_path({str(path)!r}, run_name='__main__')"
    else:
        run = f"runpy.run_module({_command(path).removeprefix('python -m ')!r}, run_name='__main__', alter_sys=True)"
    probe = (f"import runpy, sys\nsys.argv = ['{rel.name}', '--help']\ntry:\n    {run}\n"
             "except SystemExit as e:\n    assert e.code in (0, None), e.code\n"
             f"print([m for m in {HEAVY!r} if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"usage: {_command(path)}") and lines[-1] == "[]", (lines[0], lines[-1])


def _usage_error(main, argv: list[str], capsys) -> str:
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1, err
    return err


def _main(module: str):
    return importlib.import_module(module).main


BAD_VALUES = [
    ("tool_server.__main__", ["--world", "{missing}", "--port", "70000"], "--port"),
    ("tool_server.__main__", ["--world", "{missing}", "--workers", "0"], "--workers"),
    ("tool_server.__main__", ["--world", "{missing}", "--session-ttl", "-1"], "--session-ttl"),
    ("tool_server.__main__", ["--world", "{missing}", "--port", "0"], "--world"),
    ("tool_server.tour", ["--world", "{missing}"], "--world"),
    ("data_gen.world.__main__", ["build", "--size", "huge", "--out", "{tmp}/w"], "--size"),
    ("data_gen.world.__main__", ["summary", "{missing}"], "WORLD"),
    ("data_gen.world.__main__", ["build", "--size", "small", "--out", "{tmp}/w", "--cache", "{file}"], "--cache"),
    ("data_gen.__main__", ["neos", "--world", "{missing}", "--out", "{tmp}/o", "--limit", "-3"], "--limit"),
    ("data_gen.__main__", ["neos", "--world", "{missing}", "--out", "{file}"], "--out"),
    ("data_gen.__main__", ["modalsearch", "--world", "{missing}", "--out", "{file}"], "--out"),
    ("verl_ext.mei.server", ["--model", "{tmp}", "--version", "v0", "--port", "-1"], "--port"),
    ("verl_ext.mei.server", ["--model", "{tmp}", "--version", "v0", "--max-new-tokens", "0"], "--max-new-tokens"),
    ("verl_ext.mei.server", ["--model", "{missing}", "--version", "v0"], "--model"),
    ("verl_ext.mei.warm_start", ["--model", "{tmp}", "--pairs", "{missing}", "--out", "{tmp}/o"], "--pairs"),
    ("verl_ext.mei.warm_start", ["--model", "{tmp}", "--pairs", "{tmp}", "--out", "{tmp}/o", "--lr", "0"], "--lr"),
    ("verl_ext.models.__main__", ["build", "--out", "{tmp}/m", "--layers", "0"], "--layers"),
    ("verl_ext.models.__main__", ["build", "--out", "{tmp}/m", "--hidden-size", "40"], "--hidden-size"),
    ("verl_ext.rllm.benchmark", ["--tasks", "{missing}", "--out", "{tmp}/b"], "--tasks"),
    ("verl_ext.eval.__main__", ["run", "--runs", "0", "--bench", "x=verl:{missing}", "--out", "{tmp}/e",
                                "--policy-url", "http://h", "--world", "{tmp}"], "--runs"),
    ("verl_ext.eval.__main__", ["verl", "--runs", "0", "--bench", "x=verl:{missing}", "--out", "{tmp}/e",
                                "--recipe", "neos", "--checkpoint", "{tmp}", "--world", "{tmp}"], "--runs"),
    ("verl_ext.eval.__main__", ["run", "--bench", "x=verl:{file}", "--out", "{tmp}/e", "--policy-url", "http://h",
                                "--world", "{tmp}"], "--bench"),  # not a parquet file: before a server or --out
    ("verl_ext.eval.__main__", ["run", "--bench", "x=verl:{file}", "--out", "{file}", "--policy-url", "http://h",
                                "--tool-server", "http://h"], "--out"),
    ("verl_ext.eval.__main__", ["report", "--run", "{missing}"], "--run"),
    ("verl_ext.eval.__main__", ["training", "{missing}", "--out", "{tmp}/p"], "METRICS"),
    ("verl_ext.walkthrough.__main__", ["--world", "{tmp}", "--tasks", "{tmp}", "--out", "{tmp}/r", "--groups", "0"],
     "--groups"),
]


@pytest.mark.parametrize("module, argv, flag", BAD_VALUES, ids=lambda v: v if isinstance(v, str) else None)
def test_a_bad_value_is_one_line_naming_the_flag_and_exit_2(module, argv, flag, tmp_path, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    argv = [a.format(tmp=tmp_path, missing=tmp_path / "missing", file=a_file) for a in argv]
    err = _usage_error(_main(module), argv, capsys)
    assert flag in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"], "nothing written"


@pytest.mark.parametrize("module, argv", [
    ("tool_server.__main__", ["--world", "{missing}"]),
    ("verl_ext.mei.server", ["--model", "{model}", "--version", "v0"]),  # config.json unloadable: loading would raise
])
def test_a_busy_port_is_one_line_before_anything_loads(module, argv, tmp_path, capsys):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        argv = [a.format(missing=tmp_path / "missing", model=tmp_path / "model") for a in argv]
        code = _main(module)(argv + ["--port", address.split(":")[1]])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and f"cannot listen on {address}" in err, err
