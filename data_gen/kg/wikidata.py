"""Wikidata-format input for the KG layer: the JSON dump (one entity per line, as in ``latest-all.json``) and the
truthy N-Triples dump (``latest-truthy.nt``), read as streams and filtered to a snapshot subset so a user can build
a :class:`~data_gen.kg.graph.KG` from a real knowledge graph. Free of verl imports.

Both entity JSON forms Wikimedia has published are read: the current one and the older (pre-2016) one whose entity
values carry only ``{"entity-type": "item", "numeric-id": N}``. A malformed entity is counted, warned about with its
line and skipped, so one bad line does not end a 100 GB run; past :data:`MAX_MALFORMED` of them the dump is taken to
be no Wikidata dump and the read fails.

"Truthy" follows Wikidata's own definition: per (entity, property), the preferred-rank statements if any, else the
normal-rank ones; deprecated statements never. Entity values become entity triples, every other value (strings,
times, quantities, coordinates) a literal triple, so the synthesis stages never try to identify a literal.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from urllib.parse import unquote

from data_gen.kg.graph import KG

ENTITY_IRI = "http://www.wikidata.org/entity/"
DIRECT_IRI = "http://www.wikidata.org/prop/direct/"
LABEL_IRIS = ("http://www.w3.org/2000/01/rdf-schema#label", "http://schema.org/name")
ALIAS_IRI = "http://www.w3.org/2004/02/skos/core#altLabel"
DESCRIPTION_IRI = "http://schema.org/description"
COMMONS_FILE_IRI = "http://commons.wikimedia.org/wiki/Special:FilePath/"
LABEL_FALLBACKS = ("mul",)  # after the subset's language: 'mul' holds the one label many names now have (since 2024)
MAX_MALFORMED = 1000  # malformed entities skipped before the read fails: a few are dump noise, more a wrong file
ENTITY_PREFIXES = {"item": "Q", "property": "P", "lexeme": "L"}  # the older form's "entity-type" -> id letter
LOG = logging.getLogger(__name__)
_NT_LINE = re.compile(r'^<([^>]+)>\s+<([^>]+)>\s+(<[^>]+>|"(?:[^"\\]|\\.)*"(?:@[\w-]+|\^\^<[^>]+>)?)\s*\.\s*$')


class WikidataFormatError(ValueError):
    """A line that is not Wikidata JSON or N-Triples; the message names the source and line."""


@dataclass(frozen=True)
class Subset:
    """Which part of the dump to keep: ``entities`` (None: all) as subjects, ``relations`` (None: all) as
    properties; an entity object outside ``entities`` is dropped unless ``keep_outside_objects``. ``language``
    picks labels, aliases and descriptions, each falling back along ``fallbacks`` when the entity lacks it."""

    entities: frozenset[str] | None = None
    relations: frozenset[str] | None = None
    keep_outside_objects: bool = False
    language: str = "en"
    fallbacks: tuple[str, ...] = LABEL_FALLBACKS

    @property
    def languages(self) -> tuple[str, ...]:
        """The languages names are taken from, best first."""
        return (self.language, *self.fallbacks)

    def names(self, qid: str) -> bool:
        """Whether ``qid``'s names are kept: the subset's entities and every property (the world labels its
        relations with them)."""
        return self.entities is None or qid in self.entities or qid.startswith("P")

    def keeps(self, s: str, p: str, o: str | None) -> bool:
        """``o`` is None for a literal object."""
        if self.entities is not None and s not in self.entities:
            return False
        if self.relations is not None and p not in self.relations:
            return False
        return o is None or self.entities is None or self.keep_outside_objects or o in self.entities


@dataclass
class WikidataGraph:
    """What was read: names per entity, entity triples and literal triples (``(s, p, literal text)``); how many
    malformed entities were skipped."""

    labels: dict[str, str] = field(default_factory=dict)
    aliases: dict[str, list[str]] = field(default_factory=dict)
    descriptions: dict[str, str] = field(default_factory=dict)
    triples: set[tuple[str, str, str]] = field(default_factory=set)
    literals: set[tuple[str, str, str]] = field(default_factory=set)
    malformed: int = 0

    def kg(self, with_literals: bool = False) -> KG:
        """The KG over the entity triples (and the literal ones, marked as literals, when asked)."""
        if not with_literals:
            return KG.from_triples(sorted(self.triples))
        return KG.from_triples(sorted(self.triples | self.literals), literals={o for _, _, o in self.literals})


def read_json_dump(lines: Iterable[str], subset: Subset = Subset(), source: str = "<json dump>",
                   graph: WikidataGraph | None = None, max_malformed: int = MAX_MALFORMED) -> WikidataGraph:
    """Entities of the JSON dump (a JSON array with one entity per line, each line ending in a comma) into
    ``graph`` (a new one by default). A malformed entity is skipped with a warning; the one past
    ``max_malformed`` raises :class:`WikidataFormatError`."""
    graph = graph if graph is not None else WikidataGraph()
    for number, line in enumerate(lines, 1):
        text = line.strip().rstrip(",")
        if text in ("", "[", "]"):
            continue
        try:
            _read_entity(graph, text, subset)
        except WikidataFormatError as err:
            graph.malformed += 1
            message = f"{source}:{number}: {err}"
            if graph.malformed > max_malformed:
                raise WikidataFormatError(f"{message} (more than {max_malformed} malformed entities)") from None
            LOG.warning("skipped %s", message)
    return graph


def _read_entity(graph: WikidataGraph, text: str, subset: Subset) -> None:
    """One dump line's entity into ``graph``, all or nothing: a malformed statement leaves ``graph`` untouched."""
    try:
        entity = json.loads(text)
        qid = entity["id"]
        claims = entity.get("claims") or {}
        if not isinstance(qid, str) or not isinstance(claims, dict):
            raise TypeError("'id' or 'claims' of the wrong type")
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
        raise WikidataFormatError(f"not a Wikidata entity ({err})") from None
    if subset.names(qid):
        _names(graph, qid, entity, subset.languages)
    if subset.entities is not None and qid not in subset.entities:
        return
    triples, literals = set(), set()
    try:
        for prop, statements in claims.items():
            for value in _truthy_values(statements):
                if isinstance(value, str) and _is_entity_value(value):
                    if subset.keeps(qid, prop, value):
                        triples.add((qid, prop, value))
                elif subset.keeps(qid, prop, None):
                    literals.add((qid, prop, value if isinstance(value, str) else json.dumps(value)))
    except (AttributeError, TypeError) as err:  # a statement list or statement that is not one
        raise WikidataFormatError(f"malformed claims ({err})") from None
    graph.triples |= triples
    graph.literals |= literals


