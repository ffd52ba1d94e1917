"""An OpenAI-compatible MEI server on transformers that can switch checkpoints between rollout rounds (Neos §3.5).

``python -m verl_ext.mei.server --model DIR --version v0 [--host H] [--port P] [--device cuda] [--max-new-tokens N]``

Routes:
- ``POST /v1/chat/completions``: messages with text and ``image_url`` (inline PNG/JPEG data URL) parts, as the tool
  server's model MEI sends them; ``temperature``, ``top_p``, ``max_tokens``, ``seed`` honoured; ``response_format``
  accepted but not enforced (no constrained decoding: the tool server validates, repairs, retries, falls back). The
  answer's ``model`` field is the **version of the checkpoint that produced it**: the tool server records it per call.
- ``POST /admin/load {"path": DIR, "version": "v3"}``: load a checkpoint (the HF directory ``train_mei`` wrote) and make
  it current; answers ``{"version", "previous"}``. Requests already running finish on the checkpoint they started on;
  later ones get the new one, so a response never mixes versions.
- ``GET /admin/version`` and ``GET /v1/models``: the current version.
- ``GET /health``: 200 with the current version, the probe OpenAI-compatible servers answer (vLLM, SGLang) and
  rLLM's model gateway sends each worker before routing to it (no answer: "No healthy workers available").

Generation is :class:`verl_ext.rollout.hf_generate.TransformersGenerateClient` (one request at a time per model); the
prompt goes through the model's own processor and chat template (:func:`verl_ext.mei.chat.render`), the layout MEI is
trained on. Production serving of a 9B MEI belongs on vLLM/SGLang with a restart per version; this server is for
development machines, smoke runs and tests.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from dataclasses import dataclass
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from neos_core.usage import OneLineParser, listening_socket, port, positive_int
from verl_ext.mei.chat import ChatInputError, render
from verl_ext.notices import quiet_verl_import_notices
from verl_ext.tools.shards import server_urls

if TYPE_CHECKING:  # torch, transformers and verl load with the first checkpoint, not for --help
    from verl_ext.rollout.hf_generate import TransformersGenerateClient


@dataclass(frozen=True, slots=True)
class Served:
    version: str
    path: str
    client: TransformersGenerateClient


def error_response(status: int, type_: str, message: str) -> web.Response:
    """The OpenAI-style error body every MEI server route answers with."""
    return web.json_response({"error": {"type": type_, "message": message}}, status=status)


def load_checkpoint(path: str | Path, version: str, *, device: str = "cpu", max_new_tokens: int = 2048) -> Served:
    """Load an HF checkpoint (weights, processor, chat template) for serving. Raises ``OSError`` / ``ValueError``."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from verl_ext.rollout.hf_generate import TransformersGenerateClient

    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no HF checkpoint at {path} (config.json missing)")
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=dtype).to(device)
    client = TransformersGenerateClient(model, AutoProcessor.from_pretrained(path), max_new_tokens=max_new_tokens,
                                        record_calls=False)
    return Served(version, str(path), client)


@dataclass(frozen=True, slots=True)
class Completion:
    text: str  # special tokens (the closing <|im_end|>) removed
    finish_reason: str  # "stop" or "length", as chat completions report it
    prompt_tokens: int
    completion_tokens: int


async def complete(served: Served, messages: list[dict[str, Any]], sampling: dict[str, Any]) -> Completion:
    """What the server answers to ``messages``: rendered with the checkpoint's processor and chat template, generated
    with ``sampling`` (the client's ``temperature``/``max_tokens``/..., capped at the server's ``max_new_tokens``).
    One function for the HTTP route and the warm start's check, so the check decodes exactly as the server serves.
    Raises :class:`ChatInputError` for messages the model cannot take."""
    processor = served.client.processor
    prompt = render(processor, messages)
    prompt_ids = processor(text=[prompt.text], images=prompt.images or None, return_tensors="pt")["input_ids"][0]
    out = await served.client.generate(f"mei-{uuid.uuid4().hex}", prompt_ids=prompt_ids.tolist(),
                                       sampling_params={"logprobs": False, **sampling},
                                       image_data=prompt.images or None)
    return Completion(processor.tokenizer.decode(out.token_ids, skip_special_tokens=True),
                      "stop" if out.stop_reason == "stop" else "length", int(prompt_ids.shape[0]),
                      len(out.token_ids))


