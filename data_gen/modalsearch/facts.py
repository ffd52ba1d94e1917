"""Whether a number may be an answer: the world's sources must agree on it, and a count that changes over time must
come with its date and the scope it counts (the city, not its metropolitan area).

A page states a fact more than once (the article's lead and the world's fact line): Amman's lead says "a population
of five million as of 2024", its fact line "Population: 1,275,857 (GeoNames)". Asked as "the population of Amman",
either could be called wrong, so neither is asked (``conflicting``). A population without a year ("Population:
7,871,900 (GeoNames)", Taipei's metropolitan figure under the city's name) cannot be checked by a person against
any source, so it is not asked either (``undated``); one with a year is asked with that year.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Quantities whose sources are compared; those in DATED change over time and need a year.
QUANTITIES = frozenset({"P1082", "P2046"})
DATED = frozenset({"P1082"})
TOLERANCE = 0.02  # two statements of one quantity agree within this relative difference (rounding)
_WORDS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve".split())}
_SCALE = {"thousand": 1e3, "million": 1e6, "billion": 1e9}
_NUMBER = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?|" + "|".join(_WORDS) + r")(?:\s+(thousand|million|"
                     r"billion))?(?![\w,]*\d)", re.IGNORECASE)
_YEAR = re.compile(r"\b(1[89]\d\d|20\d\d)\b")
_WIDER = re.compile(r"\b(?:metro(?:politan)?|urban area|agglomeration|conurbation|greater)\b", re.IGNORECASE)


def numbers_in(sentence: str) -> list[float]:
    """The quantities a sentence states ("1,275,857", "five million", "4.1 million"), years left out."""
    out = []
    for match in _NUMBER.finditer(sentence):
        digits, scale = match.group(1).lower(), (match.group(2) or "").lower()
        if scale == "" and _YEAR.fullmatch(digits):
            continue  # "as of 2024": a date, not the quantity
        value = float(_WORDS[digits]) if digits in _WORDS else float(digits.replace(",", ""))
        if digits in _WORDS and not scale:
            continue  # "one of the largest": a word number alone is no quantity
        out.append(value * _SCALE.get(scale, 1.0))
    return out


def conflicting(value: str, stating: Iterable[str]) -> str | None:
    """A sentence among ``stating`` (those that state the quantity's relation) giving another figure than
    ``value``; None when all agree. Numbers under a hundredth of ``value`` count something else ("its 16 states
    have a population of over 83 million")."""
    target = float(value.replace(",", ""))
    for sentence in stating:
        for number in numbers_in(sentence):
            if number >= target / 100 and abs(number - target) > TOLERANCE * max(abs(target), 1.0):
                return sentence.strip()
    return None


def dated_scope(sentence: str) -> str | None:
    """The year a sentence dates its figure by, when it counts the entity itself (no metropolitan or urban area);
    None otherwise."""
    year = _YEAR.search(sentence)
    return year.group(1) if year and not _WIDER.search(sentence) else None
