"""What every online backend client shares: a token-bucket rate limiter, retries with backoff, structured errors.

Retried: HTTP 429 and 5xx, timeouts and connection errors, up to ``max_retries`` times, waiting
``min(max_delay, base_delay * 2**n)`` scaled by a random factor in [0.5, 1] (jitter, so clients that failed together
do not retry together), or the server's ``Retry-After`` seconds when given (capped at ``max_delay``). Not retried:
other 4xx (the request itself is wrong) and malformed JSON (a replay would not change it).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp


class BackendError(Exception):
    """``kind``: config | timeout | connection | rate_limited | http_error | malformed | api_error."""

    def __init__(self, kind: str, message: str, *, status: int | None = None, retry_after: str | None = None) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.status = status
        self.retry_after = retry_after  # the server's Retry-After header on 429/503, if any


class TokenBucket:
    """``rate`` requests per second on average, bursts of up to ``burst``; ``acquire`` waits for a token."""

    def __init__(self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"need rate > 0 and burst >= 1, got {rate}, {burst}")
        self._rate, self._burst = rate, float(burst)
        self._tokens = float(burst)
        self._clock, self._sleep = clock, sleep
        self._last = clock()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        async with self._lock:  # FIFO: waiters are served in arrival order
            while True:
                now = self._clock()
                self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
                self._last = now
                if self._tokens >= 1 - 1e-9:  # tolerance: refills are float sums of elapsed time x rate
                    self._tokens = max(0.0, self._tokens - 1)
                    return
                await self._sleep((1 - self._tokens) / self._rate)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int = 3
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0

    def delay(self, attempt: int, retry_after: str | None, rng: random.Random) -> float:
        if retry_after is not None:
            try:
                return min(self.max_delay_s, max(0.0, float(retry_after)))
            except ValueError:
                pass  # an HTTP date: fall back to our own schedule
        return min(self.max_delay_s, self.base_delay_s * 2**attempt) * rng.uniform(0.5, 1.0)


class JSONClient:
    """GETs JSON from one backend through the rate limiter and retry policy."""

    def __init__(self, *, name: str, timeout_s: float, retry: RetryPolicy, limiter: TokenBucket | None,
                 headers: dict[str, str] | None = None, seed: int | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.name = name
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._retry = retry
        self._limiter = limiter
        self._headers = headers or {}
        self._rng = random.Random(seed)
        self._sleep = sleep
        self._session: aiohttp.ClientSession | None = None
        self.retries = 0

    async def get_json(self, url: str, params: dict[str, str] | None = None,
                       headers: dict[str, str] | None = None) -> Any:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout, headers=self._headers)
        last: BackendError | None = None
        for attempt in range(self._retry.max_retries + 1):
            if last is not None:
                self.retries += 1
                await self._sleep(self._retry.delay(attempt - 1, last.retry_after, self._rng))
            if self._limiter is not None:
                await self._limiter.acquire()
            try:
                async with self._session.get(url, params=params, headers=headers) as resp:
                    text = await resp.text()
                    if resp.status == 429 or resp.status >= 500:
                        kind = "rate_limited" if resp.status == 429 else "http_error"
                        last = BackendError(kind, f"{self.name}: HTTP {resp.status}: {text[:200]}", status=resp.status,
                                            retry_after=resp.headers.get("Retry-After"))
                        continue
                    if resp.status != 200:
                        raise BackendError("http_error", f"{self.name}: HTTP {resp.status}: {text[:200]}",
                                           status=resp.status)
            except TimeoutError:
                last = BackendError("timeout", f"{self.name}: no answer within {self._timeout.total} s")
                continue
            except aiohttp.ClientError as e:
                last = BackendError("connection", f"{self.name}: {type(e).__name__}: {e}")
                continue
            try:
                return json.loads(text)
            except ValueError as e:
                raise BackendError("malformed", f"{self.name}: response is not JSON: {text[:120]!r}") from e
        assert last is not None
        raise last

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
