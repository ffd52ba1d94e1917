"""Sessions and their visual registers (Neos §3.1): episode-local, server-side image state.

A session's register holds the question images as ``img_1..img_k``; FetchImage/CropImage successes append
``img_{k+1}, ...`` in request order. Ids never change and stay valid for the life of the session, so a late crop of
``img_1`` is legal. Nothing is shared between sessions.

Bounded resources: a register holds at most ``max_images`` images and ``max_session_bytes`` of decoded pixels and
kept PNG encodings; all registers draw from the process's :class:`~tool_server.memory.MemoryBudget`, which reclaims
the result cache's memory level first; then the least recently used sessions idle for at least
``memory_min_idle_s`` are evicted (a session in the middle of its episode is never evicted for memory; the call that
finds none to evict gets ``server_memory_full``). One client's registers hold at most ``client_share`` of the budget
while another client competes (:class:`~tool_server.fairshare.FairShare`; 429 ``client_quota`` past it): 25 sessions
from one address, touched every 10 s, once kept every other at 503. A client alone may borrow the whole budget; a
client within its share that finds no room takes it back: the least recently used sessions of clients over their
share are evicted (``preempted``), busy or not. Sessions idle for longer than the TTL expire. The store
keeps its sessions in order of last use, so expiry and memory eviction pop the oldest in O(1) each; a client (its
address) holds at most ``max_sessions_per_client`` sessions, so one client cannot take every other's.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from PIL import Image

from tool_server.errors import ToolError
from tool_server.fairshare import CONTENTION_S, FairShare
from tool_server.limits import quote
from tool_server.memory import MemoryBudget
from tool_server.offline.pixels import encode_png

log = logging.getLogger(__name__)

_MAX_INDEX_DIGITS = 9


@dataclass(slots=True)
class RegisteredImage:
    ref: str
    image: Image.Image  # RGB
    source: str  # "question", a URL, or "img_N[box]" for a crop
    _png: bytes | None = field(default=None, repr=False)
    digest: str | None = field(default=None, repr=False)  # its pixels' cache identity, once computed

    @property
    def width(self) -> int:
        return self.image.width

    @property
    def height(self) -> int:
        return self.image.height

    @property
    def pixels(self) -> int:
        return self.image.width * self.image.height

    def png(self) -> bytes:
        """Its PNG: the kept one (:meth:`VisualRegister.keep_png`), else encoded now (not kept: a kept PNG is
        charged to the budgets, which only the event loop may do)."""
        return self._png if self._png is not None else encode_png(self.image)


def pixel_bytes(width: int, height: int) -> int:
    """What a decoded register image (RGB) holds in memory: PIL keeps RGB in 32-bit pixels."""
    return 4 * width * height


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


class VisualRegister:
    def __init__(
        self,
        max_images: int,
        max_bytes: int | None = None,
        admit: Callable[[int], None] | None = None,
        release: Callable[[int], None] | None = None,
    ) -> None:
        """``admit(n)`` takes ``n`` more bytes from the server's budget or raises (None: no server budget);
        ``release(n)`` gives them back."""
        self._images: list[RegisteredImage] = []
        self._max = max_images
        self._max_bytes = max_bytes
        self._admit = admit
        self._release = release
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._images)

    def room(self) -> int:
        return self._max - len(self._images)

    def check_bytes(self, count: int, nbytes: int) -> None:
        """Raise ``session_memory_full`` unless ``nbytes`` more fit this session's image memory."""
        if self._max_bytes is not None and self.bytes + nbytes > self._max_bytes:
            raise ToolError(
                "session_memory_full",
                f"{count} images of {_mib(nbytes)} would exceed this session's image memory of "
                f"{_mib(self._max_bytes)} ({_mib(self.bytes)} held); crop smaller regions or start a new session",
            )

    def reserve(self, count: int, nbytes: int) -> None:
        """Raise unless ``count`` more images of ``nbytes`` in all fit the register and the session and server
        budgets; on success the bytes are taken, and the caller appends the images next (no await in between)."""
        if count > self.room():
            raise ToolError(
                "register_full", f"{count} images to add but the visual register has room for {self.room()}"
            )
        try:
            self._take(count, nbytes)
        except ToolError:
            if not self._drop_pngs():  # kept PNGs only save work: pixels come first
                raise
            self._take(count, nbytes)

    def _take(self, count: int, nbytes: int) -> None:
        self.check_bytes(count, nbytes)
        if self._admit is not None:
            self._admit(nbytes)
        self.bytes += nbytes

    def _drop_pngs(self) -> int:
        """Forget every kept PNG of this register, giving their bytes back; how many."""
        freed = 0
        for entry in self._images:
            if entry._png is not None:
                freed += len(entry._png)
                entry._png = None
        if freed:
            self.release(freed)
        return freed

    def release(self, nbytes: int) -> None:
        """Give back bytes a :meth:`reserve` took for images that were not appended after all."""
        self.bytes -= nbytes
        if self._release is not None:
            self._release(nbytes)

    def append(self, image: Image.Image, source: str) -> RegisteredImage:
        self.reserve(1, pixel_bytes(image.width, image.height))
        return self.append_reserved(image, source)

    def append_reserved(self, image: Image.Image, source: str) -> RegisteredImage:
        """Append an image whose bytes a :meth:`reserve` took."""
        entry = RegisteredImage(f"img_{len(self._images) + 1}", image, source)
        self._images.append(entry)
        return entry

    def keep_png(self, entry: RegisteredImage, png: bytes) -> bool:
        """Keep ``entry``'s encoded PNG for its next ``include_pixels`` answer if its bytes fit the session's and the
        server's budgets (a PNG of noise can be larger than its pixels); else it is encoded again when asked."""
        if entry._png is not None:
            return True
        try:
            self.reserve(0, len(png))
        except ToolError:
            return False
        entry._png = png
        return True

    def get(self, ref: str, field: str | None = None) -> RegisteredImage:
        digits = ref[4:] if ref.startswith("img_") else ""
        # ASCII digits only (str.isdigit also takes "²" and "١"), and no more than an index can have
        if 0 < len(digits) <= _MAX_INDEX_DIGITS and digits.isascii() and digits.isdigit() and digits[0] != "0":
            index = int(digits) - 1
            if index < len(self._images):
                return self._images[index]
        loaded = f"img_1..img_{len(self._images)}" if self._images else "none"
        raise ToolError("unknown_image", f"{quote(ref)} is not in the visual register (loaded: {loaded})", field)

    def refs(self) -> list[str]:
        return [e.ref for e in self._images]


