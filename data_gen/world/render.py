"""Rendering of world images: SVG rasterization and locator maps from decoded TopoJSON.

A locator map shows one feature (a country, a state) filled in a highlight colour among its neighbours, with its
name written on it, as the locator maps of encyclopedia articles do; the pixels then carry evidence (shape,
neighbours, name) that a reverse-image or visual question can rely on. Drawn without the name, the map can stand
for its feature in a question (shape and neighbours only). Fonts come from the fonts-dejavu-core source
package and system fonts are never consulted, so the pixels are the same on every machine.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import resvg_py
from PIL import Image, ImageDraw, ImageFont

from data_gen.world.topojson import Feature, ring_area

FONT_DIR = Path("usr/share/fonts/truetype/dejavu")
OCEAN = (168, 208, 230)
LAND = (238, 234, 222)
BORDER = (130, 130, 130)
HIGHLIGHT = (200, 55, 55)
SUPERSAMPLE = 2


class RenderError(ValueError):
    """A flag or map could not be rasterized (bad SVG, empty geometry)."""


class PolarFeatureError(RenderError):
    """The feature reaches a pole (Antarctica): an equirectangular locator map of it would be meaningless."""


def font_path(fonts_root: Path, bold: bool = True) -> Path:
    path = fonts_root / FONT_DIR / ("DejaVuSans-Bold.ttf" if bold else "DejaVuSans.ttf")
    if not path.is_file():
        raise RenderError(f"font {path.name} missing from the fonts-dejavu-core source at {fonts_root}")
    return path


def rasterize_svg(svg: str, width: int, height: int, font: Path, background: str | None = None) -> Image.Image:
    """SVG → RGB(A) PIL image at exactly ``width`` × ``height``."""
    try:
        png = resvg_py.svg_to_bytes(
            svg_string=svg,
            width=width,
            height=height,
            background=background,
            skip_system_fonts=True,
            font_files=[str(font)],
        )
    except ValueError as exc:
        raise RenderError(f"cannot rasterize SVG: {exc}") from exc
    image = Image.open(io.BytesIO(bytes(png)))
    image.load()
    return image


@dataclass(slots=True)
class _Rings:
    """Every ring of every feature, flattened, with per-ring bounds for fast culling."""

    rings: list[np.ndarray]
    owner: np.ndarray  # feature index of each ring
    outer: np.ndarray  # bool: outer ring (not a hole)
    lon_mean: np.ndarray
    bounds: np.ndarray  # (n, 4): lon_min, lat_min, lon_max, lat_max


class Atlas:
    """Features of one TopoJSON layer, ready to draw locator maps of any of them."""

    def __init__(self, feats: list[Feature], font: Path) -> None:
        self.features = feats
        self.font = font
        rings, owner, outer = [], [], []
        for index, feat in enumerate(feats):
            for polygon in feat.polygons:
                for k, ring in enumerate(polygon):
                    lon = np.unwrap(ring[:, 0], period=360.0)  # a ring cut at ±180° becomes continuous
                    rings.append(np.stack([lon, ring[:, 1]], axis=1))
                    owner.append(index)
                    outer.append(k == 0)
        if not rings:
            raise RenderError("atlas has no polygons")
        self._rings = _Rings(
            rings=rings,
            owner=np.asarray(owner),
            outer=np.asarray(outer, dtype=bool),
            lon_mean=np.asarray([r[:, 0].mean() for r in rings]),
            bounds=np.asarray([[r[:, 0].min(), r[:, 1].min(), r[:, 0].max(), r[:, 1].max()] for r in rings]),
        )

    def locator_map(self, index: int, label: str | None, center_lon: float,
                    size: tuple[int, int] = (512, 384)) -> Image.Image:
        """Map of feature ``index`` among its neighbours, labelled ``label`` (None: no name, so the map can stand for
        its feature in a question without giving it away); ``center_lon`` keeps rings that cross the antimeridian
        (Russia, Fiji, Alaska) on the same side as the feature's body."""
        rs = self._rings
        shift = np.round((rs.lon_mean - center_lon) / 360.0) * 360.0
        own = np.flatnonzero((rs.owner == index) & rs.outer)
        if own.size == 0:
            raise RenderError(f"feature {label or index!r} has no polygon")
        view = _view_box(rs, own, shift, size)
        lon0, lat0, lon1, lat1, kx = view
        w, h = size[0] * SUPERSAMPLE, size[1] * SUPERSAMPLE
        sx, sy = w / ((lon1 - lon0) * kx), h / (lat1 - lat0)

        b = rs.bounds
        visible = np.flatnonzero(
            (b[:, 2] - shift >= lon0) & (b[:, 0] - shift <= lon1) & (b[:, 3] >= lat0) & (b[:, 1] <= lat1)
        )
        xy = {}
        for i in visible:
            ring = rs.rings[i]
            x = (ring[:, 0] - (shift[i] + lon0)) * (kx * sx)
            y = (lat1 - ring[:, 1]) * sy
            xy[i] = np.stack([x, y], axis=1)
        image = Image.new("RGB", (w, h), OCEAN)
        draw = ImageDraw.Draw(image)
        target = [i for i in visible if rs.owner[i] == index]
        for i in visible:  # neighbours' land; their holes are land of an enclave drawn as its own feature
            if rs.outer[i] and rs.owner[i] != index:
                draw.polygon(xy[i].ravel().tolist(), fill=LAND)
        for i in target:  # outer ring before its holes, as TopoJSON orders them
            draw.polygon(xy[i].ravel().tolist(), fill=HIGHLIGHT if rs.outer[i] else LAND)
        for i in visible:
            draw.line(np.concatenate([xy[i], xy[i][:1]]).ravel().tolist(), fill=BORDER, width=SUPERSAMPLE)
        main = max(own, key=lambda i: ring_area(rs.rings[i]))
        anchor = (xy[main].min(axis=0) + xy[main].max(axis=0)) / 2.0
        label_at = (float(anchor[0]) / SUPERSAMPLE, float(anchor[1]) / SUPERSAMPLE)
        if (xy[main].max(axis=0) - xy[main].min(axis=0)).max() < 12 * SUPERSAMPLE:  # too small to see: ring it
            r = 14 * SUPERSAMPLE
            draw.ellipse((anchor[0] - r, anchor[1] - r, anchor[0] + r, anchor[1] + r), outline=HIGHLIGHT, width=3 * SUPERSAMPLE)
            label_at = (label_at[0], label_at[1] + 30)  # below the ring, not over it
        image = image.reduce(SUPERSAMPLE)
        if label is not None:
            _label(image, label, label_at, self.font)
        return image


