"""Answer normalisation, matching and final-answer extraction for the two agent protocols (no verl import).

This is the offline judge: it decides when no LLM judge is configured or the judge keeps failing. It favours
precision over recall, because a reward that accepts near-misses teaches the policy to hedge: a response is
correct only when one of its answer candidates equals (after normalisation) the reference or an alias. There is
no substring matching, so "Paris, Texas" does not match "Paris" (and vice versa), and a hedge such as
"Paris or Lyon" does not match "Paris". Alternatives go the other way only: a *reference* written "X or Y"
accepts X, Y and "X or Y".
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

_ARTICLES = frozenset({"a", "an", "the"})
_NUMBER_WORDS = {
    word: str(value)
    for value, word in enumerate(
        (
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
            "twenty",
        )
    )
}
_TOKEN = re.compile(r"\d+(?:\.\d+)?|[^\W_]+")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_APOSTROPHES = re.compile(r"['\u2018\u2019\u02bc`]")
_OR_SPLIT = re.compile(r"\s+or\s+", re.IGNORECASE)
_SENTENCE_END = re.compile(r"\.\s")

# Cues that mark the answer inside free text (Neos' final turn is plain prose).
_ANSWER_CUES = (
    re.compile(r"\\boxed\{([^{}]*)\}"),
    re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE),
    re.compile(r"\*\*(.+?)\*\*"),
    re.compile(r"(?:final answer|the answer|answer)\s*(?:is|:)\s*:?\s*([^\n]+)", re.IGNORECASE),
)


def _fold(text: str) -> str:
    """Unicode-fold: compatibility forms, accents and case, so 'Ｃafé' and 'cafe' compare equal."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()


def _canonical_number(token: str) -> str:
    if "." in token:
        token = token.rstrip("0").rstrip(".")
    return token.lstrip("0") or "0"


def normalize_answer(text: str) -> str:
    """Canonical form for comparison: folded case/unicode, no punctuation or articles, canonical numbers.

    Numbers: thousands separators dropped ("1,000" = "1000"), trailing decimal zeros dropped ("3.50" = "3.5"),
    number words zero..twenty become digits, "%" reads as "percent". Articles are kept when they are all there is.
    """
    folded = _APOSTROPHES.sub("", _fold(text)).replace("%", " percent ").replace("&", " and ")
    tokens = _TOKEN.findall(_THOUSANDS.sub("", folded))
    tokens = [_canonical_number(t) if t[0].isdigit() else _NUMBER_WORDS.get(t, t) for t in tokens]
    content = [t for t in tokens if t not in _ARTICLES]
    return " ".join(content or tokens)


def _as_strings(value: Any) -> list[str]:
    """Strings from a string or any iterable of strings (verl may hand lists over as numpy arrays)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, Iterable) and not isinstance(value, Mapping):
        return [str(v) for v in value if v is not None]
    return [str(value)]


def reference_answers(ground_truth: Any) -> list[str]:
    """All accepted surface forms: ``"target"`` or ``{"target": str, "aliases": [...]}``; "X or Y" adds X and Y.

    A string that holds such a dict as JSON is accepted too, since parquet datasets often store it that way.
    """
    if isinstance(ground_truth, str) and ground_truth.lstrip().startswith("{"):
        try:
            ground_truth = json.loads(ground_truth)
        except json.JSONDecodeError:
            pass  # a plain answer that happens to start with "{": match it as text
    if isinstance(ground_truth, Mapping):
        forms = _as_strings(ground_truth.get("target")) + _as_strings(ground_truth.get("aliases"))
    else:
        forms = _as_strings(ground_truth)
    expanded: list[str] = []
    for form in forms:
        expanded.append(form)
        parts = [p for p in _OR_SPLIT.split(form) if p.strip()]
        if len(parts) > 1:
            expanded.extend(parts)
    return [f for f in dict.fromkeys(f.strip() for f in expanded) if f]


def answer_candidates(prediction: str) -> list[str]:
    """The whole prediction plus the spans that answer cues mark (boxed, <answer>, bold, 'the answer is ...')."""
    candidates = [prediction]
    for cue in _ANSWER_CUES:
        for match in cue.finditer(prediction):
            span = match.group(1)
            # "The answer is Paris. It lies ..." -> also try "Paris"; keep the whole span for "St. Louis".
            candidates.extend((span, _SENTENCE_END.split(span, maxsplit=1)[0]))
    return [c for c in (c.strip() for c in candidates) if c]


def answer_matches(prediction: str, ground_truth: Any) -> bool:
    """Whether some answer candidate of ``prediction`` normalises to some reference form (see module doc)."""
    references = {normalize_answer(r) for r in reference_answers(ground_truth)} - {""}
    return any(normalize_answer(c) in references for c in answer_candidates(prediction))


def primary_target(ground_truth: Any) -> str:
    """The reference shown to the LLM judge, with aliases spelled out so it can accept them."""
    forms = reference_answers(ground_truth)
    if not forms:
        return ""
    if len(forms) == 1:
        return forms[0]
    return f"{forms[0]} (also accepted: {'; '.join(forms[1:])})"
