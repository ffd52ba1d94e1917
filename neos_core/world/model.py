"""Records of the embedded offline world.

The world is a small "web": pages with text and hyperlinks, images with captions, and a knowledge graph.
Every page and image has a stable URL under one reserved host (``.invalid`` never resolves), so tools, MEI and
data generation speak URLs exactly as they would on the real web. These dataclasses are the one schema that the
builder writes and that :class:`neos_core.world.store.World` reads back.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import asdict, dataclass, field
from typing import Any

WORLD_HOST = "neos-world.invalid"
WORLD_ORIGIN = f"https://{WORLD_HOST}"
FORMAT_VERSION = 1


def slugify(text: str) -> str:
    """URL-safe, deterministic slug: ASCII-folded, words joined by ``_`` as in Wikipedia titles."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^A-Za-z0-9]+", "_", folded).strip("_")
    return slug or "x"


def page_url(slug: str) -> str:
    return f"{WORLD_ORIGIN}/wiki/{slug}"


def image_url(image_id: str) -> str:
    return f"{WORLD_ORIGIN}/media/{image_id}.png"


@dataclass(slots=True)
class Entity:
    """A KG node. ``id`` is namespaced by kind (``country:FRA``, ``city:2988507``, ``brand:github``)."""

    id: str
    label: str
    kind: str
    description: str = ""
    aliases: list[str] = field(default_factory=list)
    page_id: str | None = None


@dataclass(slots=True)
class Page:
    """A web page. ``links`` are ids of other pages, found by mention linking (the sources carry no links)."""

    id: str
    url: str
    title: str
    text: str
    source: str
    entity_id: str | None = None
    links: list[str] = field(default_factory=list)
    image_ids: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Image:
    """A raster image stored as PNG at ``file`` (relative to the world directory)."""

    id: str
    url: str
    file: str
    caption: str
    alt: str
    source: str
    width: int
    height: int
    page_id: str | None = None
    entity_id: str | None = None


@dataclass(slots=True)
class Triple:
    """``(s, p, o)``; ``p`` is a Wikidata property id where one exists. ``literal`` marks a non-entity object."""

    s: str
    p: str
    o: str
    literal: bool = False


@dataclass(slots=True)
class Relation:
    id: str
    label: str
    wikidata: bool


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """One registry package the world is built from, with the license recorded in the manifest."""

    name: str
    registry: str  # "pypi" | "npm" | "debian"
    package: str
    version: str
    license: str
    homepage: str


@dataclass(slots=True)
class ImageAsset:
    """An image record with its pixels, as an adapter hands it to the builder (which writes the PNG)."""

    record: Image
    pixels: Any  # PIL.Image.Image, RGB or RGBA


@dataclass(slots=True)
class Contribution:
    """What one source adapter adds to the world. Adapters are pure: sources in, records out."""

    entities: list[Entity] = field(default_factory=list)
    pages: list[Page] = field(default_factory=list)
    images: list[ImageAsset] = field(default_factory=list)
    triples: list[Triple] = field(default_factory=list)
    relations: list[Relation] = field(default_factory=list)


def to_record(obj: Any) -> dict[str, Any]:
    return asdict(obj)
