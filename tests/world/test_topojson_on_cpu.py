import numpy as np
import pytest

from data_gen.world.adapters.us_states import SOURCES
from data_gen.world.topojson import TopoJSONError, features, load_features, neighbours, ring_area
from neos_core.world.sources import SourceCache

# Two unit squares side by side, quantized (scale 0.5, translate 10/20) and delta-encoded, sharing arc 0 (x = 1).
TOPO = {
    "type": "Topology",
    "transform": {"scale": [0.5, 0.5], "translate": [10.0, 20.0]},
    "objects": {
        "cells": {
            "type": "GeometryCollection",
            "geometries": [
                {"type": "Polygon", "id": "A", "properties": {"name": "left"}, "arcs": [[0, 1]]},
                {"type": "Polygon", "id": "B", "properties": {"name": "right"}, "arcs": [[~0, 2]]},
            ],
        }
    },
    "arcs": [
        [[2, 0], [0, 2]],  # (11, 20) -> (11, 21)
        [[2, 2], [-2, 0], [0, -2], [2, 0]],  # (11, 21) -> (10, 21) -> (10, 20) -> (11, 20)
        [[2, 0], [2, 0], [0, 2], [-2, 0]],  # (11, 20) -> (12, 20) -> (12, 21) -> (11, 21)
    ],
}


def test_decoding_by_hand():
    left, right = features(TOPO, "cells")
    assert left.id == "A" and left.properties == {"name": "left"}
    np.testing.assert_allclose(left.polygons[0][0], [[11, 20], [11, 21], [10, 21], [10, 20], [11, 20]])
    # ~0 walks arc 0 backwards, then arc 2 follows without repeating the joint
    np.testing.assert_allclose(right.polygons[0][0], [[11, 21], [11, 20], [12, 20], [12, 21], [11, 21]])
    assert ring_area(left.polygons[0][0]) == pytest.approx(1.0)
    assert neighbours([left, right]) == [{1}, {0}]


def test_bad_input_is_named():
    with pytest.raises(TopoJSONError, match="no object 'states'"):
        features(TOPO, "states")
    with pytest.raises(TopoJSONError, match="not a TopoJSON"):
        features({"type": "FeatureCollection"}, "cells")


@pytest.fixture(scope="module")
def states():
    root = SourceCache().resolve(SOURCES[0]).root
    feats = load_features(root / "package" / "states-10m.json", "states")
    return {f.properties["name"]: f for f in feats}, feats


def _bbox(feature):
    pts = np.concatenate([ring for poly in feature.polygons for ring in poly])
    return pts[:, 0].min(), pts[:, 1].min(), pts[:, 0].max(), pts[:, 1].max()


def test_real_coordinates_match_known_state_lines(states):
    by_name, _ = states
    # Colorado: 37°N–41°N, 102°03'W–109°03'W; Wyoming: 41°N–45°N, 104°03'W–111°03'W
    np.testing.assert_allclose(_bbox(by_name["Colorado"]), (-109.06, 36.99, -102.04, 41.00), atol=0.03)
    np.testing.assert_allclose(_bbox(by_name["Wyoming"]), (-111.06, 40.99, -104.05, 45.01), atol=0.03)


def test_real_topology_borders(states):
    by_name, feats = states
    index = {f.properties["name"]: i for i, f in enumerate(feats)}
    near = {feats[j].properties["name"] for j in neighbours(feats)[index["Colorado"]]}
    assert {"Kansas", "Nebraska", "New Mexico", "Oklahoma", "Utah", "Wyoming"} <= near
    assert "California" not in near and "Texas" not in near
    assert neighbours(feats)[index["Hawaii"]] == set()
