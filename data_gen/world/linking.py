"""Mention linking: the sources carry no hyperlinks, so a page links every other page whose title or alias its text
mentions.

Matching is a dictionary lookup of token n-grams (longest first, left to right), which stays linear in the text
length however many titles there are; a regex alternation over tens of thousands of titles does not. Tokens keep
hyphenated and dotted words whole, so "Guinea" never matches inside "Guinea-Bissau". A surface form that names two
pages is ambiguous and links neither, unless one page has it as its title/label (a label beats an alias). Forms of
common nouns ("cat", an article titled "Cat") also match with the other case of their first letter, so both
"The cat" and "Cats are" style sentence starts link; proper names (countries, cities) match only as written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

TOKEN = re.compile(r"\w+(?:['’.\-]\w+)*|[^\w\s]")
MIN_FORM_CHARS = 3


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


@dataclass(frozen=True, slots=True)
class Form:
    """A way of writing a page's subject: ``text`` names page ``page_id``; ``label`` marks its title or label (vs an
    alias); ``common`` marks a common noun, matched with either case of the first letter."""

    text: str
    page_id: str
    label: bool
    common: bool = False


def _flip_initial(text: str) -> str:
    head = text[:1]
    return (head.lower() if head.isupper() else head.upper()) + text[1:]


class Linker:
    def __init__(self, forms: Iterable[Form]) -> None:
        # tier 0: label as written, 1: alias as written, 2: label with flipped initial, 3: alias with flipped initial
        tiers: dict[tuple[str, ...], dict[int, set[str]]] = {}
        for form in forms:
            if len(form.text) < MIN_FORM_CHARS or not any(ch.isalpha() for ch in form.text):
                continue
            variants = [(form.text, 0 if form.label else 1)]
            if form.common:
                variants.append((_flip_initial(form.text), 2 if form.label else 3))
            for text, tier in variants:
                key = tuple(tokens(text))
                if key:
                    tiers.setdefault(key, {}).setdefault(tier, set()).add(form.page_id)
        self._pages: dict[tuple[str, ...], str] = {}
        for key, by_tier in tiers.items():
            best = by_tier[min(by_tier)]
            if len(best) == 1:
                self._pages[key] = next(iter(best))
        self._max_len: dict[str, int] = {}
        for key in self._pages:
            self._max_len[key[0]] = max(self._max_len.get(key[0], 0), len(key))

    def __len__(self) -> int:
        return len(self._pages)

    def mentions(self, text: str, self_id: str | None = None) -> list[str]:
        """Ids of the pages ``text`` mentions, in order of first mention, without ``self_id``."""
        toks = tokens(text)
        found: dict[str, None] = {}
        i, n = 0, len(toks)
        while i < n:
            longest = self._max_len.get(toks[i], 0)
            step = 1
            for length in range(min(longest, n - i), 0, -1):
                page = self._pages.get(tuple(toks[i : i + length]))
                if page is not None:
                    if page != self_id:
                        found.setdefault(page, None)
                    step = length
                    break
            i += step
        return list(found)
