"""Rollout-worker benchmark: driver overhead per turn and throughput vs ideal of our agent loop, beside stock verl's
``ToolAgentLoop`` on the same workload.

    PYTHONPATH=. .venv/bin/python bench/bench_rollout.py [--part overhead|throughput|all] [--quick] [--reps N]
        [--world worlds/small] [--profile] [--torch-threads 1] [--json results.json]

Both loops are built through verl's registry (``verl_ext.rollout.instantiate.instantiate_agent_loop``) with the
tiny Qwen2.5-VL processor/tokenizer (so verl's VL Continuous Token builder is what runs), and talk to a real tool
server on the small world. Generation is :class:`CannedResponses`: pre-tokenized scripted turns (Hermes
``<tool_call>`` JSON, which both loops parse; the last turn is a plain-text answer), returned instantly or after a
drawn latency, with log-probs.

* overhead: episodes one at a time against an in-process tool server (aiohttp ``TestServer``), generation instant.
  Per-turn driver overhead = (episode wall - time in generate - time in tool calls) / turns, from the loops' own
  ``metrics["generate_sequences"]`` and ``metrics["tool_calls"]``. Text-only (TextSearch every turn) and with images
  (one question image, FetchImage at turns 0, 5, 10, ...), the latter twice: with no sharing (the per-process media
  caches of ``verl_ext.rollout.media`` emptied before every episode, so the question image is decoded and each
  image's placeholder text computed afresh), and as GRPO groups (``--group-size`` G, default 8: G rollouts of one
  question one after another, caches emptied at the start of each group; the row is the group's mean episode, ours
  only). Every episode asks the same
  question text and the memo of the constant system block stays warm in both, as does the process's one check of the
  processor's size formula (``tokens._size_formula_ok``, made on its first image). ``--profile`` adds cProfile of a
  50-turn image episode, worker threads included (the Continuous Token builder runs in the default executor).
* throughput: N concurrent episodes, after 2 untimed ones per loop (a worker's one-time costs); generation sleeps a
  drawn lognormal latency and every tool call sleeps one in an aiohttp middleware of the bench's own server (a
  subprocess, so the server's CPU is not charged to the driver).
  A call's latency is a pure function of (seed, tool, arguments), so driver and server agree on it without talking;
  ideal makespan = max over episodes of the sum of its drawn latencies; efficiency = ideal / measured.

``--serve PORT`` is the internal entry point of the latency-drawn server subprocess.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import cProfile
import hashlib
import io
import json
import math
import os
import pstats
import random
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from neos_core.usage import OneLineParser, int_list, nonnegative_int, positive_int

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ORIGIN = "https://neos-world.invalid"

GEN_MEDIAN_S, GEN_SIGMA = 0.040, 0.5  # generation latency: lognormal, median 40 ms (p99 ~128 ms)
TOOL_MEDIAN_S, TOOL_SIGMA = 0.060, 1.0  # tool latency: lognormal, median 60 ms, heavy tail (p99 ~614 ms)
LATENCY_CAP_S = 5.0


def _lognormal(u: float, median: float, sigma: float) -> float:
    u = min(max(u, 1e-12), 1 - 1e-12)
    return min(median * math.exp(sigma * statistics.NormalDist().inv_cdf(u)), LATENCY_CAP_S)


def tool_latency(seed: int, name: str, arguments: Any) -> float:
    """The drawn latency of one tool call: the same function in the driver (ideal) and the server (sleep)."""
    key = json.dumps([seed, name, arguments], sort_keys=True, ensure_ascii=False).encode()
    u = int.from_bytes(hashlib.sha256(key).digest()[:8], "big") / 2**64
    return _lognormal(u, TOOL_MEDIAN_S, TOOL_SIGMA)


# ---------------------------------------------------------------------------------------------- tool server


def _build_app(world_dir: Path, log_dir: Path, latency_seed: int | None):
    from aiohttp import web

    from tool_server.app import ServerSettings, create_app
    from tool_server.cache import TieredCache
    from tool_server.mei import MEIConfig, build_interface
    from tool_server.offline.world import OfflineWorld

    cache_dir = Path(os.environ.get("NEOS_WORLD_CACHE", Path.home() / ".cache" / "neos-world")) / "tool-server"
    world = OfflineWorld.load(world_dir, cache_dir=cache_dir)
    app = create_app(
        world=world,
        mei=build_interface(MEIConfig(log_path=log_dir / "mei.jsonl", ocr=False)),
        cache=TieredCache.from_config(memory_items=100_000),
        settings=ServerSettings(max_register_images=512),
    )
    if latency_seed is not None:
        state = {"in_flight": 0, "area": 0.0, "t": time.perf_counter(), "max": 0, "calls": 0}

        def account(delta: int) -> None:
            now = time.perf_counter()
            state["area"] += state["in_flight"] * (now - state["t"])
            state["t"] = now
            state["in_flight"] += delta
            state["max"] = max(state["max"], state["in_flight"])

        @web.middleware
        async def drawn_latency(request: web.Request, handler):
            if request.method == "POST" and request.path.endswith("/call"):
                body = json.loads(await request.read())  # aiohttp keeps the body for the handler
                account(+1)
                state["calls"] += 1
                try:
                    await asyncio.sleep(tool_latency(latency_seed, body["name"], body["arguments"]))
                    return await handler(request)
                finally:
                    account(-1)
            return await handler(request)

        async def stats(request: web.Request) -> web.Response:
            account(0)
            out = {k: state[k] for k in ("area", "max", "calls")}
            if request.query.get("reset"):
                state.update(area=0.0, max=state["in_flight"], calls=0)
            return web.json_response(out)

        app.middlewares.insert(0, drawn_latency)
        app.router.add_get("/bench/stats", stats)
    return app, world


def _serve(port: int, world_dir: Path, latency_seed: int) -> None:
    import gc
    import tempfile

    from aiohttp import web

    async def main() -> None:
        app, world = _build_app(world_dir, Path(tempfile.mkdtemp()), latency_seed)
        gc.freeze()
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        print(f"bench server listening on http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------- canned generation


_EP: contextvars.ContextVar[dict[str, float]] = contextvars.ContextVar("bench_episode")


class CannedResponses:
    """Bench-only stand-in for ``LLMServerClient.generate``: returns pre-tokenized scripted turns with log-probs.

    ``scripts[k][t]`` are the token ids of episode k's turn t (k: the episode's index set by :func:`run_episode`, else
    the order of first appearance of its request id; both loops use one request id per episode).
    ``gen_latency[k][t]`` (optional) is slept before answering. Turns past the script repeat its last turn.
    """

    def __init__(self, scripts: list[list[list[int]]], gen_latency: list[list[float]] | None = None) -> None:
        self.scripts = scripts
        self.gen_latency = gen_latency
        self._episode: dict[str, int] = {}
        self._turn: dict[str, int] = {}
        self.calls = 0

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], image_data=None, **kw: Any
    ):
        from verl.workers.rollout.replica import TokenOutput

        ctx = _EP.get(None)
        k = self._episode.setdefault(request_id, int(ctx["k"]) if ctx and "k" in ctx else len(self._episode))
        t = self._turn[request_id] = self._turn.get(request_id, -1) + 1
        script = self.scripts[k % len(self.scripts)]
        ids = script[min(t, len(script) - 1)]
        self.calls += 1
        if self.gen_latency is not None:
            await asyncio.sleep(self.gen_latency[k][min(t, len(self.gen_latency[k]) - 1)])
        return TokenOutput(
            token_ids=list(ids),
            log_probs=[-0.5] * len(ids),
            stop_reason="stop",
            num_preempted=0,
            extra_fields={"global_steps": 0, "min_global_steps": 0, "max_global_steps": 0},
        )


def _call_text(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def episode_calls(rng: random.Random, turns: int, images: bool, queries: list[str], image_urls: list[str]):
    """The (tool, arguments) of turns 0..turns-2 (the last turn answers): TextSearch, or with images FetchImage at
    turns 0, 5, 10, ..."""
    calls = []
    for t in range(turns - 1):
        if images and t % 5 == 0:
            calls.append(("FetchImage", {"urls": [rng.choice(image_urls)]}))
        else:
            calls.append(("TextSearch", {"query": [rng.choice(queries)]}))
    return calls


def tokenize_scripts(tokenizer, episodes: list[list[tuple[str, dict]]]) -> list[list[list[int]]]:
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    texts = sorted({_call_text(n, a) for ep in episodes for n, a in ep} | {"The answer is France."})
    ids = dict(zip(texts, tokenizer(texts, add_special_tokens=False)["input_ids"]))
    answer = ids["The answer is France."] + [im_end]
    return [[ids[_call_text(n, a)] + [im_end] for n, a in ep] + [answer] for ep in episodes]


# ---------------------------------------------------------------------------------------------- loops


def _instrument() -> None:
    """Per-episode timers (through a context variable, so concurrent episodes keep their own) around the pieces of
    driver work we want to see apart: the Continuous Token calls and our loop's session open/close."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase

    from verl_ext.rollout.agent_loop import SearchAgentLoop
    from verl_ext.rollout.tool_backend import ToolSession
    from verl_ext.tools.client import ToolServerClient

    def wrap(owner, name: str, key: str) -> None:
        original = getattr(owner, name)

        @contextlib.contextmanager
        def timing():
            stats = _EP.get(None)
            if stats is None or stats.get(f"_in_{key}"):  # an override calling super(): count it once
                yield
                return
            stats[f"_in_{key}"] = True
            start, start_cpu = time.perf_counter(), time.process_time()
            try:
                yield
            finally:
                stats[f"_in_{key}"] = False
                stats[key] = stats.get(key, 0.0) + time.perf_counter() - start
                stats[f"{key}_cpu"] = stats.get(f"{key}_cpu", 0.0) + time.process_time() - start_cpu

        async def timed_async(*args, **kwargs):
            with timing():
                return await original(*args, **kwargs)

        def timed(*args, **kwargs):
            with timing():
                return original(*args, **kwargs)

        setattr(owner, name, timed_async if asyncio.iscoroutinefunction(original) else timed)

    wrap(AgentLoopBase, "ct_build_initial_tokens", "ct_initial")
    wrap(AgentLoopBase, "ct_merge_context_msg", "ct_context")  # stock's merges
    wrap(AgentLoopBase, "ct_merge_assistant_token", "ct_assistant")
    # Ours: verl's merges applied in place; before that (a checkout of older code on PYTHONPATH), its ct_* overrides.
    for name, key in (("_merge_context", "ct_context"), ("_merge_assistant", "ct_assistant")):
        if hasattr(SearchAgentLoop, name):
            wrap(SearchAgentLoop, name, key)
    if "ct_merge_context_msg" in vars(SearchAgentLoop):
        wrap(SearchAgentLoop, "ct_merge_context_msg", "ct_context")
    wrap(AgentLoopBase, "process_multi_modal_info", "mm_info")
    wrap(SearchAgentLoop, "process_multi_modal_info", "mm_info")  # ours: verl's, shared by a group's rollouts
    wrap(ToolSession, "open", "session")
    wrap(ToolSession, "close", "session")
    wrap(ToolServerClient, "call", "http")  # the HTTP part of a tool call, in both loops


