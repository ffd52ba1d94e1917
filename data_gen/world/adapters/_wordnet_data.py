"""WordNet 3.0 noun database (wordnet-base), parsed once for the ``wordnet`` and ``stamps`` adapters.

Both adapters must agree on which synset a Tux Paint stamp depicts, so parsing, lemma lookup and the noun
morphology live here and neither adapter imports the other. Only the noun files are read (``data.noun``,
``index.noun``, ``noun.exc``); the format is the one documented in WordNet's ``wndb(5WN)``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from data_gen.world.adapters._prose import join_list
from neos_core.world.model import Entity, Page, page_url, slugify

SOURCE = "wordnet-base"
WORDNET_DIR = Path("usr/share/wordnet")

# Pointer symbols of noun synsets (wndb(5WN)), grouped as the adapters use them.
HYPERNYM = "@"
INSTANCE_HYPERNYM = "@i"
HYPONYMS = ("~", "~i")
HOLONYMS = ("#m", "#s", "#p")  # member of / substance of / part of
MERONYMS = ("%m", "%s", "%p")  # has member / has substance / has part

# noun lexicographer files by number (lexnames(5WN)); 15 holds countries, cities and regions.
LEXFILE_LOCATION = 15

# WordNet's morphy rules for nouns: (suffix, replacement), tried in this order.
_NOUN_SUFFIXES = (("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"), ("men", "man"),
                  ("ies", "y"), ("s", ""))


class WordNetError(ValueError):
    """The wordnet-base files are missing or do not parse as WordNet 3.0 noun data."""


@dataclass(frozen=True, slots=True)
class Synset:
    offset: str  # 8-digit byte offset in data.noun: WordNet 3.0's stable synset key
    lexfile: int
    lemmas: tuple[str, ...]  # as spelled in data.noun, underscores turned into spaces
    definition: str
    examples: tuple[str, ...]
    pointers: tuple[tuple[str, str], ...]  # (symbol, target offset), noun targets only, in file order

    @property
    def id(self) -> str:
        return synset_id(self.offset)

    @property
    def label(self) -> str:
        return self.lemmas[0]

    def targets(self, *symbols: str) -> list[str]:
        return [off for sym, off in self.pointers if sym in symbols]

    @property
    def is_instance(self) -> bool:
        """Instances (Mercury the planet, the Eiffel Tower) have an instance hypernym instead of a class one."""
        return any(sym == INSTANCE_HYPERNYM for sym, _ in self.pointers)


def synset_id(offset: str) -> str:
    return f"synset:{offset}-n"


def page_title(synset: Synset, wn: WordNet) -> str:
    """Wikipedia-style title that depends on WordNet alone (so ``stamps`` can point at the page ``wordnet`` writes):
    the label for its lemma's most frequent sense, else qualified by the first hypernym: "Mercury (planet)"."""
    title = synset.label[:1].upper() + synset.label[1:]
    if wn.senses.get(synset.label.lower().replace(" ", "_"), (synset.offset,))[0] == synset.offset:
        return title
    parents = wn.hypernyms(synset.offset)
    return f"{title} ({wn.synsets[parents[0]].label})" if parents else title


@dataclass(frozen=True, slots=True)
class WordNet:
    synsets: dict[str, Synset]  # by offset
    senses: dict[str, tuple[str, ...]]  # lowercase lemma (underscored) → offsets, most frequent sense first
    tagged: dict[str, int]  # lemma → how many of its leading senses are tagged in the semantic concordance
    exceptions: dict[str, tuple[str, ...]]  # irregular plural → base forms (noun.exc)

    def sense(self, lemma: str, number: int) -> Synset:
        """``sense("animal", 1)`` is animal.n.01; a missing lemma or sense is a clear error, not None."""
        offsets = self.senses.get(lemma.lower().replace(" ", "_"), ())
        if not 1 <= number <= len(offsets):
            raise WordNetError(f"WordNet has no noun sense {lemma}.n.{number:02d}")
        return self.synsets[offsets[number - 1]]

    def base_forms(self, phrase: str) -> list[str]:
        """Lemmas WordNet knows for ``phrase``: itself, its noun.exc bases, then morphy's suffix rules."""
        key = phrase.strip().lower().replace(" ", "_")
        forms = [key, *self.exceptions.get(key, ())]
        forms += [key[: -len(suf)] + repl for suf, repl in _NOUN_SUFFIXES if key.endswith(suf) and len(key) > len(suf)]
        return [form for form in dict.fromkeys(forms) if form in self.senses]

    def lookup(self, phrase: str) -> tuple[str, ...]:
        """Offsets of the noun senses of ``phrase``'s first known form (the phrase itself before its bases)."""
        forms = self.base_forms(phrase)
        return self.senses[forms[0]] if forms else ()

    def hypernyms(self, offset: str) -> list[str]:
        return self.synsets[offset].targets(HYPERNYM, INSTANCE_HYPERNYM)

    def closure(self, offsets: Iterable[str]) -> set[str]:
        """The offsets with all their (instance) hypernyms up to ``entity``: a set closed under P279/P31."""
        seen: set[str] = set()
        stack = list(offsets)
        while stack:
            off = stack.pop()
            if off not in seen:
                seen.add(off)
                stack.extend(self.hypernyms(off))
        return seen

    def is_under(self, offset: str, ancestors: set[str]) -> bool:
        return not ancestors.isdisjoint(self.closure([offset]))

    def tagged_offsets(self) -> set[str]:
        """Synsets that some lemma's tagged senses name: senses seen at least once in the semantic concordance."""
        return {off for lemma, n in self.tagged.items() for off in self.senses[lemma][:n]}


