"""SafeFetcher and decode_image. Every connection goes to servers started here on 127.0.0.1; refusals of other
addresses happen before any connection is attempted (IP literals) or at resolution time (names)."""

import asyncio
import io
import socket
import struct
import zlib

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver
from PIL import Image

from tool_server.net import BlockedURL, FetchError, ImageDecodeError, SafeFetcher, decode_image


async def _serve(app: web.Application):
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]


@pytest.fixture
async def servers():
    """A: the allow-listed "public" test server. B: another loopback service that must never be reached."""
    hits = {"b": 0}
    release = asyncio.Event()
    b_port_box = {}

    async def big(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        for _ in range(40):
            await resp.write(b"x" * 65536)
        return resp

    async def slow(request):
        await release.wait()
        return web.Response(text="late")

    def redirect(target):
        async def handler(request):
            raise web.HTTPFound(target() if callable(target) else target)
        return handler

    a = web.Application()
    def fixed(**kw):
        async def handler(request):
            return web.Response(**kw)
        return handler

    a.router.add_get("/page", fixed(text="<p>hello</p>", content_type="text/html"))
    a.router.add_get("/img", fixed(body=b"\x89PNG", content_type="image/png"))
    a.router.add_get("/bin", fixed(body=b"\x00\x01", content_type="application/octet-stream"))
    a.router.add_get("/big", big)  # streamed, no Content-Length
    a.router.add_get("/biglen", fixed(body=b"y" * (2 * 2**20), content_type="text/plain"))
    a.router.add_get("/slow", slow)
    a.router.add_get("/to-page", redirect("/page"))
    a.router.add_get("/to-b", redirect(lambda: f"http://127.0.0.1:{b_port_box['p']}/secret"))
    a.router.add_get("/to-b-by-name", redirect(lambda: f"http://localhost:{b_port_box['p']}/secret"))
    a.router.add_get("/to-metadata", redirect("http://169.254.169.254/latest/meta-data/"))
    a.router.add_get("/to-file", redirect("file:///etc/passwd"))
    a.router.add_get("/loop", redirect("/loop"))

    async def secret(request):
        hits["b"] += 1
        return web.Response(text="internal", content_type="text/plain")

    bapp = web.Application()
    bapp.router.add_get("/secret", secret)
    ra, pa = await _serve(a)
    rb, pb = await _serve(bapp)
    b_port_box["p"] = pb
    yield {"a": pa, "b": pb, "hits": hits}
    release.set()
    await ra.cleanup()
    await rb.cleanup()


def fetcher(servers, **kw) -> SafeFetcher:
    return SafeFetcher(allowed_endpoints=[("127.0.0.1", servers["a"])], max_bytes=2**20, **kw)


class StaticResolver(AbstractResolver):
    """Name -> addresses without DNS, to test what the resolver-level check does with each answer."""

    def __init__(self, table):
        self.table = table

    async def resolve(self, host, port=0, family=socket.AF_INET):
        return [{"hostname": host, "host": a, "port": port, "family": socket.AF_INET6 if ":" in a else socket.AF_INET,
                 "proto": 0, "flags": socket.AI_NUMERICHOST} for a in self.table[host]]

    async def close(self):
        pass


async def test_allowed_test_server_and_redirect_within_it(servers):
    f = fetcher(servers)
    r = await f.fetch(f"http://127.0.0.1:{servers['a']}/page")
    assert (r.status, r.content_type, r.body) == (200, "text/html", b"<p>hello</p>")
    r = await f.fetch(f"http://127.0.0.1:{servers['a']}/to-page")
    assert r.final_url == f"http://127.0.0.1:{servers['a']}/page" and r.body == b"<p>hello</p>"
    await f.close()


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:{b}/secret",            # loopback, port not allow-listed
    "http://127.0.0.2:{a}/page",              # other loopback address
    "http://10.0.0.7/",                       # private
    "http://192.168.1.1/",
    "http://169.254.169.254/latest/meta-data/",  # link-local (cloud metadata)
    "http://0.0.0.0:{a}/page",                # unspecified
    "http://224.0.0.1/",                      # multicast
    "http://[::1]:{a}/page",                  # IPv6 loopback
    "http://[::ffff:127.0.0.1]:{b}/secret",   # IPv4-mapped IPv6 loopback
    "http://[fe80::1]/",                      # IPv6 link-local
    "http://[fd12:3456::1]/",                 # IPv6 unique-local
    "ftp://127.0.0.1:{a}/page",
    "file:///etc/passwd",
    "http://[2002:7f00:1::]:{b}/secret",      # 6to4 embedding 127.0.0.1
    "http://[2002:a9fe:a9fe::]/latest/meta-data/",  # 6to4 embedding 169.254.169.254
    "http://[64:ff9b::7f00:1]:{b}/secret",    # NAT64 embedding 127.0.0.1
    "http://[fec0::1]/",                      # IPv6 site-local
    "http://192.88.99.1/",                    # 6to4 relay anycast
    "http://2130706433:{b}/secret",           # odd spellings of 127.0.0.1
    "http://0x7f.1:{b}/secret",
    "http://127.1:{b}/secret",
    "http://0177.0.0.1:{b}/secret",
    "http://0x08.0x08.0x08.0x08/",            # an odd spelling of a public address is refused too
])
async def test_refused_targets(servers, url):
    f = fetcher(servers)
    with pytest.raises(BlockedURL):
        await f.fetch(url.format(a=servers["a"], b=servers["b"]))
    await f.close()
    assert servers["hits"]["b"] == 0


