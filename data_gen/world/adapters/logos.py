"""Brands and their logos from simple-icons: one entity, page and logo image per brand.

Each icon is a single-colour 24×24 SVG path; it is drawn in the brand colour simple-icons gives, with a margin, on
white, or on black where the colour is too light to see on white (contrast ratio below 1.5). Facts: P31 ``x:brand``,
P465 the colour, P856 official website when the logo's source URL lies on the brand's own domain (a host label
contains the slug: ``github.com`` for GitHub), since simple-icons records where the logo came from, not the website.
``small`` is the brands in WELL_KNOWN, a hand-picked list of globally known consumer and technology brands (the
data has no popularity signal); ``full`` is every icon.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from data_gen.world.properties import relations
from data_gen.world.render import font_path, rasterize_svg
from neos_core.world.model import Contribution, Entity, Image, ImageAsset, Page, Triple, image_url, page_url, slugify

SOURCES = ("simple-icons", "fonts-dejavu-core")
SOURCE = "simple-icons"
DATA = Path("package/data/simple-icons.json")
ICONS = Path("package/icons")
LOGO_SIDE = 256
BRAND_CLASS = "x:brand"
WELL_KNOWN = (
    "google", "apple", "facebook", "youtube", "netflix", "spotify", "github", "x", "instagram", "whatsapp",
    "cocacola", "mcdonalds", "nike", "toyota", "bmw", "samsung", "intel", "amd", "nvidia", "python", "linux",
    "android", "firefox", "wikipedia", "reddit", "paypal", "visa", "tesla", "ferrari", "ubuntu", "debian", "docker",
    "zoom", "uber", "airbnb", "starbucks", "shell", "sony", "playstation", "steam", "discord", "telegram", "tiktok",
    "twitch", "dropbox", "hp", "dell", "lenovo", "huawei", "xiaomi", "audi", "volkswagen", "porsche", "honda", "ford",
    "fiat", "renault", "peugeot", "volvo", "siemens", "bosch", "dhl", "fedex", "ups", "airbus", "boeing", "lufthansa",
    "emirates", "nasa", "spacex", "adidas", "puma", "ikea", "kfc", "burgerking", "redbull", "unilever", "hermes",
    "americanexpress", "mastercard", "hsbc", "barclays", "sap", "cisco", "qualcomm", "arm", "asus", "acer", "nikon",
    "panasonic", "lg", "motorola", "nokia", "ericsson", "vodafone", "verizon", "orange", "cnn", "nbc", "hbo", "ea",
    "ubisoft", "epicgames", "roblox", "gmail", "googlechrome", "safari", "opera", "duckduckgo", "baidu", "wechat",
    "snapchat", "pinterest", "tumblr", "stackoverflow", "wordpress", "shopify", "etsy", "ebay", "lidl", "tesco",
    "carrefour", "hyundai", "kia", "nissan", "mazda", "subaru", "suzuki", "mitsubishi", "lamborghini", "maserati",
    "bugatti", "rollsroyce", "bentley", "astonmartin", "mclaren", "ducati", "airfrance", "britishairways",
    "qatarairways", "turkishairlines", "ryanair", "klm", "mozilla", "blender", "git", "javascript", "unitednations",
    "worldhealthorganization", "fifa", "nba",
)


class LogoSourceError(ValueError):
    """simple-icons data is missing, malformed, or lacks a brand the small world needs."""


@dataclass(frozen=True, slots=True)
class Brand:
    slug: str
    title: str
    hex: str  # RRGGBB, upper case
    source: str
    guidelines: str | None
    aliases: tuple[str, ...]


def load_brands(root: Path) -> list[Brand]:
    try:
        records = json.loads((root / DATA).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise LogoSourceError(f"cannot read {DATA} of simple-icons: {exc}") from exc
    brands = [_brand(rec) for rec in records]
    return sorted(brands, key=lambda b: b.slug)


def _brand(rec: dict[str, Any]) -> Brand:
    try:
        slug, title, hex_, source = rec["slug"], rec["title"], rec["hex"].upper(), rec["source"]
    except KeyError as exc:
        raise LogoSourceError(f"simple-icons record lacks {exc}: {rec}") from None
    if len(hex_) != 6 or any(c not in "0123456789ABCDEF" for c in hex_):
        raise LogoSourceError(f"brand {slug!r} has colour {hex_!r}, not RRGGBB hex")
    raw = rec.get("aliases", {})
    names = [*raw.get("aka", []), *(d["title"] for d in raw.get("dup", [])), *raw.get("loc", {}).values(),
             *raw.get("old", [])]
    aliases = tuple(a for a in dict.fromkeys(names) if a and a != title)
    return Brand(slug, title, hex_, source, rec.get("guidelines"), aliases)


def chosen(brands: list[Brand], size: str) -> list[Brand]:
    if size == "full":
        return brands
    if size != "small":
        raise ValueError(f"size must be 'small' or 'full', not {size!r}")
    by_slug = {b.slug: b for b in brands}
    missing = [s for s in WELL_KNOWN if s not in by_slug]
    if missing:
        raise LogoSourceError(f"simple-icons lacks brands of the small world: {missing}")
    return sorted((by_slug[s] for s in WELL_KNOWN), key=lambda b: b.slug)


def official_website(brand: Brand) -> str | None:
    """``scheme://host`` of the logo source when that host is the brand's own (a DNS label contains the slug)."""
    parts = urlsplit(brand.source)
    labels = (parts.hostname or "").split(".")
    if parts.scheme in ("http", "https") and any(brand.slug in label.replace("-", "") for label in labels[:-1]):
        return f"{parts.scheme}://{parts.hostname}"
    return None


