"""Builds the world: fetch sources, run adapters, merge, enrich from Wikipedia, resolve page ids, state the facts later
adapters add on their subjects' pages (``fact_lines``), show a country's flag on its subdivisions' pages and a
subdivision's on its capital's (``infobox_flags``), link mentions, write.

Merge rules (deterministic, in adapter order):

* entities: the same id from two adapters is one entity — the first adapter's label, kind and description win,
  later labels and all aliases become aliases, the first page wins; two different kinds for one id is an error;
* images: ids must be unique across adapters (an error otherwise); relations: one id, one label (else an error);
  triples: exact duplicates are dropped;
* pages: each adapter proposes an id (slug of the title); the first page keeps it, later ones with the same id are
  qualified by their entity's kind (``Georgia_(us_state)``), then numbered; references (Entity.page_id,
  Image.page_id) are rewritten per adapter, so each keeps pointing at its own page.

Output (``manifest.json``, ``entities.jsonl``, ``pages.jsonl``, ``images.jsonl``, ``triples.jsonl``,
``relations.jsonl``, ``images/<2 chars>/<id>.png``) is written into a temporary sibling directory and renamed into
place, so a reader never sees half a world. The content hash covers every record and image byte, not the manifest's
timings, so the same sources give the same hash.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import re
import shutil
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from PIL import Image as PILImage
from tqdm import tqdm

from data_gen.world import corroborate, fact_lines, infobox_flags, wiki
from data_gen.world.adapters import ADAPTERS, load_adapter
from data_gen.world.linking import Form, Linker
from neos_core.world.model import (
    FORMAT_VERSION,
    Contribution,
    Entity,
    Image,
    Page,
    Relation,
    Triple,
    page_url,
    to_record,
)
from neos_core.world.sources import SourceCache

SIZES = ("small", "full")
MAX_IMAGE_SIDE = 512
RECORD_FILES = ("entities", "pages", "images", "triples", "relations")
_IMAGE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_ENTITY_ID = re.compile(r"^[a-z_]+:\S+$")
# common-noun kinds: their labels link with either initial case (see data_gen.world.linking)
_COMMON_KINDS = {"synset", "stamp", "class"}


class BuildError(RuntimeError):
    """A build cannot go on: bad size, an adapter breaking its contract, or contributions that conflict."""


@dataclass(slots=True)
class _Merged:
    entities: dict[str, Entity] = field(default_factory=dict)
    entity_origin: dict[str, int] = field(default_factory=dict)
    pages: list[tuple[int, Page]] = field(default_factory=list)  # (contribution index, page with preferred id)
    images: dict[str, Image] = field(default_factory=dict)
    pixels: dict[str, Any] = field(default_factory=dict)
    image_origin: dict[str, int] = field(default_factory=dict)
    triples: dict[tuple[str, str, str, bool], Triple] = field(default_factory=dict)
    relations: dict[str, Relation] = field(default_factory=dict)


def build(
    size: str,
    out: Path,
    cache: Path | None = None,
    adapters: Sequence[str] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Build the world of ``size`` into ``out`` (replacing a world already there); returns the manifest."""
    if size not in SIZES:
        raise BuildError(f"size must be one of {SIZES}, not {size!r}")
    check_out(out)
    started = time.perf_counter()
    names = list(ADAPTERS if adapters is None else adapters)
    modules = [load_adapter(name) for name in names]
    needed = {wiki.SOURCE, *corroborate.SOURCES}.union(*(set(m.SOURCES) for m in modules))
    resolved = SourceCache(cache).resolve_all(needed)
    roots = {name: r.root for name, r in resolved.items()}

    merged = _Merged()
    for index, (name, module) in enumerate(tqdm(list(zip(names, modules)), desc="adapters", disable=not progress)):
        contribution = module.contribute({s: roots[s] for s in module.SOURCES}, size)
        _check_contribution(name, contribution)
        _merge(merged, index, name, contribution)

    entities = list(merged.entities.values())
    articles = wiki.load_articles(roots[wiki.SOURCE])
    extra = wiki.enrich([p for _, p in merged.pages], entities, articles, size)
    _check_contribution("wiki", extra)
    _merge(merged, len(names), "wiki", extra)

    pages = _resolve_pages(merged)
    fact_lines.state_facts(pages, merged.entities, merged.triples.values(), merged.relations)
    infobox_flags.show_infobox_flags(pages, merged.entities, merged.images.values(), merged.triples.values())
    _link(pages, merged, progress)
    _check_references(merged, pages)

    out = Path(out).resolve()
    tmp = out.parent / f"{out.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        image_digest = _write_images(tmp, merged, progress)
        records = {
            "entities": sorted(merged.entities.values(), key=lambda e: e.id),
            "pages": sorted(pages.values(), key=lambda p: p.id),
            "images": sorted(merged.images.values(), key=lambda i: i.id),
            "triples": sorted(merged.triples.values(), key=lambda t: (t.s, t.p, t.o, t.literal)),
            "relations": sorted(merged.relations.values(), key=lambda r: r.id),
        }
        content = hashlib.sha256()
        for name in RECORD_FILES:
            data = "".join(_line(to_record(r)) for r in records[name]).encode("utf-8")
            (tmp / f"{name}.jsonl").write_bytes(data)
            content.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
        content.update(b"images\0" + image_digest)
        kinds: dict[str, int] = {}
        for ent in records["entities"]:
            kinds[ent.kind] = kinds.get(ent.kind, 0) + 1
        manifest = {
            "format_version": FORMAT_VERSION,
            "size": size,
            "content_hash": content.hexdigest(),
            "adapters": names,
            "sources": [resolved[n].manifest_record() for n in sorted(resolved)],
            "counts": {name: len(records[name]) for name in RECORD_FILES} | {"entities_by_kind": dict(sorted(kinds.items()))},
            "build_seconds": round(time.perf_counter() - started, 2),
            "tools": _tool_versions(),
            # facts a second source contradicts: kept in the world, left out of questions (data_gen.world.corroborate)
            "contested_facts": corroborate.contested_facts(records["triples"], roots),
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
        _replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return manifest


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, sort_keys=True, separators=(",", ":")) + "\n"


