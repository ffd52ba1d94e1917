"""TopoJSON decoding: quantized, delta-encoded arcs → polygons as (lon, lat) rings.

The format is small (https://github.com/topojson/topojson-specification): arcs are shared polylines, delta-encoded
when the topology is quantized; a polygon is a list of rings, each ring a list of arc indices where ``~i`` (i.e.
``-i-1``) means arc ``i`` reversed; consecutive arcs share their joining point, which appears once in the ring.
Decoding it here costs ~40 lines and no dependency.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


class TopoJSONError(ValueError):
    """The TopoJSON topology is malformed (bad arcs, transform or geometry)."""


Ring = np.ndarray  # float64 array of shape (n, 2): lon, lat (or projected x, y)
Polygon = list[Ring]  # outer ring first, then holes


@dataclass(slots=True)
class Feature:
    id: str | None
    properties: dict[str, Any]
    polygons: list[Polygon]
    arcs: frozenset[int]  # indices of the shared arcs that bound it: two features sharing one share a border


def decode_arcs(topology: dict[str, Any]) -> list[np.ndarray]:
    transform = topology.get("transform")
    arcs = []
    for raw in topology["arcs"]:
        pts = np.asarray(raw, dtype=np.float64)[:, :2]
        if transform is not None:
            pts = np.cumsum(pts, axis=0) * np.asarray(transform["scale"]) + np.asarray(transform["translate"])
        arcs.append(pts)
    return arcs


def _ring(indices: list[int], arcs: list[np.ndarray]) -> Ring:
    parts = []
    for k, index in enumerate(indices):
        arc = arcs[index] if index >= 0 else arcs[~index][::-1]
        parts.append(arc if k == 0 else arc[1:])
    return np.concatenate(parts)


def features(topology: dict[str, Any], object_name: str) -> list[Feature]:
    """The features of one GeometryCollection, each with its (multi)polygon rings decoded."""
    if topology.get("type") != "Topology":
        raise TopoJSONError("not a TopoJSON Topology")
    if object_name not in topology.get("objects", {}):
        raise TopoJSONError(f"topology has no object {object_name!r}; has {sorted(topology.get('objects', {}))}")
    arcs = decode_arcs(topology)
    out = []
    for geom in topology["objects"][object_name]["geometries"]:
        if geom["type"] == "Polygon":
            rings = [geom["arcs"]]
        elif geom["type"] == "MultiPolygon":
            rings = geom["arcs"]
        elif geom["type"] is None:
            rings = []
        else:
            raise TopoJSONError(f"unsupported geometry type {geom['type']!r} in {object_name!r}")
        polygons = [[_ring(r, arcs) for r in poly] for poly in rings]
        used = frozenset(i if i >= 0 else ~i for poly in rings for r in poly for i in r)
        gid = geom.get("id")
        out.append(Feature(None if gid is None else str(gid), dict(geom.get("properties") or {}), polygons, used))
    return out


def load_features(path: Path, object_name: str) -> list[Feature]:
    try:
        topology = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TopoJSONError(f"cannot read TopoJSON {path.name}: {exc}") from exc
    return features(topology, object_name)


def neighbours(feats: list[Feature]) -> list[set[int]]:
    """For each feature, the indices of the features it shares a boundary arc with (topology makes borders exact)."""
    users: dict[int, list[int]] = {}
    for index, feat in enumerate(feats):
        for arc in feat.arcs:
            users.setdefault(arc, []).append(index)
    out: list[set[int]] = [set() for _ in feats]
    for members in users.values():
        for a in members:
            out[a].update(m for m in members if m != a)
    return out


def ring_area(ring: Ring) -> float:
    """Unsigned planar (shoelace) area in the ring's own units."""
    x, y = ring[:, 0], ring[:, 1]
    return float(abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))) / 2.0)