def _luminance(hex_: str) -> float:
    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(int(hex_[i : i + 2], 16) / 255) for i in (0, 2, 4))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def background(hex_: str) -> str:
    """White, unless the colour's WCAG contrast ratio against white is below 1.5: then black."""
    return "#ffffff" if 1.05 / (_luminance(hex_) + 0.05) >= 1.5 else "#000000"


def logo_svg(svg: str, hex_: str) -> str:
    """The icon in its colour with a 1/6 margin on each side (simple-icons paths fill the whole 24×24 box)."""
    if 'viewBox="0 0 24 24"' not in svg:
        raise LogoSourceError("simple-icons SVG without the 24x24 viewBox it documents")
    return svg.replace('viewBox="0 0 24 24"', f'viewBox="-4 -4 32 32" fill="#{hex_}"', 1)


def contribute(sources: Mapping[str, Path], size: str) -> Contribution:
    root = sources[SOURCE]
    font = font_path(sources["fonts-dejavu-core"])
    out = Contribution()
    for brand in chosen(load_brands(root), size):
        eid, image_id, page_id = f"brand:{brand.slug}", f"logo_{brand.slug}", slugify(brand.title)
        site = official_website(brand)
        page = Page(page_id, page_url(page_id), brand.title, _text(brand, site), SOURCE, entity_id=eid,
                    image_ids=[image_id])
        out.pages.append(page)
        out.entities.append(Entity(eid, brand.title, "brand", "brand", list(brand.aliases), page_id))
        out.triples += [Triple(eid, "P31", BRAND_CLASS), Triple(eid, "P465", brand.hex, literal=True)]
        if site:
            out.triples.append(Triple(eid, "P856", site, literal=True))
        try:
            svg = (root / ICONS / f"{brand.slug}.svg").read_text(encoding="utf-8")
        except OSError as exc:
            raise LogoSourceError(f"simple-icons has no icon file for {brand.slug!r}: {exc}") from exc
        drawn = rasterize_svg(logo_svg(svg, brand.hex), LOGO_SIDE, LOGO_SIDE, font, background(brand.hex))
        pixels = drawn.convert("RGB")
        record = Image(image_id, image_url(image_id), "", f"{brand.title} logo", f"the {brand.title} logo", SOURCE,
                       pixels.width, pixels.height, page_id, eid)
        out.images.append(ImageAsset(record, pixels))
    out.entities.append(Entity(BRAND_CLASS, "brand", "class", "class of brand entities"))
    out.relations = relations({t.p for t in out.triples})
    return out


def _text(brand: Brand, site: str | None) -> str:
    text = [f"{brand.title} is a brand."]
    if brand.aliases:
        text.append(f"It is also known as {', '.join(brand.aliases)}.")
    text.append(f"Its brand colour is the sRGB hex triplet #{brand.hex}; its logo is drawn in that colour.")
    if site:
        text.append(f"Its official website is {site}.")
    text.append(f"The logo was published at {brand.source}.")
    if brand.guidelines:
        text.append(f"Brand guidelines: {brand.guidelines}.")
    return " ".join(text)