class Factory:
    """Builds one loop per episode, as verl's AgentLoopWorker does, for ``ours`` or ``stock``."""

    def __init__(self, model_dir: Path, url: str, turns: int) -> None:
        from omegaconf import OmegaConf
        from transformers import AutoProcessor
        from verl.tools.tool_registry import initialize_tools_from_config

        os.environ["NEOS_TOOL_SERVER_URL"] = url
        self.processor = AutoProcessor.from_pretrained(model_dir)
        self.tokenizer = self.processor.tokenizer
        self.config = OmegaConf.create(
            {
                "actor_rollout_ref": {
                    "rollout": {
                        "prompt_length": 16384,
                        "response_length": 262144,
                        "full_determinism": False,
                        "multi_turn": {
                            "max_assistant_turns": turns,
                            "max_user_turns": None,
                            "max_parallel_calls": 1,
                            "max_tool_response_length": 8192,
                            "tool_response_truncate_side": "middle",
                            "format": "hermes",
                        },
                        "custom": {"neos_rollout": {"tool_server_url": url}},
                    }
                },
                "data": {},
            }
        )
        with contextlib.redirect_stdout(io.StringIO()):  # verl's BaseTool prints every schema
            self.tools = initialize_tools_from_config(ROOT / "recipes" / "tools" / "neos_tools.yaml")

    def build(self, kind: str, client: CannedResponses):
        from verl_ext.rollout.instantiate import instantiate_agent_loop

        name = {"ours": "neos_search_agent", "stock": "tool_agent"}[kind]
        return instantiate_agent_loop(
            name, client, self.processor, self.config, self.tools if kind == "stock" else []
        )


