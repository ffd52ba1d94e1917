"""``python -m verl_ext.eval``: evaluate a search agent on benchmarks, report, and plot a training run.

- ``run``: a policy behind an OpenAI-compatible endpoint (vLLM, SGLang, any chat-completions server) on one or more
  benchmarks (``--bench NAME=FORMAT:PATH``), with our tool server offline (``--world DIR`` starts one) or online
  (``--tool-server URL``), k runs per item, judged; resumable; then the report.
- ``verl``: a verl checkpoint (an HF directory, or ``global_step_N``) through verl's own validation loop
  (``main_ppo +recipe=NAME trainer.val_only=True``) with the recipe's agent loops and our tool server; verl's
  validation dump becomes the same results, judged and reported as an endpoint's.
- ``report``: ``report.md``, plots, ``summary.json`` and the trajectory viewer from a run directory (or from
  trajectories exported during training, ``--trajectories FILE``).
- ``training``: plots of a run's logged metrics (verl's file logger JSONL, TensorBoard events or console output);
  several runs: their learning curves on one figure, grouped by estimator (``verl_ext.eval.curves``).

Usage errors are one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from neos_core.usage import (
    OneLineParser,
    json_object,
    nonnegative_float,
    nonnegative_int,
    positive_float,
    positive_int,
    share,
)
from verl_ext.eval.benchmarks import FORMATS, BenchmarkError
from verl_ext.eval.specs import KNOWN_BENCHMARKS, BenchmarkSpec
from verl_ext.notices import quiet_verl_import_notices
from verl_ext.reward.judge import JudgeConfig
from verl_ext.rollout.protocols import Protocol
from verl_ext.rollout.settings import PROTOCOL_DEFAULTS

MAX_JUDGE_FALLBACK_SHARE = JudgeConfig().max_fallback_share  # the answer judge's, as training uses it
_HYDRA_OVERRIDE = re.compile(r"^(\+{0,2}[\w.\-/@\[\]]+=.*|~[\w.\-/@]+(=.*)?)$")  # key=value, +key=value, ~key


def _bench(text: str) -> BenchmarkSpec:
    try:
        return BenchmarkSpec.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--bench {text!r}: ")) from None


def _protocol(text: str) -> tuple[str | None, Protocol]:
    """``PROTOCOL`` or ``NAME=PROTOCOL``: (benchmark name or None for all, protocol)."""
    name, sep, protocol = text.rpartition("=")
    if protocol not in PROTOCOL_DEFAULTS or (sep and not name):
        raise argparse.ArgumentTypeError(f"expected [NAME=]PROTOCOL with PROTOCOL one of "
                                         f"{', '.join(PROTOCOL_DEFAULTS)}, got {text!r}")
    return (name or None), protocol  # type: ignore[return-value]


def _protocols(args: argparse.Namespace, p: argparse.ArgumentParser) -> tuple[Protocol, dict[str, Protocol]]:
    """The default protocol and the per-benchmark ones of the ``--protocol`` flags (the last of each wins)."""
    default: Protocol = "neos"
    by_bench: dict[str, Protocol] = {}
    names = {spec.name for spec in args.bench}
    for name, protocol in args.protocol:
        if name is None:
            default = protocol
        elif name not in names:
            p.error(f"argument --protocol: no --bench is named {name!r} ({', '.join(sorted(names))})")
        else:
            by_bench[name] = protocol
    return default, by_bench


def _fallback_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--judge-max-fallback-share", type=share, default=MAX_JUDGE_FALLBACK_SHARE, metavar="SHARE",
                   help="share of LLM-judged responses decided by the rule matcher (the judge failed) above which the "
                   "run logs a warning and the report flags it; the answer judge's max_fallback_share, the same "
                   f"threshold training warns at (default: {MAX_JUDGE_FALLBACK_SHARE})")


def _benchmarks_and_judge(r: argparse.ArgumentParser) -> None:
    """The options both policy paths take: benchmarks, output, tools, runs, turns, sampling, judge, report."""
    r.add_argument("--bench", type=_bench, action="append", required=True, metavar="NAME=FORMAT:PATH",
                   help=f"a benchmark file; formats {', '.join(sorted(FORMATS))}; NAME=PATH for a known name "
                   f"({', '.join(sorted(KNOWN_BENCHMARKS))}); repeat for several")
    r.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="run directory (results.jsonl, images/, report/; with --world also the tool server's MEI "
                   "log, mei.jsonl); an existing one resumes")
    tools = r.add_mutually_exclusive_group(required=True)
    tools.add_argument("--world", type=Path, metavar="DIR", help="offline: start our tool server on this built world")
    tools.add_argument("--tool-server", metavar="URL", help="a running tool server's URL (e.g. one started with "
                       "--online)")
    r.add_argument("--runs", type=positive_int, default=5, metavar="K",
                   help="runs per item (default: 5, as both papers report)")
    r.add_argument("--limit", type=positive_int, default=None, metavar="N",
                   help="first N items of each benchmark (default: all)")
    r.add_argument("--temperature", type=nonnegative_float, default=None,
                   help="sampling temperature (default: the paper's for the protocol)")
    r.add_argument("--top-p", type=positive_float, default=None, metavar="P",
                   help="nucleus sampling top-p in (0, 1] (default: the paper's for the protocol)")
    r.add_argument("--judge-url", default=None, metavar="URL", help="OpenAI-compatible base URL of the LLM judge "
                   "(default: the rule matcher alone, offline)")
    r.add_argument("--judge-model", default="judge", metavar="NAME",
                   help="model name sent to --judge-url (default: judge)")
    r.add_argument("--judge-passes", type=int, choices=(1, 2), default=1,
                   help="2: judge every response twice and report the agreement (repeatability) (default: 1)")
    _fallback_flag(r)
    r.add_argument("--no-embeddings", action="store_true",
                   help="report without the repeated-search analysis (it needs the [eval] extra's MiniLM)")


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m verl_ext.eval", description="Evaluate a search agent on benchmarks, report, and "
                      "plot a training run.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=OneLineParser, metavar="COMMAND")
    r = sub.add_parser("run", help="evaluate a policy endpoint on benchmarks (resumable), then report",
                       description="Run a policy behind an OpenAI-compatible endpoint on benchmarks with our tool "
                       "server, k runs per item, judged; resumable; then the report.")
    _benchmarks_and_judge(r)
    r.add_argument("--policy-url", required=True, metavar="URL", help="OpenAI-compatible base URL of the policy, e.g. "
                   "http://127.0.0.1:8000/v1")
    r.add_argument("--policy-model", default="policy", metavar="NAME",
                   help="model name sent to --policy-url (default: policy)")
    r.add_argument("--protocol", type=_protocol, action="append", default=[], metavar="[NAME=]PROTOCOL",
                   help="neos or modalsearch: the protocol of items whose row names none (no agent_name or "
                   "protocol field), for every benchmark, or NAME=PROTOCOL for benchmark NAME; repeatable "
                   "(default: neos)")
    r.add_argument("--concurrency", type=positive_int, default=8, metavar="N", help="episodes in flight (default: 8)")
    r.add_argument("--max-turns", type=positive_int, default=None, metavar="N",
                   help="assistant turns (default: the protocol's, Neos 50, ModalSearcher 46)")
    r.add_argument("--max-tokens", type=positive_int, default=4096, metavar="N",
                   help="tokens per policy turn (default: 4096)")
    r.add_argument("--sampling", type=json_object, default=None, metavar="JSON",
                   help="sampling parameters sent instead of the paper's, e.g. '{\"temperature\": 0.7}' for an API "
                   "that refuses vLLM's top_k (--temperature/--top-p/--seed still apply on top)")
    r.add_argument("--seed", type=nonnegative_int, default=None,
                   help="sampling seed sent to the policy, for servers that honour it (default: none sent)")
    r.add_argument("--policy-timeout", type=positive_float, default=600.0, metavar="SECONDS",
                   help="seconds per policy request (default: 600)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")

    v = sub.add_parser("verl", help="evaluate a verl checkpoint through verl's own validation (main_ppo "
                       "trainer.val_only) with a recipe's agent loops, then report",
                       usage="%(prog)s [options] [KEY=VALUE ...]",
                       description="Evaluate a verl checkpoint with verl's own validation loop (main_ppo "
                       "+recipe=NAME trainer.val_only=true) and the recipe's agent loops; its validation dump becomes "
                       "judged results and the report. KEY=VALUE words anywhere on the line are main_ppo overrides "
                       "applied after ours, e.g. the device keys trainer.n_gpus_per_node=8 "
                       "actor_rollout_ref.rollout.name=vllm.")
    _benchmarks_and_judge(v)
    v.add_argument("--recipe", required=True, metavar="NAME", help="the recipe the checkpoint was trained with "
                   "(main_ppo +recipe=NAME: neos, modalsearcher, neos_smoke, ...); its agent loop decides the protocol")
    v.add_argument("--checkpoint", type=Path, required=True, metavar="PATH", help="an HF model directory, or a verl "
                   "checkpoint (trainer.default_local_dir/global_step_N, or its actor/)")
    v.add_argument("--base-model", type=Path, default=None, metavar="DIR", help="for a sharded verl checkpoint: the HF "
                   "model its run started from (default: the checkpoint's actor/huggingface, when it holds weights)")
    v.add_argument("--max-turns", type=positive_int, default=None, metavar="N",
                   help="assistant turns (default: the recipe's multi_turn.max_assistant_turns)")
    v.add_argument("--dry-run", action="store_true", help="write the validation rows and print the main_ppo "
                   "command instead of running it; run it yourself, then invoke again (without it) to convert")

    rep = sub.add_parser("report", help="report.md, plots, summary.json and the trajectory viewer",
                         description="Write report.md, plots, summary.json and the trajectory viewer from a run "
                         "directory, or from trajectories exported during training.")
    src = rep.add_mutually_exclusive_group(required=True)
    src.add_argument("--run", type=Path, metavar="DIR", help="a run directory of `run`")
    src.add_argument("--trajectories", type=Path, metavar="FILE", help="JSONL of trajectories exported during "
                     "training: each "
                     "line a neos_trajectory record, or an object with it under 'neos_trajectory' and optional "
                     "'acc' (1/0) or 'correct'")
    rep.add_argument("--out", type=Path, default=None, metavar="DIR",
                     help="report directory (default: RUN/report; required with --trajectories)")
    _fallback_flag(rep)
    rep.add_argument("--no-embeddings", action="store_true", help="skip the repeated-search analysis")

    tr = sub.add_parser("training", help="plots of a training run's logged metrics (verl's file, tensorboard or "
                        "console logger)",
                        description="Plot a training run's logged metrics: verl's file logger JSONL, else its "
                        "TensorBoard event files, else its console logger's captured output.")
    tr.add_argument("metrics", type=Path, nargs="+", help="the file logger's JSONL or a captured console log, or a "
                    "run directory holding either or TensorBoard event files; several: their learning curves on one "
                    "figure (curves.png), grouped by each run's parent directory (bench/learning_curve.py's "
                    "OUT/<estimator>/seed<S>)")
    tr.add_argument("--out", type=Path, required=True, metavar="DIR", help="directory for the plots (created)")
    return p


@contextlib.contextmanager
def _usage_errors(p: argparse.ArgumentParser) -> Iterator[None]:
    """Bad input found after parsing (a malformed row, a refused restart) is a usage error too: one line, exit 2."""
    try:
        yield
    except (BenchmarkError, ValueError, FileNotFoundError) as exc:
        p.exit(2, f"{p.prog}: error: {exc}\n")


class _Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's or ``timeout``'s stop), raised where Ctrl-C is so that the same cleanup runs: the tool
    server we started and ``main_ppo`` with its Ray processes are stopped, not orphaned."""


