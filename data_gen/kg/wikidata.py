"""Wikidata-format input for the KG layer: the JSON dump (one entity per line, as in ``latest-all.json``) and the
truthy N-Triples dump (``latest-truthy.nt``), read as streams and filtered to a snapshot subset so a user can build
a :class:`~data_gen.kg.graph.KG` from a real knowledge graph. Free of verl imports.

"Truthy" follows Wikidata's own definition: per (entity, property), the preferred-rank statements if any, else the
normal-rank ones; deprecated statements never. Entity values become entity triples, every other value (strings,
times, quantities, coordinates) a literal triple, so the synthesis stages never try to identify a literal.
"""

from __future__ import annotations

import json
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
_NT_LINE = re.compile(r'^<([^>]+)>\s+<([^>]+)>\s+(<[^>]+>|"(?:[^"\\]|\\.)*"(?:@[\w-]+|\^\^<[^>]+>)?)\s*\.\s*$')


class WikidataFormatError(ValueError):
    """A line that is not Wikidata JSON or N-Triples; the message names the source and line."""


@dataclass(frozen=True)
class Subset:
    """Which part of the dump to keep: ``entities`` (None: all) as subjects, ``relations`` (None: all) as
    properties; an entity object outside ``entities`` is dropped unless ``keep_outside_objects``. ``language``
    picks labels, aliases and descriptions."""

    entities: frozenset[str] | None = None
    relations: frozenset[str] | None = None
    keep_outside_objects: bool = False
    language: str = "en"

    def keeps(self, s: str, p: str, o: str | None) -> bool:
        """``o`` is None for a literal object."""
        if self.entities is not None and s not in self.entities:
            return False
        if self.relations is not None and p not in self.relations:
            return False
        return o is None or self.entities is None or self.keep_outside_objects or o in self.entities


@dataclass
class WikidataGraph:
    """What was read: names per entity, entity triples and literal triples (``(s, p, literal text)``)."""

    labels: dict[str, str] = field(default_factory=dict)
    aliases: dict[str, list[str]] = field(default_factory=dict)
    descriptions: dict[str, str] = field(default_factory=dict)
    triples: set[tuple[str, str, str]] = field(default_factory=set)
    literals: set[tuple[str, str, str]] = field(default_factory=set)

    def kg(self, with_literals: bool = False) -> KG:
        """The KG over the entity triples (and the literal ones, marked as literals, when asked)."""
        if not with_literals:
            return KG.from_triples(sorted(self.triples))
        return KG.from_triples(sorted(self.triples | self.literals), literals={o for _, _, o in self.literals})


def read_json_dump(lines: Iterable[str], subset: Subset = Subset(), source: str = "<json dump>",
                   graph: WikidataGraph | None = None) -> WikidataGraph:
    """Entities of the JSON dump (a JSON array with one entity per line, each line ending in a comma) into
    ``graph`` (a new one by default)."""
    graph = graph if graph is not None else WikidataGraph()
    for number, line in enumerate(lines, 1):
        text = line.strip().rstrip(",")
        if text in ("", "[", "]"):
            continue
        try:
            entity = json.loads(text)
            qid = entity["id"]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise WikidataFormatError(f"{source}:{number}: not a Wikidata entity ({err})") from None
        if subset.entities is not None and qid not in subset.entities:
            continue
        _names(graph, qid, entity, subset.language)
        for prop, statements in (entity.get("claims") or {}).items():
            for value in _truthy_values(statements, f"{source}:{number}"):
                if isinstance(value, str) and _is_entity_value(value):
                    if subset.keeps(qid, prop, value):
                        graph.triples.add((qid, prop, value))
                elif subset.keeps(qid, prop, None):
                    graph.literals.add((qid, prop, value if isinstance(value, str) else json.dumps(value)))
    return graph


def read_truthy_ntriples(lines: Iterable[str], subset: Subset = Subset(), source: str = "<truthy nt>",
                         graph: WikidataGraph | None = None) -> WikidataGraph:
    """Triples of the truthy N-Triples dump (``wdt:`` properties, labels, aliases, descriptions) into ``graph``."""
    graph = graph if graph is not None else WikidataGraph()
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
        if subset.entities is not None and qid not in subset.entities:
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
            if language == subset.language:
                if p_iri == ALIAS_IRI:
                    graph.aliases.setdefault(qid, []).append(text)
                elif p_iri == DESCRIPTION_IRI:
                    graph.descriptions[qid] = text
                else:
                    graph.labels.setdefault(qid, text)
        elif p_iri.startswith(DIRECT_IRI) and subset.keeps(qid, p_iri[len(DIRECT_IRI):], None):
            graph.literals.add((qid, p_iri[len(DIRECT_IRI):], text))
    return graph


def _names(graph: WikidataGraph, qid: str, entity: dict, language: str) -> None:
    label = (entity.get("labels") or {}).get(language)
    if label:
        graph.labels[qid] = label["value"]
    aliases = [a["value"] for a in (entity.get("aliases") or {}).get(language, [])]
    if aliases:
        graph.aliases[qid] = aliases
    description = (entity.get("descriptions") or {}).get(language)
    if description:
        graph.descriptions[qid] = description["value"]


def _truthy_values(statements: Collection[dict], where: str) -> Iterator[object]:
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
                value = value["id"]
        except (KeyError, TypeError) as err:
            raise WikidataFormatError(f"{where}: malformed statement {statement.get('id', '')!r} ({err})") from None
        yield value


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
