"""A world directory from a Wikidata-format knowledge graph, so the Neos pipeline, its offline tool server and
its expert run on a real KG (``python -m data_gen neos --kg DUMP --kg-images DIR``).

The loaded graph (:mod:`data_gen.kg.wikidata`) becomes the world's records: an entity per item with a label, its
kind from ``instance of`` (P31), a page per entity whose text states its facts in both directions (what a search
engine and ``WebVisit`` serve), and the images its statements name: flag (P41), logo (P154), locator map (P242),
image (P18). Image statements hold Commons file names; their pixels come from ``--kg-images``, a directory holding
those files (PNG, JPEG or SVG, as Wikimedia Commons serves them); a named file that is missing there is counted in
the manifest (``images_missing``), never silently dropped. The world is written to a temporary directory and
renamed into place; a second run over the same dump and images writes it again identically (the same content
hash), so a resumed run's task keys still match.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import json
import os
import shutil
import sys
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import resvg_py
from PIL import Image as PILImage
from tqdm import tqdm

from data_gen.kg import Edge
from data_gen.kg.wikidata import Subset, WikidataGraph, read_json_dump, read_truthy_ntriples
from data_gen.neos.verbalize import fact_sentence
from neos_core.world.model import (
    FORMAT_VERSION,
    Entity,
    Image,
    Page,
    Relation,
    Triple,
    image_url,
    page_url,
    slugify,
    to_record,
)

# Image-bearing properties -> the image source the observer knows (data_gen.neos.observer.IMAGE_KINDS).
IMAGE_PROPERTIES: dict[str, str] = {"P41": "wikidata:P41", "P154": "wikidata:P154", "P242": "wikidata:P242",
                                    "P18": "wikidata:P18"}
# instance-of classes -> the entity kind the question names; another class's English label when the dump has it.
CLASS_KINDS: dict[str, str] = {
    "Q6256": "country", "Q3624078": "country", "Q515": "city", "Q5119": "city", "Q1549591": "city", "Q5": "person",
    "Q4830453": "company", "Q783794": "company", "Q43229": "organization", "Q34770": "language",
    "Q1288568": "language", "Q8142": "currency", "Q5107": "continent", "Q82794": "region", "Q16521": "taxon",
}
PROPERTY_LABELS: dict[str, str] = {
    "P17": "country", "P19": "place of birth", "P20": "place of death", "P27": "country of citizenship",
    "P30": "continent", "P31": "instance of", "P35": "head of state", "P36": "capital", "P37": "official language",
    "P38": "currency", "P47": "shares border with", "P6": "head of government", "P103": "native language",
    "P108": "employer", "P112": "founded by", "P127": "owned by", "P131": "located in", "P159": "headquarters",
    "P169": "chief executive officer", "P176": "manufacturer", "P279": "subclass of", "P361": "part of",
    "P452": "industry", "P495": "country of origin", "P749": "parent organization", "P1376": "capital of",
    "P1412": "languages spoken",
}
RASTER_WIDTH = 320  # SVG files are rendered at this width, their aspect ratio kept


class KGWorldError(ValueError):
    """The dump or image directory cannot make a world; the message names the file or flag."""


DECOMPRESSORS = {".gz": gzip.open, ".bz2": bz2.open}  # how Wikimedia compresses its dumps


def read_graph(path: Path, subset: Subset = Subset(), progress: bool = True) -> WikidataGraph:
    """A Wikidata dump file: truthy N-Triples (``.nt``) or the JSON dump (``.json``), each as published (plain,
    ``.gz`` or ``.bz2``), streamed line by line: memory grows with the kept subgraph, not the file. ``progress``:
    a bar over the bytes of the file as stored, when stderr is a terminal (a log keeps its one-line errors)."""
    compression = path.suffix if path.suffix in DECOMPRESSORS else ""
    name = path.name.removesuffix(compression)
    if not name.endswith((".nt", ".json")):
        raise KGWorldError(f"{path}: expected a truthy N-Triples (.nt) or JSON dump (.json) file, optionally "
                           ".gz or .bz2")
    read = read_truthy_ntriples if name.endswith(".nt") else read_json_dump
    with _dump_lines(path, compression, progress) as lines:
        return read(lines, subset, source=path.name)


@contextmanager
def _dump_lines(path: Path, compression: str, progress: bool) -> Iterator[IO[str]]:
    """The dump's text, decompressed on the fly, its progress counted on the stored (compressed) bytes."""
    with path.open("rb") as raw, tqdm(total=path.stat().st_size, unit="B", unit_scale=True, desc=path.name,
                                      disable=None if progress else True, file=sys.stderr) as bar:
        counted = _Counted(raw, bar)
        stream = DECOMPRESSORS[compression](counted) if compression else counted
        with io.TextIOWrapper(stream, encoding="utf-8") as text:
            yield text


