"""``python -m tool_server --workers N``: N server processes behind one router on the public port.

The world (pages, BM25 indexes, reverse-search features) is loaded once, then the N workers are forked from the
loading process, so they share it copy-on-write (``gc.freeze`` first, so the collector does not touch, and copy, its
pages). Each worker is the ordinary one-process server on a Unix socket, its session ids starting ``s<index>_``. The
router (this process) sends ``POST /v1/sessions`` to the live workers in turn and every later call of a session to
the worker whose index its id names, so a session's register is always where its calls go. A worker that died
turns its sessions' calls into ``worker_unavailable`` (503: the session is lost; the agent loop ends that episode as
tool instability) while the other workers' sessions go on and new sessions avoid it (a session open in flight when its
worker dies is asked of a live one). ``/metrics`` is the sum of the workers' series (less the refusals a worker counted
for a session open another worker then took) plus ``tool_server_workers{state}``; ``/healthz`` sums their sessions. An
MEI version announcement (``POST /admin/mei_version``) goes to every live worker before it is answered, so a session
opened on any worker after the trainer's announce is fixed to the new version.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import logging
import multiprocessing
import os
import re
import signal
import socket
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import aiohttp
from aiohttp import web

from neos_core.polling import poll_delays
from tool_server.assembly import (
    LISTEN_BACKLOG,
    announce,
    body_limits,
    build_app,
    connection_limits,
    load_world,
    server_settings,
)
from tool_server.bodies import BodyBudget, close_after, held_back
from tool_server.connections import GuardedAppRunner
from tool_server.errors import ToolError
from tool_server.limits import MAX_BODY_BYTES, MAX_CALL_BODY_BYTES
from tool_server.loop import run, until_terminated

log = logging.getLogger(__name__)

CONNECT_RETRY_S = 10.0
CLIENT_HEADER = "X-Neos-Client"  # the router names the client's address to the worker (its session quota)
_SESSION_WORKER = re.compile(r"^s([0-9]{1,4})_")  # ASCII and short: "\d+" took "s١_" and 5,000 digits (int() raised)
_FORWARDED_HEADERS = ("Content-Type",)
# a worker's share of a server-wide limit is full: another worker may still have room for the session
_SHARE_FULL = frozenset({"session_quota", "too_many_sessions", "server_memory_full", "client_quota"})
# a session open is asked of the next live worker: that one's share was full, or it died with the open in flight (the
# session it may have begun died with it)
_ASK_NEXT = _SHARE_FULL | {"worker_unavailable"}


def _error(status: int, type_: str, message: str, field: str | None = None) -> web.Response:
    return web.json_response({"error": {"type": type_, "message": message, "field": field}}, status=status)


def _error_type(answer: web.Response) -> str | None:
    """The ``error.type`` of an error answer (None for a success or a body that is not an error)."""
    if answer.status < 400 or not isinstance(answer.body, bytes):
        return None
    try:
        return json.loads(answer.body)["error"]["type"]
    except (ValueError, KeyError, TypeError):
        return None


def _worker_main(index: int, args: argparse.Namespace, world, path: str, ready, router_pid: int) -> None:
    """A forked worker: the one-process server on a Unix socket (``world`` is the parent's, shared)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the router stops the workers
    settings = server_settings(args, share=args.workers, session_id_prefix=f"s{index}_", client_header=CLIENT_HEADER,
                               quota_delay_s=0.0)  # the router holds back the refusal it answers, not each worker's

    async def serve() -> None:
        app = build_app(args, world, settings)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        # a full accept queue makes a Unix socket refuse a connect at once (the router then retries, see Router)
        await web.UnixSite(runner, path, backlog=LISTEN_BACKLOG).start()
        ready.set()
        while os.getppid() == router_pid:  # a router killed outright leaves no worker behind
            await asyncio.sleep(1.0)

    try:
        run(serve(), use_uvloop=not args.no_uvloop)
    finally:
        # this worker's search processes stopped before it exits: a forked process's exit joins its children but
        # first stops the queue that would tell them to stop (the shared index files stay, the router's to remove)
        world.close(wait=True)


def merge_metrics(texts: list[str], less: Mapping[str, float] | None = None) -> str:
    """Prometheus text of several processes as one: every series summed, families kept together; ``less``: what to
    take off a series (the refusals one worker counted for a session open that another then answered)."""
    families: dict[str, list[str]] = {}  # family -> its HELP/TYPE lines then its series keys, first seen first
    values: dict[str, float] = {}
    for text in texts:
        family = ""
        for line in text.splitlines():
            if line.startswith("# "):
                family = line.split()[2]
                lines = families.setdefault(family, [])
                if line not in lines:
                    lines.append(line)
                continue
            if not line:
                continue
            key, value = line.rsplit(" ", 1)
            if key not in values:
                families.setdefault(family, []).append(key)
                values[key] = 0.0
            values[key] += float(value)
    for key, n in (less or {}).items():
        if key in values:
            values[key] -= n
    out = []
    for lines in families.values():
        for item in lines:
            out.append(item if item.startswith("# ") else f"{item} {values[item]:g}")
    return "\n".join(out) + "\n"


def _json_http_errors(handler):
    """``handler`` with aiohttp's HTTP errors (a body over the 64 MiB limit: 413) answered as our JSON error body."""

    async def answer(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException as e:
            if e.status < 400:
                raise
            return _error(e.status, "body_too_large" if e.status == 413 else "http_error", e.reason)

    return answer


class Router:
    """``connect_retry_s``: how long a call waits for a live worker that accepts no connection before a 503
    ``worker_busy``."""

    def __init__(self, procs: list, paths: list[str], *, connect_retry_s: float = CONNECT_RETRY_S,
                 bodies: BodyBudget | None = None) -> None:
        self._procs = procs
        self._bodies = bodies or BodyBudget()  # the large bodies the router holds while it forwards them
        self._connect_retry_s = connect_retry_s
        # connect_retries: connections a live worker did not accept at once; busy: calls refused after retrying for
        # connect_retry_s; broken_connections: calls whose connection broke while the worker lived on;
        # create_passed_on: session opens a worker refused for its share of a limit, asked of the next;
        # create_reopened: session opens in flight on a worker that died, asked of the next
        self.counters: Counter[str] = Counter()
        self.refusals_passed_on: Counter[str] = Counter()  # by error type: counted by a worker, never seen by a client
        self._clients = [
            aiohttp.ClientSession(
                "http://worker",
                connector=aiohttp.UnixConnector(path, limit=0),
                timeout=aiohttp.ClientTimeout(total=None),  # the agent loop's own call timeout bounds a call
            )
            for path in paths
        ]
        self._turn = itertools.cycle(range(len(procs)))
        self._announcing = asyncio.Lock()  # two announcements never reach the workers interleaved

    def alive(self, index: int) -> bool:
        return self._procs[index].is_alive()

    async def _forward(self, request: web.Request, index: int, body: bytes) -> web.Response:
        headers = {h: request.headers[h] for h in _FORWARDED_HEADERS if h in request.headers}
        headers[CLIENT_HEADER] = request.remote or ""
        deadline, delays = time.monotonic() + self._connect_retry_s, poll_delays(0.01, 0.25)
        while True:
            try:
                async with self._clients[index].request(
                    request.method, request.rel_url, data=body, headers=headers
                ) as resp:
                    payload = await resp.read()
                    return web.Response(body=payload, status=resp.status, content_type=resp.content_type)
            except aiohttp.ClientConnectorError:
                # nothing was sent: a live worker whose accept queue is full (its loop busy) is retried, not lost
                if not self.alive(index):
                    return self._lost(index)
                self.counters["connect_retries"] += 1
                delay = next(delays)
                if time.monotonic() + delay > deadline:
                    self.counters["busy"] += 1
                    log.warning("server process %d accepted no connection for %g s", index, self._connect_retry_s)
                    return _error(
                        503,
                        "worker_busy",
                        f"server process {index} accepted no connection for {self._connect_retry_s:g} s; "
                        "the session is kept, retry the call",
                    )
                await asyncio.sleep(delay)
            except aiohttp.ClientError:
                return await self._failed_after_send(index)

    async def _failed_after_send(self, index: int) -> web.Response:
        """The connection broke after the call was sent: lost if the worker died (it may take a moment to be
        reaped), else a 502 (the call may or may not have run), counted."""
        for _ in range(20):
            if not self.alive(index):
                return self._lost(index)
            await asyncio.sleep(0.05)
        self.counters["broken_connections"] += 1
        log.warning("the connection to live server process %d broke during a call", index)
        return _error(
            502,
            "worker_connection_lost",
            f"the connection to server process {index} broke during the call; it may or may not have run",
        )

    def _lost(self, index: int) -> web.Response:
        return _error(
            503,
            "worker_unavailable",
            f"server process {index} holding this session has stopped; the session is lost, open a new one",
        )

    async def create_session(self, request: web.Request, body: bytes) -> web.Response:
        """The next live worker in turn opens it; one that refuses it for its share of a limit being full (the
        client's quota, the session cap, the image budget) passes it to the next, so the limits hold for the whole
        server, not per worker; one that dies with the open in flight passes it on too. The last refusal is the answer
        when every worker refuses."""
        answer: web.Response | None = None
        n = len(self._procs)
        first = next(self._turn) if n else 0
        for index in ((first + k) % n for k in range(n)):  # each worker once, whatever other opens take meanwhile
            if not self.alive(index):
                continue
            if answer is not None:
                self._passed_on(answer)
            answer = await self._forward(request, index, body)
            if _error_type(answer) not in _ASK_NEXT:
                return answer
        return answer or _error(503, "worker_unavailable", "no server process is running")

    def _passed_on(self, answer: web.Response) -> None:
        """Count a session open asked of the next worker: its share was full (that worker counted the refusal, which
        the merged ``/metrics`` takes back: the client saw none), or it died with the open in flight."""
        type_ = _error_type(answer)
        if type_ in _SHARE_FULL:
            self.counters["create_passed_on"] += 1
            self.refusals_passed_on[type_] += 1
        else:
            self.counters["create_reopened"] += 1

    async def call(self, request: web.Request) -> web.Response:
        """A tool call, its body read here under the call limit: the worker refuses a larger one, but only after the
        router had read and held all of it (up to the 64 MiB of a session open)."""
        return await self._with_body(request, MAX_CALL_BODY_BYTES, self.session)

    async def session(self, request: web.Request, body: bytes) -> web.Response:
        sid = request.match_info["session_id"]
        m = _SESSION_WORKER.match(sid)
        if m is None or int(m.group(1)) >= len(self._procs):
            return _error(404, "unknown_session", f"no session {sid[:64]!r}", "session_id")
        index = int(m.group(1))
        if not self.alive(index):
            return self._lost(index)
        return await self._forward(request, index, body)

    async def mei_version(self, request: web.Request, body: bytes) -> web.Response:
        """``POST``: the announcement to every live worker, answered once all have it (the first refusal, e.g. a bad
        version, is the answer); ``GET``: the first live worker's answer (all hold the same version)."""
        live = [i for i in range(len(self._procs)) if self.alive(i)]
        if not live:
            return _error(503, "worker_unavailable", "no server process is running")
        if request.method != "POST":
            return await self._forward(request, live[0], body)
        async with self._announcing:
            answers = await asyncio.gather(*(self._forward(request, i, body) for i in live))
        return next((a for a in answers if a.status != 200), answers[0])

    async def _gather(self, path: str) -> list[str]:
        async def one(index: int) -> str | None:
            try:
                async with self._clients[index].get(path) as resp:
                    return await resp.text()
            except aiohttp.ClientError:
                return None

        texts = await asyncio.gather(*(one(i) for i in range(len(self._procs)) if self.alive(i)))
        return [t for t in texts if t is not None]

    async def metrics(self, request: web.Request) -> web.Response:
        alive = sum(self.alive(i) for i in range(len(self._procs)))
        passed_on = {f'tool_errors_total{{type="{t}"}}': n for t, n in self.refusals_passed_on.items()}
        text = merge_metrics(await self._gather("/metrics"), less=passed_on)
        text += (
            "# HELP tool_server_workers Server processes behind the router.\n# TYPE tool_server_workers gauge\n"
            f'tool_server_workers{{state="alive"}} {alive}\ntool_server_workers{{state="dead"}} '
            f"{len(self._procs) - alive}\n"
            "# HELP tool_server_router_events_total Connections to live workers retried, calls refused busy, "
            "connections broken mid-call, session opens passed on by a worker whose share of a limit was full, "
            "session opens in flight on a worker that died asked of another, bodies refused by the router's "
            "body budget (server_busy, client_quota), cut for falling behind its minimum rate (body_timeout) or over "
            "their limit (body_too_large).\n"
            "# TYPE tool_server_router_events_total counter\n"
            + "".join(
                f'tool_server_router_events_total{{event="{k}"}} {self.counters[k]}\n'
                for k in (
                    "connect_retries", "busy", "broken_connections", "create_passed_on", "create_reopened",
                    "server_busy", "client_quota", "body_timeout", "body_too_large",
                )
            )
        )
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    async def healthz(self, request: web.Request) -> web.Response:
        health = [json.loads(t) for t in await self._gather("/healthz")]
        alive = [self.alive(i) for i in range(len(self._procs))]
        if not health:
            return _error(503, "worker_unavailable", "no server process is running")
        return web.json_response(
            {
                **health[0],
                "status": "ok" if all(alive) else "degraded",
                "sessions": sum(h["sessions"] for h in health),
                "features_ready": all(h["features_ready"] for h in health),
                "workers": alive,
                "worker_pids": [p.pid for p in self._procs],
            }
        )

    async def other(self, request: web.Request, body: bytes) -> web.Response:
        """Tool schemas, public images (held by whichever worker runs that search): the first non-404 answer."""
        answer = _error(503, "worker_unavailable", "no server process is running")
        for index in range(len(self._procs)):
            if self.alive(index):
                answer = await self._forward(request, index, body)
                if answer.status != 404:
                    return answer
        return answer

    async def _with_body(self, request: web.Request, max_bytes: int, handler) -> web.Response:
        """``handler(request, body)``, the body read within the router's body budget (``bodies.BodyBudget``: charged
        as it arrives, refused past its limit or share, cut when it stalls) and held until the workers answered."""
        client = request.remote
        try:
            body = await self._bodies.receive(request, max_bytes, client)
        except ToolError as e:
            self.counters[e.type] += 1  # server_busy, client_quota, body_timeout: tool_server_router_events_total
            answer = _error(e.status, e.type, e.message, e.field)
            if close_after(request, e):
                answer.force_close()
            await held_back(answer, e.type)
            return answer
        try:
            answer = await handler(request, body)
        finally:
            self._bodies.release(len(body), client)
        await held_back(answer, _error_type(answer))
        return answer

    def _budgeted(self, handler):
        async def answer(request: web.Request) -> web.Response:
            return await self._with_body(request, MAX_BODY_BYTES, handler)

        return answer

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        add, budgeted = app.router.add_route, lambda handler: _json_http_errors(self._budgeted(handler))
        add("*", "/v1/sessions/{session_id}/call", _json_http_errors(self.call))
        add("POST", "/v1/sessions", budgeted(self.create_session))
        add("*", "/v1/sessions/{session_id}", budgeted(self.session))
        add("GET", "/metrics", self.metrics)
        add("GET", "/healthz", self.healthz)
        add("*", "/admin/mei_version", budgeted(self.mei_version))
        add("*", "/{tail:.*}", budgeted(self.other))  # last: also every other method of /metrics and /healthz

        async def close(app: web.Application) -> None:
            for client in self._clients:
                await client.close()

        app.on_cleanup.append(close)
        return app


def serve_workers(args: argparse.Namespace, sock: socket.socket) -> int:
    """Load the world, fork ``args.workers`` workers, route on ``sock`` until interrupted."""
    world = load_world(args)
    world.wait_features()  # loaded before the fork: every worker shares the features instead of computing them
    if args.search_processes:
        world.map_index()  # one set of files that every worker's search processes map
    gc.freeze()
    fork = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="tool-server-") as tmp:
        paths = [str(Path(tmp) / f"w{i}.sock") for i in range(args.workers)]
        ready = [fork.Event() for _ in paths]
        procs = [
            # not daemonic: a worker forks its own search processes, which daemonic processes may not
            fork.Process(target=_worker_main, args=(i, args, world, path, ev, os.getpid()))
            for i, (path, ev) in enumerate(zip(paths, ready))
        ]
        for proc in procs:
            proc.start()
        try:
            deadline = time.monotonic() + 300
            for proc, ev in zip(procs, ready):
                while not ev.wait(0.5):
                    if not proc.is_alive() or time.monotonic() > deadline:
                        raise OSError(f"server process {procs.index(proc)} did not start")
            async def serve() -> None:
                router = Router(procs, paths, bodies=BodyBudget(body_limits(args)))
                runner = GuardedAppRunner(router.app(), connection_limits(args), access_log=None)
                await runner.setup()
                await web.SockSite(runner, sock, backlog=LISTEN_BACKLOG).start()
                announce(args, sock, world, f" {args.workers} workers")
                try:
                    await until_terminated()
                finally:
                    await runner.cleanup()

            run(serve(), use_uvloop=not args.no_uvloop)
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.join(10)
            world.close()
    return 0