def _check_contribution(name: str, c: Contribution) -> None:
    def fail(msg: str) -> None:
        raise BuildError(f"adapter {name!r}: {msg}")

    seen: set[str] = set()
    for ent in c.entities:
        if not _ENTITY_ID.match(ent.id):
            fail(f"entity id {ent.id!r} is not namespaced (kind:rest)")
        if ent.id in seen:
            fail(f"entity {ent.id!r} given twice")
        if not ent.label:
            fail(f"entity {ent.id!r} has no label")
        seen.add(ent.id)
    keys = [(p.id, p.entity_id) for p in c.pages]
    if len(set(keys)) != len(keys):
        counts: dict[tuple[str, str | None], int] = {}
        for k in keys:
            counts[k] = counts.get(k, 0) + 1
        dup = sorted(k[0] for k, n in counts.items() if n > 1)[:5]
        fail(f"pages given twice (same id and entity): {dup}")
    by_id = _page_index(keys)
    for ent in c.entities:
        if ent.page_id is not None and _page_key(by_id, ent.page_id, ent.id) is None:
            fail(f"entity {ent.id!r} points at page {ent.page_id!r}, which the adapter gives not or not unambiguously")
    image_ids = set()
    for asset in c.images:
        img = asset.record
        if not _IMAGE_ID.match(img.id):
            fail(f"image id {img.id!r} is not URL-safe")
        if img.id in image_ids:
            fail(f"image {img.id!r} given twice")
        image_ids.add(img.id)
        if not img.caption.strip() or not img.alt.strip():
            fail(f"image {img.id!r} needs a caption and an alt text")
        if img.page_id is not None and _page_key(by_id, img.page_id, img.entity_id) is None:
            fail(f"image {img.id!r} points at page {img.page_id!r}, which the adapter gives not or not unambiguously")
    for page in c.pages:
        missing = [i for i in page.image_ids if i not in image_ids]
        if missing:
            fail(f"page {page.id!r} shows images the adapter does not give: {missing[:3]}")


