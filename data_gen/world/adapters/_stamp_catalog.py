"""The Tux Paint stamp catalogue (tuxpaint-stamps-default) and which WordNet synset each stamp depicts.

Shared by the ``stamps`` adapter (images, category facts) and the ``wordnet`` adapter (whose small world is the
hypernym closure of the depicted synsets and whose pages show the stamps), so both see one matching.

A stamp is ``<category>/.../<name>.png`` (or ``.svg``) with ``<name>.txt`` whose first line is the English
description. The depicted concept is read off the description's first clause ("A great blue heron." → "great blue
heron"): the longest trailing word sequence that WordNet knows as a noun with a sense inside the category's domain
(animals → animal.n.01, food → food, ...), taking WordNet's most frequent in-domain sense. Style folders
(``cartoon``, ``toys``, ``plastic``) say how a thing is drawn, not what it is, so they are no category level.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from data_gen.world.adapters._wordnet_data import Synset, WordNet

STAMP_DIR = Path("usr/share/tuxpaint/stamps")
STYLE_DIRS = frozenset({"cartoon", "toys", "plastic"})
# Folders of letters, digits, operators, notes, smileys and shapes: signs, not depictions of an entity.
SYMBOL_DIRS = ("symbols/alphabets", "symbols/math", "symbols/music", "symbols/faces", "symbols/shapes",
               "symbols/money/00_symbols")
# Category prefix → WordNet senses (lemma, sense number) whose hyponyms the stamps there may depict; longest prefix
# wins, "" is the default. Restricting the domain is what makes "A bat." under animals the animal, not the club.
DOMAINS: dict[str, tuple[tuple[str, int], ...]] = {
    "": (("artifact", 1),),
    "animals": (("animal", 1),),
    "animals/amphibians": (("amphibian", 3),),
    "animals/birds": (("bird", 1),),
    "animals/dinosaur": (("reptile", 1),),
    "animals/fish": (("fish", 1), ("crustacean", 1)),
    "animals/insects": (("invertebrate", 1),),
    "animals/lizards": (("reptile", 1),),
    "animals/mammals": (("mammal", 1),),
    "animals/marsupials": (("mammal", 1),),
    "animals/shellfish": (("invertebrate", 1),),
    "plants": (("organism", 1),),
    "food": (("food", 1), ("food", 2), ("edible fruit", 1), ("plant part", 1)),
    "space": (("celestial body", 1), ("artifact", 1), ("person", 1)),
    "symbols/chess": (("chessman", 1),),
    "symbols/money": (("coin", 1), ("currency", 1)),
    "people": (("person", 1), ("body part", 1), ("artifact", 1)),
    "medical": (("artifact", 1), ("body part", 1)),
    "military": (("artifact", 1), ("person", 1)),
    "naturalforces": (("natural phenomenon", 1), ("event", 1)),
    "seasonal": (("organism", 1), ("artifact", 1), ("food", 2), ("spiritual being", 1), ("natural object", 1)),
}
# Small world: stamps of things with knowledge behind them (species, plants, celestial bodies, monuments).
SMALL_PREFIXES = ("animals", "plants", "space", "town/monuments")
_LEADING = frozenset({"a", "an", "the", "our", "two", "another", "some", "this", "these", "with"})
_CLAUSE_END = re.compile(r"\s*(?:[.!?,;:()\"“”—–]|\s-\s)")
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’-]*")
_STOPS = frozenset({"with", "in", "on", "of", "from", "for", "and", "or", "at", "to", "by", "as", "that", "who",
                    "is", "are", "was", "can", "called", "like", "lets", "resembles", "last", "during"})


class StampError(ValueError):
    """The tuxpaint-stamps-default tree is missing or a stamp's description cannot be read."""


@dataclass(frozen=True, slots=True)
class Stamp:
    image_id: str  # stamp_<name>, made unique over the whole catalogue so it is the same in every size
    path: str  # stamp path below the stamps folder, without extension: "animals/mammals/cats/lion"
    image_file: Path  # the PNG, or the SVG where Tux Paint ships only that
    description: str  # first line of <name>.txt, verbatim
    category: tuple[str, ...]  # folders without style folders: ("animals", "mammals", "cats")
    style: str | None  # "cartoon" etc. when the stamp sits in a style folder
    phrase: str  # the description's first clause without its article: "great blue heron"


@dataclass(frozen=True, slots=True)
class Depiction:
    stamp: Stamp
    synset: Synset | None  # None: WordNet has no in-domain noun for it ("Tux—the Linux mascot!")
    matched: str  # the words that named the synset, or the phrase when unmatched


