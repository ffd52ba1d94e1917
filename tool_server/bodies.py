"""Request bodies read within budgets: charged by the bytes actually received, with a deadline and a minimum rate.

The earlier budget charged a large body's declared Content-Length from before it was read until it was answered,
and nothing timed out a body that stopped arriving: one connection declaring 255 MiB and sending 5 bytes refused
every large session open until it closed, and bodies up to 1 MiB were not counted at all (1,500 tool calls stalled
just under 1 MiB took 2.7 GB). Here every body, a tool call's too, is read by :meth:`BodyBudget.receive`:

- a declared length over the body's limit is 413 ``body_too_large`` before a byte is read (a chunked body, once it
  passes the limit);
- each chunk is charged as it arrives, to the process's body budget (bodies over the call limit may use all but
  :attr:`BodyLimits.call_reserve_bytes` of it, so large bodies never leave tool calls without room), to the client's
  share of it (:class:`~tool_server.fairshare.FairShare`: binding only while another client competes) and to the
  process's memory budget; a chunk that does not fit ends the read: 503 ``server_busy`` (retry later), or 429
  ``client_quota`` for a client past its share beside others, whose bodies the others never wait behind;
- a body must arrive at :attr:`BodyLimits.min_rate_bps` after a grace of :attr:`BodyLimits.grace_s`: one that falls
  behind is cut (408 ``body_timeout``, the connection closed) and counted.

The bytes stay charged until the request is answered (:meth:`BodyBudget.release`): the body and what is parsed from
it live that long. One event loop per process: no await between a check and its charge, so no lock.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiohttp import web

from tool_server.errors import ToolError
from tool_server.fairshare import CONTENTION_S, FairShare
from tool_server.limits import MAX_CALL_BODY_BYTES, MAX_INFLIGHT_BODY_BYTES
from tool_server.memory import MemoryBudget


@dataclass(frozen=True, slots=True)
class BodyLimits:
    """``inflight_bytes``: bodies of one process being read or answered at once; ``call_reserve_bytes``: the part
    only bodies of at most the call limit may take; ``client_share``: the fraction one client's bodies may hold while
    another client competes (``contention_s``: how long a client competes after its last body); ``grace_s`` and
    ``min_rate_bps``: a body must have ``min_rate_bps * (elapsed - grace_s)`` bytes in at any time."""

    inflight_bytes: int = MAX_INFLIGHT_BODY_BYTES
    call_reserve_bytes: int = MAX_INFLIGHT_BODY_BYTES // 8
    client_share: float = 0.5
    grace_s: float = 10.0
    min_rate_bps: int = 2**20
    contention_s: float = CONTENTION_S


class BodyBudget:
    def __init__(self, limits: BodyLimits = BodyLimits(), memory: MemoryBudget | None = None) -> None:
        self.limits, self._memory = limits, memory
        self.used = 0
        self.share = FairShare(limits.inflight_bytes, limits.client_share, limits.contention_s)
        self._large_bytes = limits.inflight_bytes - limits.call_reserve_bytes

    async def receive(self, request: web.BaseRequest, max_bytes: int, client: str | None) -> bytes | bytearray:
        """The whole body (a bytearray when ``max_bytes`` is over the call limit), its bytes charged until
        :meth:`release`; ``ToolError`` (nothing left charged) if it is
        over ``max_bytes``, does not fit a budget or falls behind the minimum rate."""
        declared = request.content_length
        if declared is not None and declared > max_bytes:
            raise ToolError("body_too_large", f"{declared} bytes declared; the limit is {max_bytes}", "body")
        content = request.content
        large = max_bytes > MAX_CALL_BODY_BYTES
        if content.is_eof():  # all of it arrived with the headers (a tool call, mostly): nothing to wait for
            # empty when a middleware read it first (request.text()): aiohttp's request.read() keeps that copy
            body = content.read_nowait(-1) or await request.read()
            if len(body) > max_bytes:
                raise ToolError("body_too_large", f"{len(body)} bytes; the limit is {max_bytes}", "body")
            self._take(len(body), client, large)
            return body
        body = bytearray()
        loop = asyncio.get_running_loop()
        start = loop.time()
        try:
            async with asyncio.timeout_at(start + self.limits.grace_s) as deadline:
                while chunk := await content.readany():
                    if len(body) + len(chunk) > max_bytes:
                        raise ToolError("body_too_large", f"the body passed its limit of {max_bytes} bytes", "body")
                    self._take(len(chunk), client, large)
                    body += chunk
                    deadline.reschedule(start + self.limits.grace_s + len(body) / self.limits.min_rate_bps)
        except TimeoutError:
            self.release(len(body), client)
            raise ToolError(
                "body_timeout",
                f"{len(body)} bytes in {loop.time() - start:.1f} s: a body must arrive at "
                f"{self.limits.min_rate_bps} bytes/s after {self.limits.grace_s:g} s",
                "body",
            ) from None
        except BaseException:
            self.release(len(body), client)
            raise
        return body if large else bytes(body)  # a copy of a 48 MB body held the event loop ~40 ms

    def _take(self, n: int, client: str | None, large: bool) -> None:
        if not self.share.admits(client, n):
            raise ToolError("client_quota", f"this client's request bodies hold their share of "
                            f"{self.share.share_bytes} bytes being read at once while other clients send theirs; "
                            "retry later", "body")
        if self.used + n > (self._large_bytes if large else self.limits.inflight_bytes):
            raise ToolError("server_busy", f"{n} more bytes would pass the {self.limits.inflight_bytes} bytes of "
                            "request bodies this server reads at once; retry later", "body")
        if self._memory is not None and not self._memory.take("bodies", n):
            raise ToolError("server_busy", "the server's memory budget is full; retry later", "body")
        self.used += n
        self.share.take(client, n)

    def release(self, n: int, client: str | None) -> None:
        """Give back the bytes of a body that has been answered (or abandoned)."""
        if not n:
            return
        self.used -= n
        self.share.give(client, n)
        if self._memory is not None:
            self._memory.give("bodies", n)


QUOTA_DELAY_S = 1.0  # how late a 429 client_quota is answered: a refused client sends at most one a second a connection


async def held_back(response: web.Response, error_type: str | None, delay_s: float = QUOTA_DELAY_S) -> None:
    """Hold a 429 ``client_quota`` answer back ``delay_s`` (its budgets already given back), with ``Retry-After``.
    Answered at once, a client past its share sent its refused opens again as fast as the server refused them: 16
    connections sent ~140 a second, each a 0.45 MB body read, parsed and probed on the event loop, and the other
    clients' cheap calls waited behind them (p99 x5.9). Held back, a connection costs one sleeping task."""
    if error_type == "client_quota" and delay_s > 0:
        response.headers["Retry-After"] = str(max(1, round(delay_s)))
        await asyncio.sleep(delay_s)


def close_after(request: web.BaseRequest, error: ToolError) -> bool:
    """Whether the answer to a request refused with ``error`` must close its connection: its body was left partly
    unread. aiohttp then reads and discards the rest for up to its lingering time (10 s, no memory kept) so that a
    client still sending gets the answer instead of a reset; a body cut for stalling sends nothing more, so its
    connection is closed at once (aiohttp's lingering time, zero for this connection)."""
    if request.content.is_eof():
        return False
    if error.type == "body_timeout":
        request.protocol._lingering_time = 0.0
    return True