class _Counted(io.RawIOBase):
    """A binary file whose reads advance a progress bar."""

    def __init__(self, raw: IO[bytes], bar: tqdm) -> None:
        self._raw, self._bar = raw, bar

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self._raw.readinto(buffer)
        self._bar.update(n or 0)
        return n


def write_world(graph: WikidataGraph, images_dir: Path | None, out: Path, source: Path) -> dict:
    """The world of ``graph`` at ``out`` (replaced if there); returns its manifest. ``source``: the dump, named
    and hashed in the manifest."""
    classes: dict[str, list[str]] = defaultdict(list)
    for s, p, o in sorted(graph.triples):
        if p == "P31":
            classes[s].append(o)
    kinds = {qid: _kind(graph, classes[qid]) for qid in _items(graph)}
    ids = {qid: f"{kind}:{qid}" for qid, kind in kinds.items()}
    entities: dict[str, Entity] = {}
    slugs: set[str] = set()
    for qid in sorted(kinds):
        label = graph.labels.get(qid, qid)
        slug = slugify(label) if slugify(label) not in slugs else f"{slugify(label)}_{qid}"
        slugs.add(slug)
        entities[qid] = Entity(id=ids[qid], label=label, kind=kinds[qid], description=graph.descriptions.get(qid, ""),
                               aliases=list(graph.aliases.get(qid, [])), page_id=slug)
    triples = [Triple(ids[s], p, ids[o]) for s, p, o in sorted(graph.triples)
               if s in ids and o in ids and p != "P31" and s != o]  # "Portugal has Portugal as its ..." says nothing
    relations = [Relation(p, _property_label(graph, p), True) for p in sorted({t.p for t in triples})]
    images, pixels, missing = _images(graph, entities, images_dir)
    if not images:  # no anchor or checkpoint is possible: a run would verify nothing
        raise KGWorldError(f"none of the {missing} image files the dump's flag/logo/map/image statements name is in "
                           f"{images_dir}" if missing else
                           "the dump has no flag (P41), logo (P154), locator map (P242) or image (P18) statements")
    labels = {r.id: r.label for r in relations}
    by_id = {e.id: e for e in entities.values()}
    facts: dict[str, list[str]] = defaultdict(list)
    links: dict[str, set[str]] = defaultdict(set)
    for t in triples:
        # the subject described from the object: "France's capital is Paris."
        sentence = fact_sentence(Edge(t.o, t.s, t.p, False), labels[t.p], by_id[t.s].label, by_id[t.o].label)
        for end, other in ((t.s, t.o), (t.o, t.s)):
            facts[end].append(sentence)
            links[end].add(by_id[other].page_id)
    shown: dict[str, list[str]] = defaultdict(list)
    for image in images:
        shown[image.entity_id].append(image.id)
    pages = []
    for entity in entities.values():
        lead = f"{entity.label} is {_article(entity.description)}." if entity.description else \
            f"{entity.label} is a {entity.kind}."
        pages.append(Page(id=entity.page_id, url=page_url(entity.page_id), title=entity.label,
                          text=" ".join([lead, *facts[entity.id]]), source="wikidata", entity_id=entity.id,
                          links=sorted(links[entity.id]), image_ids=shown[entity.id]))
    records = {"entities": sorted(entities.values(), key=lambda e: e.id), "pages": sorted(pages, key=lambda p: p.id),
               "images": images, "triples": triples, "relations": relations}
    unlabelled = sorted(r.id for r in relations if r.label == r.id)
    return _write(out, records, pixels, {"source": source.name, "source_sha256": _file_sha256(source),
                                         "images_missing": missing, "unlabelled_properties": unlabelled,
                                         "self_loops_dropped": sum(s == o for s, _, o in graph.triples)})


def _property_label(graph: WikidataGraph, pid: str) -> str:
    """The built-in label (worded for the verbalizer), else the dump's own, else the id (counted as unlabelled)."""
    return PROPERTY_LABELS.get(pid) or graph.labels.get(pid) or pid


def _items(graph: WikidataGraph) -> set[str]:
    """Items the world holds: every labelled entity a fact or an image names (classes only as kinds)."""
    named = {s for s, _, _ in graph.triples} | {o for _, p, o in graph.triples if p != "P31"}
    named |= {s for s, p, _ in graph.literals if p in IMAGE_PROPERTIES}
    return {q for q in named if q.startswith("Q") and q in graph.labels}


def image_files(graph: WikidataGraph) -> set[str]:
    """The Commons file names of the image statements of the items a world of ``graph`` holds."""
    items = _items(graph)
    return {name for qid, prop, name in graph.literals if prop in IMAGE_PROPERTIES and qid in items}