def row_image(image) -> dict[str, Any]:
    """The question image as verl's ``RLHFDataset`` puts a parquet row's image into the prompt: the encoded file and
    the image decoded from it."""
    from PIL import Image

    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return {"bytes": buf.getvalue(), "image": Image.open(io.BytesIO(buf.getvalue()))}


def question(image: dict[str, Any] | None) -> list[dict[str, Any]]:
    text = "Which country's flag is this, and what is its capital?"
    if image is None:
        return [{"role": "user", "content": text}]
    return [{"role": "user", "content": [{"type": "image", **image}, {"type": "text", "text": text}]}]


async def run_episode(loop, raw_prompt, uid: str, k: int = 0) -> dict[str, float]:
    stats: dict[str, float] = {"k": k}
    _EP.set(stats)
    start, start_cpu = time.perf_counter(), time.process_time()
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}
    out = await loop.run(sampling, raw_prompt=raw_prompt, uid=uid)
    stats["wall"] = time.perf_counter() - start
    stats["cpu"] = time.process_time() - start_cpu  # all threads; meaningful when episodes run one at a time
    stats["end"] = time.perf_counter()
    stats["start"] = start
    stats["gen"] = float(out.metrics.generate_sequences)
    stats["tool"] = float(out.metrics.tool_calls)
    stats["assistant_turns"] = sum(1 for _ in _assistant_spans(out.response_mask))
    stats["images"] = len((out.multi_modal_data or {}).get("images") or [])
    stats["response_tokens"] = len(out.response_ids)
    stats["termination"] = (out.extra_fields or {}).get("termination_reason", "-")
    return stats


