"""Evaluation harness throughput: episodes/s of ``python -m verl_ext.eval run`` on our benchmark split, at the default
concurrency (8) against concurrency 1 in the same invocation, with the offline rule judge and with an LLM judge.

Real: the harness (``verl_ext.eval.run.evaluate``: episodes under the Neos protocol, tool sessions, the judge cache,
the append-only results log), our tool server (a subprocess on the world), the LLM judge path through the project's
OpenAI-compatible client. Stand-in, where no model can run here: ``scripted_policy`` of ``tests/eval/conftest.py``
(a fixed Neos script per episode: two TextSearch calls, one FetchImage, then the answer; right for even-numbered
items, wrong for odd ones) and its scripted judge (``correct: yes`` exactly when the rule matcher accepts), served by
this file with ``--serve`` in a subprocess on loopback, answering each policy turn after ``--latency`` seconds and each
judge request after ``--judge-latency`` seconds (a model server's reply time).

Per setting: wall time, episodes/s (an episode: one run of one item, rolled out and judged), judged episodes/s
through the LLM judge path (verdicts from the judge cache included; ``judge_asked`` counts the requests: the script
repeats an item's answer in every run, so each distinct answer is asked once), and the harness's own CPU time per
episode (this process; the servers run in others). The
ideal at concurrency c is min(c, episodes) times the rate at concurrency 1. Run from the repository root:
    PYTHONPATH=. .venv/bin/python bench/bench_eval.py --world WORLD --bench SPLIT/benchmark.parquet [--runs 2]
(``SPLIT`` from ``python -m data_gen neos --world WORLD --out SPLIT --limit 150``: its benchmark split.)
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _scripted_policy():
    """The tests' stand-in policy (``tests/eval/conftest.py``), loaded under a name of its own."""
    spec = importlib.util.spec_from_file_location("neos_eval_stand_in", ROOT / "tests" / "eval" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.scripted_policy


from neos_core.ports import free_local_port  # noqa: E402
from neos_core.usage import OneLineParser, int_list, nonnegative_float, positive_int  # noqa: E402
from tool_server.launch import served  # noqa: E402

if TYPE_CHECKING:  # the harness is imported where used: --help and a usage error answer without loading verl
    from verl_ext.eval.specs import BenchmarkSpec

WRONG = "Atlantis"


def serve(port: int, answers_file: Path, latency_s: float, judge_latency_s: float) -> None:
    reply = _scripted_policy()(json.loads(answers_file.read_text()))

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        user = body["messages"][1]["content"]
        judge = isinstance(user, str) and user.startswith("[Question]")
        await asyncio.sleep(judge_latency_s if judge else latency_s)
        message = dict(reply(body))
        usage = message.pop("usage", None)
        return web.json_response({"choices": [{"message": message}], **({"usage": usage} if usage else {})})

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v1/chat/completions", chat)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def _wait(port: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"stand-in policy server on port {port}")


def one_run(bench: BenchmarkSpec, url: str, tool_url: str, runs: int, concurrency: int, llm_judge: bool) -> dict:
    from verl_ext.eval.episode import PolicySettings
    from verl_ext.eval.run import RunConfig, evaluate, read_results
    from verl_ext.reward.judge import JudgeConfig

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        judge = JudgeConfig(url=url, model="judge") if llm_judge else JudgeConfig()
        config = RunConfig(out=out, benches=[bench], policy=PolicySettings(JudgeConfig(url=url, model="policy",
                                                                                       max_tokens=256)),
                           tool_url=tool_url, runs=runs, concurrency=concurrency, judge=judge, progress=False)
        cpu, start = time.process_time(), time.perf_counter()
        counts = asyncio.run(evaluate(config))
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        records = read_results(out)
        cache = out / "judge_cache.jsonl"  # one line per reply the judge gave (cache hits and shared requests: none)
        asked = len(cache.read_text().splitlines()) if cache.exists() else 0
    episodes = counts["ok"]
    llm = [r.verdict for r in records if r.verdict and r.verdict["source"] == "llm"]
    return {"concurrency": concurrency, "judge": "llm" if llm_judge else "rule", "episodes": episodes,
            "errors": counts["errors"], "wall_s": round(wall, 2), "episodes_per_s": round(episodes / wall, 2),
            "judged_per_s": round(len(llm) / wall, 2), "judge_asked": asked, "cpu_ms_per_episode": round(1000 * cpu / max(episodes, 1), 1),
            "accuracy": round(sum(bool(r.correct) for r in records) / max(len(records), 1), 3)}


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python bench/bench_eval.py", description="Evaluation harness throughput: episodes per "
                      "second of the harness on our benchmark split at each concurrency (the first is the baseline), "
                      "with the rule judge and with an LLM judge, against a scripted stand-in policy and judge and "
                      "the real tool server.")
    p.add_argument("--world", type=Path, required=True, metavar="DIR", help="a built world (the tool server's)")
    p.add_argument("--bench", type=Path, required=True, metavar="FILE",
                   help="our split's benchmark.parquet (python -m data_gen neos --world DIR --out SPLIT)")
    p.add_argument("--runs", type=positive_int, default=2, metavar="K", help="runs per item (default: 2)")
    p.add_argument("--concurrency", type=int_list, default=[1, 8], metavar="N,N",
                   help="episodes in flight, comma-separated; the first is the baseline (default: 1,8, 8 being the "
                   "harness's default)")
    p.add_argument("--latency", type=nonnegative_float, default=0.1, metavar="SECONDS",
                   help="stand-in policy seconds per turn (default: 0.1)")
    p.add_argument("--judge-latency", type=nonnegative_float, default=0.1, metavar="SECONDS",
                   help="stand-in judge seconds per verdict (default: 0.1)")
    p.add_argument("--serve", nargs=2, metavar=("PORT", "ANSWERS"), help=argparse.SUPPRESS)  # the server subprocess
    return p


