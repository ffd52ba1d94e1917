"""Client-side cost of one model step call in data generation: ``SyncChat.ask`` (the blocking bridge the rewriter,
observer and question wording use: a hop to its private event loop, the request, strict-JSON parsing and pydantic
validation) against the bare async ``chat_completion`` on one session (the pattern of the relation proposer and
probe 1), both against the same loopback chat server in another process that answers at once.

The model's own latency is not in it (a real model takes 10-1000x longer); the figure says how much the bridge adds
per call. One comparable figure: the ratio of medians (bridge / bare), measured in the same run.

    PYTHONPATH=. .venv/bin/python bench/bench_model_steps.py --calls 500 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import socket
import statistics
import time

import aiohttp
from aiohttp import web

from data_gen.common.llm import QuestionReply, SyncChat, Usage
from neos_core.ports import free_local_port
from neos_core.usage import OneLineParser, positive_int
from verl_ext.reward.judge import JudgeConfig, chat_completion

REPLY = json.dumps({"question": "Let A be the country whose flag is shown in the image. Which country is A?"})
MESSAGES = [{"role": "system", "content": "Reword it."}, {"role": "user", "content": json.dumps({"question": "q"})}]


def _serve(port: int) -> None:
    async def chat(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"choices": [{"message": {"role": "assistant", "content": REPLY}}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    web.run_app(app, host="127.0.0.1", port=port, print=None)


def bare(config: JudgeConfig, calls: int) -> float:
    """Seconds per call of ``chat_completion`` awaited in sequence on one session."""

    async def go() -> float:
        async with aiohttp.ClientSession() as session:
            await chat_completion(session, config, MESSAGES)  # connection warm-up
            start = time.perf_counter()
            for _ in range(calls):
                QuestionReply.model_validate_json(await chat_completion(session, config, MESSAGES))
            return (time.perf_counter() - start) / calls

    return asyncio.run(go())


def bridged(config: JudgeConfig, calls: int) -> float:
    """Seconds per call of ``SyncChat.ask`` from synchronous code."""
    usage = Usage()
    with SyncChat(config) as chat:
        chat.ask(MESSAGES, QuestionReply, usage)
        start = time.perf_counter()
        for _ in range(calls):
            assert chat.ask(MESSAGES, QuestionReply, usage) is not None
        return (time.perf_counter() - start) / calls


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python bench/bench_model_steps.py", description="Client-side cost of one model step call "
                      "in data generation: the blocking bridge the pipelines' model steps use against the bare async "
                      "chat call, on the same loopback server; prints the ratio of medians.")
    p.add_argument("--calls", type=positive_int, default=500, metavar="N",
                   help="calls per measurement (default: 500)")
    p.add_argument("--repeat", type=positive_int, default=3, metavar="N",
                   help="measurements of each; medians are compared (default: 3)")
    return p


def main() -> None:
    args = parser().parse_args()
    port = free_local_port()
    server = multiprocessing.Process(target=_serve, args=(port,), daemon=True)
    server.start()
    config = JudgeConfig(url=f"http://127.0.0.1:{port}/v1", model="bench")
    for _ in range(100):  # wait for the server
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            break
        except OSError:
            time.sleep(0.05)
    runs = {"bare": [], "bridged": []}
    for _ in range(args.repeat):  # alternate so load changes hit both alike
        runs["bare"].append(bare(config, args.calls))
        runs["bridged"].append(bridged(config, args.calls))
    server.terminate()
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(json.dumps({"calls_per_run": args.calls, "ms_per_call": {k: [round(x * 1e3, 3) for x in v]
                                                                    for k, v in runs.items()},
                      "median_ms": {k: round(v * 1e3, 3) for k, v in med.items()},
                      "bridged_over_bare": round(med["bridged"] / med["bare"], 2)}, indent=2))


if __name__ == "__main__":
    main()
