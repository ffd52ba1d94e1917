"""Credit-judge throughput: assessments/s of ``CreditJudge.assess_group`` against a local server with fixed latency.

The server (this file with ``--serve``, a subprocess pinned to CPU 1) answers every chat completion after
``--latency`` seconds with a valid assessment; the client (pinned to CPU 0) judges ``--failures`` failed 30-turn
candidates against one reference, in groups of ``--group``, all groups at once, for each concurrency limit. The
ideal is min(concurrency, failures) / latency; "client cpu" is the judge's own work per assessment (prompt rendering,
HTTP, strict validation). Run from the repository root:
    PYTHONPATH=. .venv/bin/python bench/bench_credit_judge.py [--latency 0.5] [--failures 512] [--concurrency 1,8,64,256]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time

from aiohttp import web

from neos_core.usage import OneLineParser, int_list, nonnegative_float, positive_int
from verl_ext.credit import SCHEMA_VERSION
from verl_ext.credit.judge import CreditJudge, CreditJudgeConfig
from verl_ext.rollout.record import CallRecord, ImageEntry, TrajectoryRecord, TurnRecord

TURNS = 30
REPLY = json.dumps(
    {
        "schema_version": SCHEMA_VERSION,
        "candidate_overall_summary": "left the path at t7, came back at t12, left again at t20",
        "events": [
            {
                "span_id": s,
                "type": t,
                "severity": sev,
                "confidence": 0.8,
                "error_category": "wrong_entity",
                "rationale": "because",
                "reference_support": [3],
            }
            for s, t, sev in (("t7", "causal_error", 0.9), ("t12", "recovery", 0.0), ("t20", "re_derailment", 0.7))
        ],
        "productive_turns": [{"span_id": f"t{i}", "confidence": 0.6, "rationale": "found it"} for i in (1, 3, 14)],
        "confidence": 0.8,
    }
)


def serve(port: int, latency_s: float) -> None:
    async def chat(request: web.Request) -> web.Response:
        await request.read()
        await asyncio.sleep(latency_s)
        return web.json_response({"choices": [{"message": {"role": "assistant", "content": REPLY}}]})

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v1/chat/completions", chat)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def trajectory(session: str, turns: int, answer: str) -> TrajectoryRecord:
    """A 30-turn search episode with ~1,000-character observations and an image every fifth turn."""
    records = [
        TurnRecord(
            index=i,
            span=(100 * i, 100 * i + 60),
            text=f"I should look up item {i}. " * 8,
            outcome="call_ok",
            calls=[
                CallRecord(
                    tool_name="TextSearch" if i % 2 else "WebVisit",
                    arguments={"query": f"entity {i} relation"}
                    if i % 2
                    else {"url": f"https://neos-world.invalid/{i}"},
                    ok=True,
                    observation=f"Result {i}: " + "lorem ipsum dolor sit amet " * 36,
                    images_added=[f"img_{i // 5 + 2}"] if i % 5 == 0 else [],
                )
            ],
        )
        for i in range(turns - 1)
    ]
    records.append(TurnRecord(index=turns - 1, span=(100 * turns, 100 * turns + 20), text=answer, outcome="answer"))
    images = [ImageEntry(ref="img_1", source="question", turn=None, in_context=True)] + [
        ImageEntry(ref=f"img_{i // 5 + 2}", source="WebVisit", turn=i, in_context=True) for i in range(0, turns - 1, 5)
    ]
    return TrajectoryRecord(
        protocol="neos",
        question="Which river ...?",
        session_id=session,
        group_id="g",
        mei_version=None,
        termination_reason="answer",
        final_answer=answer,
        images=images,
        turns=records,
    )


async def run(url: str, concurrency: int, failures: int, group: int, latency_s: float) -> tuple[float, float, dict]:
    config = CreditJudgeConfig(url=url, model="bench", max_concurrency=concurrency, timeout_s=60 + latency_s)
    judge = CreditJudge(config)
    reference = trajectory("ref", 12, "Beirut River")
    candidates = [trajectory(f"s{i}", TURNS, "Orontes") for i in range(failures)]
    groups = [candidates[i : i + group] for i in range(0, failures, group)]
    start, start_cpu = time.perf_counter(), time.process_time()
    results = await asyncio.gather(*(judge.assess_group(reference, g) for g in groups))
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    assert sum(len(r) for r in results) == failures and all(label.assessed for r in results for label in r)
    return failures / wall, cpu * 1e3 / failures, dict(judge.counters)


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python bench/bench_credit_judge.py", description="Credit-judge throughput: assessments "
                      "per second of the credit judge against a local chat server with a fixed latency, for each "
                      "concurrency limit, against the ideal min(concurrency, failures) / latency.")
    p.add_argument("--latency", type=nonnegative_float, default=0.5, metavar="SECONDS",
                   help="server seconds per completion (default: 0.5)")
    p.add_argument("--failures", type=positive_int, default=512, metavar="N",
                   help="failed 30-turn candidates to judge (default: 512)")
    p.add_argument("--group", type=positive_int, default=7, metavar="N",
                   help="failures per group, judged against one reference (default: 7, G=8 minus the reference)")
    p.add_argument("--concurrency", type=int_list, default=[1, 8, 64, 256], metavar="N,N",
                   help="concurrency limits to measure, comma-separated (default: 1,8,64,256)")
    p.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the server subprocess: its port
    return p


def main() -> None:
    args = parser().parse_args()
    if args.serve:
        serve(args.serve, args.latency)
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        ["taskset", "-c", "1", sys.executable, __file__, "--serve", str(port), "--latency", str(args.latency)],
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    os.sched_setaffinity(0, {0})
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/v1"
        for concurrency in args.concurrency:
            n = min(args.failures, max(4 * concurrency, 16))  # keep the c=1 row short
            rate, cpu_ms, counters = asyncio.run(run(url, concurrency, n, args.group, args.latency))
            ideal = min(concurrency, n) / args.latency
            print(
                f"credit judge latency {args.latency:.2f}s c={concurrency}: {n} assessments, {rate:.1f}/s "
                f"(ideal {ideal:.1f}/s, {rate / ideal:.0%}), client cpu {cpu_ms:.2f} ms/assessment, {counters}"
            )
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