def _page_index(keys: list[tuple[str, str | None]]) -> dict[str, list[str | None]]:
    index: dict[str, list[str | None]] = {}
    for page_id, entity_id in keys:
        index.setdefault(page_id, []).append(entity_id)
    return index


def _page_key(index: dict[str, list[str | None]], page_id: str, entity_id: str | None) -> tuple[str, str | None] | None:
    """The page a reference means: the one with that id about that entity, else the only one with that id (an
    adapter may give two pages the same preferred id: a continent and a country both named Antarctica)."""
    about = index.get(page_id, [])
    if entity_id in about:
        return page_id, entity_id
    return (page_id, about[0]) if len(about) == 1 else None


def _merge(m: _Merged, index: int, name: str, c: Contribution) -> None:
    for ent in c.entities:
        old = m.entities.get(ent.id)
        if old is None:
            m.entities[ent.id] = Entity(ent.id, ent.label, ent.kind, ent.description, list(ent.aliases), ent.page_id)
            m.entity_origin[ent.id] = index if ent.page_id is not None else -1
            continue
        if old.kind != ent.kind:
            raise BuildError(f"entity {ent.id!r} is a {old.kind!r} in an earlier adapter but a {ent.kind!r} in {name!r}")
        names = [ent.label, *ent.aliases]  # a later adapter's label is another name of the entity
        old.aliases = list(dict.fromkeys([*old.aliases, *(a for a in names if a != old.label)]))
        old.description = old.description or ent.description
        if old.page_id is None and ent.page_id is not None:
            old.page_id = ent.page_id
            m.entity_origin[ent.id] = index
    m.pages += [(index, p) for p in c.pages]
    for asset in c.images:
        if asset.record.id in m.images:
            raise BuildError(f"image id {asset.record.id!r} from {name!r} is already given by an earlier adapter")
        m.images[asset.record.id] = asset.record
        m.pixels[asset.record.id] = asset.pixels
        m.image_origin[asset.record.id] = index
    for t in c.triples:
        m.triples.setdefault((t.s, t.p, t.o, t.literal), t)
    for rel in c.relations:
        old_rel = m.relations.get(rel.id)
        if old_rel is not None and old_rel != rel:
            raise BuildError(f"relation {rel.id!r} from {name!r} is {rel.label!r}, earlier {old_rel.label!r}")
        m.relations.setdefault(rel.id, rel)


def _qualifier(kind: str) -> str:
    return kind.replace(" ", "_")


def _resolve_pages(m: _Merged) -> dict[str, Page]:
    """Final page ids; rewrites Entity.page_id and Image.page_id through each adapter's own id map."""
    final: dict[str, Page] = {}
    remap: dict[int, dict[tuple[str, str | None], str]] = {}
    for index, page in m.pages:
        wanted = page.id
        if wanted in final:
            ent = m.entities.get(page.entity_id) if page.entity_id else None
            base = f"{wanted}_({_qualifier(ent.kind if ent else page.source)})"
            wanted, n = base, 2
            while wanted in final:
                wanted = f"{base[:-1]}_{n})"
                n += 1
        remap.setdefault(index, {})[(page.id, page.entity_id)] = wanted
        page.id = wanted
        page.url = page_url(wanted)
        final[wanted] = page

    indexes = {index: _page_index(list(keys)) for index, keys in remap.items()}

    def resolve(index: int, page_id: str, entity_id: str | None) -> str:
        keys = remap[index]
        key = _page_key(indexes[index], page_id, entity_id)
        assert key is not None, "checked by _check_contribution"
        return keys[key]

    for eid, ent in m.entities.items():
        if ent.page_id is not None:
            ent.page_id = resolve(m.entity_origin[eid], ent.page_id, eid)
    for iid, img in m.images.items():
        if img.page_id is not None:
            img.page_id = resolve(m.image_origin[iid], img.page_id, img.entity_id)
    return final


