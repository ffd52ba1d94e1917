"""What every tool handler gets (:class:`ToolContext`) and returns (:class:`Observation`)."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from typing import Any

import orjson

from tool_server.image_processes import ImageProcesses
from tool_server.mei.schema import EvidenceInterface, ImageView, MEICall, MEIContext
from tool_server.offline.pixels import png_as_is
from tool_server.offline.world import OfflineWorld
from tool_server.online.web import OnlineBackends
from tool_server.pools import Pools
from tool_server.sessions import RegisteredImage, Session

MAX_PAGE_IMAGES = 15


def _image_free_body(blob: bytes, cached: bool) -> bytes:
    """The response body of a result that added no images, spliced from its cache encoding instead of re-encoded."""
    if not blob.startswith(b'{"text":'):  # orjson's encoding, or json.dumps' of an older disk-cache entry
        raise ValueError("not an Observation.to_cache() encoding")
    return (b'{"cached": true, "images": [], ' if cached else b'{"cached": false, "images": [], ') + blob[1:]


_EMPTY_PIXELS = b'"png_base64":""'
BASE64_STEP = 3 * 2**18  # bytes of PNG base64-encoded at a time (~1 ms holding the GIL); a multiple of 3


def _with_base64(encoded: bytes, pngs: list[bytes], processes: ImageProcesses | None = None) -> bytearray:
    """``encoded`` (orjson's, each image's ``png_base64`` empty, in order) with the PNGs' base64 put in a slice at a
    time. Encoded whole, a crop's 36 MB PNG held the GIL ~50 ms in ``b64encode`` and as long again in its JSON, each
    an event-loop stall for every other client; between slices the event loop gets the GIL back. A PNG of
    ``processes.min_bytes`` or more is encoded in an image process instead: in slices it still held the GIL ~95 ms in
    all, in 5 ms turns (the switch interval) that the event loop waited for."""
    sizes = [4 * -(-len(png) // 3) for png in pngs]
    out = bytearray(len(encoded) + sum(sizes))
    src = dst = 0
    at = encoded.index(b'"images":')  # the text before it is one JSON string: no unescaped quote inside
    for png in pngs:
        at = encoded.index(_EMPTY_PIXELS, at) + len(_EMPTY_PIXELS) - 1  # the closing quote of the empty value
        out[dst : dst + at - src] = encoded[src:at]
        dst += at - src
        src = at
        if processes is not None and len(png) >= processes.min_bytes:
            dst += processes.b64encode_into(png, out, dst)
            continue
        view = memoryview(png)
        for i in range(0, len(png), BASE64_STEP):
            chunk = base64.b64encode(view[i : i + BASE64_STEP])
            out[dst : dst + len(chunk)] = chunk
            dst += len(chunk)
    out[dst:] = encoded[src:]
    return out


@dataclass(slots=True)
class Observation:
    text: str  # what the policy reads
    records: list[dict[str, Any]]  # structured per-item results
    images: list[RegisteredImage] = field(default_factory=list)  # register entries this call created
    mei: list[dict[str, str]] = field(default_factory=list)
    cached: bool = False
    _encoded: bytes | None = field(default=None, repr=False, compare=False)  # to_cache(), encoded once

    def to_json(self, *, include_pixels: bool) -> dict[str, Any]:
        """The answer, each image's ``png_base64`` empty when ``include_pixels`` (:meth:`body` fills them in)."""
        images = []
        for entry in self.images:
            item: dict[str, Any] = {"ref": entry.ref, "width": entry.width, "height": entry.height}
            if include_pixels:  # put in by body(), a slice at a time
                item["png_base64"] = ""
            images.append(item)
        return {"text": self.text, "images": images, "records": self.records, "mei": self.mei, "cached": self.cached}

    def body(
        self, *, include_pixels: bool, pngs: list[bytes] | None = None, processes: ImageProcesses | None = None
    ) -> bytes | bytearray:
        """The HTTP response body: :meth:`to_json`, encoded; ``pngs``: the images' PNGs when ``include_pixels``
        (:meth:`with_pixels`), else each is encoded here; ``processes``: where large PNGs' base64 is made."""
        if not self.images:
            return _image_free_body(self.to_cache(), self.cached)
        encoded = orjson.dumps(self.to_json(include_pixels=include_pixels), option=orjson.OPT_SERIALIZE_NUMPY)
        if not include_pixels:
            return encoded
        return _with_base64(encoded, pngs or [entry.png() for entry in self.images], processes)

    def with_pixels(
        self, world: OfflineWorld, processes: ImageProcesses | None = None
    ) -> tuple[bytes | bytearray, list[bytes]]:
        """The ``include_pixels`` body and the PNG of each image (pool work: encoding): the kept PNG, or the world
        file of a fetched world image when it is :func:`~tool_server.offline.pixels.png_as_is`, else encoded now."""
        pngs = [entry._png or _world_png(world, entry) or entry.png() for entry in self.images]
        return self.body(include_pixels=True, pngs=pngs, processes=processes), pngs

    def to_cache(self) -> bytes:
        if self.images:
            raise ValueError("observations that change the visual register are not cacheable")
        if self._encoded is None:
            self._encoded = orjson.dumps(  # numpy scores included, as json.dumps took float64
                {"text": self.text, "records": self.records, "mei": self.mei}, option=orjson.OPT_SERIALIZE_NUMPY
            )
        return self._encoded


