"""Image-node expansion by verified visual entity linking (App. A.2): recognize candidate entities (high recall, at
most 5), link each to an article, verify the link, and relate image and article.

:class:`OfflineImageLinker` is the **offline default and uses no model**: recognition reads the image's metadata
``c_i`` (caption, alt text, source-page title) and, when an ``ocr`` reader is given, the text in its pixels, with the
world's mention linker (``data_gen.world.linking.Linker`` over entity labels and aliases: a surface form naming two
articles is ambiguous and links neither, so ambiguous matches are discarded rather than forced). OCR is what
recognises an entity an image shows in writing but its metadata does not name (a labelled map, a stamp, a
wordmark); entities found only through it are counted in ``recognized_by_ocr``. Verification is the offline
stand-in for cross-image comparison: an article is verified when it is the depicted entity's and carries this very
image, or when the KG holds a fact between the depicted entity and the article's entity (the article body
corroborates the relation); otherwise the candidate is dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from data_gen.kg import KG
from data_gen.kg.distinguish import TAXONOMIC_RELATIONS
from data_gen.modalsearch.graph import Relation
from data_gen.modalsearch.relations import disambiguated, is_category, kg_phrase, noun
from data_gen.world.linking import Form, Linker
from neos_core.world.model import Image, Page
from neos_core.world.store import World

MAX_ENTITIES = 5


@dataclass(frozen=True, slots=True)
class Linked:
    page: Page
    relation: Relation


@dataclass
class LinkCounts:
    recognized: int = 0
    recognized_by_ocr: int = 0  # of ``recognized``: named in the pixels' text only, not in the metadata
    unverified: int = 0
    verified: int = 0


class OfflineImageLinker:
    name = "offline_metadata_linker"

    def __init__(self, world: World, kg: KG, *, ocr: Callable[[bytes], str] | None = None) -> None:
        self.world = world
        self.kg = kg
        self._ocr = ocr
        forms = []
        for entity in world.entities.values():
            if entity.page_id in world.pages:
                forms.append(Form(entity.label, entity.page_id, label=True))
                forms += [Form(a, entity.page_id, label=False) for a in entity.aliases]
        self._linker = Linker(forms)
        self.counts = LinkCounts()

    def link(self, image: Image) -> list[Linked]:
        source = self.world.pages.get(image.page_id) if image.page_id else None
        text = " . ".join(t for t in (image.caption, image.alt, source.title if source else "") if t)
        named = self._linker.mentions(text)
        by_ocr: list[str] = []
        if self._ocr is not None:  # metadata names first: they carry the caption's intent
            written = self._ocr(self.world.image_path(image.id).read_bytes()).splitlines()
            by_ocr = [c for c in self._linker.mentions(" . ".join(written)) if c not in named]
        candidates = (named + by_ocr)[:MAX_ENTITIES]
        self.counts.recognized_by_ocr += sum(1 for c in candidates if c in by_ocr)
        self.counts.recognized += len(candidates)
        out = []
        for page_id in candidates:
            page = self.world.pages[page_id]
            relation = None if is_category(self.world, page) else self._verify(image, page)
            if relation is None:
                self.counts.unverified += 1
                continue
            self.counts.verified += 1
            out.append(Linked(page, relation))
        return out

    def _verify(self, image: Image, page: Page) -> Relation | None:
        depicted = image.entity_id
        if page.entity_id == depicted and (image.id in page.image_ids or page.id == image.page_id):
            return Relation(f"is the {noun(self.world, depicted)} depicted in {{x}}", unique=True,
                            source="depiction")
        if depicted is None or page.entity_id is None:
            return None
        b = page.entity_id
        facts = [(p, True) for p, objs in self.kg.outgoing(depicted).items() if b in objs]
        facts += [(p, False) for p, subs in self.kg.incoming(depicted).items() if b in subs]
        facts = sorted(f for f in facts if f[0] not in TAXONOMIC_RELATIONS)
        if not facts:
            return None
        rel, forward = facts[0]
        peers = self.kg.objects(depicted, rel) if forward else self.kg.subjects(rel, depicted)
        label = self.world.relations[rel].label if rel in self.world.relations else rel
        shown = f"the {noun(self.world, depicted)} depicted in {{x}}"
        return disambiguated(self.world, kg_phrase(rel, label, forward).replace("{x}", shown), b, peers,
                             "kg_via_depiction", rel)