def _assistant_spans(mask: list[int]):
    previous = 0
    for m in mask:
        if m and not previous:
            yield 1
        previous = m


# ---------------------------------------------------------------------------------------------- part 1: overhead


class ProfilingExecutor(ThreadPoolExecutor):
    """A default executor that runs each job under its own cProfile (cProfile sees only its own thread)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.profiles: list[cProfile.Profile] = []
        self._lock = threading.Lock()

    def submit(self, fn, /, *args, **kwargs):
        def run():
            prof = cProfile.Profile()
            prof.enable()
            try:
                return fn(*args, **kwargs)
            finally:
                prof.disable()
                with self._lock:
                    self.profiles.append(prof)

        return super().submit(run)


def _top(profiles: list[cProfile.Profile], n: int, sort: str) -> str:
    buf = io.StringIO()
    stats = pstats.Stats(profiles[0], stream=buf)
    for p in profiles[1:]:
        stats.add(p)
    stats.strip_dirs().sort_stats(sort).print_stats(n)
    lines = buf.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if "ncalls" in line)
    return "\n".join(lines[start : start + n + 1])


async def part_overhead(args, model_dir: Path, results: dict) -> None:
    from aiohttp.test_utils import TestServer
    import tempfile

    from verl_ext.tools.client import close_shared_clients

    app, world = _build_app(args.world, Path(tempfile.mkdtemp()), None)
    server = TestServer(app)
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")
    queries = [p.title for p in list(world.world.pages.values())[:512]]
    image_urls = [i.url for i in list(world.world.images.values())[:256]]
    qimage = world.load_pixels("flag_fra", max_pixels=4_000_000)
    qrow = row_image(qimage)
    turn_list = [5, 10] if args.quick else [5, 20, 50]
    reps = args.reps or (2 if args.quick else 3)
    rows = results.setdefault("overhead", [])
    try:
        for images, group in ((False, 1), (True, 1), (True, args.group_size)):
            loops = args.loops if group == 1 else [k for k in args.loops if k == "ours"]
            for turns in turn_list:
                factory = Factory(model_dir, url, turns)
                rng = random.Random(turns * 2 + images)
                eps = [episode_calls(rng, turns, images, queries, image_urls) for _ in range((reps + 1) * group)]
                scripts = tokenize_scripts(factory.tokenizer, eps)
                per_kind: dict[str, list[dict[str, float]]] = {kind: [] for kind in loops}
                for rep in range(reps + 1):  # rep 0 warms up (catalog fetch, caches)
                    for kind in loops if rep % 2 == 0 else loops[::-1]:
                        members = []
                        for g in range(group):
                            if g == 0:
                                _clear_media_caches()
                            client = CannedResponses([scripts[rep * group + g]])
                            loop = factory.build(kind, client)
                            members.append(await run_episode(loop, question(qrow if images else None), f"u{rep}"))
                            assert client.calls == turns, (kind, client.calls, members[-1])
                        if rep:
                            per_kind[kind].append(_mean_episode(members))
                for kind, eps_stats in per_kind.items():
                    row = _overhead_row(kind, turns, images, eps_stats, group)
                    rows.append(row)
                    print(_fmt_overhead(row), flush=True)
        results["ct_probe"] = await _ct_probe(model_dir, url, world, qimage)
        if args.profile:
            await _profile(model_dir, url, queries, image_urls, qimage, results)
    finally:
        await close_shared_clients()
        await server.close()
        world.close()


def _clear_media_caches() -> None:
    """Empty the per-process media caches (decoded question media, placeholder texts, session PNGs): the next episode
    decodes its question image and computes its images' placeholder texts afresh, as the first rollout of a question
    does."""
    from verl_ext.rollout import media

    media.QUESTION_MEDIA.clear()
    media.IMAGE_REPLACEMENTS.clear()
    media.SESSION_PNGS.clear()


def _mean_episode(members: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean of a group's episode stats (numbers averaged; the termination reasons joined)."""
    numbers = {k for m in members for k, v in m.items() if isinstance(v, (int, float))}
    mean = {k: statistics.fmean(m.get(k, 0.0) for m in members) for k in numbers}
    mean["termination"] = ",".join(sorted({str(m["termination"]) for m in members}))
    return mean