def _kind(graph: WikidataGraph, classes: list[str]) -> str:
    for cls in classes:
        if cls in CLASS_KINDS:
            return CLASS_KINDS[cls]
    return slugify(graph.labels[classes[0]]).lower() if classes and classes[0] in graph.labels else "entity"


def _article(description: str) -> str:
    return description if description.split(" ", 1)[0].lower() in {"a", "an", "the"} else f"a {description}"


def _images(graph: WikidataGraph, entities: dict[str, Entity], images_dir: Path | None
            ) -> tuple[list[Image], dict[str, PILImage.Image], int]:
    """Image records and pixels of the image statements whose files ``images_dir`` holds; how many it lacks. An
    entity with several truthy values of one image property (two normal-rank P18s, as real dumps have) gets them
    all: the first as ``p18_q64``, the next as ``p18_q64_2``, ..."""
    records, pixels, missing = [], {}, 0
    taken: dict[str, int] = defaultdict(int)
    for qid, prop, file_name in sorted(graph.literals):
        if prop not in IMAGE_PROPERTIES or qid not in entities:
            continue
        path = images_dir / file_name if images_dir else None
        if path is None or not path.is_file():
            missing += 1
            continue
        image = _load(path)
        base = f"{prop.lower()}_{qid.lower()}"
        taken[base] += 1
        image_id = base if taken[base] == 1 else f"{base}_{taken[base]}"
        entity = entities[qid]
        what = PROPERTY_LABELS.get(prop, "image").replace(" image", "")
        records.append(Image(id=image_id, url=image_url(image_id), file=f"images/kg/{image_id}.png",
                             caption=f"{file_name.rsplit('.', 1)[0]}", alt=f"{what} of {entity.label}",
                             source=IMAGE_PROPERTIES[prop], width=image.width, height=image.height,
                             page_id=entity.page_id, entity_id=entity.id))
        pixels[image_id] = image
    return records, pixels, missing


def _load(path: Path) -> PILImage.Image:
    try:
        if path.suffix.lower() == ".svg":
            png = resvg_py.svg_to_bytes(svg_string=path.read_text(encoding="utf-8"), width=RASTER_WIDTH)
            image = PILImage.open(io.BytesIO(bytes(png)))
        else:
            image = PILImage.open(path)
        image.load()
    except (OSError, ValueError) as err:
        raise KGWorldError(f"--kg-images: {path.name} is not a readable image ({err})") from None
    return image.convert("RGBA") if image.mode in ("P", "LA", "RGBA") else image.convert("RGB")


def _write(out: Path, records: dict[str, list], pixels: dict[str, PILImage.Image], source: dict) -> dict:
    """The world files into a temporary directory, then renamed over ``out``: a crash leaves the old one."""
    tmp = out.parent / f"{out.name}.tmp-{os.getpid()}"
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "images" / "kg").mkdir(parents=True)
    try:
        content = hashlib.sha256()
        for name in ("entities", "pages", "images", "triples", "relations"):
            data = "".join(json.dumps(to_record(r), ensure_ascii=False, sort_keys=True) + "\n" for r in records[name])
            (tmp / f"{name}.jsonl").write_text(data, encoding="utf-8")
            content.update(name.encode() + b"\0" + data.encode())
        for image_id, image in sorted(pixels.items()):
            buffer = io.BytesIO()
            image.save(buffer, "PNG")
            (tmp / "images" / "kg" / f"{image_id}.png").write_bytes(buffer.getvalue())
            content.update(buffer.getvalue())
        kinds: dict[str, int] = defaultdict(int)
        for entity in records["entities"]:
            kinds[entity.kind] += 1
        manifest = {"format_version": FORMAT_VERSION, "size": "kg", "content_hash": content.hexdigest(),
                    "adapters": [], "sources": [source], "images_missing": source["images_missing"],
                    "unlabelled_properties": source["unlabelled_properties"],
                    "self_loops_dropped": source["self_loops_dropped"],
                    "counts": {name: len(records[name]) for name in records}
                    | {"entities_by_kind": dict(sorted(kinds.items()))}}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return manifest


def _file_sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def entity_subset(path: Path | None) -> Subset:
    """The snapshot subset from ``--kg-entities`` (one QID a line, ``#`` comments); every item when None."""
    entities = None
    if path is not None:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as err:
            raise KGWorldError(f"--kg-entities: {err}") from None
        entities = frozenset(line.split("#", 1)[0].strip() for line in lines) - {""}
    # outside objects stay so instance-of classes still give kinds; other unlabelled ones are dropped later
    return Subset(entities=entities, keep_outside_objects=True)
