"""Identical cache misses coalesced across processes and nodes through the Redis tier: one lease per key.

Within a process :meth:`TieredCache.get_or_compute` already makes concurrent misses of a key await one computation.
Across processes (``--workers``, one server per node) that is not enough: the G rollouts of a GRPO group, spread over
servers, issue the same call at the same moment, and each process would compute it. So the process that misses first
takes the key's lease (``SET lease:KEY TOKEN NX PX``, redis-py's :class:`~redis.asyncio.lock.Lock`), computes,
writes the value to the shared tier and only then releases the lease; the others poll the tier (5 ms doubling to
200 ms) until the value is there. While it computes, the holder renews its lease every third of its life, so a short
lease bounds how long a *dead* holder blocks anyone, not how long a computation may take.

Counted in ``cache_events_total{level="shared",event="lease_..."}``: ``lease_leads``, misses computed under this
process's lease; ``lease_waits``, misses that found another's lease; ``lease_coalesced``, those answered by its value.
Every way out without the holder's value is counted too: ``lease_expired`` (the lease vanished without a value: its
holder died; the first waiter to see it takes the lease and computes), ``lease_wait_timeouts`` (waited ``max_wait_s``
for a live holder, then computed), ``lease_errors`` (Redis failed during the protocol; computed without coalescing).
``lease_unshared``: the holder's result was not shareable (it changed its own session's register) or its computation
failed, so each waiter computes its own, as waiters in one process do. A share of fallbacks over ``WARN_SHARE`` logs a
warning (at most once a minute).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable

from neos_core.polling import poll_delays

log = logging.getLogger(__name__)

FIRST_POLL_S = 0.005
MAX_POLL_S = 0.2
UNSHARED_MARK_MS = 2_000  # longer than a poll interval: every waiter sees the holder's "compute your own"
WARN_SHARE = 0.05  # fallbacks (expired, timeouts, errors) per lease taken or waited for that log a warning...
WARN_MIN_EVENTS = 20  # ...once this many were seen
WARN_EVERY_S = 60.0
FALLBACKS = ("expired", "wait_timeouts", "errors")


class RedisLeases:
    """The lease protocol over one Redis client (the shared tier's); keys are the cache's own keys."""

    def __init__(self, client, prefix: str, *, lease_s: float = 10.0, max_wait_s: float = 30.0) -> None:
        import redis.exceptions

        if lease_s <= 0 or max_wait_s <= 0:
            raise ValueError(f"lease_s and max_wait_s must be > 0, got {lease_s}, {max_wait_s}")
        self._client = client
        self._prefix = prefix
        self.lease_s = lease_s
        self.max_wait_s = max_wait_s
        self._errors = (redis.exceptions.RedisError, OSError)
        self.events: Counter[str] = Counter()
        self._warned_at = float("-inf")

    async def compute_once(
        self, key: str, compute: Callable[[], Awaitable[bytes | None]]
    ) -> tuple[bytes | None, bool]:
        """``(value, computed_here)``: the value ``compute()`` gave here, or another process's.

        ``compute`` must have stored a shareable value in the shared tier when it returns (the lease is released
        after it); it returns None for a result that must not be shared. Its exceptions go to this caller only.
        """
        lease = self._client.lock(self._prefix + "lease:" + key, timeout=self.lease_s, blocking=False,
                                  thread_local=False, raise_on_release_error=False)
        deadline = time.monotonic() + self.max_wait_s
        contested = False
        while True:
            try:
                acquired = await lease.acquire()
            except self._errors as e:
                return await self._fallback("errors", f"taking the lease failed: {e}", compute)
            if acquired:
                return await self._lead(lease, key, compute, contested)
            if not contested:
                self._count("waits")
                contested = True
            outcome = await self._wait(key, deadline)
            if isinstance(outcome, bytes):
                self._count("coalesced")
                return outcome, False
            if outcome == "unshared":
                self._count("unshared")
                return await compute(), True
            if outcome == "wait_timeouts":
                return await self._fallback(outcome, f"waited {self.max_wait_s:g}s for another process", compute)
            if outcome == "errors":
                return await self._fallback(outcome, "polling the shared tier failed", compute)
            # "free": the lease is gone and no value came: try to take it

    async def _lead(
        self, lease, key: str, compute: Callable[[], Awaitable[bytes | None]], contested: bool
    ) -> tuple[bytes | None, bool]:
        renew = asyncio.create_task(self._renew(lease))
        shared = False
        try:
            # finished by another process between this process's miss and its lease?
            try:
                value = await self._client.get(self._prefix + key)
            except self._errors:
                value = None  # the tier is failing: the lease calls below will count it
            if value is not None:
                shared = True
                self._count("coalesced")
                return value, False
            if contested:  # the lease vanished without a value: its holder died
                self._count("expired")
                log.warning("cache lease of %s expired without a value (its holder died?); computing", key[:16])
            else:
                self._count("leads")
            value = await compute()
            shared = value is not None
            return value, True
        finally:
            renew.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renew
            try:
                if not shared:  # waiters must not wait for a value that will not come
                    await self._client.set(self._prefix + "unshared:" + key, b"1", px=UNSHARED_MARK_MS)
                await lease.release()  # only if still ours (token-checked); else it expired and was taken
            except self._errors as e:
                self._count("errors")
                log.warning("releasing the cache lease of %s failed (it expires by itself): %s", key[:16], e)

    async def _renew(self, lease) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                await lease.reacquire()
            except self._errors as e:  # lost to expiry (this loop stalled past the lease) or Redis down
                self._count("errors")
                log.warning("renewing a cache lease failed; another process may compute the same key: %s", e)
                return

    async def _wait(self, key: str, deadline: float) -> bytes | str:
        """Poll until the value is there (returned), the holder says "unshared", the lease is free, or time is up."""
        keys = [self._prefix + key, self._prefix + "unshared:" + key, self._prefix + "lease:" + key]
        delays = poll_delays(FIRST_POLL_S, MAX_POLL_S)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return "wait_timeouts"
            await asyncio.sleep(min(next(delays), left))
            try:
                value, unshared, holder = await self._client.mget(keys)
            except self._errors:
                return "errors"
            if value is not None:
                return value
            if unshared is not None:
                return "unshared"
            if holder is None:
                return "free"

    async def _fallback(
        self, event: str, reason: str, compute: Callable[[], Awaitable[bytes | None]]
    ) -> tuple[bytes | None, bool]:
        self._count(event)
        log.debug("cache lease fallback (%s): %s", event, reason)
        return await compute(), True

    def _count(self, event: str) -> None:
        self.events[event] += 1
        if event not in FALLBACKS:
            return
        contests = self.events["leads"] + self.events["waits"]
        fallbacks = sum(self.events[e] for e in FALLBACKS)
        now = time.monotonic()
        if contests >= WARN_MIN_EVENTS and fallbacks > WARN_SHARE * contests and now - self._warned_at > WARN_EVERY_S:
            self._warned_at = now
            log.warning(
                "cache leases: %d of %d misses under a lease or waiting for one were computed without coalescing "
                "(expired %d, wait timeouts %d, Redis errors %d)",
                fallbacks, contests, self.events["expired"], self.events["wait_timeouts"], self.events["errors"],
            )
