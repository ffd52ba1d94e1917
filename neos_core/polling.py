"""Delays between polls of something starting (a server's health, a log line): short at first, so a start of a
fraction of a second is seen at once, doubling up to a ceiling, so a start of minutes is polled no more often than
before."""

from __future__ import annotations

from collections.abc import Iterator


def poll_delays(first_s: float = 0.05, most_s: float = 1.0) -> Iterator[float]:
    """``first_s``, then twice the last delay, at most ``most_s``, forever."""
    delay = first_s
    while True:
        yield delay
        delay = min(2 * delay, most_s)
