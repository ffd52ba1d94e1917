"""Sessions and their visual registers (Neos §3.1): episode-local, server-side image state.

A session's register holds the question images as ``img_1..img_k``; FetchImage/CropImage successes append
``img_{k+1}, ...`` in request order. Ids never change and stay valid for the life of the session, so a late crop of
``img_1`` is legal. Sessions idle for longer than the TTL are evicted; nothing is shared between sessions.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from PIL import Image

from tool_server.errors import ToolError
from tool_server.limits import quote
from tool_server.offline.pixels import encode_png

log = logging.getLogger(__name__)

_MAX_INDEX_DIGITS = 9


@dataclass(slots=True)
class RegisteredImage:
    ref: str
    image: Image.Image  # RGB
    source: str  # "question", a URL, or "img_N[box]" for a crop
    _png: bytes | None = field(default=None, repr=False)

    @property
    def width(self) -> int:
        return self.image.width

    @property
    def height(self) -> int:
        return self.image.height

    def png(self) -> bytes:
        if self._png is None:
            self._png = encode_png(self.image)
        return self._png


class VisualRegister:
    def __init__(self, max_images: int) -> None:
        self._images: list[RegisteredImage] = []
        self._max = max_images

    def __len__(self) -> int:
        return len(self._images)

    def room(self) -> int:
        return self._max - len(self._images)

    def append(self, image: Image.Image, source: str) -> RegisteredImage:
        if not self.room():
            raise ToolError("register_full", f"the visual register holds its limit of {self._max} images")
        entry = RegisteredImage(f"img_{len(self._images) + 1}", image, source)
        self._images.append(entry)
        return entry

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
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # register appends of one call stay contiguous


class SessionStore:
    def __init__(
        self,
        *,
        ttl_s: float = 3600.0,
        max_sessions: int = 100_000,
        max_images: int = 512,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl_s <= 0:
            raise ValueError(f"session TTL must be > 0, got {ttl_s}")
        self.ttl_s = ttl_s
        self._max_sessions = max_sessions
        self._max_images = max_images
        self._clock = clock
        self._sessions: dict[str, Session] = {}
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self, group_id: str | None = None) -> Session:
        self.evict_idle()
        if len(self._sessions) >= self._max_sessions:
            raise ToolError("too_many_sessions", f"the server holds its limit of {self._max_sessions} sessions")
        session = Session(f"s_{secrets.token_hex(12)}", group_id, VisualRegister(self._max_images), self._clock())
        self._sessions[session.id] = session
        return session

    def get(self, session_id: str) -> Session:
        session = self._sessions.get(session_id)
        now = self._clock()
        if session is None or now - session.last_used > self.ttl_s:
            if session is not None:
                self._drop(session_id)
            raise ToolError(
                "unknown_session", f"no session {quote(session_id)} (never created, deleted or expired)", "session_id"
            )
        session.last_used = now
        return session

    def delete(self, session_id: str) -> None:
        if self._sessions.pop(session_id, None) is None:
            raise ToolError("unknown_session", f"no session {quote(session_id)}", "session_id")

    def _drop(self, session_id: str) -> None:
        del self._sessions[session_id]
        self.evicted += 1

    def evict_idle(self) -> int:
        cutoff = self._clock() - self.ttl_s
        stale = [sid for sid, s in self._sessions.items() if s.last_used < cutoff]
        for sid in stale:
            self._drop(sid)
        return len(stale)

    async def run_evictor(self) -> None:
        """Background task: evict idle sessions every quarter TTL (at most every 30 s)."""
        while True:
            await asyncio.sleep(min(self.ttl_s / 4, 30.0))
            if n := self.evict_idle():
                log.info("evicted %d idle sessions", n)