async def _ct_probe(model_dir: Path, url: str, world, qimage) -> dict[str, Any]:
    """One tool-observation merge (verl's ``merge_context_tokens``, as both loops call it) with the tool schemas
    passed, as both loops do, and without: same tokens? how long? (the proposal in docs/benchmarks.md)"""
    from verl_ext.rollout.tool_backend import tool_catalog
    from verl_ext.tools.client import shared_client

    factory = Factory(model_dir, url, 5)
    builder = factory.build("ours", CannedResponses([[[0]]])).continuous_token_builder
    schemas = (await tool_catalog(url, "neos", 120.0)).schemas
    client = shared_client(url, 120.0)
    session = await client.open_session([])
    text = (await client.call(session.session_id, "TextSearch", {"query": ["capital of France"]})).text[:8192]
    await client.close_session(session.session_id)
    call = {"type": "function", "function": {"name": "TextSearch", "arguments": {"query": ["capital of France"]}}}
    prev = [
        {"role": "system", "content": "You are a search agent."},
        {"role": "user", "content": [{"type": "image", "image": qimage}, {"type": "text", "text": "Which country?"}]},
        {"role": "assistant", "content": "", "tool_calls": [call]},
    ]
    ids = builder.build_initial_tokens(prev[:2], tools=schemas, images=[qimage])
    out: dict[str, Any] = {}
    for label, message in (
        ("text", {"role": "tool", "content": text}),
        ("image", {"role": "tool", "content": [{"type": "text", "text": "img_2:"}, {"type": "image", "image": qimage},
                                               {"type": "text", "text": text[:500]}]}),
    ):
        times: dict[str, list[float]] = {"tools": [], "none": []}
        tokens = {}
        for _ in range(7):
            for key, tools in (("tools", schemas), ("none", None)):
                start = time.perf_counter()
                tokens[key] = builder.merge_context_tokens(prev, prev + [message], ids, tools=tools).token_ids
                times[key].append(time.perf_counter() - start)
        row = {
            "same_tokens": tokens["tools"] == tokens["none"],
            "with_tools_ms": statistics.median(times["tools"]) * 1000,
            "without_tools_ms": statistics.median(times["none"]) * 1000,
            "appended_tokens": len(tokens["tools"]) - len(ids),
        }
        out[label] = row
        print(
            f"CTPROBE {label:5s} observation merge ({row['appended_tokens']} tokens): with tool schemas "
            f"{row['with_tools_ms']:.1f} ms, without {row['without_tools_ms']:.1f} ms, "
            f"same tokens: {row['same_tokens']}",
            flush=True,
        )
    return out


def _overhead_row(kind: str, turns: int, images: bool, eps: list[dict[str, float]], group: int) -> dict[str, Any]:
    def med(f) -> float:
        return statistics.median(f(e) for e in eps) * 1000

    return {
        "loop": kind,
        "turns": turns,
        "images": images,
        "group": group,  # > 1: each of eps is the mean episode of a group of that many rollouts of one question
        "n": len(eps),
        "overhead_ms_per_turn": med(lambda e: (e["wall"] - e["gen"] - e["tool"]) / turns),
        # Process CPU of the episode less the CPU spent inside tool HTTP calls (the in-process server's work lands
        # there): the driver's own work, text-merge and executor threads included. Less sensitive to a shared
        # machine than wall time, which also counts other processes' turns on the cores.
        "driver_cpu_ms_per_turn": med(lambda e: (e["cpu"] - e.get("http_cpu", 0.0)) / turns),
        "overhead_ex_session_ms_per_turn": med(
            lambda e: (e["wall"] - e["gen"] - e["tool"] - e.get("session", 0)) / turns
        ),
        "ct_context_ms_per_turn": med(lambda e: e.get("ct_context", 0) / turns),
        "ct_assistant_ms_per_turn": med(lambda e: e.get("ct_assistant", 0) / turns),
        "ct_initial_ms": med(lambda e: e.get("ct_initial", 0)),
        "session_ms": med(lambda e: e.get("session", 0)),
        "mm_info_ms": med(lambda e: e.get("mm_info", 0)),  # verl's process_multi_modal_info of the question
        "tool_http_ms_per_turn": med(lambda e: e.get("http", 0) / turns),
        "wall_ms": med(lambda e: e["wall"]),
        "tool_ms_per_turn": med(lambda e: e["tool"] / turns),
        "response_tokens": int(statistics.median(e["response_tokens"] for e in eps)),
        "images_out": int(statistics.median(e["images"] for e in eps)),
        "termination": sorted({str(e["termination"]) for e in eps}),
    }