def load_stamps(root: Path) -> list[Stamp]:
    """Every stamp with an English description and an image, symbol folders left out, sorted by path."""
    base = root / STAMP_DIR
    if not base.is_dir():
        raise StampError(f"no {STAMP_DIR} in the tuxpaint-stamps-default source at {root}")
    found: list[tuple[str, Path, str]] = []
    for txt in sorted(base.rglob("*.txt")):
        rel = txt.relative_to(base).with_suffix("").as_posix()
        image = next((p for p in (txt.with_suffix(".png"), txt.with_suffix(".svg")) if p.is_file()), None)
        if image is None or "/" not in rel or any(rel.startswith(d + "/") for d in SYMBOL_DIRS):
            continue
        try:
            first = txt.read_text(encoding="utf-8").splitlines()[0].strip()
        except (OSError, UnicodeDecodeError, IndexError) as exc:
            raise StampError(f"cannot read the description of stamp {rel}: {exc}") from exc
        if first:
            found.append((rel, image, first))
    ids = _unique_ids([rel for rel, _, _ in found])
    stamps = []
    for rel, image, first in found:
        folders = rel.split("/")[:-1]
        style = next((d for d in folders if d in STYLE_DIRS), None)
        category = tuple(d for d in folders if d not in STYLE_DIRS)
        stamps.append(Stamp(ids[rel], rel, image, first, category, style, _phrase(first)))
    return stamps


def _unique_ids(paths: list[str]) -> dict[str, str]:
    """``stamp_<name>``; of stamps sharing a name, the one with the shortest path keeps it, the others get their
    folder appended (``stamp_lion_cartoon``), then their whole path if that still collides."""
    def slug(text: str) -> str:
        return "stamp_" + re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")

    groups: dict[str, list[str]] = {}
    for rel in paths:
        groups.setdefault(slug(rel.rsplit("/", 1)[1]), []).append(rel)
    ids: dict[str, str] = {}
    for base, rels in groups.items():
        keeper = min(rels, key=lambda r: (r.count("/"), r))
        for rel in rels:
            folder = rel.rsplit("/", 2)[-2]
            ids[rel] = base if rel == keeper else f"{base}_{slug(folder)[len('stamp_'):]}"
    if len(set(ids.values())) != len(ids):
        counts: dict[str, int] = {}
        for value in ids.values():
            counts[value] = counts.get(value, 0) + 1
        ids = {rel: (slug(rel) if counts[value] > 1 else value) for rel, value in ids.items()}
    if len(set(ids.values())) != len(ids):
        raise StampError("two stamps map to one image id; the stamp tree has names differing only in punctuation")
    return ids


def _phrase(description: str) -> str:
    """First clause, leading article dropped, cut before a preposition or a participle: the noun phrase."""
    clause = _CLAUSE_END.split(description, maxsplit=1)[0]
    words = _WORD.findall(clause)
    while words and words[0].lower() in _LEADING:
        words = words[1:]
    for i, word in enumerate(words):
        if i > 0 and (word.lower() in _STOPS or word.lower().endswith("ing")):
            words = words[:i]
            break
    return " ".join(words)


def depict(stamps: list[Stamp], wn: WordNet) -> list[Depiction]:
    domains = {prefix: {wn.sense(lemma, n).offset for lemma, n in senses} for prefix, senses in DOMAINS.items()}
    out = []
    for stamp in stamps:
        path = "/".join(stamp.category)
        prefix = max((p for p in domains if p == "" or path == p or path.startswith(p + "/")), key=len)
        out.append(_match(stamp, wn, domains[prefix]))
    return out


def _match(stamp: Stamp, wn: WordNet, domain: set[str]) -> Depiction:
    words = re.split(r"[\s-]+", stamp.phrase)
    for start in range(len(words)):  # longest trailing sequence first: "great blue heron" before "heron"
        candidate = " ".join(words[start:])
        inside = [off for off in wn.lookup(candidate) if wn.is_under(off, domain)]
        if inside:  # a sense whose head lemma is the word beats one that merely lists it (dolphin ≠ dolphinfish)
            head = [off for off in inside if _key(wn.synsets[off].label) in _forms(candidate, wn)]
            return Depiction(stamp, wn.synsets[(head or inside)[0]], candidate)
    return Depiction(stamp, None, stamp.phrase)


def _key(lemma: str) -> str:
    return lemma.lower().replace(" ", "_")


def _forms(candidate: str, wn: WordNet) -> set[str]:
    """The candidate and the base forms WordNet's morphology gives it ("geese" → "goose")."""
    key = _key(candidate)
    return {key, *wn.base_forms(key)}


def select(depictions: list[Depiction], size: str) -> list[Depiction]:
    """``full``: every stamp. ``small``: stamps under SMALL_PREFIXES that WordNet names, one per synset (the first
    drawn from life, else the first cartoon, by path), so the small world is about things with knowledge."""
    if size == "full":
        return list(depictions)
    if size != "small":
        raise ValueError(f"size must be 'small' or 'full', not {size!r}")
    best: dict[str, Depiction] = {}
    for d in depictions:
        path = "/".join(d.stamp.category)
        if d.synset is None or not any(path == p or path.startswith(p + "/") for p in SMALL_PREFIXES):
            continue
        held = best.get(d.synset.offset)
        if held is None or (held.stamp.style is not None and d.stamp.style is None):
            best[d.synset.offset] = d
    return sorted(best.values(), key=lambda d: d.stamp.path)