async def test_names_are_checked_after_resolution(servers):
    table = {"ok.test": ["127.0.0.1"], "mixed.test": ["8.8.8.8", "127.0.0.1"], "v6.test": ["::1"]}
    f = fetcher(servers, resolver=StaticResolver(table))
    r = await f.fetch(f"http://ok.test:{servers['a']}/page")  # resolves to the allow-listed endpoint
    assert r.body == b"<p>hello</p>"
    for url in (f"http://ok.test:{servers['b']}/secret", f"http://mixed.test:{servers['b']}/secret",
                f"http://v6.test:{servers['a']}/page"):
        with pytest.raises(BlockedURL):
            await f.fetch(url)
    await f.close()
    f = fetcher(servers)  # the real resolver: localhost is loopback
    with pytest.raises(BlockedURL):
        await f.fetch(f"http://localhost:{servers['b']}/secret")
    await f.close()
    assert servers["hits"]["b"] == 0


@pytest.mark.parametrize("path", ["/to-b", "/to-b-by-name", "/to-metadata", "/to-file"])
async def test_redirect_hops_are_checked(servers, path):
    f = fetcher(servers)
    with pytest.raises(BlockedURL):
        await f.fetch(f"http://127.0.0.1:{servers['a']}{path}")
    await f.close()
    assert servers["hits"]["b"] == 0


async def test_redirect_loop_is_bounded(servers):
    f = fetcher(servers, max_redirects=3)
    with pytest.raises(FetchError) as e:
        await f.fetch(f"http://127.0.0.1:{servers['a']}/loop")
    assert e.value.reason == "too_many_redirects"
    await f.close()


@pytest.mark.parametrize("path,reason", [("/big", "too_large"), ("/biglen", "too_large"), ("/bin", "content_type"),
                                         ("/slow", "timeout")])
async def test_body_type_and_time_limits(servers, path, reason):
    f = fetcher(servers, timeout_s=0.3)
    with pytest.raises(FetchError) as e:
        await f.fetch(f"http://127.0.0.1:{servers['a']}{path}")
    assert e.value.reason == reason and not isinstance(e.value, BlockedURL)
    await f.close()


async def test_content_type_allow_list_and_allow_private(servers):
    f = SafeFetcher(allow_private=True, content_types=["image/*"])
    assert (await f.fetch(f"http://127.0.0.1:{servers['a']}/img")).content_type == "image/png"
    with pytest.raises(FetchError):
        await f.fetch(f"http://127.0.0.1:{servers['a']}/page")
    await f.close()


def _png(w: int, h: int) -> bytes:
    buf = io.BytesIO()
    Image.new("L", (w, h)).save(buf, "PNG")
    return buf.getvalue()


def _png_header_only(w: int, h: int) -> bytes:
    """A PNG that claims w x h pixels: what a decompression bomb looks like to a decoder before it inflates."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)
    idat = chunk(b"IDAT", zlib.compress(b"\x00" * 64))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + idat + chunk(b"IEND", b"")


def test_decode_image_limits():
    im = decode_image(_png(40, 30), max_pixels=1200)
    assert im.size == (40, 30)
    with pytest.raises(ImageDecodeError) as e:
        decode_image(_png(41, 30), max_pixels=1200)
    assert e.value.reason == "too_many_pixels"
    with pytest.raises(ImageDecodeError) as e:  # beyond Pillow's own bomb limit: refused at open
        decode_image(_png_header_only(100_000, 100_000), max_pixels=10**12)
    assert e.value.reason == "too_many_pixels"
    with pytest.raises(ImageDecodeError) as e:
        decode_image(b"not an image", max_pixels=100)
    assert e.value.reason == "undecodable"
    with pytest.raises(ImageDecodeError) as e:
        decode_image(_png(40, 30)[:40], max_pixels=10_000)  # truncated
    assert e.value.reason == "undecodable"