async def chat_request(request: web.Request) -> dict[str, Any] | web.Response:
    """``POST /v1/chat/completions``' body (a JSON object with a non-empty ``messages`` list), or the 400 to send."""
    try:
        body = await request.json()
    except ValueError:
        return error_response(400, "invalid_json", "the body is not JSON")
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
        return error_response(400, "invalid_request", "need a JSON object with a non-empty messages list")
    return body


async def load_request(request: web.Request) -> tuple[str, str] | web.Response:
    """``POST /admin/load``'s body as ``(path, version)``, or the 400 answer to send."""
    try:
        body = await request.json()
    except ValueError:
        return error_response(400, "invalid_json", "the body is not JSON")
    if not isinstance(body, dict) or not isinstance(body.get("path"), str) or not isinstance(
            body.get("version"), str) or not body["version"]:
        return error_response(400, "invalid_request", 'need {"path": str, "version": non-empty str}')
    return body["path"], body["version"]


class MEIServer:
    """The aiohttp application's state: the current checkpoint and how to load the next one."""

    def __init__(self, served: Served, *, device: str = "cpu", max_new_tokens: int = 2048) -> None:
        self.served = served
        self._device = device
        self._max_new_tokens = max_new_tokens
        self._load_lock = asyncio.Lock()

    async def chat(self, request: web.Request) -> web.Response:
        served = self.served  # this request's checkpoint, whatever loads meanwhile
        body = await chat_request(request)
        if isinstance(body, web.Response):
            return body
        sampling: dict[str, Any] = {}
        for key, kind in (("temperature", float), ("top_p", float), ("max_tokens", int), ("seed", int)):
            value = body.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                return error_response(400, "invalid_request", f"{key} must be a non-negative number")
            sampling[key] = kind(value)
        try:
            answer = await complete(served, body["messages"], sampling)
        except ChatInputError as e:
            return error_response(400, "invalid_messages", str(e))
        return web.json_response({
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": served.version,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer.text},
                         "finish_reason": answer.finish_reason}],
            "usage": {"prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
                      "total_tokens": answer.prompt_tokens + answer.completion_tokens},
        })

    async def load(self, request: web.Request) -> web.Response:
        parsed = await load_request(request)
        if isinstance(parsed, web.Response):
            return parsed
        path, version = parsed
        async with self._load_lock:
            loop = asyncio.get_running_loop()
            try:
                served = await loop.run_in_executor(None, lambda: load_checkpoint(
                    path, version, device=self._device, max_new_tokens=self._max_new_tokens))
            except (OSError, ValueError) as e:
                return error_response(400, "load_failed", f"{type(e).__name__}: {e}")
            previous, self.served = self.served.version, served
        return web.json_response({"version": served.version, "previous": previous})

    async def version_route(self, request: web.Request) -> web.Response:
        return web.json_response({"version": self.served.version, "path": self.served.path})

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "version": self.served.version})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.served.version, "object": "model"}]})


def create_app(server: Any) -> web.Application:
    """The MEI routes over ``server`` (:class:`MEIServer`, or the vLLM-backed one): same contract, either engine."""
    app = web.Application(client_max_size=256 * 1024**2)  # requests carry up to a few dozen inline images
    app.router.add_post("/v1/chat/completions", server.chat)
    app.router.add_get("/v1/models", server.models)
    app.router.add_post("/admin/load", server.load)
    app.router.add_get("/admin/version", server.version_route)
    app.router.add_get("/health", server.health)
    return app


async def _json(method: str, url: str, body: dict | None, timeout_s: float) -> tuple[int, Any]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        async with session.request(method, url, json=body) as resp:
            return resp.status, await resp.json(content_type=None)