def read_truthy_ntriples(lines: Iterable[str], subset: Subset = Subset(), source: str = "<truthy nt>",
                         graph: WikidataGraph | None = None) -> WikidataGraph:
    """Triples of the truthy N-Triples dump (``wdt:`` properties, labels, aliases, descriptions) into ``graph``."""
    graph = graph if graph is not None else WikidataGraph()
    ranks: dict[tuple[str, str], int] = {}  # (entity, name kind) -> the rank of the language its name came from
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _NT_LINE.match(line.strip())
        if match is None:
            raise WikidataFormatError(f"{source}:{number}: not an N-Triples statement")
        s_iri, p_iri, obj = match.groups()
        if not s_iri.startswith(ENTITY_IRI):
            continue
        qid = s_iri[len(ENTITY_IRI):]
        if not subset.names(qid) or (subset.entities is not None and qid not in subset.entities
                                     and not obj.startswith('"')):
            continue
        if obj.startswith("<"):
            o_iri = obj[1:-1]
            if p_iri.startswith(DIRECT_IRI) and o_iri.startswith(ENTITY_IRI):
                prop, value = p_iri[len(DIRECT_IRI):], o_iri[len(ENTITY_IRI):]
                if subset.keeps(qid, prop, value):
                    graph.triples.add((qid, prop, value))
            elif p_iri.startswith(DIRECT_IRI) and subset.keeps(qid, p_iri[len(DIRECT_IRI):], None):
                graph.literals.add((qid, p_iri[len(DIRECT_IRI):], _iri_value(o_iri)))
            continue
        text, language = _literal(obj)
        if p_iri in LABEL_IRIS or p_iri in (ALIAS_IRI, DESCRIPTION_IRI):
            if language in subset.languages:
                _nt_name(graph, qid, p_iri, text, subset.languages.index(language), ranks)
        elif subset.entities is not None and qid not in subset.entities:
            continue
        elif p_iri.startswith(DIRECT_IRI) and subset.keeps(qid, p_iri[len(DIRECT_IRI):], None):
            graph.literals.add((qid, p_iri[len(DIRECT_IRI):], text))
    return graph


