"""From the parsed flags of ``python -m tool_server`` to a server's parts: the world, the application, its settings,
its body and connection limits and the line it announces. Both the one-process server (``__main__``) and the
``--workers`` router and its workers (``workers``) assemble theirs here."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import tempfile
from pathlib import Path

from aiohttp import web

from neos_core.world.sources import default_cache_dir
from tool_server.app import ServerSettings, create_app
from tool_server.bodies import BodyLimits
from tool_server.cache import TieredCache
from tool_server.connections import ConnectionLimits
from tool_server.image_processes import SHM_DIR, SHM_PREFIX
from tool_server.mei import MEIConfig, build_interface
from tool_server.mei.ocr import disk_cache_dir
from tool_server.net import SafeFetcher
from tool_server.offline.world import INDEX_DIR_PREFIX, OfflineWorld
from tool_server.orphans import remove_orphans
from tool_server.online import LensClient, ReaderClient
from tool_server.online.public import PublicImages
from tool_server.online.web import OnlineBackends


def _online(args: argparse.Namespace) -> OnlineBackends | None:
    if not args.online:
        return None
    search = LensClient.from_env()  # web, image and reverse search; BackendError("config") names a missing variable
    reader = ReaderClient.from_env() if os.environ.get("NEOS_READER_BASE_URL") else None
    return OnlineBackends(
        SafeFetcher(allow_private=args.allow_private_network),
        search,
        lens=search,
        reader=reader,
        public=PublicImages(args.public_base_url) if args.public_base_url else None,
    )


# accept queue of every listening socket (the kernel caps it at net.core.somaxconn): aiohttp's sites default to 128 and
# re-listen a given socket with theirs; 1,024 sessions' calls arriving at once while a loop was busy overflowed it
LISTEN_BACKLOG = 4096


def load_world(args: argparse.Namespace) -> OfflineWorld:
    """The world, after removing the index directories and shared-memory files that servers killed outright left
    behind. Its image features
    go to ``--cache-dir``, else to the source cache's ``tool-server/`` (keyed by the world's content hash, like the
    worlds built there), so that only a server's first start on a world computes them (~10 s of CPU on the small
    world; every eval run, tour and walkthrough started one without a cache directory)."""
    temp = Path(tempfile.gettempdir())
    for path in [*remove_orphans(temp, INDEX_DIR_PREFIX), *remove_orphans(Path(SHM_DIR or temp), SHM_PREFIX)]:
        logging.getLogger(__name__).info("removed %s, left by a server process that is gone", path)
    cache_dir = args.cache_dir or default_cache_dir() / "tool-server"
    return OfflineWorld.load(args.world, cache_dir=cache_dir, search_processes=args.search_processes)


def build_app(args: argparse.Namespace, world: OfflineWorld, settings: ServerSettings) -> web.Application:
    """The server of one process over ``world``: MEI, cache tiers and online backends as the flags say."""
    online = _online(args)
    mei_log = args.mei_log or ((args.cache_dir or Path(".")) / "mei.jsonl")
    mei = build_interface(
        MEIConfig(endpoint=args.mei_endpoint, model=args.mei_model, log_path=mei_log, ocr=not args.no_ocr,
                  ocr_cache_dir=disk_cache_dir(args.cache_dir) if args.cache_dir else None)
    )
    cache = TieredCache.from_config(
        disk_dir=args.cache_dir / "results" if args.cache_dir else None,
        shared_dir=args.shared_cache_dir,
        redis_url=args.redis_url,
        lease_s=args.redis_lease_s,
        lease_max_wait_s=args.redis_lease_wait_s,
    )
    return create_app(world=world, mei=mei, cache=cache, settings=settings, online=online)


def server_settings(args: argparse.Namespace, *, share: int = 1, **extra) -> ServerSettings:
    """The settings of one server process; ``share``: one of that many ``--workers``, which split the server's image
    budget, session cap and per-client quota between them (each holds its own sessions)."""
    return ServerSettings(
        session_ttl_s=args.session_ttl,
        max_sessions=-(-ServerSettings().max_sessions // share),
        max_sessions_per_client=-(-args.max_sessions_per_client // share),
        max_session_image_bytes=args.session_image_mib * 2**20,
        memory_budget_bytes=int(args.memory_budget_gib * 2**30) // share,
        client_memory_share=args.client_share,
        bodies=body_limits(args),  # not split: the router's own budget bounds them all
        image_processes=args.image_processes,
        image_process_min_bytes=args.image_process_min_kib * 1024,
        **extra,
    )


def body_limits(args: argparse.Namespace) -> BodyLimits:
    """The bounds on request bodies of one process (the router's with --workers)."""
    inflight = args.inflight_body_mib * 2**20
    return BodyLimits(inflight_bytes=inflight, call_reserve_bytes=inflight // 8, client_share=args.client_share,
                      grace_s=args.body_grace_s, min_rate_bps=args.body_min_kib_per_s * 1024)


def connection_limits(args: argparse.Namespace) -> ConnectionLimits:
    """The limits on the public port's client connections (the router's with --workers)."""
    return ConnectionLimits(
        max_connections=args.max_connections, keepalive_s=args.keepalive_s, header_timeout_s=args.header_timeout_s,
        drain_s=args.drain_s,
    )


def announce(args: argparse.Namespace, sock: socket.socket, world: OfflineWorld, extra: str = "") -> None:
    """The line ``tool_server.launch.served`` (and an operator) waits for: address, world, mode."""
    host, port = sock.getsockname()[:2]
    mode = "" if not args.online else " online, private network allowed" if args.allow_private_network else " online"
    print(
        f"tool_server listening on http://{host}:{port} world {world.content_hash[:16]} "
        f"({len(world.world.pages)} pages, {len(world.world.images)} images){mode}{extra}",
        flush=True,
    )
