"""Per-client shares of a byte budget that bind only under contention: the rule of a fair-share scheduler.

A fixed cap of ``share`` of a budget per client gave a server used by one client (a training node reaches its tool
server from one address) half its budget. Here a client alone may borrow the whole budget, and every client is held
to its share once another competes:

- a client *competes* while it holds bytes of the budget, and for ``window_s`` after its last take or refusal (a
  client retrying a refusal with backoff keeps competing between its tries);
- a take that keeps a client within ``share`` of the budget is judged by the budget alone; a take past it is let
  through only while no other client competes (a *borrowed* take, counted), else refused (429 ``client_quota``);
- borrowed bytes come back as the borrower's work ends (request bodies: answered within seconds, and a body still
  arriving is cut at its next chunk past the share) or are taken back (session images: the owner of the memory
  evicts the least recently used sessions of clients over their share to make room for a client within its share).

One event loop per process: no await between a check and its charge, so no lock.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable

Client = Hashable  # an address, or the name the --workers router gives (None: a request without either)
CONTENTION_S = 10.0  # past the rollout client's longest backoff between two tries of a refused open (2 s)


class FairShare:
    def __init__(self, limit_bytes: int, share: float, window_s: float = CONTENTION_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"client share must be in (0, 1], got {share}")
        self.share_bytes = int(limit_bytes * share)
        self.unbounded = share >= 1  # one client may hold the whole budget even beside others
        self.window_s = window_s
        self.held: Counter[Client] = Counter()  # bytes held now, by client (only clients holding some)
        self.borrowed = 0  # takes past a client's share let through because no other client competed
        self._clock = clock
        self._seen: OrderedDict[Client, float] = OrderedDict()  # last take or refusal, least recent first

    def admits(self, client: Client, nbytes: int) -> bool:
        """Whether ``client`` may take ``nbytes`` more (within its share, or alone); the attempt makes it compete."""
        now = self._clock()
        self._seen[client] = now
        self._seen.move_to_end(client)
        if self.unbounded or self.held[client] + nbytes <= self.share_bytes:
            return True
        if self.competing(client, now):
            return False
        self.borrowed += 1
        return True

    def competing(self, client: Client, now: float | None = None) -> bool:
        """Whether a client other than ``client`` holds bytes or was seen within the window."""
        if len(self.held) > (client in self.held):
            return True
        cutoff = (self._clock() if now is None else now) - self.window_s
        while self._seen and next(iter(self._seen.values())) < cutoff:
            self._seen.popitem(last=False)
        return len(self._seen) > (client in self._seen)

    def over_share(self, client: Client) -> bool:
        return not self.unbounded and self.held[client] > self.share_bytes

    def take(self, client: Client, nbytes: int) -> None:
        self.held[client] += nbytes

    def give(self, client: Client, nbytes: int) -> None:
        self.held[client] -= nbytes
        if self.held[client] <= 0:
            if self.held[client] < 0:
                raise AssertionError(f"fair share: {client!r} gave back {-self.held[client]} bytes more than it took")
            del self.held[client]
