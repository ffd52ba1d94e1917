"""Outbound fetching that cannot be turned against the server's own network (SSRF), and safe image decoding.

Target addresses are checked *after* DNS resolution, inside a custom aiohttp resolver, so the address that passed
the check is the one the connector connects to (no window for DNS rebinding between check and connect). IP-literal
hosts, which aiohttp does not send through the resolver, are checked before the request. Redirects are followed by
hand, so every hop goes through the same checks, up to ``max_redirects``.

Refused unless ``allow_private=True``: loopback, private, link-local, multicast, reserved, unspecified, shared
(carrier-grade NAT) and every other non-global address, IPv4 and IPv6, including IPv4-mapped IPv6 addresses, which
are judged by the IPv4 address they carry, as are NAT64 (64:ff9b::/96) addresses; 6to4 (2002::/16, which can embed
any IPv4 address), site-local fec0::/10 and the 6to4 relay anycast 192.88.99.0/24 (all deprecated) are refused
whatever they carry. A host spelled as an IPv4 address in any form but dotted decimal (``2130706433``, ``0x7f.1``,
``127.1``, ``0177.0.0.1``: what ``inet_aton`` and browsers accept) is refused before anything is resolved.
``allowed_endpoints`` is an explicit list of ``(address, port)`` pairs
that are let through although non-global: it exists so tests can talk to a server they started on loopback while
every other loopback port, and every redirect away from that server, is still refused exactly as in production.
"""

from __future__ import annotations

import io
import ipaddress
import socket
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urljoin

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from PIL import Image
from yarl import URL

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

DEFAULT_CONTENT_TYPES = ("text/html", "text/plain", "text/markdown", "application/xhtml+xml", "application/json",
                         "application/pdf", "image/*")