@functools.lru_cache(maxsize=2)
def load_wordnet(root: Path) -> WordNet:
    """Parsed once per process: the ``wordnet`` and ``stamps`` adapters of one build read the same files."""
    folder = root / WORDNET_DIR
    synsets = _parse_data(_read(folder / "data.noun"))
    senses, tagged = _parse_index(_read(folder / "index.noun"), synsets)
    exceptions: dict[str, tuple[str, ...]] = {}
    for line in _read(folder / "noun.exc").splitlines():
        parts = line.split()
        if len(parts) >= 2:
            exceptions[parts[0]] = tuple(parts[1:])
    return WordNet(synsets, senses, tagged, exceptions)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WordNetError(f"cannot read WordNet file {path.name} of wordnet-base: {exc}") from exc


def _parse_data(text: str) -> dict[str, Synset]:
    synsets: dict[str, Synset] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line or line.startswith("  "):  # the license header lines start with two spaces
            continue
        try:
            synset = _parse_synset(line)
        except (ValueError, IndexError) as exc:
            raise WordNetError(f"data.noun line {number} is not a WordNet synset record: {line[:80]!r}") from exc
        synsets[synset.offset] = synset
    if not synsets:
        raise WordNetError("data.noun holds no synsets")
    return synsets


def _parse_synset(line: str) -> Synset:
    head, _, gloss = line.partition(" | ")
    f = head.split()
    offset, lexfile, w_cnt = f[0], int(f[1]), int(f[3], 16)
    if len(offset) != 8 or f[2] != "n":
        raise ValueError("not a noun synset")
    lemmas = tuple(f[4 + 2 * i].replace("_", " ") for i in range(w_cnt))
    at = 4 + 2 * w_cnt
    p_cnt = int(f[at])
    pointers = []
    for i in range(p_cnt):
        symbol, target, pos = f[at + 1 + 4 * i : at + 4 + 4 * i]
        if pos == "n":
            pointers.append((symbol, target))
    definition, examples = _split_gloss(gloss.strip())
    return Synset(offset, lexfile, lemmas, definition, examples, tuple(pointers))


def _split_gloss(gloss: str) -> tuple[str, tuple[str, ...]]:
    """``'feline mammal ...; "cats hunt mice"'`` → definition and the quoted usage examples."""
    parts = [p.strip() for p in gloss.split(";")]
    definition = [p for p in parts if not p.startswith('"')]
    examples = [p.strip('"') for p in parts if p.startswith('"') and p.strip('"')]
    return "; ".join(definition), tuple(examples)


def _parse_index(text: str, synsets: dict[str, Synset]) -> tuple[dict[str, tuple[str, ...]], dict[str, int]]:
    senses: dict[str, tuple[str, ...]] = {}
    tagged: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line or line.startswith("  "):
            continue
        f = line.split()
        try:
            synset_cnt, p_cnt = int(f[2]), int(f[3])
            tagsense_cnt = int(f[5 + p_cnt])
            offsets = tuple(f[6 + p_cnt : 6 + p_cnt + synset_cnt])
        except (ValueError, IndexError) as exc:
            raise WordNetError(f"index.noun line {number} is not a WordNet index record: {line[:80]!r}") from exc
        if len(offsets) != synset_cnt or any(off not in synsets for off in offsets):
            raise WordNetError(f"index.noun line {number} names synsets missing from data.noun: {line[:80]!r}")
        senses[f[0]] = offsets
        if tagsense_cnt:
            tagged[f[0]] = tagsense_cnt
    return senses, tagged


LIST_CAP = 12  # related concepts named per sentence: enough to read as an encyclopedia line, not a dump


def synset_entity(synset: Synset, page_id: str | None) -> Entity:
    return Entity(synset.id, synset.label, "synset", synset.definition, list(synset.lemmas[1:]), page_id)


def synset_page(synset: Synset, wn: WordNet) -> Page:
    """The concept's page: gloss and relations in prose, under the title :func:`page_title` gives."""
    title = page_title(synset, wn)
    page_id = slugify(title)
    return Page(page_id, page_url(page_id), title, describe(synset, wn), SOURCE, entity_id=synset.id)


def describe(synset: Synset, wn: WordNet) -> str:
    name = synset.label[:1].upper() + synset.label[1:]
    also = f" (also {join_list(list(synset.lemmas[1:]))})" if len(synset.lemmas) > 1 else ""
    text = [f"{name}{also} is defined in WordNet as: {synset.definition}."]

    def names(*symbols: str) -> str | None:
        labels = list(dict.fromkeys(wn.synsets[off].label for off in synset.targets(*symbols)))
        return join_list(labels[:LIST_CAP]) if labels else None

    sentences = (
        ((HYPERNYM,), "It is a kind of {}."),
        ((INSTANCE_HYPERNYM,), "It is an instance of {}."),
        (("~",), f"Kinds of {synset.label} include {{}}."),
        (("~i",), f"Examples of {synset.label} include {{}}."),
        (("#p",), "It is part of {}."),
        (("#m",), "It is a member of {}."),
        (("#s",), "It is a substance of {}."),
        (("%p",), "Its parts include {}."),
        (("%m",), "Its members include {}."),
        (("%s",), "It is made of {}."),
    )
    for symbols, sentence in sentences:
        listed = names(*symbols)
        if listed:
            text.append(sentence.format(listed))
    text += [f"Usage: \u201c{ex}\u201d." for ex in synset.examples[:2]]
    return " ".join(text)
