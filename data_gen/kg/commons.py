"""The Commons files a Wikidata dump's image statements name, downloaded into a directory (``python -m data_gen neos
--kg DUMP`` without ``--kg-images``): what ``--kg-images`` would otherwise hold.

Each file is fetched from ``BASE/<file name>`` (default: Wikimedia Commons' ``Special:FilePath``, which redirects to
the file itself) with the tool server's ``SafeFetcher``, so size, content-type and address
limits are the ones the tool server applies to every fetch. A file already in the directory is not fetched again (a
restart redoes only what is missing); each is written to a temporary name and renamed, so a crash never leaves half a
file. A file that cannot be fetched is counted by reason and left out; the world's manifest then counts it as missing.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import quote

from yarl import URL

COMMONS_FILE_PATH = "https://commons.wikimedia.org/wiki/Special:FilePath"
# Wikimedia asks automated clients for a descriptive User-Agent and modest parallelism.
USER_AGENT = "neos-verl-data-gen/1 (Wikidata KG image download)"
PARALLEL = 4
# images, and the text of an error page so its HTTP status is what gets counted
CONTENT_TYPES = ("image/*", "text/html", "text/plain")


def file_url(base: str, file_name: str) -> str:
    return f"{base.rstrip('/')}/{quote(file_name)}"


def _trusted_endpoint(base: str) -> list[tuple[str, int]]:
    """The base named by the user is trusted like a tool server's configured search API: when it is an IP literal
    (a local mirror), that one endpoint is allowed even if private; every other address keeps the public-only
    policy (redirects included)."""
    u = URL(base)
    try:
        return [(str(ipaddress.ip_address(u.host or "")), u.port or 0)]
    except ValueError:
        return []


async def download(file_names: Iterable[str], dest: Path, base: str = COMMONS_FILE_PATH, *,
                   timeout_s: float = 60.0) -> dict[str, int]:
    """Every name of ``file_names`` into ``dest``; returns counts: ``fetched``, ``present`` (already there) and
    ``failed_<reason>`` (the fetcher's reason: ``connection``, ``http_404``, ``content_type``, ``too_large``...)."""
    from tool_server.net import FetchError, SafeFetcher  # here: the CLI's flags import this module for --help

    counts: Counter[str] = Counter()
    fetcher = SafeFetcher(allowed_endpoints=_trusted_endpoint(base), content_types=CONTENT_TYPES, timeout_s=timeout_s,
                          user_agent=USER_AGENT)
    gate = asyncio.Semaphore(PARALLEL)

    async def one(name: str) -> None:
        target = dest / name
        if target.is_file():
            counts["present"] += 1
            return
        async with gate:
            try:
                result = await fetcher.fetch(file_url(base, name))
            except FetchError as err:
                counts[f"failed_{err.reason}"] += 1
                return
        if result.status != 200:
            counts[f"failed_http_{result.status}"] += 1
            return
        if not result.content_type.startswith("image/"):
            counts["failed_not_an_image"] += 1
            return
        dest.mkdir(parents=True, exist_ok=True)  # only once a file came: a run that fetched nothing leaves nothing
        tmp = target.with_name(f".{name}.tmp-{os.getpid()}")
        tmp.write_bytes(result.body)
        tmp.replace(target)
        counts["fetched"] += 1

    try:
        await asyncio.gather(*(one(name) for name in sorted(set(file_names)) if _safe_name(name)))
    finally:
        await fetcher.close()
    counts["failed_bad_file_name"] += sum(1 for name in set(file_names) if not _safe_name(name))
    return {k: v for k, v in sorted(counts.items()) if v}


def _safe_name(name: str) -> bool:
    """A Commons file name that stays inside ``dest`` (a dump is input, not trusted)."""
    return bool(name) and "/" not in name and "\\" not in name and name not in {".", ".."} and not name.startswith(".")