def _fmt_overhead(r: dict[str, Any]) -> str:
    return (
        f"OVERHEAD {r['loop']:5s} {_workload(r)} turns={r['turns']:<3d} "
        f"{r['overhead_ms_per_turn']:6.2f} ms/turn (ex session open/close {r['overhead_ex_session_ms_per_turn']:.2f}; "
        f"driver CPU {r['driver_cpu_ms_per_turn']:.2f}) "
        f"[CT context {r['ct_context_ms_per_turn']:.2f} + CT assistant {r['ct_assistant_ms_per_turn']:.2f} ms/turn, "
        f"CT initial {r['ct_initial_ms']:.1f} ms, session {r['session_ms']:.1f} ms, mm info {r['mm_info_ms']:.1f} "
        f"ms/episode] "
        f"tool {r['tool_ms_per_turn']:.2f} ms/turn (HTTP {r['tool_http_ms_per_turn']:.2f}), "
        f"{r['response_tokens']} resp tokens, {r['images_out']} images, "
        f"n={r['n']} {','.join(r['termination'])}"
    )


def _workload(r: dict[str, Any]) -> str:
    if not r["images"]:
        return "text            "
    return "images          " if r.get("group", 1) == 1 else f"images, G={r['group']:<5d}"


async def _profile(model_dir, url, queries, image_urls, qimage, results) -> None:
    turns = 50
    factory = Factory(model_dir, url, turns)
    scripts = tokenize_scripts(factory.tokenizer, [episode_calls(random.Random(7), turns, True, queries, image_urls)])
    running = asyncio.get_running_loop()
    executor = ProfilingExecutor(max_workers=4)
    running.set_default_executor(executor)
    loop = factory.build("ours", CannedResponses(scripts))
    main = cProfile.Profile()
    main.enable()
    stats = await run_episode(loop, question(row_image(qimage)), "prof")
    main.disable()
    total = stats["wall"] - stats["gen"] - stats["tool"]
    print(f"PROFILE ours images turns=50: overhead {total * 1000 / turns:.2f} ms/turn under cProfile", flush=True)
    for title, profs in (("event-loop thread", [main]), ("executor threads", executor.profiles)):
        text = _top(profs, 18, "tottime")
        print(f"-- cProfile top by tottime, {title}:\n{text}", flush=True)
        results.setdefault("profile", {})[title] = text
    text = _top([main, *executor.profiles], 25, "cumulative")
    print(f"-- cProfile top by cumulative, all threads:\n{text}", flush=True)
    results.setdefault("profile", {})["cumulative"] = text


# ---------------------------------------------------------------------------------------------- part 2/3: throughput


def _start_server(world: Path, seed: int) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--serve", "0", "--world", str(world), "--seed", str(seed)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        raise RuntimeError(f"bench server did not start: {line!r}")
    return proc, line.split("listening on ")[1].strip()


async def _server_stats(url: str, reset: bool = False) -> dict[str, Any]:
    import aiohttp

    async with aiohttp.ClientSession() as s:
        async with s.get(url + "/bench/stats", params={"reset": "1"} if reset else None) as r:
            return await r.json()


async def _warm_cache(url: str, calls: list[tuple[str, dict]]) -> None:
    """Every TextSearch of the pool once, so neither loop meets a cold server result cache."""
    from verl_ext.tools.client import shared_client

    client = shared_client(url, 120.0)
    session = await client.open_session([])
    sem = asyncio.Semaphore(64)

    async def one(name, arguments):
        async with sem:
            await client.call(session.session_id, name, arguments)

    await asyncio.gather(*(one(n, a) for n, a in calls if n == "TextSearch"))
    await client.close_session(session.session_id)


async def part_throughput(args, model_dir: Path, results: dict) -> None:
    from neos_core.world.store import World

    from verl_ext.tools.client import close_shared_clients

    world = World.load(args.world)
    queries = [p.title for p in list(world.pages.values())[:512]]
    image_urls = [i.url for i in list(world.images.values())[:256]]
    from tool_server.offline.pixels import DEFAULT_MAX_PIXELS  # noqa: F401  (server-side default, for the record)
    from PIL import Image

    qrow = row_image(Image.open(world.image_path("flag_fra")).convert("RGB"))
    proc, url = _start_server(args.world, args.seed)
    rows = results.setdefault("throughput", [])
    try:
        turns = args.throughput_turns or (5 if args.quick else 10)
        ns = args.n or ([8] if args.quick else [16, 64])
        variants = [False, True] if args.images else [False]
        factory = Factory(model_dir, url, turns)
        for images in variants:
            for n in ns:
                rng = random.Random(1000 + n + images)
                eps = [episode_calls(rng, turns, images, queries, image_urls) for _ in range(n)]
                scripts = tokenize_scripts(factory.tokenizer, eps)
                grng = random.Random(2000 + n + images)
                gen = [[_lognormal(grng.random(), GEN_MEDIAN_S, GEN_SIGMA) for _ in range(turns)] for _ in range(n)]
                ideal_each = [sum(g) + sum(tool_latency(args.seed, nm, a) for nm, a in ep) for g, ep in zip(gen, eps)]
                ideal = max(ideal_each)
                await _warm_cache(url, [c for ep in eps for c in ep])
                if n == ns[0]:  # a worker's one-time costs (catalog fetch, first-use render checks): not steady state
                    for kind in args.loops:
                        await _throughput_once(
                            factory, kind, 2, turns, images, scripts[:2], gen[:2], ideal, ideal_each[:2], url, qrow
                        )
                reps = 1
                for rep in range(reps):
                    order = ("ours", "stock") if rep % 2 == 0 else ("stock", "ours")
                    for kind in (k for k in order if k in args.loops):
                        row = await _throughput_once(
                            factory, kind, n, turns, images, scripts, gen, ideal, ideal_each, url, qrow
                        )
                        row["rep"] = rep
                        rows.append(row)
                        print(_fmt_throughput(row), flush=True)
    finally:
        await close_shared_clients()
        proc.kill()
        proc.wait()


