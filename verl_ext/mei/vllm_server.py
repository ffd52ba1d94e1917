"""The MEI served by vLLM, with the trainer's version/load contract (Neos §3.5: the MEI is updated between rollout
rounds while it serves the tool server).

``python -m verl_ext.mei.vllm_server --model DIR --version v0 [--port P] [-- <vllm serve arguments>]`` starts
``vllm serve DIR`` on a private loopback port with ``VLLM_SERVER_DEV_MODE=1`` and answers in front of it:

- ``POST /v1/chat/completions``: forwarded to vLLM (the request's ``model`` set to vLLM's served name, its
  ``max_tokens`` capped at ``--max-new-tokens``, as the transformers server caps it); the answer's
  ``model`` is the **version** that produced it, as :mod:`verl_ext.mei.server` reports it. Streaming is refused (the
  tool server never streams, and a stream could span a load).
- ``POST /admin/load {"path": DIR, "version": "v3"}``: new requests wait, requests in flight finish on the old
  weights, then vLLM reloads ``DIR`` in place through its own API (``POST /collective_rpc`` with the worker's
  ``reload_weights(weights_path=DIR)``), its prefix and encoder caches are reset (they hold states of the old weights)
  and the version switches: a response never mixes versions. No restart: the engine, its CUDA graphs and KV pool stay.
  ``DIR`` must have the served model's architecture and shapes (``config.json`` compared first: a mismatch is a
  ``400 load_failed``, never a half-loaded model).
- ``GET /admin/version``, ``GET /v1/models``, ``GET /health`` (vLLM's health included): as the transformers server.

``--upstream URL`` attaches to a vLLM server started elsewhere (it must run with ``VLLM_SERVER_DEV_MODE=1``, which
exposes the reload routes: keep it on loopback or a private network).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from neos_core.polling import poll_delays
from neos_core.usage import OneLineParser, listening_socket, port, positive_int
from verl_ext.mei.server import LISTEN_BACKLOG, chat_request, create_app, error_response, load_request

SERVED_NAME = "mei"  # vLLM's --served-model-name; clients see the version instead
# config.json keys that must agree for an in-place reload (the engine's shapes were fixed when it started)
SHAPE_KEYS = ("architectures", "model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "intermediate_size", "vocab_size")


def shape_of(model_dir: str | Path) -> dict[str, Any]:
    """The architecture keys of a checkpoint's ``config.json`` (top level and ``text_config``). Raises ``OSError`` or
    ``ValueError`` for a directory that is not an HF checkpoint."""
    path = Path(model_dir) / "config.json"
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e.msg}, line {e.lineno})") from None
    text = config.get("text_config") or {}
    return {key: config.get(key, text.get(key)) for key in SHAPE_KEYS}


class VersionGate:
    """Many requests at once, or one switch: a switch waits for the requests in flight and holds new ones back, so
    every request runs on one version from start to end."""

    def __init__(self) -> None:
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._open = asyncio.Event()
        self._open.set()
        self._switch = asyncio.Lock()

    @property
    def switching(self) -> bool:
        """A switch holds new requests back (waiting for those in flight, or loading)."""
        return not self._open.is_set()

    @contextlib.asynccontextmanager
    async def request(self) -> AsyncIterator[None]:
        await self._open.wait()
        self._in_flight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    @contextlib.asynccontextmanager
    async def switch(self) -> AsyncIterator[None]:
        async with self._switch:
            self._open.clear()
            try:
                await self._idle.wait()
                yield
            finally:
                self._open.set()


class VLLMMEIServer:
    """The aiohttp application's state: the vLLM server behind it, the served version and its checkpoint."""

    def __init__(self, upstream: str, model_dir: str | Path, version: str, *, max_new_tokens: int = 2048,
                 timeout_s: float = 600.0) -> None:
        self.upstream = upstream.rstrip("/")
        self.max_new_tokens = max_new_tokens
        self.version, self.path = version, str(model_dir)
        self.shape = shape_of(model_dir)
        self.gate = VersionGate()
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    async def close(self, _app: web.Application | None = None) -> None:
        if self._session is not None:
            await self._session.close()

    async def _upstream(self, method: str, route: str, body: dict | None = None) -> tuple[int, Any]:
        async with self.session().request(method, self.upstream + route, json=body) as resp:
            text = await resp.text()
            try:
                return resp.status, json.loads(text) if text else None
            except json.JSONDecodeError:
                return resp.status, text

    async def chat(self, request: web.Request) -> web.Response:
        body = await chat_request(request)
        if isinstance(body, web.Response):
            return body
        if body.get("stream"):
            return error_response(400, "invalid_request", "stream=true is not served (a stream could span a load)")
        asked = body.get("max_tokens")
        if asked is not None and (isinstance(asked, bool) or not isinstance(asked, int) or asked < 1):
            return error_response(400, "invalid_request", "max_tokens must be a positive integer")
        body = {**body, "model": SERVED_NAME, "max_tokens": min(asked or self.max_new_tokens, self.max_new_tokens)}
        async with self.gate.request():
            version = self.version
            try:
                status, answer = await self._upstream("POST", "/v1/chat/completions", body)
            except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                return error_response(503, "upstream_unavailable", f"vLLM at {self.upstream}: {e!r}")
        if status == 200 and isinstance(answer, dict):
            answer["model"] = version
        return web.json_response(answer, status=status)

    async def load(self, request: web.Request) -> web.Response:
        parsed = await load_request(request)
        if isinstance(parsed, web.Response):
            return parsed
        path, version = parsed
        try:
            shape = shape_of(path)
        except (OSError, ValueError) as e:
            return error_response(400, "load_failed", f"{type(e).__name__}: {e}")
        if shape != self.shape:
            diff = {k: (self.shape[k], shape[k]) for k in SHAPE_KEYS if self.shape[k] != shape[k]}
            return error_response(400, "load_failed", f"{path} is not the served model's shape (served, new): {diff}")
        async with self.gate.switch():
            started = time.monotonic()
            try:
                status, body = await self._upstream("POST", "/collective_rpc", {
                    "method": "reload_weights", "kwargs": {"weights_path": str(path)}})
                if status != 200:
                    return error_response(502, "load_failed", f"vLLM reload_weights: HTTP {status} {str(body)[:200]}")
                for route in ("/reset_prefix_cache", "/reset_encoder_cache"):
                    status, body = await self._upstream("POST", route)
                    if status != 200:
                        return error_response(502, "load_failed", f"vLLM {route}: HTTP {status} {str(body)[:200]}")
            except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                return error_response(503, "upstream_unavailable", f"vLLM at {self.upstream}: {e!r}")
            previous, self.version, self.path = self.version, version, path
        return web.json_response({"version": version, "previous": previous,
                                  "load_s": round(time.monotonic() - started, 3)})

    async def version_route(self, request: web.Request) -> web.Response:
        return web.json_response({"version": self.version, "path": self.path})

    async def health(self, request: web.Request) -> web.Response:
        try:
            status, _ = await self._upstream("GET", "/health")
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            return error_response(503, "upstream_unavailable", f"vLLM at {self.upstream}: {e!r}")
        if status != 200:
            return error_response(503, "upstream_unhealthy", f"vLLM at {self.upstream}: /health HTTP {status}")
        return web.json_response({"status": "ok", "version": self.version})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.version, "object": "model"}]})


