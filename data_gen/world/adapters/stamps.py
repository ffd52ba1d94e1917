"""Tux Paint stamps: photos and drawings as images captioned with their English description, tied to what they show.

A stamp depicting a WordNet noun (see ``_stamp_catalog``) shows that synset's entity and sits on its page (WordNet's
gloss and relations, written here so the page can show the stamps); a stamp WordNet cannot name ("Tux—the Linux
mascot!") gets its own ``stamp:`` entity and page. The stamp's folder path becomes a class hierarchy (``x:category:animals/mammals/cats`` P279
``x:category:animals/mammals``) and the depicted concept joins its folder: P279 for a WordNet class, P31 for an
individual (an instance synset, a ``stamp:`` entity). Images are flattened onto white and fit into 512 px, the size
a web page shows; SVG-only stamps are rasterized.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from pathlib import Path

import resvg_py
from PIL import Image as PILImage

from data_gen.world.adapters._stamp_catalog import Depiction, Stamp, StampError, depict, load_stamps, select
from data_gen.world.adapters._wordnet_data import WordNet, load_wordnet, synset_entity, synset_page
from data_gen.world.properties import relations
from neos_core.world.model import Contribution, Entity, Image, ImageAsset, Page, Triple, image_url, page_url, slugify
from tool_server.offline.pixels import flattened

SOURCES = ("tuxpaint-stamps-default", "wordnet-base")
SOURCE = "tuxpaint-stamps-default"
MAX_SIDE = 512
_ROOT = re.compile(r"<svg\b[^>]*>")
_ABSOLUTE = re.compile(r'\b(width|height)="([0-9.]+)(pt|pc|mm|cm|in)"')
_PX_PER = {"pt": 4 / 3, "pc": 16.0, "mm": 96 / 25.4, "cm": 96 / 2.54, "in": 96.0}


def category_id(path: tuple[str, ...]) -> str:
    return "x:category:" + "/".join(path)


def contribute(sources: Mapping[str, Path], size: str) -> Contribution:
    wn = load_wordnet(sources["wordnet-base"])
    chosen = select(depict(load_stamps(sources[SOURCE]), wn), size)
    out = Contribution()
    pages: dict[str, Page] = {}  # concept entity id → the page showing its stamps
    facts: set[tuple[str, str, str]] = set()
    categories: set[tuple[str, ...]] = set()
    for d in chosen:
        if d.synset is not None:
            concept, membership, alt = d.synset.id, "P31" if d.synset.is_instance else "P279", d.synset.label
            page = pages.get(concept) or _synset_page(out, pages, d, wn)
        else:
            concept, page = _own_concept(out, pages, d)
            membership, alt = "P31", page.title
        pixels = load_pixels(d.stamp)
        record = Image(d.stamp.image_id, image_url(d.stamp.image_id), "", d.stamp.description, alt, SOURCE,
                       pixels.width, pixels.height, page.id, concept)
        out.images.append(ImageAsset(record, pixels))
        page.image_ids.append(d.stamp.image_id)
        facts.add((concept, membership, category_id(d.stamp.category)))
        categories.update(d.stamp.category[:n] for n in range(1, len(d.stamp.category) + 1))
    for path in sorted(categories):
        out.entities.append(Entity(category_id(path), " / ".join(path), "class",
                                   f"Tux Paint stamp category {'/'.join(path)}"))
        if len(path) > 1:
            facts.add((category_id(path), "P279", category_id(path[:-1])))
    out.triples = [Triple(s, p, o) for s, p, o in sorted(facts)]
    out.relations = relations({t.p for t in out.triples})
    return out


def _synset_page(out: Contribution, pages: dict[str, Page], d: Depiction, wn: WordNet) -> Page:
    """A depicted synset's page is written here, not by ``wordnet``, because a page may only show images of its own
    adapter; the ``wordnet`` adapter gives the same entity without a page and the synset's relations."""
    page = synset_page(d.synset, wn)
    page.text += f" The Tux Paint stamp collection pictures it in the category {' / '.join(d.stamp.category)}."
    pages[d.synset.id] = page
    out.pages.append(page)
    out.entities.append(synset_entity(d.synset, page.id))
    return page


def _own_concept(out: Contribution, pages: dict[str, Page], d: Depiction) -> tuple[str, Page]:
    """The ``stamp:`` entity of a stamp WordNet cannot name; stamps with one phrase share it."""
    label = _label(d.stamp)
    eid = "stamp:" + slugify(label).lower()
    if eid not in pages:
        where = " / ".join(d.stamp.category)
        text = (f"{label} is pictured in the Tux Paint stamp collection, in the category {where}. "
                f"The stamp's description reads: \u201c{d.stamp.description}\u201d")
        page = Page(slugify(label), page_url(slugify(label)), label, text, SOURCE, entity_id=eid)
        pages[eid] = page
        out.pages.append(page)
        out.entities.append(Entity(eid, label, "stamp", d.stamp.description, [], page.id))
    return eid, pages[eid]


def _label(stamp: Stamp) -> str:
    """The description's noun phrase, or the file name when the description is a sentence without one."""
    phrase = stamp.phrase or re.sub(r"[_\-\d]+", " ", stamp.path.rsplit("/", 1)[1]).strip()
    return phrase[:1].upper() + phrase[1:]


def load_pixels(stamp: Stamp) -> PILImage.Image:
    """RGB pixels flattened onto white, longest side at most MAX_SIDE (SVGs are drawn at exactly MAX_SIDE)."""
    if stamp.image_file.suffix == ".svg":
        image = _rasterize(stamp)
    else:
        try:
            with PILImage.open(stamp.image_file) as raw:
                image = raw.convert("RGBA")
        except OSError as exc:
            raise StampError(f"cannot decode stamp image {stamp.path}.png: {exc}") from exc
        image.thumbnail((MAX_SIDE, MAX_SIDE), PILImage.Resampling.LANCZOS)
    return flattened(image)


def _rasterize(stamp: Stamp) -> PILImage.Image:
    svg = stamp.image_file.read_text(encoding="utf-8")
    # resvg rejects a root sized in absolute units (pt, cm) without a viewBox; the same size in px draws the same.
    root = _ROOT.search(svg)
    if root is not None:
        fixed = _ABSOLUTE.sub(lambda m: f'{m.group(1)}="{float(m.group(2)) * _PX_PER[m.group(3)]:.4f}"', root.group(0))
        svg = svg[: root.start()] + fixed + svg[root.end() :]
    try:
        image = _render(svg, width=MAX_SIDE)
        if image.height > MAX_SIDE:
            image = _render(svg, height=MAX_SIDE)
    except ValueError as exc:
        raise StampError(f"cannot rasterize stamp {stamp.path}.svg: {exc}") from exc
    return image


def _render(svg: str, **size: int) -> PILImage.Image:
    png = resvg_py.svg_to_bytes(svg_string=svg, skip_system_fonts=True, **size)
    image = PILImage.open(io.BytesIO(bytes(png)))
    image.load()
    return image.convert("RGBA")