async def _throughput_once(factory, kind, n, turns, images, scripts, gen, ideal, ideal_each, url, qrow):
    import gc

    client = CannedResponses(scripts, gen)
    loops = [factory.build(kind, client) for _ in range(n)]
    prompts = [question(qrow if images else None) for _ in range(n)]
    gc.collect()
    await _server_stats(url, reset=True)
    cpu0, loop_cpu0 = time.process_time(), time.thread_time()
    start = time.perf_counter()
    stats = await asyncio.gather(
        *(run_episode(loop, prompt, f"u{k}", k) for k, (loop, prompt) in enumerate(zip(loops, prompts)))
    )
    makespan = time.perf_counter() - start
    cpu, loop_cpu = time.process_time() - cpu0, time.thread_time() - loop_cpu0
    server = await _server_stats(url)
    assert client.calls == n * turns, (kind, client.calls, n * turns)
    busy = sum(s["wall"] for s in stats)
    driver = sum(s["wall"] - s["gen"] - s["tool"] for s in stats)
    return {
        "loop": kind,
        "n": n,
        "turns": turns,
        "images": images,
        "makespan_s": makespan,
        "ideal_s": ideal,
        "efficiency": ideal / makespan,
        "episodes_per_s": n / makespan,
        "mean_in_flight": busy / makespan,
        "ideal_mean_in_flight": sum(ideal_each) / ideal,
        "mean_in_driver": driver / makespan,
        "driver_ms_per_turn": driver / (n * turns) * 1000,
        "tool_wait_over_drawn": sum(s["tool"] for s in stats) / sum(i - sum(g) for i, g in zip(ideal_each, gen)),
        "http_over_drawn": sum(s.get("http", 0) for s in stats) / sum(i - sum(g) for i, g in zip(ideal_each, gen)),
        "server_mean_in_flight_calls": server["area"] / makespan,
        "server_max_in_flight_calls": server["max"],
        "driver_cpu_s": cpu,
        "event_loop_cpu_s": loop_cpu,  # the one thread every episode's async work shares
    }


def _fmt_throughput(r: dict[str, Any]) -> str:
    return (
        f"THROUGHPUT {r['loop']:5s} {'images' if r['images'] else 'text  '} N={r['n']:<3d} turns={r['turns']} "
        f"makespan {r['makespan_s']:.2f} s vs ideal {r['ideal_s']:.2f} s -> efficiency {r['efficiency'] * 100:.1f}% "
        f"({r['episodes_per_s']:.1f} episodes/s); in flight {r['mean_in_flight']:.1f} of N (ideal "
        f"{r['ideal_mean_in_flight']:.1f}), {r['mean_in_driver']:.1f} in driver; driver {r['driver_ms_per_turn']:.2f} "
        f"ms/turn; tool time / drawn {r['tool_wait_over_drawn']:.2f}x (HTTP part {r['http_over_drawn']:.2f}x); "
        f"server calls in flight mean {r['server_mean_in_flight_calls']:.1f} max {r['server_max_in_flight_calls']}; "
        f"driver CPU {r['driver_cpu_s']:.1f} s "
        f"(event-loop thread {r['event_loop_cpu_s']:.1f} s)"
    )


# ---------------------------------------------------------------------------------------------- main