def _nt_name(graph: WikidataGraph, qid: str, p_iri: str, text: str, rank: int,
             ranks: dict[tuple[str, str], int]) -> None:
    """A label, alias or description triple, kept when its language ranks no worse than the one already kept
    for that entity (a better one replaces it: the dump's triple order is not the language order)."""
    kind = "alias" if p_iri == ALIAS_IRI else "description" if p_iri == DESCRIPTION_IRI else "label"
    best = ranks.get((qid, kind))
    if best is not None and (rank > best or (rank == best and kind != "alias")):
        return
    ranks[(qid, kind)] = rank
    if kind == "alias":
        graph.aliases[qid] = [*graph.aliases.get(qid, []), text] if best == rank else [text]
    else:
        (graph.descriptions if kind == "description" else graph.labels)[qid] = text


def _names(graph: WikidataGraph, qid: str, entity: dict, languages: tuple[str, ...]) -> None:
    """Label, aliases and description, each in the first of ``languages`` the entity has it in."""
    label = _first(entity.get("labels"), languages)
    if label:
        graph.labels[qid] = label["value"]
    aliases = [a["value"] for a in _first(entity.get("aliases"), languages) or []]
    if aliases:
        graph.aliases[qid] = aliases
    description = _first(entity.get("descriptions"), languages)
    if description:
        graph.descriptions[qid] = description["value"]


def _first(by_language: dict | None, languages: tuple[str, ...]):
    """The entry of the first language ``by_language`` has (an empty dump field is ``[]``, not ``{}``)."""
    if not isinstance(by_language, dict):
        return None
    return next((by_language[lang] for lang in languages if by_language.get(lang)), None)


def _truthy_values(statements: Collection[dict]) -> Iterator[object]:
    """The values of the truthy statements: preferred rank if any, else normal; 'somevalue'/'novalue' skipped."""
    ranked = [s for s in statements if s.get("rank") == "preferred"] or [
        s for s in statements if s.get("rank", "normal") == "normal"]
    for statement in ranked:
        snak = statement.get("mainsnak") or {}
        if snak.get("snaktype") != "value":
            continue
        try:
            datavalue = snak["datavalue"]
            value = datavalue["value"]
            if datavalue["type"] == "wikibase-entityid":
                value = _entity_id(value)
        except (KeyError, TypeError, AttributeError, ValueError) as err:
            raise WikidataFormatError(f"malformed statement {statement.get('id', '')!r} ({err!r})") from None
        yield value


def _entity_id(value: dict) -> str:
    """An entity value's id: ``id`` in the current form, built from ``entity-type`` and ``numeric-id`` in the
    older one."""
    if "id" in value:
        return value["id"]
    return f"{ENTITY_PREFIXES[value['entity-type']]}{int(value['numeric-id'])}"


def _iri_value(iri: str) -> str:
    """A non-entity IRI value as the JSON dump holds it: a Commons file's name (image, flag, logo statements),
    else the IRI itself."""
    return unquote(iri[len(COMMONS_FILE_IRI):]) if iri.startswith(COMMONS_FILE_IRI) else iri


def _is_entity_value(value: str) -> bool:
    return bool(re.fullmatch(r"[QPL]\d+", value))


def _literal(obj: str) -> tuple[str, str | None]:
    """``"text"@lang`` or ``"text"^^<type>`` -> (unescaped text, language or None)."""
    close = obj.rindex('"')
    text = json.loads(obj[: close + 1])  # N-Triples string escapes are JSON's (\\", \\n, \\uXXXX)
    rest = obj[close + 1:]
    return text, rest[1:] if rest.startswith("@") else None
