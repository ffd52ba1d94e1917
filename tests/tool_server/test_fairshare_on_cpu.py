"""The per-client share rule (``tool_server.fairshare``): a client alone borrows the whole budget; beside a client
that holds bytes, or that took or was refused bytes within the window, it is held to its share."""

from __future__ import annotations

import pytest

from tool_server.fairshare import FairShare


def clocked(window_s: float = 10.0) -> tuple[FairShare, list[float]]:
    """A share of 500 of 1,000 bytes on a hand-moved clock: ``now[0]`` is the time."""
    now = [100.0]
    return FairShare(1000, 0.5, window_s=window_s, clock=lambda: now[0]), now


def test_a_lone_client_borrows_and_is_counted():
    share, _ = clocked()
    assert share.share_bytes == 500
    assert share.admits("a", 500) and share.borrowed == 0  # exactly its share
    share.take("a", 500)
    assert share.admits("a", 400) and share.borrowed == 1  # past it, alone
    share.take("a", 400)
    assert share.over_share("a") and share.held == {"a": 900}


def test_a_client_that_holds_bytes_competes_however_long_ago_it_took_them():
    share, now = clocked()
    assert share.admits("b", 1)
    share.take("b", 1)
    now[0] += 3600
    assert share.admits("a", 500) and not share.admits("a", 501)
    share.give("b", 1)
    assert share.held == {} and share.admits("a", 501)  # b holds nothing and was last seen an hour ago


def test_a_client_seen_within_the_window_competes_then_stops():
    share, now = clocked()
    share.take("a", 500)
    assert share.admits("b", 10)  # b asks (and is refused by the budget, say): it competes from now on
    now[0] += 9.9
    assert not share.admits("a", 1) and share.borrowed == 0
    now[0] += 0.2  # 10.1 s after b's last try: a is alone again
    assert share.admits("a", 1) and share.borrowed == 1


def test_share_one_never_binds_and_bad_shares_are_refused():
    share = FairShare(1000, 1.0)
    share.take("b", 10)
    assert share.admits("a", 1000) and share.borrowed == 0 and not share.over_share("a")
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="client share must be in"):
            FairShare(1000, bad)
    share.give("b", 10)
    with pytest.raises(AssertionError):
        share.give("b", 1)