def _ratios(results: dict) -> str:
    parts = []
    over = {
        (r["loop"], r["turns"], r["images"]): r["overhead_ms_per_turn"]
        for r in results.get("overhead", [])
        if r.get("group", 1) == 1
    }
    for (loop, turns, images), v in sorted(over.items()):
        if loop == "ours" and ("stock", turns, images) in over:
            parts.append(f"overhead T={turns}{'+img' if images else ''} {v / over[('stock', turns, images)]:.2f}x")
    thr: dict[tuple, dict[str, list[float]]] = {}
    for r in results.get("throughput", []):
        thr.setdefault((r["n"], r["images"]), {}).setdefault(r["loop"], []).append(r["episodes_per_s"])
    for (n, images), d in sorted(thr.items()):
        if "ours" in d and "stock" in d:
            ratio = statistics.median(d["ours"]) / statistics.median(d["stock"])
            parts.append(f"throughput N={n}{'+img' if images else ''} {ratio:.2f}x")
    head = "RATIOS ours / stock ToolAgentLoop (overhead: lower is better; throughput: higher is better): "
    return head + ", ".join(parts)


LOOPS = ("ours", "stock")


def _loops(text: str) -> list[str]:
    loops = [k.strip() for k in text.split(",") if k.strip()]
    if not loops or set(loops) - set(LOOPS):
        raise argparse.ArgumentTypeError(f"expected a comma-separated subset of {','.join(LOOPS)}, got {text!r}")
    return loops


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python bench/bench_rollout.py", description="Rollout-worker benchmark: driver overhead "
                      "per turn and throughput against the ideal of our agent loop, beside stock verl's ToolAgentLoop "
                      "on the same workload; prints the ratios ours / stock.")
    p.add_argument("--part", choices=["overhead", "throughput", "all"], default="all",
                   help="which measurement (default: all)")
    p.add_argument("--quick", action="store_true", help="fewer turns, repetitions and episodes (< 60 s)")
    p.add_argument("--world", type=Path, default=ROOT / "worlds" / "small", metavar="DIR",
                   help="a built small world (default: worlds/small of the checkout)")
    p.add_argument("--profile", action="store_true", help="cProfile a 50-turn image episode of our loop")
    p.add_argument("--reps", type=positive_int, default=None, metavar="N",
                   help="overhead: episodes per loop and workload, after one warm-up (default: 3; --quick 2)")
    p.add_argument("--n", type=int_list, default=None, metavar="N,N",
                   help="throughput: concurrent episodes, comma-separated (default: 16,64; --quick 8)")
    p.add_argument("--throughput-turns", type=positive_int, default=None, metavar="N",
                   help="throughput: turns per episode (default: 10; --quick 5)")
    p.add_argument("--images", action="store_true", help="throughput: also the image workload")
    p.add_argument("--loops", type=_loops, default=list(LOOPS), metavar="ours,stock",
                   help="which loops, comma-separated; stock alone takes minutes at N=256 (default: ours,stock)")
    p.add_argument("--group-size", type=positive_int, default=8, metavar="G",
                   help="overhead: rollouts per question in the image workload with sharing (GRPO's G; Neos uses 8) "
                   "(default: 8)")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the drawn tool latencies (default: 0)")
    p.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write all results here")
    p.add_argument("--torch-threads", type=positive_int, default=1, metavar="N",
                   help="torch intra-op threads of the driver, as in verl's agent-loop workers: Ray actors without "
                   "num_cpus run with OMP_NUM_THREADS=1 (default: 1)")
    p.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)  # the tool-server subprocess: its port
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.serve is not None:
        _serve(args.serve, args.world, args.seed)
        return 0
    if not (args.world / "manifest.json").is_file():
        p.error(f"--world: no world at {args.world}: python -m data_gen.world build --size small --out {args.world}")

    import logging

    import torch

    # The image processor's small tensor ops (resize, normalize, patchify of one observation image) are what an image
    # turn costs; with intra-op threads on a busy 2-core box they take 5-15x longer than on one thread.
    torch.set_num_threads(args.torch_threads)
    logging.disable(logging.WARNING)  # verl warns per call about things the bench does on purpose
    import verl  # noqa: F401  (loads our plugins: registers neos_search_agent)
    import verl.experimental.agent_loop.tool_agent_loop  # noqa: F401  (registers tool_agent)

    from verl_ext.models.tiny_vl import cached_tiny_qwen_vl

    model_dir = cached_tiny_qwen_vl()
    _instrument()
    results: dict[str, Any] = {
        "cpus": os.cpu_count(), "torch_threads": args.torch_threads, "load_avg_start": os.getloadavg()
    }
    t0 = time.perf_counter()

    async def run() -> None:
        if args.part in ("overhead", "all"):
            await part_overhead(args, model_dir, results)
        if args.part in ("throughput", "all"):
            await part_throughput(args, model_dir, results)

    asyncio.run(run())
    results["load_avg_end"] = os.getloadavg()
    results["seconds"] = time.perf_counter() - t0
    print(_ratios(results), flush=True)
    print(f"done in {results['seconds']:.0f} s; load average {results['load_avg_start']} -> {results['load_avg_end']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
