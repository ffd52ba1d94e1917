"""``python -m tool_server --world DIR [--host H] [--port P] [--session-ttl S] [--mei-endpoint URL] [--mei-log PATH]
[--cache-dir DIR] [--redis-url URL] [--online [--public-base-url URL] [--allow-private-network]] [--max-connections N]
[--keepalive-s S] [--header-timeout-s S] [--no-uvloop]``: serve both protocols' tools over the offline world, or
(``--online``) over the web as well. Runs on uvloop when it is installed (``--no-uvloop``: asyncio's own loop)."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import socket
import sys
from pathlib import Path

from aiohttp import web

from neos_core.usage import (
    OneLineParser,
    listening_socket,
    nonnegative_int,
    port,
    positive_float,
    positive_int,
    share,
)
from neos_core.world.store import WorldError
from tool_server import allocator
from tool_server.assembly import LISTEN_BACKLOG, announce, build_app, connection_limits, load_world, server_settings
from tool_server.bodies import BodyLimits
from tool_server.connections import ConnectionLimits, GuardedAppRunner
from tool_server.loop import run, until_terminated
from tool_server.online import BackendError

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m tool_server", description="Serve the tools of Neos (TextSearch, ImageSearch, "
                      "ReverseImageSearch, WebVisit, FetchImage, CropImage) and ModalSearcher over HTTP, on the "
                      "offline world or (--online) the web, with per-session image registers and a result cache.")
    p.add_argument("--world", required=True, type=Path, metavar="DIR",
                   help="a built world directory (python -m data_gen.world build)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, loopback only)")
    p.add_argument("--port", type=port, default=8080, help="TCP port; 0 picks a free one (default: 8080)")
    p.add_argument("--session-ttl", type=positive_float, default=3600.0, metavar="SECONDS",
                   help="seconds before an idle session is evicted (default: 3600)")
    p.add_argument("--workers", type=positive_int, default=1, metavar="N",
                   help="server processes forked after the world loads (sharing it copy-on-write) behind one router on "
                   "--port that sends every call of a session to the process holding it (default: 1)")
    p.add_argument("--search-processes", type=nonnegative_int, default=None, metavar="N",
                   help="spawned processes (per server process) for reverse image search, mapping one copy of the "
                   "index, so searches never take the GIL from the event loop; 0: threads of the server process "
                   "(default: the usable cores divided by --workers, at least 1)")
    p.add_argument("--image-processes", type=nonnegative_int, default=1, metavar="N",
                   help="spawned processes (per server process) that parse session-open bodies of "
                   "--image-process-min-kib or more and decode and base64-encode images that large, so that work never "
                   "holds the GIL the event loop needs; 0: threads of the server process (default: 1)")
    p.add_argument("--image-process-min-kib", type=positive_int, default=1024, metavar="KIB",
                   help="the size from which a body, a base64 image or an answer's PNG goes to --image-processes "
                   "(default: 1024)")
    p.add_argument("--session-image-mib", type=positive_int, default=512, metavar="MIB",
                   help="decoded image memory of one session's visual register, MiB (default: 512)")
    p.add_argument("--inflight-body-mib", type=positive_int, default=256, metavar="MIB",
                   help="request bodies read at once per process (the --workers router too), charged as their bytes "
                   "arrive; bodies over 1 MiB may take all but an eighth; one that does not fit is refused with 503 "
                   "server_busy, not queued (default: 256)")
    p.add_argument("--body-grace-s", type=positive_float, default=BodyLimits().grace_s, metavar="SECONDS",
                   help="a request body may start slower than --body-min-kib-per-s for this long; past it one that "
                   "falls behind is cut, 408 body_timeout (default: %(default)g)")
    p.add_argument("--body-min-kib-per-s", type=positive_int, default=BodyLimits().min_rate_bps // 1024,
                   metavar="KIB", help="the minimum rate of a request body after --body-grace-s (default: %(default)s)")
    p.add_argument("--memory-budget-gib", type=positive_float, default=16.0, metavar="GIB",
                   help="client data one server holds, GiB (split evenly between --workers): session images and "
                   "their PNGs, the result cache's memory level, request bodies, answers being written; the cache "
                   "gives entries back, then least recently used idle sessions are evicted (default: 16)")
    p.add_argument("--client-share", type=share, default=0.5, metavar="FRACTION",
                   help="of the memory budget and of the body budget, what one client address may hold while another "
                   "client competes (holds bytes, or tried within 10 s); past it that client gets 429 client_quota. A "
                   "client alone may use the whole budget (default: %(default)g)")
    p.add_argument("--max-sessions-per-client", type=positive_int, default=10_000, metavar="N",
                   help="open sessions of one client address, over all --workers (default: 10000)")
    p.add_argument("--mei-endpoint", default=None, metavar="URL",
                   help="OpenAI-compatible base URL of the MEI model (default: the extractive MEI, no model)")
    p.add_argument("--mei-model", default="mei", metavar="NAME",
                   help="model name sent to --mei-endpoint (default: mei)")
    p.add_argument("--mei-log", type=Path, default=None, metavar="PATH",
                   help="MEI call log, JSONL (default: CACHE_DIR/mei.jsonl, or ./mei.jsonl without --cache-dir)")
    p.add_argument("--no-ocr", action="store_true", help="extractive MEI without OCR of image text")
    p.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                   help="disk tier of the result cache, the image-feature cache and the OCR texts (default: results "
                   "and OCR texts in memory only, image features in the source cache: NEOS_WORLD_CACHE, else "
                   "~/.cache/neos-world)")
    p.add_argument("--shared-cache-dir", type=Path, default=None, metavar="DIR",
                   help="shared (network) directory tier of the result cache (default: none)")
    p.add_argument("--redis-url", default=None, metavar="URL",
                   help="Redis shared tier of the result cache, redis://HOST:PORT/DB, also coalescing identical "
                   "misses of every process using it (default: none)")
    p.add_argument("--redis-lease-s", type=positive_float, default=10.0, metavar="SECONDS",
                   help="with --redis-url: life of a computing process's lease on a key, renewed while it computes; "
                   "how long a dead holder keeps the others waiting (default: 10)")
    p.add_argument("--redis-lease-wait-s", type=positive_float, default=30.0, metavar="SECONDS",
                   help="with --redis-url: longest wait for another process's computation before computing it here, "
                   "counted (default: 30)")
    p.add_argument("--online", action="store_true",
                   help="web and image search through the SERP API and reverse image search through its Lens engine "
                   "(NEOS_SERP_BASE_URL, NEOS_SERP_API_KEY), pages through a page reader if NEOS_READER_BASE_URL is "
                   "set (NEOS_READER_API_KEY optional), else fetched directly; pages/images outside the world fetched "
                   "from the web, refusing private, loopback and link-local addresses")
    p.add_argument("--public-base-url", default=None, metavar="URL",
                   help="with --online: this server's address as the reverse-image API can reach it (e.g. a reverse "
                   "proxy); session images (question images, crops) are exposed there under /v1/public-images/ while "
                   "their reverse search runs (default: none, and reverse search of a session image is refused with "
                   "public_url_required)")
    p.add_argument("--allow-private-network", action="store_true",
                   help="with --online: also fetch from private/loopback addresses (for replay servers in tests; never "
                   "in production, it lets the policy reach the server's own network)")
    p.add_argument("--max-connections", type=positive_int, default=ConnectionLimits.max_connections, metavar="N",
                   help="open client connections on --port; one over it gets 503 too_many_connections and is closed "
                   "(keep it under the file limit, ulimit -n) (default: %(default)s)")
    p.add_argument("--keepalive-s", type=positive_float, default=ConnectionLimits.keepalive_s, metavar="SECONDS",
                   help="a client connection with no request for this long (from its start or its last answer) is "
                   "closed (default: %(default)g)")
    p.add_argument("--header-timeout-s", type=positive_float, default=ConnectionLimits.header_timeout_s,
                   metavar="SECONDS", help="a request whose headers are not all received this long after their first "
                   "byte has its connection closed (default: %(default)g)")
    p.add_argument("--drain-s", type=positive_float, default=ConnectionLimits.drain_s, metavar="SECONDS",
                   help="on SIGTERM, requests in flight get this long to finish before their connections are closed "
                   "(default: %(default)g)")
    p.add_argument("--no-uvloop", action="store_true",
                   help="run on asyncio's own event loop even when uvloop is installed")
    p.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS,
                   help="server log level on stderr (default: INFO)")
    return p


def _usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


async def _serve(args: argparse.Namespace, sock: socket.socket) -> None:
    world = load_world(args)
    try:  # closed however this ends: a flag refused by build_app (--online without its variables) included
        app = build_app(args, world, server_settings(args))
        # the world and its indexes are millions of objects that live as long as the process: out of the collector's
        # sight, a full collection no longer walks them (it took ~9% of the CPU of an uncached search under load)
        gc.freeze()
        runner = GuardedAppRunner(app, connection_limits(args), access_log=None)
        await runner.setup()
        try:
            site = web.SockSite(runner, sock, backlog=LISTEN_BACKLOG)
            await site.start()
            announce(args, sock, world)
            await until_terminated()
        finally:
            await runner.cleanup()
    finally:
        world.close()


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    stderr = logging.StreamHandler()
    stderr.setLevel(args.log_level)  # for every library too: bm25s sets its own logger to DEBUG
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        handlers=[stderr])
    _check(p, args)
    allocator.configure()  # before the world loads and --workers fork: they inherit it
    try:
        sock = listening_socket(args.host, args.port, LISTEN_BACKLOG)  # before the world is looked at
        if not (args.world / "manifest.json").is_file():
            sock.close()
            p.error(f"--world: {args.world} is not a world: manifest.json is missing (build one with "
                          "python -m data_gen.world build)")
        if args.workers > 1:
            from tool_server.workers import serve_workers

            return serve_workers(args, sock)
        run(_serve(args, sock), use_uvloop=not args.no_uvloop)
    except WorldError as e:
        print(f"{p.prog}: error: --world: {e}", file=sys.stderr)
        return 2
    except BackendError as e:  # --online without its environment variables
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # address in use, unwritable cache/log directory
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    return 0


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The combinations of flags that cannot work together (one value at a time is checked by its type)."""
    if args.search_processes is None:
        args.search_processes = max(1, _usable_cores() // args.workers)
    if args.shared_cache_dir and args.redis_url:
        parser.error("give --shared-cache-dir or --redis-url, not both")
    if args.allow_private_network and not args.online:
        parser.error("--allow-private-network only applies with --online")
    if args.public_base_url is not None:
        if not args.online:
            parser.error("--public-base-url only applies with --online")
        if not args.public_base_url.startswith(("http://", "https://")):
            parser.error("--public-base-url must start with http:// or https://")


if __name__ == "__main__":
    sys.exit(main())
