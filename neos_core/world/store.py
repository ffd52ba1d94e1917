"""Read-only access to a built world (the tool server and the task pipelines load it once)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from neos_core.world.model import FORMAT_VERSION, Entity, Image, Page, Relation, Triple

T = TypeVar("T")


class WorldError(RuntimeError):
    """The directory is not a readable world of this format version."""


def _records(path: Path, make: Callable[..., T]) -> Iterator[T]:
    if not path.is_file():
        raise WorldError(f"world file {path.name} is missing from {path.parent}")
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            try:
                yield make(**json.loads(line))
            except (json.JSONDecodeError, TypeError) as exc:
                raise WorldError(f"{path.name}:{number} is corrupt: {exc}") from exc


@dataclass(frozen=True, slots=True)
class World:
    root: Path
    manifest: dict[str, Any]
    entities: dict[str, Entity]
    pages: dict[str, Page]
    images: dict[str, Image]
    triples: list[Triple]
    relations: dict[str, Relation]
    page_by_url: dict[str, Page]
    image_by_url: dict[str, Image]

    @classmethod
    def load(cls, path: str | Path) -> World:
        root = Path(path)
        manifest_file = root / "manifest.json"
        if not manifest_file.is_file():
            raise WorldError(f"{root} is not a world: manifest.json is missing (build one with `python -m data_gen.world build`)")
        try:
            manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise WorldError(f"{manifest_file} is corrupt: {exc}") from exc
        version = manifest.get("format_version")
        if version != FORMAT_VERSION:
            raise WorldError(f"{root} has world format {version!r}; this code reads format {FORMAT_VERSION}: rebuild it")
        entities = {e.id: e for e in _records(root / "entities.jsonl", Entity)}
        pages = {p.id: p for p in _records(root / "pages.jsonl", Page)}
        images = {i.id: i for i in _records(root / "images.jsonl", Image)}
        triples = list(_records(root / "triples.jsonl", Triple))
        relations = {r.id: r for r in _records(root / "relations.jsonl", Relation)}
        counts = manifest.get("counts", {})
        for name, table in (("entities", entities), ("pages", pages), ("images", images), ("triples", triples)):
            if counts.get(name) != len(table):
                raise WorldError(f"{root}: manifest counts {counts.get(name)} {name} but the file holds {len(table)}")
        return cls(
            root=root,
            manifest=manifest,
            entities=entities,
            pages=pages,
            images=images,
            triples=triples,
            relations=relations,
            page_by_url={p.url: p for p in pages.values()},
            image_by_url={i.url: i for i in images.values()},
        )

    def image_path(self, image_id: str) -> Path:
        try:
            return self.root / self.images[image_id].file
        except KeyError:
            raise KeyError(f"no image {image_id!r} in the world at {self.root}") from None
