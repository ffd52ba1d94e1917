"""Sessions, visual register ordering/limits, TTL eviction and the pixel guards."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from tool_server.errors import ToolError
from tool_server.offline.pixels import box_to_pixels, decode_image, set_pil_pixel_limit
from tool_server.sessions import SessionStore


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _png(w: int, h: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (1, 2, 3)).save(buf, format="PNG")
    return buf.getvalue()


def test_register_appends_in_order_and_ids_stay_valid():
    store = SessionStore(max_images=3)
    reg = store.create().register
    a = reg.append(Image.new("RGB", (4, 4)), "question")
    b = reg.append(Image.new("RGB", (5, 6)), "https://x/y.png")
    assert (a.ref, b.ref) == ("img_1", "img_2")
    assert reg.get("img_1") is a and (reg.get("img_2").width, reg.get("img_2").height) == (5, 6)
    for bad in ("img_3", "img_0", "img_01", "img_", "1", "image_1"):
        with pytest.raises(ToolError) as err:
            reg.get(bad, "arguments/x")
        assert err.value.type == "unknown_image" and err.value.field == "arguments/x"
    reg.append(Image.new("RGB", (1, 1)), "q")
    with pytest.raises(ToolError) as err:
        reg.append(Image.new("RGB", (1, 1)), "q")
    assert err.value.type == "register_full"


def test_sessions_are_isolated_and_deleted():
    store = SessionStore()
    s1, s2 = store.create("g"), store.create()
    s1.register.append(Image.new("RGB", (2, 2)), "q")
    assert len(s2.register) == 0 and s1.id != s2.id and s1.group_id == "g"
    store.delete(s1.id)
    with pytest.raises(ToolError) as err:
        store.get(s1.id)
    assert err.value.type == "unknown_session" and err.value.status == 404
    with pytest.raises(ToolError):
        store.delete(s1.id)


def test_idle_sessions_expire_after_the_ttl_and_use_refreshes():
    clock = FakeClock()
    store = SessionStore(ttl_s=10, clock=clock)
    idle, busy = store.create(), store.create()
    clock.now += 8
    store.get(busy.id)
    clock.now += 8  # idle: 16 s without use, busy: 8 s
    with pytest.raises(ToolError):
        store.get(idle.id)
    assert store.get(busy.id) is busy
    clock.now += 11
    assert store.evict_idle() == 1 and len(store) == 0 and store.evicted == 2


def test_pixel_limit_and_decompression_bomb_guard():
    assert decode_image(_png(20, 10), max_pixels=200).size == (20, 10)
    with pytest.raises(ToolError) as err:
        decode_image(_png(20, 11), max_pixels=200)
    assert err.value.type == "image_too_large"
    set_pil_pixel_limit(100)  # PIL's own guard: error above 2x its limit, warning (made an error) above it
    try:
        for size in ((20, 20), (11, 10)):
            with pytest.raises(ToolError) as err:
                decode_image(_png(*size), max_pixels=10**6)
            assert err.value.type == "image_too_large" and "bomb" in err.value.message
    finally:
        set_pil_pixel_limit(25_000_000)
    with pytest.raises(ToolError) as err:
        decode_image(b"not an image", max_pixels=100)
    assert err.value.type == "bad_image"


def test_normalized_boxes_to_pixels():
    assert box_to_pixels([0, 0, 500, 500], 320, 240) == (0, 0, 160, 120)
    assert box_to_pixels([250, 0, 1000, 1000], 320, 240) == (80, 0, 320, 240)
    for bad in ([500, 0, 500, 10], [10, 20, 5, 30], [0, 0, 1, 1]):
        with pytest.raises(ValueError):
            box_to_pixels(bad, 320, 240)
