"""Tool-server benchmark: throughput/latency per tool, a FastAPI baseline, asyncio vs uvloop, RSS and cache hit
rates of a replay.

    PYTHONPATH=. .venv/bin/python bench/bench_tool_server.py --part all [--quick] [--world worlds/small]
        [--full-world worlds/full]

Servers run as subprocesses pinned to CPU 0; this process (the load generator: keep-alive HTTP/1.1 connections, one
request in flight each, see :class:`Connection`) pins itself to CPU 1, so the two cores are split server/client.
All traffic stays on loopback (127.0.0.1; the attack part's attacker connects from 127.0.0.2); every phase is
bounded by a request count and a duration. ``--serve-baseline`` / ``--serve-trivial`` are the internal entry points
of the comparison servers:

* baseline: FastAPI + uvicorn (Search-R1 ``retrieval_server.py`` style: a sync ``def`` endpoint on the threadpool,
  pydantic request model) doing the same BM25 search with our :class:`PageIndex` over the same world;
* trivial: an aiohttp handler returning a constant JSON body (the serving-stack ceiling).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

from neos_core.ports import free_local_port  # noqa: E402
from neos_core.usage import OneLineParser, int_list, positive_int, subset  # noqa: E402  (PYTHONPATH=. as above)
from tool_server.loop import run, uvloop_available  # noqa: E402  (PYTHONPATH=. as in the command above)

LOOP = "asyncio"  # set by main(): the event loop of every server and of the load generator


# ---------------------------------------------------------------------------------------------- comparison servers
def serve_baseline(world_dir: Path, port: int, loop: str) -> None:
    import uvicorn
    from fastapi import FastAPI
    from pydantic import BaseModel

    from neos_core.world.store import World
    from tool_server.offline.lexical import PageIndex

    world = World.load(world_dir)
    index = PageIndex(list(world.pages.values()))
    app = FastAPI()

    class Query(BaseModel):
        query: list[str]
        topk: int = 10

    globals()["Query"] = Query  # FastAPI resolves the (postponed) annotation below in the module namespace

    @app.post("/retrieve")
    def retrieve(req: Query):  # sync def -> starlette threadpool, as in Search-R1's retrieval server
        out = []
        for q in req.query:
            hits = index.search(q, req.topk)
            out.append(
                {
                    "query": q,
                    "results": [
                        {"title": h.page.title, "url": h.page.url, "snippet": h.snippet, "score": h.score} for h in hits
                    ],
                }
            )
        return {"result": out}

    print(f"baseline listening on http://127.0.0.1:{port}", flush=True)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, loop=loop)


def serve_trivial(port: int, loop: str) -> None:
    from aiohttp import web

    from tool_server.loop import run

    body = json.dumps({"text": "ok", "images": [], "records": [], "mei": [], "cached": False}).encode()

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_post("/call", handler)
    async def serve() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        print(f"trivial listening on http://127.0.0.1:{port}", flush=True)
        await asyncio.Event().wait()

    run(serve(), use_uvloop=loop == "uvloop")


# ---------------------------------------------------------------------------------------------- process control
class Server:
    def __init__(self, argv: list[str], cpu: int | None, *, name: str, timeout: float = 600) -> None:
        pre = ["taskset", "-c", str(cpu)] if cpu is not None else []
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.name = name
        self.proc = subprocess.Popen(pre + argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
        deadline = time.time() + timeout
        line = ""
        while time.time() < deadline:
            line = self.proc.stdout.readline().decode()
            if "listening on " in line or not line:
                break
        if "listening on " not in line:
            self.proc.kill()
            raise SystemExit(f"{name} did not start")
        self.base = line.split("listening on ", 1)[1].split()[0]
        global SERVER_PID
        SERVER_PID = self.proc.pid  # taskset execs the server, so this is the server's pid
        host, port = self.base.rsplit("/", 1)[1].rsplit(":", 1)
        import socket

        while time.time() < deadline:  # uvicorn/aiohttp bind after the line is printed: wait for the port
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)

    def rss(self) -> dict[str, int]:
        out = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS", "VmHWM")):
                out[line.split(":")[0]] = int(line.split()[1]) * 1024
        return out

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_ours(world: Path, cpu: int | None, *extra: str) -> Server:
    return Server(
        [
            sys.executable,
            "-m",
            "tool_server",
            "--world",
            str(world),
            "--port",
            "0",
            "--no-ocr",
            "--log-level",
            "WARNING",
            *(["--no-uvloop"] if LOOP == "asyncio" else []),
            "--mei-log",  # keep the MEI call log out of the working tree
            str(Path(tempfile.gettempdir()) / f"bench_tool_server_mei_{os.getpid()}.jsonl"),
            *extra,
        ],
        cpu,
        name="tool_server",
    )


def start_baseline(world: Path, cpu: int | None) -> Server:
    port = free_local_port()
    return Server(
        [sys.executable, str(Path(__file__).resolve()), "--serve-baseline", "--world", str(world), "--port", str(port),
         "--loop", LOOP],
        cpu,
        name="baseline",
    )


def start_trivial(cpu: int | None) -> Server:
    port = free_local_port()
    return Server(
        [sys.executable, str(Path(__file__).resolve()), "--serve-trivial", "--port", str(port), "--loop", LOOP],
        cpu,
        name="trivial",
    )


# ---------------------------------------------------------------------------------------------- load generation
def _pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


def cpu_s(pid: int | None, *, children: bool = True) -> float:
    """utime + stime of a process, its threads and (``children``) every process under it (workers, search
    processes), in seconds (0 when unknown); children that exited are in their parent's cutime/cstime."""
    if pid is None:
        return 0.0
    if not children:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    stats: dict[int, list[str]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            stats[int(stat.parent.name)] = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # exited meanwhile
            continue
    tree, total = {pid}, 0
    while grown := {p for p, f in stats.items() if int(f[1]) in tree and p not in tree}:
        tree |= grown
    for p in tree & stats.keys():
        f = stats[p]
        total += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
    return total / os.sysconf("SC_CLK_TCK")


SERVER_PID: int | None = None  # the server under test, for CPU time per request


class Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection issuing one request at a time (like a ``wrk`` connection).

    A bare asyncio protocol: an aiohttp ``ClientSession`` made the client core the bottleneck (cached TextSearch
    capped near 570 req/s with the server core mostly idle), and asyncio streams still cost a StreamReader, a
    ``readuntil`` and a ``readexactly`` per answer. Answers must carry ``Content-Length`` (all three servers send it).
    """

    def __init__(self, host: str) -> None:
        self._host = host
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._answer: asyncio.Future[tuple[int, bytes]] | None = None

    @classmethod
    async def open(cls, base: str, local: str | None = None) -> Connection:
        """``local``: the loopback address to connect from (another client to the server's per-client quotas)."""
        host, port = base.rsplit("/", 1)[1].rsplit(":", 1)
        _, conn = await asyncio.get_running_loop().create_connection(
            lambda: cls(f"{host}:{port}"), host, int(port), local_addr=(local, 0) if local else None
        )
        return conn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._buf += data
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            return
        length = re.search(rb"(?im)^content-length:\s*(\d+)", self._buf[:end])
        if length is None:
            self._answer.set_exception(RuntimeError(f"answer without Content-Length: {bytes(self._buf[:200])!r}"))
            return
        size = end + 4 + int(length.group(1))
        if len(self._buf) >= size and self._answer is not None and not self._answer.done():
            self._answer.set_result((int(self._buf[9:12]), bytes(self._buf[end + 4 : size])))
            del self._buf[:size]

    def connection_lost(self, exc: Exception | None) -> None:
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(exc or ConnectionError("connection closed"))

    async def post(self, path: str, body: dict | bytes) -> tuple[int, bytes]:
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        self._answer = asyncio.get_running_loop().create_future()
        self._transport.write(
            b"POST %b HTTP/1.1\r\nHost: %b\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
            % (path.encode(), self._host.encode(), len(payload), payload)
        )
        return await self._answer

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


def failure_class(status: int, body: bytes) -> str:
    """A failed call's class for the reports: ``<status> <error type>`` from our JSON error body (``<status>`` alone
    for another body)."""
    try:
        return f"{status} {json.loads(body)['error']['type']}"
    except (ValueError, KeyError, TypeError):
        return str(status)


async def drive(base: str, concurrency: int, total: int, max_s: float, make, setup=None) -> dict:
    """``concurrency`` workers, one :class:`Connection` to ``base`` each, issue ``total`` requests in all (or stop
    after ``max_s``). ``make(worker, i, state)`` returns (path, json body); ``setup(worker)`` returns per-worker state
    (e.g. a session id), awaited first."""
    states = await asyncio.gather(*(setup(w) for w in range(concurrency))) if setup else [None] * concurrency
    conns = await asyncio.gather(*(Connection.open(base) for _ in range(concurrency)))
    lat: list[float] = []
    failures: Counter[str] = Counter()
    counter = iter(range(total))
    deadline = time.perf_counter() + max_s

    is_async = asyncio.iscoroutinefunction(make)

    async def worker(w: int) -> None:
        state, conn = states[w], conns[w]
        for i in counter:
            if time.perf_counter() > deadline:
                return
            path, body = await make(w, i, state) if is_async else make(w, i, state)
            t0 = time.perf_counter()
            status, answer = await conn.post(path, body)
            lat.append(time.perf_counter() - t0)
            if status != 200:
                failures[failure_class(status, answer)] += 1

    t0, c0, me0 = time.perf_counter(), cpu_s(SERVER_PID), cpu_s(os.getpid(), children=False)
    try:
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
    finally:
        for conn in conns:
            conn.close()
    wall, cpu, me = time.perf_counter() - t0, cpu_s(SERVER_PID) - c0, cpu_s(os.getpid(), children=False) - me0
    return {
        "n": len(lat),
        "errors": sum(failures.values()),
        "failures": dict(failures),
        "rps": len(lat) / wall if wall else 0.0,
        "p50_ms": _pct(lat, 50) * 1e3,
        "p99_ms": _pct(lat, 99) * 1e3,
        "wall_s": wall,
        "cpu_ms_per_req": cpu / len(lat) * 1e3 if lat else float("nan"),
        "client_cpu_ms_per_req": me / len(lat) * 1e3 if lat else float("nan"),
    }


class Workload:
    """Arguments per tool; ``uncached`` draws never-repeated arguments, ``cached`` cycles over a small set."""

    def __init__(self, world_dir: Path) -> None:
        pages = [json.loads(line) for line in (world_dir / "pages.jsonl").open()]
        images = [json.loads(line) for line in (world_dir / "images.jsonl").open()]
        self.titles = [p["title"] for p in pages]
        self.page_urls = [p["url"] for p in pages]
        self.image_urls = [im["url"] for im in images]
        self.image_captions = [im["caption"] or im["alt"] or im["id"] for im in images]
        self._n = 0  # global counter: uncached arguments never repeat across phases

    def fresh(self) -> int:
        self._n += 1
        return self._n

    def title_query(self, k: int) -> str:
        n = len(self.titles)
        # distinct for every k: the pair (k mod n, k div n) is unique, spelled with a counter suffix word
        return f"{self.titles[k % n]} {self.titles[(k * 7 + k // n) % n]} v{k}"

    def args(self, tool: str, cached: bool, i: int) -> dict:
        k = i % 8 if cached else self.fresh()
        if tool == "TextSearch":
            return {"query": [self.titles[k] if cached else self.title_query(k)]}
        if tool == "WebVisit":
            url = self.page_urls[k % len(self.page_urls)]
            return {"url": [url], "goal": f"what is {self.titles[k % len(self.titles)]}" + ("" if cached else f" #{k}")}
        if tool == "ImageSearch":
            cap = self.image_captions[k % len(self.image_captions)]
            return {"query": [cap if cached else f"{cap} {self.title_query(k)}"], "goal": f"image of {cap}"}
        if tool == "ReverseImageSearch":
            return {
                "image_url": [self.image_urls[k % len(self.image_urls)]],
                "goal": "identify" + ("" if cached else f" #{k}"),
            }
        if tool == "FetchImage":
            return {"urls": [self.image_urls[k % len(self.image_urls)]]}
        if tool == "CropImage":
            a = (k * 37) % 400
            return {"crop_config": {"img_1": [a, a // 2, a + 500, a // 2 + 500]}}
        raise KeyError(tool)


TOOLS = ("TextSearch", "WebVisit", "ImageSearch", "FetchImage", "CropImage", "ReverseImageSearch")
NOT_CACHED = {"FetchImage", "CropImage"}  # not result-cached by design (they change the visual register)


async def _session(http, images: list[str] | None = None, group_id: str | None = None) -> str:
    body: dict = {"images": images or []}
    if group_id is not None:
        body["group_id"] = group_id
    async with http.post("/v1/sessions", json=body) as r:
        return (await r.json())["session_id"]


async def _wait_features(http, max_s: float = 900) -> None:
    t0 = time.time()
    while time.time() - t0 < max_s:
        async with http.get("/healthz") as r:
            if (await r.json())["features_ready"]:
                return
        await asyncio.sleep(0.5)


async def ours_tool(
    http, base: str, wl: Workload, tool: str, cached: bool, conc: int, total: int, max_s: float
) -> dict:
    sessions: dict[int, list] = {}
    register_tools = tool in ("FetchImage", "CropImage")

    async def setup(w: int):
        img = [wl.image_urls[w % len(wl.image_urls)]] if tool == "CropImage" else None
        sessions[w] = [await _session(http, img), 0, img]
        return sessions[w]

    async def make(w: int, i: int, st):
        st[1] += 1
        if register_tools and st[1] % 200 == 0:  # the register holds 512 images: start a fresh session now and then
            async with http.delete(f"/v1/sessions/{st[0]}"):
                pass
            st[0] = await _session(http, st[2])
        return f"/v1/sessions/{st[0]}/call", {"name": tool, "arguments": wl.args(tool, cached, i)}

    if cached and tool not in NOT_CACHED:  # warm the small repeated set first
        sid = await _session(http)
        for i in range(8):
            async with http.post(f"/v1/sessions/{sid}/call", json={"name": tool, "arguments": wl.args(tool, True, i)}):
                pass
    return await drive(base, conc, total, max_s, make, setup)


def _counts(quick: bool, conc: int, tool: str, cached: bool) -> tuple[int, float]:
    heavy = tool in ("ReverseImageSearch", "WebVisit", "ImageSearch")
    if conc == 1:
        n = 100 if quick else 400
    elif conc == 64:
        n = 400 if quick else 3000
    else:
        n = 1536 if quick else 4608
    if heavy and conc > 1:
        n //= 2
    if tool == "ReverseImageSearch" and not cached and conc > 1:
        n = min(n, 128 if quick else 256)
    return n, (8.0 if quick else 30.0)


def _fmt(r: dict) -> str:
    return (
        f"{r['rps']:8.0f} req/s  p50 {r['p50_ms']:7.1f} ms  p99 {r['p99_ms']:7.1f} ms  server CPU "
        f"{r['cpu_ms_per_req']:6.3f} ms/req, client {r['client_cpu_ms_per_req']:5.3f}  (n={r['n']}, err={r['errors']}"
        + "".join(f", {k}: {v}" for k, v in sorted(r.get("failures", {}).items()))
        + ")"
    )


async def part_throughput(args, wl: Workload) -> list[dict]:
    import aiohttp

    rows = []
    srv = start_ours(args.world, 0)
    try:
        async with aiohttp.ClientSession(base_url=srv.base, connector=aiohttp.TCPConnector(limit=0)) as http:
            await _wait_features(http)
            for tool in TOOLS:
                for cached in (False, True):
                    if cached and tool in NOT_CACHED:
                        continue
                    for conc in args.concurrency:
                        if tool == "ReverseImageSearch" and not cached and conc > 64:
                            # ~0.1-0.5 s of ORB matching per uncached call: 768 in flight would run for minutes
                            print(f"{tool:19s} uncached c={conc:<4d} skipped (CPU-bound, see c=64)", flush=True)
                            continue
                        n, max_s = _counts(args.quick, conc, tool, cached)
                        r = await ours_tool(http, srv.base, wl, tool, cached, conc, n, max_s)
                        r.update(tool=tool, cached=cached, conc=conc)
                        rows.append(r)
                        print(f"{tool:19s} {'cached' if cached else 'uncached':8s} c={conc:<4d} {_fmt(r)}", flush=True)
    finally:
        srv.stop()
    return rows


async def part_baseline(args, wl: Workload) -> dict:
    import aiohttp

    conc = 64
    n, max_s = (600, 10.0) if args.quick else (3000, 40.0)

    async def run(base: str, kind: str) -> dict:
        async with aiohttp.ClientSession(base_url=base, connector=aiohttp.TCPConnector(limit=0)) as http:
            if kind == "ours":
                await _wait_features(http)
                sid = await _session(http)
                for i in range(8):
                    async with http.post(
                        f"/v1/sessions/{sid}/call",
                        json={"name": "TextSearch", "arguments": wl.args("TextSearch", True, i)},
                    ):
                        pass
                path = f"/v1/sessions/{sid}/call"
                # the repeated requests are encoded once, as a wrk script would send them (the trivial phase too)
                repeated = [
                    json.dumps({"name": "TextSearch", "arguments": wl.args("TextSearch", True, i)}).encode()
                    for i in range(8)
                ]
                uncached = await drive(
                    base,
                    conc,
                    n,
                    max_s,
                    lambda w, i, st: (path, {"name": "TextSearch", "arguments": wl.args("TextSearch", False, i)}),
                )
                cached = await drive(base, conc, 4 * n, max_s, lambda w, i, st: (path, repeated[i % 8]))
                return {"uncached": uncached, "cached": cached}
            if kind == "baseline":
                return {
                    "uncached": await drive(
                        base, conc, n, max_s, lambda w, i, st: ("/retrieve", wl.args("TextSearch", False, i))
                    )
                }
            constant = json.dumps({"name": "TextSearch", "arguments": {}}).encode()
            return {"trivial": await drive(base, conc, 4 * n, max_s, lambda w, i, st: ("/call", constant))}

    rounds: list[dict] = []
    for r in range(args.repeat):  # rounds interleave the servers, so a burst of foreign load hits all of them alike
        out = {}
        for kind, start in (
            ("ours", lambda: start_ours(args.world, 0)),
            ("baseline", lambda: start_baseline(args.world, 0)),
            ("trivial", lambda: start_trivial(0)),
        ):
            srv = start()
            try:
                out[kind] = await run(srv.base, kind)
            finally:
                srv.stop()
            for k, res in out[kind].items():
                print(f"round {r + 1}/{args.repeat} {kind:9s} {k:8s} c={conc} {_fmt(res)}", flush=True)
        rounds.append(out)
    # per figure, the median over rounds
    out = {
        kind: {k: {m: statistics.median(rd[kind][k][m] for rd in rounds) for m in res} for k, res in phases.items()}
        for kind, phases in rounds[0].items()
    }
    ours, base = out["ours"]["uncached"], out["baseline"]["uncached"]
    rps_ratio, p99_ratio = ours["rps"] / base["rps"], ours["p99_ms"] / base["p99_ms"]
    cached_rps, trivial_rps = out["ours"]["cached"]["rps"], out["trivial"]["trivial"]["rps"]
    cpu = {
        k: out[a][b]["cpu_ms_per_req"]
        for k, a, b in (
            ("ours_uncached", "ours", "uncached"),
            ("ours_cached", "ours", "cached"),
            ("baseline", "baseline", "uncached"),
            ("trivial", "trivial", "trivial"),
        )
    }
    cpu_ratios = {
        "uncached_vs_baseline": cpu["baseline"] / cpu["ours_uncached"],
        "cached_vs_trivial": cpu["ours_cached"] / cpu["trivial"],
    }
    print(
        "server CPU ms/req (load-independent; 1000/x = req/s on one dedicated core): "
        + ", ".join(f"{k} {v:.3f}" for k, v in cpu.items())
        + f"; baseline / ours uncached {cpu_ratios['uncached_vs_baseline']:.2f}x, ours cached / trivial "
        f"{cpu_ratios['cached_vs_trivial']:.2f}x",
        flush=True,
    )
    print(
        f"RATIOS c=64 (medians of {args.repeat} rounds): uncached TextSearch {rps_ratio:.2f}x baseline req/s "
        f"(goal >=2), p99 {p99_ratio:.2f}x baseline (goal <=0.5); cached TextSearch {cached_rps:.0f} req/s "
        f"(goal >=5000); trivial ceiling {trivial_rps:.0f} req/s",
        flush=True,
    )
    out["ratios"] = {
        "rps_ratio": rps_ratio,
        "p99_ratio": p99_ratio,
        "cached_rps": cached_rps,
        "trivial_rps": trivial_rps,
        "cpu_ms_per_req": cpu,
        "cpu_ratios": cpu_ratios,
    }
    out["rounds"] = rounds
    return out


def part_loops(args, wl: Workload) -> dict:
    """Server and client CPU per request of cached TextSearch and of the trivial handler under asyncio's loop and
    uvloop, alternating phase by phase (``--repeat`` rounds), so both loops meet the same foreign load."""
    global LOOP
    conc, n, max_s = 64, 40_000, 8.0
    constant = json.dumps({"name": "TextSearch", "arguments": {}}).encode()
    repeated = [
        json.dumps({"name": "TextSearch", "arguments": wl.args("TextSearch", True, i)}).encode() for i in range(8)
    ]

    async def ours(base: str) -> dict:
        import aiohttp

        async with aiohttp.ClientSession(base_url=base) as http:
            await _wait_features(http)
            sid = await _session(http)
            for body in repeated:  # warm the 8 entries
                async with http.post(f"/v1/sessions/{sid}/call", data=body):
                    pass
        return await drive(base, conc, n, max_s, lambda w, i, st: (f"/v1/sessions/{sid}/call", repeated[i % 8]))

    rows: dict[str, list[dict]] = {}
    for r in range(args.repeat):
        for LOOP in ("asyncio", "uvloop"):
            for kind in ("ours", "trivial"):
                srv = start_ours(args.world, 0) if kind == "ours" else start_trivial(0)
                try:
                    phase = ours(srv.base) if kind == "ours" else drive(
                        srv.base, conc, n, max_s, lambda w, i, st: ("/call", constant)
                    )
                    res = run(phase, use_uvloop=LOOP == "uvloop")
                finally:
                    srv.stop()
                rows.setdefault(f"{kind} {LOOP}", []).append(res)
                print(f"round {r + 1}/{args.repeat} {kind:7s} {LOOP:7s} c={conc} {_fmt(res)}", flush=True)
    out = {
        key: {m: statistics.median(x[m] for x in rs) for m in ("rps", "cpu_ms_per_req", "client_cpu_ms_per_req")}
        for key, rs in rows.items()
    }
    print(
        f"LOOPS (medians of {args.repeat} rounds, server / client CPU ms per request): "
        + "; ".join(f"{k} {v['cpu_ms_per_req']:.3f} / {v['client_cpu_ms_per_req']:.3f}" for k, v in out.items()),
        flush=True,
    )
    return out


async def part_rss(args, wl_unused) -> dict:
    import aiohttp

    world = args.full_world if args.full_world and (args.full_world / "manifest.json").is_file() else args.world
    wl = Workload(world)
    t0 = time.time()
    srv = start_ours(world, 0)
    try:
        async with aiohttp.ClientSession(base_url=srv.base, connector=aiohttp.TCPConnector(limit=0)) as http:
            start_rss = srv.rss()
            await _wait_features(http)
            ready_s = time.time() - t0
            for tool in TOOLS:  # warm-up: every tool, uncached, 64 at a time
                await ours_tool(http, srv.base, wl, tool, False, 16, 64 if args.quick else 256, 30)
            rss = srv.rss()
    finally:
        srv.stop()
    out = {
        "world": str(world.name),
        "pages": len(wl.titles),
        "images": len(wl.image_urls),
        "ready_s": ready_s,
        "rss_at_listen": start_rss.get("VmRSS", 0),
        **rss,
    }
    print(
        f"RSS world={out['world']} ({out['pages']} pages, {out['images']} images): at listen "
        f"{out['rss_at_listen'] / 2**20:.0f} MiB, after warm-up VmRSS {rss['VmRSS'] / 2**20:.0f} MiB, VmHWM "
        f"{rss['VmHWM'] / 2**20:.0f} MiB (goal < 2048 MiB); features ready after {ready_s:.0f} s",
        flush=True,
    )
    return out


def _cache_events(text: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for m in re.finditer(r'cache_events_total\{level="(\w+)",event="(\w+)"\} ([\d.e+]+)', text):
        out.setdefault(m.group(1), {})[m.group(2)] = float(m.group(3))
    return out


async def part_replay(args, wl: Workload) -> dict:
    """Rollout-like replay: G groups x 8 sessions (one question per group); each session issues T turns of
    TextSearch / WebVisit drawn from its group's pool of plausible queries/pages, so group members overlap."""
    import random
    import tempfile

    import aiohttp

    groups, per_group, turns = (4, 8, 6) if args.quick else (16, 8, 8)
    rng = random.Random(0)
    plan = []
    for g in range(groups):
        topic = rng.randrange(len(wl.titles))
        q_pool = [wl.titles[(topic + j) % len(wl.titles)] + suffix for j in range(3) for suffix in ("", " history")]
        u_pool = [wl.page_urls[(topic + j) % len(wl.page_urls)] for j in range(4)]
        for s in range(per_group):
            calls = []
            for _t in range(turns):
                if rng.random() < 0.6:
                    calls.append(("TextSearch", {"query": [rng.choice(q_pool)]}))
                else:
                    calls.append(("WebVisit", {"url": [rng.choice(u_pool)], "goal": f"facts about {wl.titles[topic]}"}))
            plan.append((f"g{g}", calls))
    results = {}
    with tempfile.TemporaryDirectory() as cache_dir:
        for phase in ("cold", "restart"):  # restart: same disk cache, empty memory level
            srv = start_ours(args.world, 0, "--cache-dir", cache_dir)
            try:
                async with aiohttp.ClientSession(base_url=srv.base) as http:
                    sids = [await _session(http, group_id=g) for g, _ in plan]

                    async def one(sid: str, calls) -> None:
                        for name, a in calls:
                            async with http.post(f"/v1/sessions/{sid}/call", json={"name": name, "arguments": a}) as r:
                                await r.read()

                    await asyncio.gather(*(one(sid, calls) for sid, (_, calls) in zip(sids, plan)))
                    async with http.get("/metrics") as r:
                        text = await r.text()
                    ev = _cache_events(text)
                    coalesced = int(re.search(r"^cache_coalesced_total (\d+)", text, re.MULTILINE).group(1))
            finally:
                srv.stop()
            rates = {lv: s.get("hits", 0) / max(1, s.get("hits", 0) + s.get("misses", 0)) for lv, s in ev.items()}
            total = groups * per_group * turns
            served = ev.get("memory", {}).get("hits", 0) + ev.get("disk", {}).get("hits", 0)
            computed = int(total - served - coalesced)  # calls whose tool actually ran
            results[phase] = {
                "events": ev,
                "rates": rates,
                "calls": total,
                "overall": served / total,
                "coalesced": coalesced,
                "computed": computed,
            }
            print(
                f"replay {phase:7s} {groups} groups x {per_group} sessions x {turns} calls = {total}: "
                + ", ".join(
                    f"{lv} {ev[lv].get('hits', 0):.0f}/{ev[lv].get('hits', 0) + ev[lv].get('misses', 0):.0f}"
                    f" = {rates[lv]:.1%}"
                    for lv in ev
                )
                + f"; served from cache {served / total:.1%}; coalesced with a concurrent identical call "
                f"{coalesced}; computed {computed}",
                flush=True,
            )
    return results


def tree_pss(pid: int) -> int:
    """Proportional set size (bytes) of a process and its children: pages shared copy-on-write counted once."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if stat.parent.name != str(pid) and fields[1] != str(pid):
                continue
            rollup = (stat.parent / "smaps_rollup").read_text()
        except OSError:
            continue
        total += int(re.search(r"^Pss:\s+(\d+) kB", rollup, re.MULTILINE).group(1)) * 1024
    return total


MIX = (  # a rollout-like mix of one turn's tool: weights out of 20
    ("TextSearch", 8),
    ("WebVisit", 4),
    ("FetchImage", 3),
    ("CropImage", 2),
    ("ImageSearch", 2),
    ("ReverseImageSearch", 1),
)


def paper_round(cpu_ms_per_call: list[float], rollouts: int, turns: list[int], within_s: float = 60.0) -> dict:
    """The tool server's CPU in one paper-scale round (``rollouts`` x each of ``turns`` tool calls) at the median of the
    measured server CPU per call, and the free cores that keep it within ``within_s`` of wall time."""
    ms = statistics.median(cpu_ms_per_call)
    out = {"rollouts": rollouts, "server_cpu_ms_per_call": ms, "range_ms": (min(cpu_ms_per_call), max(cpu_ms_per_call))}
    for t in turns:
        cpu = rollouts * t * ms / 1e3
        out[f"{t}_turns"] = {
            "calls": rollouts * t, "cpu_s": cpu, f"cores_within_{within_s:g}s": math.ceil(cpu / within_s)
        }
    return out


async def part_scale(args, wl: Workload) -> dict:
    """The rollout-like mix (``MIX``, uncached arguments) at 64/256/1,024 sessions, one connection and one call in
    flight each, against 1/2/4 workers: p50/p99 per tool, PSS of the server's processes, CPU per call of the server
    (with its children) and of the load generator."""
    import random

    import aiohttp

    turns = 3 if args.quick else 8
    tools = [t for t, w in MIX for _ in range(w)]
    out = {}
    for workers in args.workers:
        srv = start_ours(args.world, None, "--workers", str(workers))  # on both cores
        try:
            async with aiohttp.ClientSession(base_url=srv.base, connector=aiohttp.TCPConnector(limit=0)) as http:
                await _wait_features(http)
                for sessions in args.sessions:
                    rng = random.Random(sessions)
                    lat: dict[str, list[float]] = {t: [] for t, _ in MIX}
                    failures: Counter[str] = Counter()
                    conns = await asyncio.gather(*(Connection.open(srv.base) for _ in range(sessions)))
                    sids = [await _session(http, [wl.image_urls[i % len(wl.image_urls)]]) for i in range(sessions)]

                    async def episode(conn: Connection, sid: str) -> None:
                        for _ in range(turns):
                            tool = rng.choice(tools)
                            body = {"name": tool, "arguments": wl.args(tool, False, 0)}
                            t0 = time.perf_counter()
                            try:
                                status, answer = await conn.post(f"/v1/sessions/{sid}/call", body)
                            except (OSError, RuntimeError) as e:  # the connection itself failed: no later calls
                                failures[f"connection {type(e).__name__}"] += 1
                                return
                            lat[tool].append(time.perf_counter() - t0)
                            if status != 200:
                                failures[f"{tool}: {failure_class(status, answer)}"] += 1

                    t0, c0, me0 = time.perf_counter(), cpu_s(SERVER_PID), cpu_s(os.getpid(), children=False)
                    await asyncio.gather(*(episode(c, s) for c, s in zip(conns, sids)))
                    wall = time.perf_counter() - t0
                    cpu, me = cpu_s(SERVER_PID) - c0, cpu_s(os.getpid(), children=False) - me0
                    for conn in conns:
                        conn.close()
                    for sid in sids:
                        async with http.delete(f"/v1/sessions/{sid}"):
                            pass
                    n = sum(map(len, lat.values()))
                    row = {
                        "calls": n,
                        "errors": sum(failures.values()),
                        "failures": dict(failures),
                        "wall_s": wall,
                        "calls_per_s": n / wall,
                        "server_cpu_ms_per_call": cpu / n * 1e3,
                        "client_cpu_ms_per_call": me / n * 1e3,
                        "pss_mib": tree_pss(srv.proc.pid) / 2**20,
                        "per_tool": {t: (_pct(x, 50) * 1e3, _pct(x, 99) * 1e3, len(x)) for t, x in lat.items() if x},
                    }
                    out[f"{workers}w/{sessions}s"] = row
                    tools_txt = ", ".join(f"{t} {p50:.0f}/{p99:.0f} ms" for t, (p50, p99, _) in row["per_tool"].items())
                    print(
                        f"{workers} workers, {sessions:4d} sessions: {n} calls in {wall:5.1f} s = "
                        f"{row['calls_per_s']:6.1f}/s, err {row['errors']}, server CPU "
                        f"{row['server_cpu_ms_per_call']:.1f} ms/call, client {row['client_cpu_ms_per_call']:.2f}, "
                        f"PSS {row['pss_mib']:.0f} MiB; "
                        f"p50/p99 {tools_txt}"
                        + "".join(f"\n    failed: {k}: {v}" for k, v in sorted(failures.items())),
                        flush=True,
                    )
        finally:
            srv.stop()
    costs = [row["server_cpu_ms_per_call"] for row in out.values()]
    out["paper_round"] = r = paper_round(costs, args.round_rollouts, args.round_turns)
    print(
        f"paper-scale round at {r['server_cpu_ms_per_call']:.1f} ms of server CPU per call (median; "
        f"{r['range_ms'][0]:.1f}-{r['range_ms'][1]:.1f} measured): "
        + "; ".join(
            f"{r['rollouts']:,} rollouts x {t} tool turns = {r[f'{t}_turns']['calls']:,} calls = "
            f"{r[f'{t}_turns']['cpu_s']:.0f} CPU-s, {r[f'{t}_turns']['cores_within_60s']} free cores within a minute"
            for t in args.round_turns
        ),
        flush=True,
    )
    return out


def _big_question_image(size: tuple[int, int] = (4000, 3000)) -> str:
    """A 12 Mpx question image (a gradient: a small PNG to send, 48 MB of decoded pixels to crop and encode)."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    w, h = size
    x, y = np.meshgrid(np.arange(w, dtype=np.uint16), np.arange(h, dtype=np.uint16))
    rgb = np.stack([x % 256, y % 256, (x + y) % 256], axis=-1).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="PNG", compress_level=1)
    return base64.b64encode(buf.getvalue()).decode()


HOL_SERVERS = (  # (name, extra server arguments): reverse search in the server's threads, in search processes, and
    # the same behind the --workers router (the router hop; each worker with its search process)
    ("threads", ("--search-processes", "0")),
    ("processes", ()),
    ("workers", ("--workers", "2")),
)


async def part_hol(args, wl: Workload) -> dict:
    """Head-of-line blocking: cheap calls (cached TextSearch, FetchImage of a world image, session open) at 4
    connections, alone (the baseline) and then while 16 connections run heavy calls (12: uncached reverse image search;
    4: crops of a quarter of a 12 Mpx question image, 3 Mpx each, returned as PNG), against each of ``HOL_SERVERS``.
    The ratio of the cheap calls' p50/p99 under load to alone is the figure; server and load-generator CPU per request
    beside it."""
    out = {}
    for name, extra in HOL_SERVERS:
        if name not in args.hol_servers:
            continue
        print(f"-- server: {name} ({' '.join(extra) or 'default'})", flush=True)
        out[name] = await _hol_round(args, wl, extra)
    return out


async def _hol_round(args, wl: Workload, extra: tuple[str, ...]) -> dict:
    import aiohttp

    n_cheap, heavy_s = (300, 12.0) if args.quick else (900, 30.0)
    srv = start_ours(args.world, 0, *extra)
    try:
        async with aiohttp.ClientSession(base_url=srv.base, connector=aiohttp.TCPConnector(limit=0)) as http:
            await _wait_features(http)
            big = _big_question_image()
            warm = await _session(http)
            for i in range(8):
                body = {"name": "TextSearch", "arguments": wl.args("TextSearch", True, i)}
                async with http.post(f"/v1/sessions/{warm}/call", json=body):
                    pass
            for i in range(4):  # the search processes started (a spawned process imports OpenCV once)
                reverse = {"name": "ReverseImageSearch", "arguments": wl.args("ReverseImageSearch", False, i)}
                async with http.post(f"/v1/sessions/{warm}/call", json=reverse):
                    pass

            def cheap(w: int, i: int, sid: str):
                kind = i % 3
                if kind == 0:
                    return "/v1/sessions", {}
                if kind == 1:
                    return f"/v1/sessions/{sid}/call", {
                        "name": "FetchImage",
                        "arguments": {"urls": [wl.image_urls[i % 8]]},
                    }
                return f"/v1/sessions/{sid}/call", {"name": "TextSearch", "arguments": wl.args("TextSearch", True, i)}

            async def cheap_setup(w: int) -> str:
                return await _session(http)

            async def heavy_setup(w: int) -> list:
                return [await _session(http, [big] if w % 4 == 0 else None), 0]

            async def heavy(w: int, i: int, state: list):
                if w % 4 == 0:  # crops of the 12 Mpx image, pixels returned (PNG encoding)
                    state[1] += 1
                    # a crop is a quarter of the image (3 Mpx, 12 MB): a new session (decoding the image again)
                    # every 30, before the register's 512 MiB are full
                    if state[1] % 30 == 0:
                        async with http.delete(f"/v1/sessions/{state[0]}"):
                            pass
                        state[0] = await _session(http, [big])
                    a = (i * 37) % 400
                    crop = {"crop_config": {"img_1": [a, a // 2, a + 500, a // 2 + 500]}}
                    body = {"name": "CropImage", "arguments": crop, "include_pixels": True}
                    return f"/v1/sessions/{state[0]}/call", body
                reverse = wl.args("ReverseImageSearch", False, i)
                return f"/v1/sessions/{state[0]}/call", {"name": "ReverseImageSearch", "arguments": reverse}

            alone = await drive(srv.base, 4, n_cheap, 60.0, cheap, cheap_setup)
            print(f"cheap alone       {_fmt(alone)}", flush=True)
            load = asyncio.create_task(drive(srv.base, 16, 10**6, heavy_s, heavy, heavy_setup))
            await asyncio.sleep(3.0)  # the heavy calls in flight
            loaded = await drive(srv.base, 4, n_cheap, heavy_s, cheap, cheap_setup)
            heavy_result = await load
            print(f"cheap under load  {_fmt(loaded)}", flush=True)
            print(f"heavy (16 conns)  {_fmt(heavy_result)}", flush=True)
    finally:
        srv.stop()
    ratio = {k: loaded[k] / alone[k] for k in ("p50_ms", "p99_ms")}
    print(
        f"cheap calls under heavy load / alone: p50 x{ratio['p50_ms']:.2f}, p99 x{ratio['p99_ms']:.2f}; CPU per cheap "
        f"call under load: server {loaded['cpu_ms_per_req']:.2f} ms (all calls in flight), load generator "
        f"{loaded['client_cpu_ms_per_req']:.2f} ms",
        flush=True,
    )
    return {"alone": alone, "loaded": loaded, "heavy": heavy_result, "ratio": ratio}


# ---------------------------------------------------------------------------------------------- attacks (issue 35)
ATTACKER = "127.0.0.2"  # the attacks' loopback address: another client than the victims' 127.0.0.1
ATTACKS = ("slow_bodies", "stalled_calls", "large_opens", "large_crops", "image_hog")


def _png_b64(size: tuple[int, int], noise: bool = False) -> str:
    import base64
    import io

    import numpy as np
    from PIL import Image

    w, h = size
    if noise:
        rgb = np.random.default_rng(0).integers(0, 256, (h, w, 3), dtype=np.uint8)
    else:
        x, y = np.meshgrid(np.arange(w, dtype=np.uint16), np.arange(h, dtype=np.uint16))
        rgb = np.stack([x % 256, y % 256, (x + y) % 256], axis=-1).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="PNG", compress_level=1)
    return base64.b64encode(buf.getvalue()).decode()


async def _held(base: str, path: str, head: bytes, sent: bytes) -> asyncio.StreamWriter:
    """A raw attacker connection that sends a request's headers and ``sent`` of its body, then nothing."""
    host, port = base.rsplit("/", 1)[1].rsplit(":", 1)
    _, writer = await asyncio.open_connection(host, int(port), local_addr=(ATTACKER, 0))
    writer.write(b"POST %b HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%b\r\n\r\n%b"
                 % (path.encode(), head, sent))
    await writer.drain()
    return writer


async def _attack(name: str, base: str) -> None:
    """Issue 35's attack ``name`` at small scale, from :data:`ATTACKER`, until this process gets SIGTERM; "ready" on
    stdout once its images are made (the attacker process of :class:`Attacker`)."""
    import signal

    import aiohttp

    until = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, until.set)
    answers: Counter[str] = Counter()  # the attack's requests by outcome, printed at the end
    conn = aiohttp.TCPConnector(limit=0, local_addr=(ATTACKER, 0))
    async with aiohttp.ClientSession(base_url=base, connector=conn) as http:
        held: list[asyncio.StreamWriter] = []
        if name in ("slow_bodies", "stalled_calls"):
            print("ready", flush=True)
        if name == "slow_bodies":  # 255 MiB declared, 5 bytes sent; four 64 MiB; four chunked bodies held
            while not until.is_set():
                held += [await _held(base, "/v1/sessions", b"Content-Length: %d" % (255 * 2**20), b'{"gro')]
                held += [await _held(base, "/v1/sessions", b"Content-Length: %d" % (64 * 2**20), b'{"group_id"')
                         for _ in range(4)]
                held += [await _held(base, "/v1/sessions", b"Transfer-Encoding: chunked", b"5\r\n{\"gro\r\n")
                         for _ in range(4)]
                await asyncio.sleep(1.0)
        elif name == "stalled_calls":  # tool-call bodies stalled just under 1 MiB, 300 at once
            sid = await _session(http)
            chunk = b" " * (1000 * 1024)
            head = b"Content-Length: %d" % (2**20 - 1)
            held += await asyncio.gather(*(_held(base, f"/v1/sessions/{sid}/call", head, chunk) for _ in range(300)))
            await until.wait()
        else:
            size, noise = {"large_opens": ((5000, 5000), False), "large_crops": ((4000, 3000), True),
                           "image_hog": ((2000, 2000), False)}[name]
            image = _png_b64(size, noise)
            print("ready", flush=True)

            async def loop(w: int) -> None:
                sid = None
                while not until.is_set():
                    if name == "large_crops" and sid is not None:
                        body = {"name": "CropImage", "arguments": {"crop_config": {"img_1": [0, 0, 1000, 1000]}},
                                "include_pixels": True}
                        async with http.post(f"/v1/sessions/{sid}/call", json=body) as r:
                            answers[f"crop {failure_class(r.status, await r.read())}"] += 1
                        continue
                    async with http.post("/v1/sessions", json={"images": [image]}) as r:
                        opened = await r.json()
                        answers[f"open {failure_class(r.status, json.dumps(opened).encode())}"] += 1
                    if name == "large_opens" and "session_id" in opened:
                        async with http.delete(f"/v1/sessions/{opened['session_id']}"):
                            pass
                    elif name == "large_crops":
                        sid = opened.get("session_id")
                    elif name == "image_hog" and "error" in opened:  # its share is full: keep it touched
                        await asyncio.sleep(0.5)

            await asyncio.gather(*(loop(w) for w in range({"large_opens": 16, "large_crops": 3}.get(name, 1))))
        for writer in held:
            writer.close()
    print(json.dumps(answers), flush=True)


class Attacker:
    """An attack in a process of its own, at nice 19 on the load generator's core: in the load generator's event loop
    the attackers' work (building and sending 16 bodies, reading 3 croppers' answers) delayed the victims' requests
    and answers (its CPU per victim request went from 0.1 to 9.4 ms), so the figure measured the load generator too.
    Niced, it runs when the victims' generator has nothing to do; the server's core is not shared with either."""

    def __init__(self, name: str, base: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--attack-from", base, "--attacks", name, "--loop", LOOP],
            stdout=subprocess.PIPE, env=env, cwd=ROOT, preexec_fn=lambda: os.nice(19),
        )
        if self.proc.stdout.readline().strip() != b"ready":
            raise SystemExit(f"attacker {name} did not start")

    def stop(self, timeout: float = 120) -> dict[str, int]:
        """Stop it; its requests by outcome (``"open 200"``, ``"crop 429 client_quota"``...; none for held bodies)."""
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=timeout)
        return json.loads(out.splitlines()[-1])


async def _memory_bytes(http) -> int:
    async with http.get("/metrics") as r:
        text = await r.text()
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
               if line.startswith("memory_budget_bytes{") and 'kind="limit"' not in line)


async def part_attack(args, wl: Workload) -> dict:
    """Victims (2 connections of 127.0.0.1: a session open with a small question image, FetchImage of a world image
    with ``include_pixels`` as our rollout client sends it) alone, then under each of issue 35's attacks from
    127.0.0.2 against one server (``--memory-budget-gib 1``); the victims' p50/p99 under attack / alone is the
    figure, with their failures, the server's peak RSS and its accounted bytes after the attack."""
    import aiohttp

    n, phase_s = (200, 10.0) if args.quick else (600, 20.0)
    srv = start_ours(args.world, 0, "--memory-budget-gib", "1", "--body-grace-s", "5")
    small = _png_b64((64, 48))
    out: dict = {}
    try:
        async with aiohttp.ClientSession(base_url=srv.base, connector=aiohttp.TCPConnector(limit=0)) as http:
            await _wait_features(http)
            rss0 = srv.rss()["VmRSS"]

            def victim(w: int, i: int, sid: str):
                if i % 2 == 0:
                    return "/v1/sessions", {"images": [small]}
                body = {"name": "FetchImage", "arguments": {"urls": [wl.image_urls[i % 8]]}, "include_pixels": True}
                return f"/v1/sessions/{sid}/call", body

            async def setup(w: int) -> str:
                return await _session(http)

            alone = await drive(srv.base, 2, n, phase_s, victim, setup)
            print(f"victims alone        {_fmt(alone)}; RSS {rss0 / 2**20:.0f} MiB", flush=True)
            out["alone"] = alone
            for name in args.attacks:
                attacker = await asyncio.to_thread(Attacker, name, srv.base)
                await asyncio.sleep(3.0)  # the attack in place
                loaded = await drive(srv.base, 2, n, phase_s, victim, setup)
                accounted = await _memory_bytes(http)
                attack = await asyncio.to_thread(attacker.stop)
                rss = srv.rss()
                ratio = {k: loaded[k] / alone[k] for k in ("p50_ms", "p99_ms")}
                out[name] = {**loaded, "ratio": ratio, "rss_peak": rss["VmHWM"], "rss_after": rss["VmRSS"],
                             "accounted": accounted, "attack": attack}
                print(f"victims {name:<13}{_fmt(loaded)}; p50 x{ratio['p50_ms']:.2f} p99 x{ratio['p99_ms']:.2f}; "
                      f"accounted {accounted / 2**20:.0f} MiB, RSS peak {rss['VmHWM'] / 2**20:.0f} MiB, after "
                      f"{rss['VmRSS'] / 2**20:.0f} MiB; attack {dict(attack)}", flush=True)
                await asyncio.sleep(6.0)  # stalled bodies cut, connections gone
    finally:
        srv.stop()
    return out


async def part_parse(args, wl_unused) -> dict:
    """Fetched pages read by :mod:`tool_server.online.markup` against the standard library's ``HTMLParser`` (a subclass
    that does nothing: its own scanning is what is timed) on pages a site may serve: process CPU seconds, best of 3.
    The stdlib parser only on the small pages (it is quadratic on unterminated constructs)."""
    from html.parser import HTMLParser

    from tool_server.online.markup import markdown_images, read_html

    def cpu(fn, repeat: int = 3) -> float:
        best = float("inf")
        for _ in range(repeat):
            t0 = time.process_time()
            fn()
            best = min(best, time.process_time() - t0)
        return best

    def stdlib(page: str) -> None:
        parser = HTMLParser()
        parser.feed(page)
        parser.close()

    pages = {
        "20,000 distinct <img> tags": "".join(f'<img src="/i/{i}.png" alt="a{i}">' for i in range(20_000)),
        "10,000 unterminated '<a '": "<p>x" + "<a " * 10_000,
        "50,000 unterminated '<a '": "<p>x" + "<a " * 50_000,
        "50,000 '<a b=\"c'": "<p>x" + '<a b="c' * 50_000,
    }
    out = {}
    for name, page in pages.items():
        row = {"kb": len(page) / 1e3, "read_html_ms": cpu(lambda: read_html(page, "https://example.com/")) * 1e3}
        if len(page) <= 40_000 or "<img" in name:
            row["html_parser_s"] = cpu(lambda: stdlib(page), repeat=1)
        out[name] = row
        stdlib_txt = f", HTMLParser {row['html_parser_s']:.2f} s" if "html_parser_s" in row else ""
        print(f"{name} ({row['kb']:.0f} kB): read_html {row['read_html_ms']:.1f} ms{stdlib_txt}", flush=True)
    regex = re.compile(r"!\[([^\]]*)\]\((https?://[^\s)]+)")  # the Markdown image pattern markup.py replaced
    text = "![" * 20_000
    out["markdown"] = {"ms": cpu(lambda: markdown_images(text)) * 1e3, "regex_s": cpu(lambda: regex.findall(text), 1)}
    print(f"Markdown, 20,000 '![' without ']': markdown_images {out['markdown']['ms']:.2f} ms, regex "
          f"{out['markdown']['regex_s']:.2f} s", flush=True)
    return out


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python bench/bench_tool_server.py", description="Tool-server benchmark: throughput and "
                      "latency per tool, a FastAPI baseline, asyncio against uvloop, memory, cache hit rates of a "
                      "replay, head-of-line blocking and scaling over worker processes; loopback only.")
    p.add_argument("--part", choices=["throughput", "baseline", "loops", "rss", "replay", "hol", "scale", "parse",
                                      "attack", "all"],
                   default="all", help="which measurement; all = throughput, baseline, rss and replay (default: all)")
    p.add_argument("--workers", type=int_list, default=[1, 2, 4], metavar="N,N",
                   help="--part scale: server worker processes to compare (default: 1,2,4)")
    p.add_argument("--sessions", type=int_list, default=[64, 256, 1024], metavar="N,N",
                   help="--part scale: concurrent sessions (default: 64,256,1024)")
    p.add_argument("--round-rollouts", type=positive_int, default=1024, metavar="N",
                   help="--part scale: rollouts of the paper-scale round the cores are estimated for (Neos: B*G = 512 "
                   "selected, up to 1,024 in flight) (default: 1024)")
    p.add_argument("--round-turns", type=int_list, default=[50, 27], metavar="N,N",
                   help="--part scale: tool turns per rollout to estimate a round for: the papers' bound and our "
                   "trajectories' (26-28 tool turns per episode in the neos_smoke run of 2026-12-03) (default: 50,27)")
    p.add_argument("--hol-servers", type=subset([name for name, _ in HOL_SERVERS]),
                   default=[name for name, _ in HOL_SERVERS], metavar="NAME,NAME",
                   help="--part hol: the server configurations to measure (threads: --search-processes 0; processes: "
                   "the default; workers: --workers 2) (default: all three)")
    p.add_argument("--attacks", type=subset(list(ATTACKS)), default=list(ATTACKS), metavar="NAME,NAME",
                   help=f"--part attack: the attacks to run (default: {','.join(ATTACKS)})")
    p.add_argument("--quick", action="store_true", help="small request counts, short phases")
    p.add_argument("--world", type=Path, default=ROOT / "worlds" / "small", metavar="DIR",
                   help="a built small world (default: worlds/small of the checkout)")
    p.add_argument("--full-world", type=Path, default=ROOT / "worlds" / "full", metavar="DIR",
                   help="--part rss: a built full world (default: worlds/full of the checkout)")
    p.add_argument("--concurrency", type=int_list, default=[1, 64, 768], metavar="N,N",
                   help="--part throughput: requests in flight (default: 1,64,768)")
    p.add_argument("--repeat", type=positive_int, default=1, metavar="N",
                   help="--part baseline/loops: rounds over the servers, medians reported (default: 1)")
    p.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write all results here")
    p.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop" if uvloop_available() else "asyncio",
                   help="event loop of every server (ours, the uvicorn baseline, the trivial handler) and of the load "
                   "generator (default: uvloop when installed)")
    p.add_argument("--serve-baseline", action="store_true", help=argparse.SUPPRESS)  # internal: the comparison servers
    p.add_argument("--serve-trivial", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--attack-from", default=None, help=argparse.SUPPRESS)  # internal: an Attacker's process
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.serve_baseline:
        serve_baseline(args.world, args.port, args.loop)
        return 0
    if args.serve_trivial:
        serve_trivial(args.port, args.loop)
        return 0
    if args.attack_from:
        run(_attack(args.attacks[0], args.attack_from), use_uvloop=args.loop == "uvloop")
        return 0
    global LOOP
    LOOP = args.loop
    print(f"event loop of servers and load generator: {LOOP}", flush=True)
    if hasattr(os, "sched_setaffinity") and os.cpu_count() and os.cpu_count() >= 2:
        os.sched_setaffinity(0, {1})  # the load generator on CPU 1, servers on CPU 0
    wl = None if args.part == "parse" else Workload(args.world)  # parsing needs no world
    parts = ["throughput", "baseline", "rss", "replay"] if args.part == "all" else [args.part]
    fns = {
        "throughput": part_throughput,
        "baseline": part_baseline,
        "rss": part_rss,
        "replay": part_replay,
        "hol": part_hol,
        "scale": part_scale,
        "parse": part_parse,
        "attack": part_attack,
    }
    results = {}
    for part in parts:
        print(f"== {part}", flush=True)
        if part == "loops":  # runs each phase on the loop under test itself
            results[part] = part_loops(args, wl)
        else:
            results[part] = run(fns[part](args, wl), use_uvloop=LOOP == "uvloop")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