def _world_png(world: OfflineWorld, entry: RegisteredImage) -> bytes | None:
    """The file of the world image ``entry`` was fetched from, when it is the PNG of its pixels as they are."""
    record = world.image(entry.source) if entry.source.startswith(("http://", "https://")) else None
    if record is None or (record.width, record.height) != (entry.width, entry.height):
        return None
    data = world.image_bytes(record.id)
    return data if png_as_is(data) else None


@dataclass(frozen=True, slots=True)
class CachedObservation:
    """A result served from the cache, answered without decoding or re-encoding it.

    A cached result never adds to the visual register (:meth:`Observation.to_cache` refuses those), so its body is
    the stored JSON object plus ``"cached": true`` and no images, whatever the session or ``include_pixels``.
    """

    blob: bytes  # Observation.to_cache()
    cached = True

    def body(self, *, include_pixels: bool) -> bytes:
        return _image_free_body(self.blob, cached=True)


@dataclass(slots=True)
class Call:
    """One tool call of one session."""

    session: Session
    arguments: dict[str, Any]
    turn: int | None

    def ctx(self, tool: str) -> MEIContext:
        return MEIContext(session_id=self.session.id, turn=self.turn, tool=tool, mei_version=self.session.mei_version)


@dataclass(slots=True)
class ToolContext:
    world: OfflineWorld
    mei: EvidenceInterface
    max_pixels: int
    online: OnlineBackends | None = None  # None: offline, only the world's pages and images are reachable
    pools: Pools = field(default_factory=Pools)  # CPU work of the calls, by cost class


def mei_entry(call: MEICall) -> dict[str, str]:
    return {"call_id": call.call_id, "version": call.version, "outcome": call.outcome}


def item_error(type_: str, message: str) -> dict[str, str]:
    return {"type": type_, "message": message}


def pixels_digest(entry: RegisteredImage) -> str:
    """Cache identity of a register image: its pixels, not its session-local id."""
    return "sha256:" + hashlib.sha256(entry.image.tobytes() + f"{entry.width}x{entry.height}".encode()).hexdigest()


def world_image_view(ctx: ToolContext, image_id: str, *, pixels: bool, match_score: float | None = None) -> ImageView:
    image = ctx.world.image_record(image_id)
    page = ctx.world.page_of(image)
    return ImageView(
        url=image.url,
        caption=image.caption,
        alt=image.alt,
        source_page_url=page.url if page else None,
        png=ctx.world.image_bytes(image_id) if pixels else None,
        match_score=match_score,
    )


def clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"