class FetchError(Exception):
    """A fetch that could not complete; ``reason`` is a short machine-readable code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


class BlockedURL(FetchError):
    """The URL or an address it resolves to is not allowed (scheme, private address, redirect target)."""


@dataclass(frozen=True, slots=True)
class FetchResult:
    status: int
    content_type: str
    body: bytes
    final_url: str


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_6TO4_RELAY = ipaddress.IPv4Network("192.88.99.0/24")


def odd_ipv4_spelling(host: str) -> str | None:
    """The IPv4 address ``host`` spells in a form other than dotted decimal (``inet_aton``'s forms), else None."""
    name = host[:-1] if host.endswith(".") else host
    try:
        packed = socket.inet_aton(name)
    except OSError:
        return None
    address = str(ipaddress.IPv4Address(packed))
    return None if host == address else address


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    allow_private: bool = False
    allowed_endpoints: frozenset[tuple[str, int]] = frozenset()

    def refusal(self, address: str, port: int) -> str | None:
        """Why connecting to ``address:port`` is refused, or None if it is allowed."""
        ip: IPAddress = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone id
        if self.allow_private or (str(ip), port) in self.allowed_endpoints:
            return None
        if isinstance(ip, ipaddress.IPv6Address):
            if ip.sixtofour is not None or ip.is_site_local:
                return f"{ip} is {'6to4' if ip.sixtofour is not None else 'site-local'}"
            if ip.ipv4_mapped is not None:
                ip = ip.ipv4_mapped
            elif ip in _NAT64:
                ip = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if ip in _6TO4_RELAY:
            return f"{ip} is the 6to4 relay anycast network"
        for attr in ("is_unspecified", "is_loopback", "is_link_local", "is_multicast", "is_private", "is_reserved"):
            if getattr(ip, attr):
                return f"{ip} is {attr[3:].replace('_', '-')}"
        if not ip.is_global:
            return f"{ip} is not a global address"
        return None


class SafeResolver(AbstractResolver):
    """Resolves with ``base`` and refuses the host if any of its addresses is refused by the policy."""

    def __init__(self, policy: AddressPolicy, base: AbstractResolver | None = None) -> None:
        self._policy = policy
        self._base = base or aiohttp.ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._base.resolve(host, port, family)
        for r in results:
            why = self._policy.refusal(r["host"], r["port"])
            if why is not None:
                raise BlockedURL("blocked_address", f"{host} resolves to a refused address: {why}")
        return results

    async def close(self) -> None:
        await self._base.close()


def _content_type_allowed(content_type: str, allowed: Iterable[str]) -> bool:
    for pattern in allowed:
        if pattern.endswith("/*") and content_type.startswith(pattern[:-1]):
            return True
        if content_type == pattern:
            return True
    return False


class SafeFetcher:
    def __init__(
        self,
        *,
        allow_private: bool = False,
        allowed_endpoints: Iterable[tuple[str, int]] = (),
        max_bytes: int = 20 * 2**20,
        content_types: Iterable[str] = DEFAULT_CONTENT_TYPES,
        timeout_s: float = 20.0,
        connect_timeout_s: float = 5.0,
        max_redirects: int = 5,
        user_agent: str = "neos-tool-server",
        resolver: AbstractResolver | None = None,
    ) -> None:
        endpoints = frozenset((str(ipaddress.ip_address(a)), p) for a, p in allowed_endpoints)
        self.policy = AddressPolicy(allow_private, endpoints)
        self._max_bytes = max_bytes
        self._content_types = tuple(content_types)
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, connect=connect_timeout_s)
        self._max_redirects = max_redirects
        self._headers = {"User-Agent": user_agent}
        self._base_resolver = resolver
        self._resolver: SafeResolver | None = None
        self._session: aiohttp.ClientSession | None = None

    def _get_resolver(self) -> SafeResolver:
        if self._resolver is None:
            self._resolver = SafeResolver(self.policy, self._base_resolver)
        return self._resolver

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(resolver=self._get_resolver(), limit=100)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout, headers=self._headers)
        return self._session

    def _check_url(self, url: str) -> URL:
        try:
            u = URL(url)
        except (ValueError, TypeError) as e:
            raise BlockedURL("bad_url", f"{url!r}: {e}") from e
        if u.scheme not in ("http", "https"):
            raise BlockedURL("bad_scheme", f"only http and https are fetched, not {u.scheme or 'no scheme'!r}")
        if not u.host:
            raise BlockedURL("bad_url", f"{url!r} has no host")
        if (spelled := odd_ipv4_spelling(u.host)) is not None:
            raise BlockedURL("blocked_address", f"{url}: host {u.host!r} spells the IPv4 address {spelled} oddly")
        try:
            literal = ipaddress.ip_address(u.host)
        except ValueError:
            return u  # a name: checked by SafeResolver at connect time
        why = self.policy.refusal(str(literal), u.port or 0)
        if why is not None:
            raise BlockedURL("blocked_address", f"{url}: {why}")
        return u

    async def vet(self, url: str) -> str:
        """``url`` if :meth:`fetch` would connect to it, else :class:`BlockedURL`, without fetching anything.

        For handing a URL to a service that fetches it itself (a page reader): the name is resolved here and every
        address it resolves to must pass the policy. What that service does afterwards (its own DNS answer,
        redirects) is outside this server's control, which is why readers are optional and operator-configured.
        """
        u = self._check_url(url)
        try:
            ipaddress.ip_address(u.host)
            return url  # an IP literal, checked by _check_url
        except ValueError:
            pass
        try:
            await self._get_resolver().resolve(u.host, u.port or 0, socket.AF_UNSPEC)
        except OSError as e:
            raise FetchError("dns", f"{u.host}: {e}") from e
        return url

    async def fetch(self, url: str) -> FetchResult:
        session = self._get_session()
        current = self._check_url(url)
        for _hop in range(self._max_redirects + 1):
            try:
                async with session.get(current, allow_redirects=False) as resp:
                    if resp.status in (301, 302, 303, 307, 308):
                        location = resp.headers.get("Location")
                        if not location:
                            raise FetchError("bad_redirect", f"{current}: HTTP {resp.status} without Location")
                        current = self._check_url(urljoin(str(current), location))
                        continue
                    return await self._read(resp, str(current))
            except FetchError:
                raise
            except TimeoutError as e:
                raise FetchError("timeout", f"{current}: no complete answer within {self._timeout.total} s") from e
            except aiohttp.ClientError as e:
                raise FetchError("connection", f"{current}: {type(e).__name__}: {e}") from e
        raise FetchError("too_many_redirects", f"{url}: more than {self._max_redirects} redirects")

    async def _read(self, resp: aiohttp.ClientResponse, url: str) -> FetchResult:
        content_type = resp.content_type  # without parameters, lower-cased
        if not _content_type_allowed(content_type, self._content_types):
            raise FetchError("content_type", f"{url}: content type {content_type!r} is not accepted")
        if resp.content_length is not None and resp.content_length > self._max_bytes:
            raise FetchError("too_large", f"{url}: {resp.content_length} bytes announced, limit {self._max_bytes}")
        body = bytearray()
        async for chunk in resp.content.iter_chunked(64 * 1024):
            body += chunk
            if len(body) > self._max_bytes:
                raise FetchError("too_large", f"{url}: body exceeds {self._max_bytes} bytes")
        return FetchResult(resp.status, content_type, bytes(body), url)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._resolver is not None:
            await self._resolver.close()
            self._resolver = None


class ImageDecodeError(FetchError):
    """Bytes that are not a decodable image, or one with more pixels than allowed (a decompression bomb)."""


def decode_image(data: bytes, max_pixels: int) -> Image.Image:
    """Decode and fully load an image, refusing more than ``max_pixels`` pixels before any pixel is decoded."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            im = Image.open(io.BytesIO(data))
            width, height = im.size
            if width * height > max_pixels:
                raise ImageDecodeError("too_many_pixels", f"{width}x{height} exceeds {max_pixels} pixels")
            im.load()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise ImageDecodeError("too_many_pixels", str(e)) from e
    except ImageDecodeError:
        raise
    except (OSError, ValueError, SyntaxError) as e:  # PIL reports truncated/garbage data with these
        raise ImageDecodeError("undecodable", f"{type(e).__name__}: {e}") from e
    return im


__all__ = ["AddressPolicy", "BlockedURL", "FetchError", "FetchResult", "ImageDecodeError", "SafeFetcher",
           "SafeResolver", "decode_image"]