@dataclass(slots=True)
class Session:
    id: str
    group_id: str | None
    register: VisualRegister
    last_used: float
    client: str | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # register appends of one call stay contiguous
    mei_version: str | None = None  # fixed at creation (Neos §3.5); None until its first MEI answer when unknown


class SessionStore:
    def __init__(
        self,
        *,
        ttl_s: float = 3600.0,
        max_sessions: int = 100_000,
        max_sessions_per_client: int | None = None,
        max_images: int = 512,
        max_session_bytes: int | None = None,
        memory: MemoryBudget | None = None,
        client_share: float = 1.0,
        contention_s: float = CONTENTION_S,
        memory_min_idle_s: float = 60.0,
        id_prefix: str = "s_",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``id_prefix`` starts every session id (``s3_``: worker 3's, which the ``--workers`` router reads);
        ``memory``: the process's budget the registers draw from (None: unbounded); ``client_share``: the fraction of
        it one client's registers may hold while another client competes (``contention_s``: how long a client competes
        after its last take of image memory, besides while it holds some)."""
        if ttl_s <= 0:
            raise ValueError(f"session TTL must be > 0, got {ttl_s}")
        self.ttl_s = ttl_s
        self._max_sessions = max_sessions
        self._max_per_client = max_sessions_per_client
        self._max_images = max_images
        self._max_session_bytes = max_session_bytes
        self._memory = memory
        self.share = FairShare(memory.limit_bytes if memory is not None else 1, client_share, contention_s, clock)
        self._min_idle_s = memory_min_idle_s
        self._id_prefix = id_prefix
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()  # least recently used first
        self._per_client: Counter[str] = Counter()
        self.image_bytes = 0  # held by every register together
        self.evictions: Counter[str] = Counter()  # "idle" (TTL), "memory" (server budget), "preempted" (a share)

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def evicted(self) -> int:
        return sum(self.evictions.values())

    def create(
        self, group_id: str | None = None, mei_version: str | None = None, *, client: str | None = None
    ) -> Session:
        self.evict_idle()
        if len(self._sessions) >= self._max_sessions:
            raise ToolError("too_many_sessions", f"the server holds its limit of {self._max_sessions} sessions")
        if client is not None and self._max_per_client is not None and self._per_client[client] >= self._max_per_client:
            raise ToolError(
                "session_quota",
                f"client {quote(client)} holds its quota of {self._max_per_client} sessions; delete finished ones",
            )
        sid = f"{self._id_prefix}{secrets.token_hex(12)}"
        register = VisualRegister(
            self._max_images,
            self._max_session_bytes,
            lambda n: self._admit(sid, n),
            lambda n: self._give_back(sid, n),
        )
        session = Session(sid, group_id, register, self._clock(), client, mei_version=mei_version)
        self._sessions[sid] = session
        if client is not None:
            self._per_client[client] += 1
        return session

    def get(self, session_id: str) -> Session:
        session = self._sessions.get(session_id)
        now = self._clock()
        if session is None or now - session.last_used > self.ttl_s:
            if session is not None:
                self._drop(session_id, "idle")
            raise ToolError(
                "unknown_session", f"no session {quote(session_id)} (never created, deleted or expired)", "session_id"
            )
        session.last_used = now
        self._sessions.move_to_end(session_id)
        return session

    def delete(self, session_id: str) -> None:
        if session_id not in self._sessions:
            raise ToolError("unknown_session", f"no session {quote(session_id)}", "session_id")
        self._drop(session_id, None)

    def discard(self, session_id: str) -> None:
        """Delete the session if it is still held (a failed open: it may have been evicted meanwhile)."""
        if session_id in self._sessions:
            self._drop(session_id, None)

    def _drop(self, session_id: str, reason: str | None) -> None:
        session = self._sessions.pop(session_id)
        self._uncharge(session.client, session.register.bytes)
        if session.client is not None:
            self._per_client[session.client] -= 1
            if not self._per_client[session.client]:
                del self._per_client[session.client]
        if reason is not None:
            self.evictions[reason] += 1

    def _admit(self, session_id: str, nbytes: int) -> None:
        """Take ``nbytes`` of the memory budget for ``session_id``: within its client's share unless that client is
        alone (else 429 ``client_quota``), reclaiming the cache's memory level, then evicting least recently used
        sessions idle for ``memory_min_idle_s`` or more, then (for a client within its share) sessions of clients over
        theirs to make room; ``server_memory_full`` if that is not enough."""
        session = self._sessions.get(session_id)
        if session is None:  # evicted while its call ran: its bytes would never be given back
            raise ToolError(
                "unknown_session",
                f"session {quote(session_id)} was evicted or deleted while this call ran; open a new one",
                "session_id",
            )
        if self._memory is None:
            self._charge(session.client, nbytes)
            return
        client = session.client
        if not self.share.admits(client, nbytes):
            raise ToolError(
                "client_quota",
                f"client {quote(client)} holds {_mib(self.share.held[client])} of images, its share "
                f"{_mib(self.share.share_bytes)} of the server's memory while other clients use it; delete finished "
                "sessions",
            )
        within = self.share.held[client] + nbytes <= self.share.share_bytes
        cutoff = self._clock() - self._min_idle_s
        while not self._memory.take("images", nbytes):
            oldest = next(iter(self._sessions.values()), None)
            if oldest is not None and oldest.last_used <= cutoff and oldest.id != session_id:
                self._drop(oldest.id, "memory")
            elif within and (borrower := self._borrower_session(session_id)) is not None:
                self._drop(borrower.id, "preempted")
            else:
                raise ToolError(
                    "server_memory_full",
                    f"the server's memory ({_mib(self._memory.limit_bytes)}) is held by sessions used in the last "
                    f"{self._min_idle_s:g} s, within their clients' shares, and by request bodies; retry later",
                )
        self._charge(client, nbytes)

    def _borrower_session(self, session_id: str) -> Session | None:
        """The least recently used session (not ``session_id``) of a client holding more than its share."""
        return next(
            (s for s in self._sessions.values() if s.id != session_id and self.share.over_share(s.client)), None
        )

    def _charge(self, client: str | None, nbytes: int) -> None:
        self.image_bytes += nbytes
        self.share.take(client, nbytes)

    def _uncharge(self, client: str | None, nbytes: int) -> None:
        self.image_bytes -= nbytes
        self.share.give(client, nbytes)
        if self._memory is not None:
            self._memory.give("images", nbytes)

    def _give_back(self, session_id: str, nbytes: int) -> None:
        """Bytes ``session_id`` reserved and did not use; a session dropped since gave back all it held already."""
        session = self._sessions.get(session_id)
        if session is not None:
            self._uncharge(session.client, nbytes)

    def evict_idle(self) -> int:
        """Expire sessions idle longer than the TTL: the oldest first, stopping at the first fresh one."""
        cutoff = self._clock() - self.ttl_s
        n = 0
        while self._sessions:
            oldest = next(iter(self._sessions.values()))
            if oldest.last_used >= cutoff:
                break
            self._drop(oldest.id, "idle")
            n += 1
        return n

    async def run_evictor(self) -> None:
        """Background task: evict idle sessions every quarter TTL (at most every 30 s)."""
        while True:
            await asyncio.sleep(min(self.ttl_s / 4, 30.0))
            if n := self.evict_idle():
                log.info("evicted %d idle sessions", n)