def main() -> None:
    p = parser()
    args = p.parse_args()
    if args.serve:
        serve(int(args.serve[0]), Path(args.serve[1]), args.latency, args.judge_latency)
        return
    if not args.bench.is_file():
        p.error(f"--bench: {args.bench}: no such file")
    if not (args.world / "manifest.json").is_file():
        p.error(f"--world: {args.world}: not a built world (no manifest.json)")
    from verl_ext.eval.specs import BenchmarkSpec

    bench = BenchmarkSpec("neos", "verl", args.bench)
    items = bench.load()
    answers = {item.question: item.ground_truth["target"] if i % 2 == 0 else WRONG for i, item in enumerate(items)}
    with tempfile.TemporaryDirectory() as tmp:
        answers_file = Path(tmp) / "answers.json"
        answers_file.write_text(json.dumps(answers))
        port = free_local_port()
        server = subprocess.Popen([sys.executable, __file__, "--world", str(args.world), "--bench", str(args.bench),
                                   "--latency", str(args.latency), "--judge-latency", str(args.judge_latency),
                                   "--serve", str(port), str(answers_file)],
                                  env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            _wait(port)
            with served(args.world) as tool_url:
                load = os.getloadavg()[0]
                rows = [one_run(bench, f"http://127.0.0.1:{port}/v1", tool_url, args.runs, c, llm)
                        for llm in (False, True) for c in args.concurrency]
                load = (load + os.getloadavg()[0]) / 2
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(f"{len(items)} items x {args.runs} runs; policy {args.latency} s/turn, judge {args.judge_latency} s; "
          f"load {load:.1f}")
    for row in rows:
        print(json.dumps(row))
    for judge in ("rule", "llm"):
        base, *others = [r for r in rows if r["judge"] == judge]
        for r in others:
            ideal = min(r["concurrency"], r["episodes"]) * base["episodes_per_s"]
            print(f"{judge} judge: concurrency {r['concurrency']} {r['episodes_per_s']} episodes/s = "
                  f"{r['episodes_per_s'] / base['episodes_per_s']:.2f}x concurrency {base['concurrency']} "
                  f"({base['episodes_per_s']}); {100 * r['episodes_per_s'] / ideal:.0f}% of ideal")


if __name__ == "__main__":
    main()
