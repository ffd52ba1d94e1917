"""``python -m tool_server --world DIR [--host H] [--port P] [--session-ttl S] [--mei-endpoint URL]
[--mei-log PATH] [--cache-dir DIR] [--redis-url URL]``: serve both protocols' tools over the offline world."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from aiohttp import web

from data_gen.world.store import WorldError
from tool_server.app import ServerSettings, create_app
from tool_server.cache import TieredCache
from tool_server.mei import MEIConfig, build_interface
from tool_server.offline.world import OfflineWorld


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tool_server", description="Serve Neos' and ModalSearcher's tools.")
    p.add_argument("--world", required=True, type=Path, help="a built world directory (python -m data_gen.world build)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    p.add_argument("--session-ttl", type=float, default=3600.0, help="seconds before an idle session is evicted")
    p.add_argument(
        "--mei-endpoint", default=None, help="OpenAI-compatible base URL of the MEI model (default: extractive MEI)"
    )
    p.add_argument("--mei-model", default="mei")
    p.add_argument(
        "--mei-log", type=Path, default=None, help="MEI call log (default: CACHE_DIR/mei.jsonl or ./mei.jsonl)"
    )
    p.add_argument("--no-ocr", action="store_true", help="extractive MEI without OCR of image text")
    p.add_argument("--cache-dir", type=Path, default=None, help="disk tier of the result cache and image-feature cache")
    p.add_argument(
        "--shared-cache-dir", type=Path, default=None, help="shared (network) directory tier of the result cache"
    )
    p.add_argument("--redis-url", default=None, help="Redis shared tier of the result cache")
    p.add_argument("--log-level", default="INFO")
    return p


async def _serve(args: argparse.Namespace) -> None:
    world = OfflineWorld.load(args.world, cache_dir=args.cache_dir)
    mei_log = args.mei_log or ((args.cache_dir or Path(".")) / "mei.jsonl")
    mei = build_interface(
        MEIConfig(endpoint=args.mei_endpoint, model=args.mei_model, log_path=mei_log, ocr=not args.no_ocr)
    )
    cache = TieredCache.from_config(
        disk_dir=args.cache_dir / "results" if args.cache_dir else None,
        shared_dir=args.shared_cache_dir,
        redis_url=args.redis_url,
    )
    app = create_app(world=world, mei=mei, cache=cache, settings=ServerSettings(session_ttl_s=args.session_ttl))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port)
    await site.start()
    host, port = runner.addresses[0][:2]
    print(
        f"tool_server listening on http://{host}:{port} world {world.content_hash[:16]} "
        f"({len(world.world.pages)} pages, {len(world.world.images)} images)",
        flush=True,
    )
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
        world.close()


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.session_ttl <= 0:
        parser.error("--session-ttl must be > 0")
    if not 0 <= args.port <= 65535:
        parser.error("--port must be 0..65535")
    if args.shared_cache_dir and args.redis_url:
        parser.error("give --shared-cache-dir or --redis-url, not both")
    try:
        asyncio.run(_serve(args))
    except WorldError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # address in use, unwritable cache/log directory
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
