"""Sessions, visual register ordering/limits, TTL eviction and the pixel guards."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from tool_server.errors import ToolError
from tool_server.memory import MemoryBudget
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


def _image(w: int, h: int) -> Image.Image:
    return Image.new("RGB", (w, h))


def test_a_sessions_image_memory_is_bounded_in_bytes():
    store = SessionStore(max_images=100, max_session_bytes=4 * 100 * 100 * 2)  # two 100x100 RGB images
    register = store.create().register
    register.append(_image(100, 100), "q")
    register.append(_image(50, 200), "q")
    assert register.bytes == store.image_bytes == 80_000
    with pytest.raises(ToolError) as err:
        register.append(_image(1, 1), "q")
    assert (err.value.type, err.value.status) == ("session_memory_full", 409) and len(register) == 2
    with pytest.raises(ToolError):  # a batch that does not fit takes nothing
        register.reserve(1, 1)
    assert register.bytes == 80_000


def test_the_server_budget_evicts_least_recently_used_idle_sessions_first():
    clock = FakeClock()
    store = SessionStore(memory=MemoryBudget(4 * 300), memory_min_idle_s=30, clock=clock)
    a, b, c = store.create(), store.create(), store.create()
    for s in (a, b, c):
        s.register.append(_image(10, 10), "q")  # 400 bytes each: the server is full
    clock.now += 60
    store.get(a.id)  # a is used again: b is now the least recently used, then c, then a
    d = store.create()
    d.register.append(_image(10, 10), "q")
    assert set(store._sessions) == {a.id, c.id, d.id} and store.evictions["memory"] == 1
    with pytest.raises(ToolError):
        store.get(b.id)
    assert store.image_bytes == 1200
    # every other session was used in the last 30 s: a clear error instead of evicting a live episode
    store.get(c.id)
    with pytest.raises(ToolError) as err:
        store.create().register.append(_image(10, 10), "q")
    assert (err.value.type, err.value.status) == ("server_memory_full", 503)
    assert store.image_bytes == 1200
    store.delete(a.id)  # deleting returns its bytes
    assert store.image_bytes == 800


def test_expiry_pops_the_oldest_sessions_without_scanning_the_rest():
    clock = FakeClock()
    store = SessionStore(ttl_s=10, clock=clock)
    old = [store.create() for _ in range(3)]
    clock.now += 5
    fresh = [store.create() for _ in range(1000)]
    clock.now += 6  # the three old ones are 11 s idle, the rest 6 s
    touched: list[str] = []
    for s in fresh:  # a scan would read every session's last_used; expiry reads the three and the first fresh one
        object.__setattr__(s, "last_used", _Watched(s.last_used, touched, s.id))
    assert store.evict_idle() == 3 and len(touched) == 1 and store.evictions["idle"] == 3
    assert {s.id for s in old}.isdisjoint(store._sessions)


class _Watched(float):
    """A last_used value that records being compared (how many sessions an expiry pass looked at)."""

    def __new__(cls, value: float, log: list[str], sid: str):
        obj = super().__new__(cls, value)
        obj.log, obj.sid = log, sid
        return obj

    def __lt__(self, other):
        self.log.append(self.sid)
        return float(self) < other

    def __ge__(self, other):
        self.log.append(self.sid)
        return float(self) >= other

    def __gt__(self, other):
        self.log.append(self.sid)
        return float(self) > other


def test_one_client_cannot_take_every_session():
    store = SessionStore(max_sessions=10, max_sessions_per_client=3)
    mine = [store.create(client="10.0.0.1") for _ in range(3)]
    with pytest.raises(ToolError) as err:
        store.create(client="10.0.0.1")
    assert (err.value.type, err.value.status) == ("session_quota", 429) and "10.0.0.1" in err.value.message
    assert store.create(client="10.0.0.2")  # another client still gets sessions
    store.delete(mine[0].id)
    assert store.create(client="10.0.0.1")  # a deleted session frees its place in the quota


def test_shipped_session_defaults():
    from tool_server.app import ServerSettings

    s = ServerSettings()
    assert (s.max_sessions, s.max_sessions_per_client, s.max_register_images) == (100_000, 10_000, 512)
    assert (s.max_session_image_bytes, s.memory_budget_bytes, s.client_memory_share) == (512 * 2**20, 16 * 2**30, 0.5)


def test_a_session_evicted_while_its_call_ran_takes_no_bytes_it_cannot_give_back():
    """A call that outlives its session's idle time (a slow fetch) can see it evicted for another's images; its images
    were then added to the server's total and never subtracted (the session was gone): the budget shrank for good."""
    clock = FakeClock()
    store = SessionStore(memory=MemoryBudget(4 * 300), memory_min_idle_s=30, clock=clock)
    slow, other = store.create(), store.create()
    slow.register.append(_image(10, 10), "q")
    clock.now += 60  # slow's call started 60 s ago and is still fetching
    store.get(other.id)
    for _ in range(3):  # the third finds the server full: slow (idle 60 s) is evicted
        other.register.append(_image(10, 10), "q")
    assert store.evictions["memory"] == 1 and store.image_bytes == 1200
    store.delete(other.id)
    with pytest.raises(ToolError) as err:
        slow.register.append(_image(10, 10), "q")  # the slow call's image arrives
    assert (err.value.type, err.value.status) == ("unknown_session", 404)
    assert store.image_bytes == 0 and len(store) == 0


async def test_fetch_image_charges_each_image_as_it_is_decoded_and_gives_back_what_it_did_not_register(
    monkeypatch,
):
    """FetchImage decoded all of a call's images (five of up to 25 Mpx) before the budgets were asked, so concurrent
    calls held them outside the budgets; now each decoded image is charged at once, and a call cancelled (or finding
    the register full) gives back the bytes of the images it did not register."""
    import asyncio

    from tool_server.tools import neos
    from tool_server.tools.base import Call

    store = SessionStore(max_images=2, memory=MemoryBudget(4 * 10_000))
    session = store.create()
    gate = asyncio.Event()

    async def load_image(ctx, url: str, field: str):
        if url.endswith("slow"):
            await gate.wait()
        return None, _image(20, 20)  # 1,600 bytes each

    monkeypatch.setattr(neos, "load_image", load_image)
    call = asyncio.create_task(neos.fetch_image(None, Call(session, {"urls": ["a", "slow"]}, 0)))
    for _ in range(1000):  # the first image loads at once; the second waits for the gate
        if store.image_bytes or call.done():
            break
        await asyncio.sleep(0)
    assert store.image_bytes == 1600 and not call.done()  # the first image charged while the second loads
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert store.image_bytes == session.register.bytes == 0 and len(session.register) == 0
    gate.set()
    observation = await neos.fetch_image(None, Call(session, {"urls": ["a", "b", "c"]}, 0))
    assert [r.get("output_ref") for r in observation.records] == ["img_1", "img_2", None]
    assert observation.records[2]["error"]["type"] == "register_full"
    assert store.image_bytes == session.register.bytes == 3200
