"""Turn routing and admission on real vLLM replicas: the production router (``verl_ext.rollout.routing.TurnRouter``)
places every turn of a multi-turn round on one of several running ``vllm serve`` replicas (``/v1/completions`` with
token-id prompts, ``return_token_ids``), and an admission limit bounds the trajectories in flight, as the mixed-group
sampler does. What ``bench/bench_routing.py`` simulates, measured: the round's wall time per policy and limit, the
ratio to ``sticky`` at the same limit, turns per replica, and from each replica's ``/metrics`` the prompt tokens,
prefix-cache hits (the recomputed share) and preemptions.

A trajectory: a random prompt of ``--prompt`` tokens shared by its group of ``--group`` (the system prompt, tool
schemas and question image a group shares), then ``--turns`` turns, each generating ``--gen`` tokens (``ignore_eos``),
followed by ``--obs`` random observation tokens after a tool latency of ``--tool-s`` seconds. The replicas must run
with ``VLLM_SERVER_DEV_MODE=1`` (their prefix caches are reset before each run). ``--slow URL --slow-load N`` keeps N
long generations running on one replica for the whole run (a co-located load: the degraded-replica workload).

    python bench/bench_routing_vllm.py --replicas http://127.0.0.1:8101,http://127.0.0.1:8102 --in-flight 64,32
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import get_args

import aiohttp

from neos_core.usage import OneLineParser, int_list, nonnegative_float, positive_int, subset
from verl_ext.rollout.routing import Policy, RouterSettings, TurnRouter, prefix_keys

METRICS = {"prompt": "vllm:prompt_tokens_total", "hits": "vllm:prefix_cache_hits_total",
           "preempted": "vllm:num_preemptions_total"}
TOKENS = (1_000, 150_000)  # ordinary vocabulary ids, clear of Qwen's special tokens


@dataclass
class Run:
    policy: str
    in_flight: int
    seconds: float
    turns: Counter
    metrics: dict[str, float]


async def scrape(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(url + "/metrics") as resp:
        text = await resp.text()
    out = {}
    for key, name in METRICS.items():
        out[key] = sum(float(m) for m in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M))
    return out


async def complete(session: aiohttp.ClientSession, url: str, model: str, prompt: list[int], gen: int) -> list[int]:
    body = {"model": model, "prompt": prompt, "max_tokens": gen, "min_tokens": gen, "ignore_eos": True,
            "temperature": 1.0, "return_token_ids": True}
    async with session.post(url + "/v1/completions", json=body) as resp:
        answer = await resp.json()
        if resp.status != 200:
            raise RuntimeError(f"{url}: HTTP {resp.status} {str(answer)[:300]}")
    return answer["choices"][0]["token_ids"]


async def background_load(session: aiohttp.ClientSession, url: str, model: str, n: int, stop: asyncio.Event) -> None:
    rng = random.Random(7)

    async def one() -> None:
        while not stop.is_set():
            await complete(session, url, model, [rng.randrange(*TOKENS) for _ in range(4_000)], 512)

    await asyncio.gather(*(one() for _ in range(n)))


async def run_round(args: argparse.Namespace, policy: str, in_flight: int, session: aiohttp.ClientSession) -> Run:
    urls = args.replicas
    for url in urls:
        async with session.post(url + "/reset_prefix_cache") as resp:
            if resp.status != 200:
                raise RuntimeError(f"{url}/reset_prefix_cache: HTTP {resp.status} (start vLLM with "
                                   "VLLM_SERVER_DEV_MODE=1)")
    router = TurnRouter(RouterSettings(policy=policy, expected_generation_tokens=args.gen, block_tokens=args.block,
                                       cache_capacity_tokens=args.kv_tokens,
                                       cost={"kv_capacity_tokens": args.kv_tokens}), urls)
    rng = random.Random(args.seed)
    groups = -(-args.trajectories // args.group)
    prefixes = [[rng.randrange(*TOKENS) for _ in range(args.prompt)] for _ in range(groups)]
    gate = asyncio.Semaphore(in_flight)
    turns: Counter = Counter()
    before = {url: await scrape(session, url) for url in urls}

    async def trajectory(i: int) -> None:
        local = random.Random(args.seed * 1_000 + i)
        context = list(prefixes[i // args.group])
        async with gate:
            for _ in range(args.turns):
                decision = router.route(f"traj-{i}", prefix_keys(context, args.block), len(context), args.gen)
                turns[decision.replica] += 1
                try:
                    context += await complete(session, decision.replica, args.model_name, context, args.gen)
                finally:
                    router.release(decision.replica, f"traj-{i}")
                await asyncio.sleep(local.lognormvariate(0, 1) * args.tool_s)
                context += [local.randrange(*TOKENS) for _ in range(args.obs)]

    stop = asyncio.Event()
    slow = (asyncio.create_task(background_load(session, args.slow, args.model_name, args.slow_load, stop))
            if args.slow else None)
    started = time.perf_counter()
    await asyncio.gather(*(trajectory(i) for i in range(args.trajectories)))
    seconds = time.perf_counter() - started
    stop.set()
    if slow is not None:
        await slow
    after = {url: await scrape(session, url) for url in urls}
    metrics = {k: sum(after[u][k] - before[u][k] for u in urls) for k in METRICS}
    return Run(policy, in_flight, seconds, turns, metrics)


async def main_async(args: argparse.Namespace) -> list[Run]:
    runs = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3_600)) as session:
        await run_round(args, "sticky", min(args.in_flight), session)  # warm-up: first-request costs out of the table
        for in_flight in args.in_flight:
            for policy in args.policies:
                run = await run_round(args, policy, in_flight, session)
                runs.append(run)
                sticky = next((r for r in runs if r.policy == "sticky" and r.in_flight == in_flight), None)
                ratio = f"{sticky.seconds / run.seconds:.2f}x" if sticky else "-"
                m = run.metrics
                recomputed = 1 - m["hits"] / m["prompt"] if m["prompt"] else 0.0
                print(f"{policy:>12} in-flight {in_flight:>4}: round {run.seconds:7.1f} s, sticky/policy {ratio}, "
                      f"turns {'/'.join(str(run.turns[u]) for u in args.replicas)}, prompt tokens "
                      f"{m['prompt']:,.0f} ({recomputed:.0%} computed), preemptions {m['preempted']:.0f}", flush=True)
    return runs


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python bench/bench_routing_vllm.py", description="Turn routing and admission on real vLLM "
                      "replicas: round time per router policy and in-flight limit, ratio to sticky, turns per replica, "
                      "prefix hits and preemptions from each replica's /metrics.")
    p.add_argument("--replicas", type=lambda s: [u.rstrip("/") for u in s.split(",")], required=True, metavar="URLS",
                   help="comma-separated base URLs of running vllm serve replicas (VLLM_SERVER_DEV_MODE=1)")
    p.add_argument("--model-name", default="policy", help="the replicas' --served-model-name (default: policy)")
    p.add_argument("--policies", type=subset(get_args(Policy)), default=["sticky", "least_loaded", "cost_aware"],
                   metavar="P,P", help="router policies (default: sticky,least_loaded,cost_aware)")
    p.add_argument("--in-flight", type=int_list, default=[64, 32], metavar="N,N",
                   help="admission limits: trajectories in flight at once (default: 64,32)")
    p.add_argument("--trajectories", type=positive_int, default=64, metavar="N",
                   help="trajectories a round (default: 64)")
    p.add_argument("--group", type=positive_int, default=8, metavar="G",
                   help="trajectories sharing one prompt prefix (default: 8)")
    p.add_argument("--turns", type=positive_int, default=6, metavar="N", help="turns a trajectory (default: 6)")
    p.add_argument("--prompt", type=positive_int, default=2_000, metavar="TOKENS",
                   help="the group's shared prompt (default: 2000)")
    p.add_argument("--gen", type=positive_int, default=128, metavar="TOKENS",
                   help="tokens a turn writes (default: 128)")
    p.add_argument("--obs", type=positive_int, default=1_000, metavar="TOKENS",
                   help="observation tokens after each turn (default: 1000)")
    p.add_argument("--tool-s", type=nonnegative_float, default=0.2, metavar="SECONDS",
                   help="median tool latency, lognormal with sigma 1 (default: 0.2)")
    p.add_argument("--block", type=positive_int, default=256, metavar="TOKENS",
                   help="the router's prefix block (default: 256)")
    p.add_argument("--kv-tokens", type=positive_int, default=300_000, metavar="TOKENS",
                   help="each replica's KV pool in tokens, as its log reports it (default: 300000)")
    p.add_argument("--slow", default=None, metavar="URL", help="the replica to load with --slow-load generations")
    p.add_argument("--slow-load", type=positive_int, default=16, metavar="N",
                   help="long generations kept running on --slow (default: 16)")
    p.add_argument("--seed", type=int, default=0, help="workload seed (default: 0)")
    return p


if __name__ == "__main__":
    asyncio.run(main_async(parser().parse_args()))
    sys.exit(0)