def _view_box(rs: _Rings, own: np.ndarray, shift: np.ndarray, size: tuple[int, int]) -> tuple[float, ...]:
    """Bounds (lon0, lat0, lon1, lat1, kx) around the feature's main polygons, padded and fitted to the image aspect;
    kx = cos(mid latitude) makes the equirectangular projection locally conformal."""
    b = rs.bounds[own] - np.stack([shift[own], np.zeros(len(own))] * 2, axis=1)
    areas = np.asarray([ring_area(rs.rings[i]) for i in own])
    big = int(np.argmax(areas))
    center = (b[:, :2] + b[:, 2:]) / 2.0
    reach = 1.5 * float(np.max(b[big, 2:] - b[big, :2]))
    near = (areas >= 0.05 * areas[big]) & (np.abs(center - center[big]).max(axis=1) <= max(reach, 1.0))
    b = b[near]  # the main body and what lies near it: French Guiana stays off France's map, Alaska on the US's
    lon0, lon1 = float(b[:, 0].min()), float(b[:, 2].max())
    lat0, lat1 = float(b[:, 1].min()), float(b[:, 3].max())
    if lat0 < -85.0 or lat1 > 85.0:
        raise PolarFeatureError("a feature reaching a pole has no equirectangular locator map")
    kx = math.cos(math.radians(max(min((lat0 + lat1) / 2.0, 70.0), -70.0)))
    span_x = max((lon1 - lon0) * kx, 4.0) * 1.8
    span_y = max(lat1 - lat0, 4.0) * 1.8
    aspect = size[0] / size[1]
    span_x, span_y = max(span_x, span_y * aspect), max(span_y, span_x / aspect)
    cx, cy = (lon0 + lon1) / 2.0, (lat0 + lat1) / 2.0
    return cx - span_x / kx / 2.0, cy - span_y / 2.0, cx + span_x / kx / 2.0, cy + span_y / 2.0, kx


def _label(image: Image.Image, text: str, anchor: tuple[float, float], font_file: Path) -> None:
    draw = ImageDraw.Draw(image)
    size = 22
    font = ImageFont.truetype(str(font_file), size)
    while size > 11 and draw.textlength(text, font=font) > image.width - 16:
        size -= 1
        font = ImageFont.truetype(str(font_file), size)
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font, stroke_width=3)
    tw, th = right - left, bottom - top
    x = min(max(anchor[0] - tw / 2.0, 8.0), image.width - tw - 8.0)
    y = min(max(anchor[1] - th / 2.0, 8.0), image.height - th - 8.0)
    draw.text((x - left, y - top), text, font=font, fill=(20, 20, 20), stroke_width=3, stroke_fill=(255, 255, 255))
