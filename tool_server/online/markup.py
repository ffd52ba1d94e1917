"""What MEI reads of a fetched page (title, visible text, image references), in time linear in the page's length.

Pages are the web's, so their markup is an attacker's to choose, up to the 20 MB page limit. The standard library's
``HTMLParser`` (Python 3.11) rescans to the end of the page for each construct left open: 10,000 copies of ``<a `` (30
kB) took 7.4 s, doubling them 4x that, and ``<![`` without a name raised ``AssertionError``. A regular expression
over Markdown (``!\\[([^\\]]*)\\]``) did the same for each ``![`` without a ``]``. Here every construct is found by
one forward search from the current position and the position moves past what was searched, so each character is
read a bounded number of times. A construct still open at the end of the page ends the page, as HTML parsing's
end-of-file rules say (a tag cut off there is dropped; a comment, script or style runs to the end).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from urllib.parse import urljoin

SKIPPED = frozenset({"script", "style", "noscript", "template", "svg", "head"})  # no visible text inside
BLOCKS = frozenset({"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article", "table"})
_RAW = ("script", "style", "title")  # their content is text up to their end tag (no markup inside)
_RAW_END = {name: re.compile(rf"</{name}[\t\n\f\r />]", re.IGNORECASE) for name in _RAW}
_TAG = re.compile(r"<(/?)([A-Za-z][^\t\n\f\r />]*)")
_SPACE = re.compile(r"[\t\n\f\r /]*")
_NAME = re.compile(r"[^\t\n\f\r />][^\t\n\f\r />=]*")
_EQUALS = re.compile(r"[\t\n\f\r ]*=[\t\n\f\r ]*")
_UNQUOTED = re.compile(r"[^\t\n\f\r >]*")
_MD_TARGET = re.compile(r"\((https?://[^\s)]+)")


@dataclass(slots=True)
class HtmlPage:
    title: str = ""
    text: str = ""  # visible text, one line per block, whitespace collapsed
    images: list[tuple[str, str]] = field(default_factory=list)  # (absolute URL, alt), first occurrence of each URL


def _attributes(page: str, pos: int) -> tuple[int, dict[str, str]]:
    """A tag's attributes from ``pos`` (just after its name) and the position after its ``>``; -1 when the page ends
    inside the tag. The first of repeated names counts; values are unescaped."""
    attrs: dict[str, str] = {}
    n = len(page)
    while True:
        pos = _SPACE.match(page, pos).end()
        if pos >= n:
            return -1, attrs
        if page[pos] == ">":
            return pos + 1, attrs
        name_end = _NAME.match(page, pos).end()  # at least one character: not a space, "/" or ">"
        name, pos, value = page[pos:name_end].lower(), name_end, ""
        if eq := _EQUALS.match(page, pos):
            pos = eq.end()
            if pos < n and page[pos] in "\"'":
                close = page.find(page[pos], pos + 1)
                if close < 0:
                    return -1, attrs
                value, pos = page[pos + 1 : close], close + 1
            else:
                end = _UNQUOTED.match(page, pos).end()
                value, pos = page[pos:end], end
        attrs.setdefault(name, html.unescape(value))


def _skip_to(page: str, marker: str, start: int) -> int:
    """The position after the next ``marker`` from ``start``; the page's end when there is none."""
    end = page.find(marker, start)
    return len(page) if end < 0 else end + len(marker)


def read_html(page: str, base_url: str) -> HtmlPage:
    """Title, visible text (a line break at each block element) and ``<img>`` references (absolute http(s) URLs)."""
    out = HtmlPage()
    parts: list[str] = []
    seen: set[str] = set()
    skip, pos, n = 0, 0, len(page)
    while pos < n:
        lt = page.find("<", pos)
        if lt < 0:
            lt = n
        if lt > pos and not skip:
            parts.append(html.unescape(page[pos:lt]))
        if lt >= n:
            break
        pos = lt
        tag = _TAG.match(page, lt)
        if tag is None:
            if page.startswith("<!--", lt):
                pos = _skip_to(page, "-->", lt + 4)
            elif page.startswith(("<!", "<?", "</"), lt):  # declarations, CDATA, processing instructions, "</3"
                pos = _skip_to(page, ">", lt + 2)
            else:  # a "<" that starts nothing: text
                if not skip:
                    parts.append("<")
                pos = lt + 1
            continue
        closing, name = tag.group(1), tag.group(2).lower()
        pos, attrs = _attributes(page, tag.end())
        if pos < 0:
            break  # the page ends inside this tag: dropped
        if closing:
            if name in SKIPPED and skip:
                skip -= 1
            continue
        if name in BLOCKS:
            parts.append("\n")
        if name == "img":
            src = attrs.get("src", "").strip()
            url = urljoin(base_url, src) if src else ""
            if url.startswith(("http://", "https://")) and url not in seen:
                seen.add(url)
                out.images.append((url, attrs.get("alt", "").strip()))
        self_closing = page[pos - 2] == "/"
        if name in SKIPPED and not self_closing:
            skip += 1
        if name in _RAW and not self_closing:
            end = _RAW_END[name].search(page, pos)
            content_end = n if end is None else end.start()
            if name == "title":
                out.title += html.unescape(page[pos:content_end])
            pos = content_end  # its end tag is read next
    lines = (" ".join(line.split()) for line in "".join(parts).split("\n"))
    out.text = "\n".join(line for line in lines if line)
    out.title = " ".join(out.title.split())
    return out


def markdown_images(text: str) -> dict[str, str]:
    """``![alt](url)`` references of a Markdown page, URL -> alt, first occurrence of each URL, in order.

    The alt of a ``![`` runs to the next ``]``; that ``]`` is found once for every ``![`` before it, not once each.
    """
    images: dict[str, str] = {}
    close, pos = -1, 0
    while (start := text.find("![", pos)) >= 0:
        if close < start + 2:
            close = text.find("]", start + 2)
            if close < 0:
                break  # no "]" after this one: no reference can end anywhere later
        target = _MD_TARGET.match(text, close + 1)
        if target is None:
            pos = start + 1
            continue
        images.setdefault(target.group(1), text[start + 2 : close].strip())
        pos = target.end()
    return images