def _link(pages: dict[str, Page], m: _Merged, progress: bool) -> None:
    forms = []
    for ent in m.entities.values():
        if ent.page_id is None:
            continue
        page = pages[ent.page_id]
        common = ent.kind in _COMMON_KINDS or ent.label[:1].islower()
        if ent.kind == "article":
            common = wiki.is_common_noun(ent.label, page.text)
        forms.append(Form(ent.label, ent.page_id, label=True, common=common))
        forms += [Form(a, ent.page_id, label=False, common=common) for a in ent.aliases]
    with_entity = {e.page_id for e in m.entities.values() if e.page_id is not None}
    forms += [Form(p.title, p.id, label=True) for p in pages.values() if p.id not in with_entity]
    linker = Linker(forms)
    for page in tqdm(list(pages.values()), desc="linking", disable=not progress):
        page.links = linker.mentions(page.text, self_id=page.id)


def _check_references(m: _Merged, pages: dict[str, Page]) -> None:
    for t in m.triples.values():
        if t.s not in m.entities:
            raise BuildError(f"triple {t} has an unknown subject")
        if not t.literal and t.o not in m.entities:
            raise BuildError(f"triple {t} points at an unknown entity (mark it literal if it is a value)")
        if t.p not in m.relations:
            raise BuildError(f"triple {t} uses relation {t.p!r} that no adapter declares")
    for page in pages.values():
        if page.entity_id is not None and page.entity_id not in m.entities:
            raise BuildError(f"page {page.id!r} is about unknown entity {page.entity_id!r}")
    for img in m.images.values():
        if img.entity_id is not None and img.entity_id not in m.entities:
            raise BuildError(f"image {img.id!r} shows unknown entity {img.entity_id!r}")


def _write_images(root: Path, m: _Merged, progress: bool) -> bytes:
    """PNG files, longest side capped, encoded on a thread pool (Pillow releases the GIL while encoding); returns a
    digest over (id, bytes) in id order."""
    for iid, pixels in m.pixels.items():
        if not isinstance(pixels, PILImage.Image):
            raise BuildError(f"image {iid!r}: pixels must be a PIL image, got {type(pixels).__name__}")

    def write(iid: str) -> bytes:
        img, pixels = m.images[iid], m.pixels[iid]
        pixels = pixels.convert("RGBA" if pixels.mode in ("RGBA", "LA", "P", "PA") else "RGB")
        if max(pixels.size) > MAX_IMAGE_SIDE:
            pixels = pixels.copy()
            pixels.thumbnail((MAX_IMAGE_SIDE, MAX_IMAGE_SIDE), PILImage.Resampling.LANCZOS)
        rel = Path("images") / iid[:2] / f"{iid}.png"
        buffer = io.BytesIO()
        pixels.save(buffer, format="PNG", compress_level=6)
        (root / rel.parent).mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(buffer.getvalue())
        img.file, img.width, img.height = rel.as_posix(), pixels.width, pixels.height
        return buffer.getvalue()

    ids = sorted(m.images)
    digest = hashlib.sha256()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for iid, data in zip(ids, tqdm(pool.map(write, ids), total=len(ids), desc="images", disable=not progress)):
            digest.update(iid.encode() + b"\0" + data)
    m.pixels.clear()
    return digest.digest()


def _tool_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for dist in ("pillow", "numpy", "resvg_py", "tqdm"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return versions


def check_out(out: Path) -> None:
    """Raise :class:`BuildError` if a world cannot be written to ``out``: a file, a directory holding something other
    than a world (never replaced), or a path under a file or an unwritable directory. :func:`build` checks before
    it starts (a build takes minutes) and again before it replaces ``out``."""
    out = Path(out).resolve()
    if out.exists() and not out.is_dir():
        raise BuildError(f"{out} is a file, not a directory")
    if out.is_dir() and not (out / "manifest.json").is_file() and any(out.iterdir()):
        raise BuildError(f"{out} exists and is not a world (no manifest.json); refusing to replace it")
    parent = next(p for p in out.parents if p.exists())
    if not parent.is_dir():
        raise BuildError(f"{out} cannot be created: {parent} is a file")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise BuildError(f"{out} cannot be created: {parent} is not writable")


def _replace(tmp: Path, out: Path) -> None:
    if out.exists():
        check_out(out)
        old = out.parent / f"{out.name}.old-{os.getpid()}"
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old)
    else:
        tmp.rename(out)