def vllm_command(model_dir: Path, vllm_port: int, extra: Sequence[str]) -> list[str]:
    """``vllm serve`` on loopback under the served name the proxy rewrites (``extra``: the user's engine flags)."""
    return [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model_dir), "--host", "127.0.0.1",
            "--port", str(vllm_port), "--served-model-name", SERVED_NAME, *extra]


async def wait_healthy(url: str, proc: subprocess.Popen | None, timeout_s: float) -> None:
    """Until ``url``/health answers 200 (vLLM, and both MEI servers); raises ``RuntimeError`` if ``proc`` exits or the
    time runs out."""
    deadline, delays = time.monotonic() + timeout_s, poll_delays()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{url}: its process exited with {proc.returncode} before it was healthy")
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                async with session.get(url + "/health") as resp:
                    if resp.status == 200:
                        return
            await asyncio.sleep(next(delays))
    raise RuntimeError(f"{url} not healthy after {timeout_s:.0f} s")


def parser() -> OneLineParser:
    p = OneLineParser(prog="python -m verl_ext.mei.vllm_server", description="The MEI served by vLLM with the "
                      "trainer's version/load contract: checkpoints reloaded in place between rollout rounds (Neos: "
                      "Learning to Interleave Search and Visual Reasoning, Sec. 3.5). Arguments after -- go to "
                      "vllm serve.")
    p.add_argument("--model", required=True, type=Path, metavar="DIR", help="HF checkpoint directory of the MEI")
    p.add_argument("--version", required=True, help="version name of this checkpoint (e.g. v0)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, loopback only)")
    p.add_argument("--port", type=port, default=8010, help="TCP port (default: 8010)")
    p.add_argument("--max-new-tokens", type=positive_int, default=2048, metavar="N",
                   help="tokens one answer may generate at most; a request's max_tokens may lower it (default: 2048)")
    p.add_argument("--vllm-port", type=port, default=None,
                   help="loopback port of the vllm serve it starts (default: --port + 1)")
    p.add_argument("--upstream", default=None, metavar="URL",
                   help="attach to a running vLLM server (started with VLLM_SERVER_DEV_MODE=1) instead of starting one")
    p.add_argument("--start-timeout-s", type=float, default=900.0,
                   help="seconds vLLM may take to become healthy (default: 900)")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    p = parser()
    args = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if not args.version.strip():
        p.error("argument --version: must not be empty")
    if not (args.model / "config.json").is_file():
        p.error(f"--model: {args.model} is not an HF checkpoint directory (no config.json)")
    if args.upstream and extra:
        p.error("arguments after -- go to the vllm serve this starts; with --upstream none is started")
    try:
        sock = listening_socket(args.host, args.port, LISTEN_BACKLOG)
    except OSError as e:
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 1
    proc = None
    upstream = args.upstream
    if upstream is None:
        vllm_port = args.vllm_port or args.port + 1
        upstream = f"http://127.0.0.1:{vllm_port}"
        proc = subprocess.Popen(vllm_command(args.model, vllm_port, extra),
                                env={**os.environ, "VLLM_SERVER_DEV_MODE": "1"})
    try:
        asyncio.run(wait_healthy(upstream, proc, args.start_timeout_s))
        server = VLLMMEIServer(upstream, args.model, args.version, max_new_tokens=args.max_new_tokens)
        app = create_app(server)
        app.on_cleanup.append(server.close)
        web.run_app(app, sock=sock, backlog=LISTEN_BACKLOG)
    except RuntimeError as e:
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 1
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