def _terminate(signum: int, frame: Any) -> None:
    raise _Terminated


@contextlib.contextmanager
def _resumable(p: argparse.ArgumentParser, out: Path) -> Iterator[None]:
    """Ctrl-C (exit code 130) or SIGTERM (143) is one line saying what is kept and how to go on, not a traceback:
    every finished episode is already on disk."""
    main_thread = threading.current_thread() is threading.main_thread()  # signal handlers live there only
    # Ctrl-C as Python's own KeyboardInterrupt even where an embedding process (a test session, a notebook) left
    # another SIGINT handler installed
    previous = ((signal.signal(signal.SIGTERM, _terminate), signal.signal(signal.SIGINT, signal.default_int_handler))
                if main_thread else None)
    try:
        yield
    except KeyboardInterrupt as exc:
        code, what = (143, "terminated") if isinstance(exc, _Terminated) else (130, "interrupted")
        p.exit(code, f"{p.prog}: {what}; finished episodes are kept in {out / 'results.jsonl'}: rerun the same "
               "command to go on\n")
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous[0])
            signal.signal(signal.SIGINT, previous[1])


def _check_inputs(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    """``run`` and ``verl``: ``--out`` is a directory (or new) and every ``--bench`` row loads, checked before a tool
    server starts or ``--out`` is written (a bad row otherwise left an empty run directory behind)."""
    if args.out.exists() and not args.out.is_dir():
        p.error(f"--out: {args.out} is a file, not a directory")
    try:
        for spec in args.bench:
            spec.load()
    except (BenchmarkError, ValueError, OSError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        p.error(f"--bench: {exc}")


@contextlib.contextmanager
def _tool_server(args: argparse.Namespace) -> Iterator[str]:
    """``--tool-server URL``, or our tool server started on ``--world`` for the command's duration, its MEI log in
    the run directory (not the current one)."""
    if args.tool_server:
        yield args.tool_server
        return
    if not (args.world / "manifest.json").is_file():
        raise ValueError(f"--world {args.world}: not a built world (no manifest.json); build one with "
                         "`python -m data_gen.world build --size small --out DIR`")
    from tool_server.launch import served

    with served(args.world, "--mei-log", str(args.out / "mei.jsonl")) as url:
        yield url


def _judge(args: argparse.Namespace) -> JudgeConfig:
    return JudgeConfig(url=args.judge_url, model=args.judge_model, max_fallback_share=args.judge_max_fallback_share)


def _sampling_flags(args: argparse.Namespace) -> dict[str, Any]:
    flags = (("temperature", args.temperature), ("top_p", args.top_p), ("seed", getattr(args, "seed", None)))
    return {k: v for k, v in flags if v is not None}


def _run(args: argparse.Namespace, p: argparse.ArgumentParser) -> int:
    _check_inputs(args, p)
    from verl_ext.eval.episode import PolicySettings
    from verl_ext.eval.report import write_report
    from verl_ext.eval.run import RunConfig, evaluate

    chat = JudgeConfig(url=args.policy_url, model=args.policy_model, max_tokens=args.max_tokens,
                       timeout_s=args.policy_timeout)
    default_protocol, bench_protocols = _protocols(args, p)
    with _resumable(p, args.out), _usage_errors(p):
        with _tool_server(args) as url:
            config = RunConfig(out=args.out, benches=args.bench, policy=PolicySettings(chat, max_turns=args.max_turns),
                               tool_url=url, runs=args.runs, concurrency=args.concurrency,
                               default_protocol=default_protocol, bench_protocols=bench_protocols,
                               judge=_judge(args), judge_passes=args.judge_passes,
                               limit=args.limit, sampling_override=_sampling_flags(args),
                               sampling_replace=args.sampling, progress=not args.no_progress)
            counts = asyncio.run(evaluate(config))
        paths = write_report(args.out, args.out / "report", embeddings=not args.no_embeddings,
                             max_fallback_share=args.judge_max_fallback_share)
    print(json.dumps(counts))
    print(f"report: {paths['report']}  viewer: {paths['viewer']}")
    return 0 if counts["errors"] == 0 else 1


def _verl(args: argparse.Namespace, p: argparse.ArgumentParser) -> int:
    if args.dry_run and not args.tool_server:
        p.error("--dry-run needs --tool-server (a server that outlives this command)")
    _check_inputs(args, p)
    from verl_ext.eval.report import write_report
    from verl_ext.eval.verl_val import LaunchFailed, VerlValConfig, evaluate_verl

    with _resumable(p, args.out), _usage_errors(p):
        with _tool_server(args) as url:
            config = VerlValConfig(out=args.out, benches=args.bench, recipe=args.recipe, checkpoint=args.checkpoint,
                                   tool_url=url, base_model=args.base_model, runs=args.runs, limit=args.limit,
                                   max_turns=args.max_turns, sampling_override=_sampling_flags(args),
                                   judge=_judge(args), judge_passes=args.judge_passes, overrides=args.overrides)
            try:
                counts = evaluate_verl(config, dry_run=args.dry_run)
            except LaunchFailed as exc:
                print(f"{p.prog}: {exc}", file=sys.stderr)
                return 1
        if "command" in counts:
            print(counts["command"])
            return 0
        paths = write_report(args.out, args.out / "report", embeddings=not args.no_embeddings,
                             max_fallback_share=args.judge_max_fallback_share)
    print(json.dumps(counts))
    print(f"report: {paths['report']}  viewer: {paths['viewer']}")
    return 0 if counts["errors"] == 0 else 1


def _report(args: argparse.Namespace, p: argparse.ArgumentParser) -> int:
    if args.run is not None and not args.run.is_dir():
        p.error(f"--run: {args.run} is not a run directory (python -m verl_ext.eval run --out DIR writes one)")
    if args.trajectories is not None and not args.trajectories.is_file():
        p.error(f"--trajectories: {args.trajectories}: no such file")
    from verl_ext.eval.report import write_report, write_trajectory_report

    with _usage_errors(p):
        if args.run is not None:
            paths = write_report(args.run, args.out or args.run / "report", embeddings=not args.no_embeddings,
                                 max_fallback_share=args.judge_max_fallback_share)
        else:
            if args.out is None:
                raise ValueError("--out is required with --trajectories")
            paths = write_trajectory_report(args.trajectories, args.out, embeddings=not args.no_embeddings)
    print(f"report: {paths['report']}  viewer: {paths['viewer']}")
    return 0


def _training(args: argparse.Namespace, p: argparse.ArgumentParser) -> int:
    for path in args.metrics:
        if not path.exists():
            p.error(f"METRICS: {path}: no such file or directory")
    if len(args.metrics) == 1:
        from verl_ext.eval.training import training_plots

        with _usage_errors(p):
            written = training_plots(args.metrics[0], args.out)
        print("\n".join(map(str, written)))
        return 0
    from verl_ext.eval.curves import first_and_last, overlay_plots

    with _usage_errors(p):
        written = overlay_plots(args.metrics, args.out)
    print("\n".join([*map(str, written), *first_and_last(written[-1])]))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args, extra = p.parse_known_args(sys.argv[1:] if argv is None else argv)
    if args.command == "verl" and all(_HYDRA_OVERRIDE.match(x) for x in extra):
        args.overrides = extra  # main_ppo's KEY=VALUE overrides: what argparse leaves over
    elif extra:
        p.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command in ("run", "verl") and args.top_p is not None and args.top_p > 1:
        p.error(f"argument --top-p: must be <= 1, got {args.top_p}")
    quiet_verl_import_notices()  # every command imports verl past its own checks
    return {"run": _run, "verl": _verl, "report": _report, "training": _training}[args.command](args, p)


if __name__ == "__main__":
    sys.exit(main())