async def activate(base_url: str, path: str | Path, version: str, *, timeout_s: float = 600.0) -> str:
    """Make the MEI server at ``base_url`` (``http://host:port``) serve ``path`` as ``version``; returns the version
    it reports. Raises ``RuntimeError`` with the server's structured error when it refuses."""
    status, body = await _json("POST", base_url.rstrip("/") + "/admin/load", {"path": str(path), "version": version},
                               timeout_s)
    if status != 200:
        raise RuntimeError(f"MEI server refused {path} as {version}: {body}")
    return body["version"]


async def served_version(base_url: str, *, timeout_s: float = 30.0) -> str:
    """The version the MEI server at ``base_url`` serves now."""
    status, body = await _json("GET", base_url.rstrip("/") + "/admin/version", None, timeout_s)
    if status != 200 or not isinstance(body, dict) or not isinstance(body.get("version"), str):
        raise RuntimeError(f"MEI server at {base_url} did not report its version: HTTP {status} {str(body)[:200]}")
    return body["version"]


async def announce(tool_server_url: str | Sequence[str], version: str, *, timeout_s: float = 30.0) -> str:
    """Tell the tool server(s) that ``version`` is now served (their ``POST /admin/mei_version``): sessions they create
    from now on are fixed to it and their MEI-backed cache entries are keyed by it. ``tool_server_url``: one URL or
    several (a list, or comma-separated: one server per node), all told at once; one that refuses or cannot be
    reached raises (its sessions would mix versions), and so does one whose MEI is the extractive interface (it would
    log every call under ``version`` while no checkpoint ever answers). Returns the version."""

    async def one(url: str) -> None:
        try:
            status, body = await _json("POST", url + "/admin/mei_version", {"version": version}, timeout_s)
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            raise RuntimeError(f"tool server at {url} was not told MEI version {version}: {e!r}") from None
        if status != 200 or not isinstance(body, dict) or body.get("version") != version:
            raise RuntimeError(f"tool server at {url} refused MEI version {version}: HTTP {status} {str(body)[:200]}")
        if body.get("interface") != "model":
            raise RuntimeError(f"tool server at {url} answers MEI calls with the {body.get('interface')} "
                               "interface, not a model MEI: trainer.v1.neos.mei.enable=true needs it started with "
                               "--mei-endpoint <MEI server>/v1 (or set trainer.v1.neos.mei.enable=false)")

    await asyncio.gather(*(one(url) for url in server_urls(tool_server_url)))
    return version


LISTEN_BACKLOG = 128  # aiohttp's own default: the MEI server answers one tool server per node


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m verl_ext.mei.server", description="An OpenAI-compatible MEI server on "
                      "transformers that can switch checkpoints between rollout rounds (Neos: Learning to Interleave "
                      "Search and Visual Reasoning, Sec. 3.5); for development machines, smoke runs and tests.")
    p.add_argument("--model", required=True, type=Path, metavar="DIR",
                   help="HF checkpoint directory of the MEI model (config.json, weights, processor)")
    p.add_argument("--version", required=True,
                   help="version name of this checkpoint, reported as each answer's model field (e.g. v0)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, loopback only)")
    p.add_argument("--port", type=port, default=8010, help="TCP port (default: 8010)")
    p.add_argument("--device", default=None,
                   help="torch device of the model, e.g. cuda, cuda:1, cpu (default: cuda when available, else cpu)")
    p.add_argument("--max-new-tokens", type=positive_int, default=2048, metavar="N",
                   help="tokens one answer may generate at most; a request's max_tokens may lower it (default: 2048)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if not args.version.strip():
        p.error("argument --version: must not be empty")
    if not (args.model / "config.json").is_file():
        p.error(f"--model: {args.model} is not an HF checkpoint directory (no config.json)")
    try:
        sock = listening_socket(args.host, args.port, LISTEN_BACKLOG)  # before the model is loaded
    except OSError as e:
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 1
    quiet_verl_import_notices()
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    served = load_checkpoint(args.model, args.version, device=device, max_new_tokens=args.max_new_tokens)
    server = MEIServer(served, device=device, max_new_tokens=args.max_new_tokens)
    web.run_app(create_app(server), sock=sock, backlog=LISTEN_BACKLOG)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
