"""Several tool servers (one per node: ``tool_server.ray_fleet``) as one agent-loop process sees them: each session
placed on a healthy server by rendezvous hashing of its shard key, servers that fail skipped by new sessions.

A session lives on the server that opened it (its visual register is that process's memory), so only opening one
chooses: the servers ranked by SHA-256 of ``key + url``, the first healthy one taken. Rendezvous hashing moves only
the keys of a server that goes down or comes back, and every process ranks alike without talking to the others. The
agent loop's shard key is the rollout group's uid: the G sessions of a GRPO group land on one server, where
identical calls of the group are computed once by that process's single-flight cache even without a shared tier.

Health: a server is marked down when opening a session on it gets no usable answer (refused connection, timeout,
5xx), or when a call of one of its sessions cannot connect and a ``/healthz`` probe fails too (the session is then
lost: ``ToolSession`` ends its episode as tool instability). New sessions skip a server that is down for
``retry_s``; after that the next open tries it again. Counted in ``events`` (and logged): ``marked_down``;
``rerouted``, session opens (and tool-list fetches) answered by a server other than their first choice.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from verl_ext.tools.client import ToolServerClient, ToolServerUnavailable, shared_client

log = logging.getLogger(__name__)
T = TypeVar("T")


def server_urls(value: str | Sequence[str]) -> list[str]:
    """A tool-server address setting as a list: one URL, a comma-separated list (``$NEOS_TOOL_SERVER_URL``) or a
    list (YAML)."""
    items = value.split(",") if isinstance(value, str) else [str(u) for u in value]
    urls = [u.strip().rstrip("/") for u in items if u.strip()]
    if not urls:
        raise ValueError(f"no tool server URL in {value!r}")
    if len(set(urls)) != len(urls):
        raise ValueError(f"a tool server URL is listed twice in {value!r}")
    return urls


class ServerShards:
    """The servers of one address list, with their health as this process has seen it."""

    def __init__(self, urls: Sequence[str], timeout_s: float, *, retry_s: float = 10.0, probe_s: float = 5.0) -> None:
        self.urls = list(urls)
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self.probe_s = probe_s
        self._down_until: dict[str, float] = {}
        self.events: Counter[str] = Counter()

    def client(self, url: str) -> ToolServerClient:
        return shared_client(url, self.timeout_s)

    def ranked(self, key: str) -> list[str]:
        """Every server, the key's first choice first (rendezvous order)."""
        return sorted(self.urls, key=lambda u: hashlib.sha256(f"{key}\0{u}".encode()).digest(), reverse=True)

    def healthy(self) -> list[str]:
        now = time.monotonic()
        return [u for u in self.urls if self._down_until.get(u, 0.0) <= now]

    def mark_down(self, url: str, reason: str) -> None:
        self._down_until[url] = time.monotonic() + self.retry_s
        self.events["marked_down"] += 1
        log.warning("tool server %s marked down for new sessions for %gs: %s", url, self.retry_s, reason)

    async def place(self, key: str, open_on: Callable[[ToolServerClient], Awaitable[T]]) -> tuple[ToolServerClient, T]:
        """``open_on(client)`` on the key's first healthy server; on no answer, marks it down and tries the next.
        With every server down, all are tried in order (one may be back). Raises the last failure."""
        ranked = self.ranked(key)
        up = set(self.healthy())
        failure: ToolServerUnavailable | None = None
        for url in [u for u in ranked if u in up] or ranked:
            client = self.client(url)
            try:
                result = await open_on(client)
            except ToolServerUnavailable as e:
                self.mark_down(url, str(e))
                failure = e
                continue
            if url != ranked[0]:
                self.events["rerouted"] += 1
            return client, result
        assert failure is not None
        raise failure

    async def gone(self, client: ToolServerClient) -> bool:
        """:func:`server_gone`, marking the server down if so."""
        if await server_gone(client, self.probe_s):
            self.mark_down(client.base_url, "health probe failed")
            return True
        return False


async def server_gone(client: ToolServerClient, probe_s: float = 5.0) -> bool:
    """Whether the server behind ``client`` is gone: its ``/healthz`` gives no usable answer within ``probe_s``."""
    try:
        await client.health(probe_s)
    except ToolServerUnavailable:
        return True
    return False


_SHARDS: dict[tuple[tuple[str, ...], float], ServerShards] = {}


def shared_shards(urls: Sequence[str], timeout_s: float) -> ServerShards:
    """One health view per address list and timeout, shared by every episode of a worker process."""
    key = (tuple(urls), timeout_s)
    if key not in _SHARDS:
        _SHARDS[key] = ServerShards(urls, timeout_s)
    return _SHARDS[key]
