"""The KG's relation vocabulary: Wikidata property ids with their Wikidata English labels, plus the few own ``x:``
relations for facts Wikidata has no property for. One table, so that two adapters using P31 or P361 declare the
identical Relation (the builder rejects two different labels for one relation id)."""

from __future__ import annotations

from neos_core.world.model import Relation

_LABELS: dict[str, str] = {
    "P17": "country",
    "P27": "country of citizenship",
    "P30": "continent",
    "P31": "instance of",
    "P36": "capital",
    "P37": "official language",
    "P38": "currency",
    "P47": "shares border with",
    "P61": "discoverer or inventor",
    "P78": "top-level Internet domain",
    "P106": "occupation",
    "P131": "located in the administrative territorial entity",
    "P138": "named after",
    "P154": "logo image",
    "P189": "location of discovery",
    "P220": "ISO 639-3 code",
    "P279": "subclass of",
    "P282": "writing system",
    "P297": "ISO 3166-1 alpha-2 code",
    "P298": "ISO 3166-1 alpha-3 code",
    "P299": "ISO 3166-1 numeric code",
    "P300": "ISO 3166-2 code",
    "P361": "part of",
    "P421": "located in time zone",
    "P463": "member of",
    "P465": "sRGB color hex triplet",
    "P474": "country calling code",
    "P498": "ISO 4217 code",
    "P610": "highest point",
    "P527": "has part(s)",
    "P625": "coordinate location",
    "P856": "official website",
    "P1082": "population",
    "P1376": "capital of",
    "P1448": "official name",
    "P1549": "demonym",
    "P1589": "lowest point",
    "P2124": "member count",
    "P238": "IATA airport code",
    "P239": "ICAO airport code",
    "P931": "place served by transport hub",
    "P2046": "area",
    "P5061": "unit symbol",
    "x:animal_found_in": "animal found in",
    "x:artifact_associated_with": "artifact associated with",
    "x:desert_in": "desert in",
    "x:division_count": "number of divisions",
    "x:food_associated_with": "food associated with",
    "x:former_currency": "former currency",
    "x:island_in": "island in",
    "x:lake_in": "lake in",
    "x:landmark_in": "landmark in",
    "x:landlocked": "landlocked",
    "x:main_religion": "main religion",
    "x:mountain_in": "mountain in",
    "x:mountain_range_in": "mountain range in",
    "x:national_dish": "national dish",
    "x:plant_found_in": "plant found in",
    "x:river_in": "river in",
    "x:time_zone": "time zone",
    "x:volcano_in": "volcano in",
    "x:waterfall_in": "waterfall in",
    "x:vital_topic": "Wikipedia vital article topic",
}


# The country a natural feature lies in, one relation per kind of feature (data_gen.world.adapters.country_facts):
# a question says "the river that flows through B", and a river shares no fact with the mountains and the capital
# city that also lie in B, so "the river" is one answer where B has one river. (Wikidata's P17 would match them all.)
FEATURE_RELATIONS: dict[str, str] = {kind: f"x:{kind.replace(' ', '_')}_in" for kind in (
    "river", "mountain", "volcano", "lake", "island", "desert", "waterfall", "mountain range")}


# The country a food or an artifact is associated with (WordNet's region domain, data_gen.world.adapters.country_facts):
# one relation per kind for the reason above; "the food associated with B" is one answer where B has one food.
CULTURE_RELATIONS: dict[str, str] = {kind: f"x:{kind}_associated_with" for kind in ("food", "artifact")}

# The country an animal or a plant is found in (its WordNet gloss; data_gen.world.adapters.wildlife), likewise.
WILDLIFE_RELATIONS: dict[str, str] = {kind: f"x:{kind}_found_in" for kind in ("animal", "plant")}


# The country or capital city a landmark is part of (data_gen.world.adapters.landmarks).
LANDMARK_RELATION = "x:landmark_in"

# A country's one national dish (country-json; data_gen.world.adapters.national_dishes): Wikidata has no such property.
NATIONAL_DISH = "x:national_dish"

# A country's main religion, its largest group (country-json; data_gen.world.adapters.religions).
MAIN_RELIGION = "x:main_religion"

# A language's script, the one CLDR's likely subtags give it (data_gen.world.adapters.scripts): Wikidata's writing
# system.
WRITING_SYSTEM = "P282"

# A capital's time zone, CLDR's metazone of its GeoNames zone (data_gen.world.adapters.time_zones); P421 is the IANA
# zone, a literal of every city.
TIME_ZONE = "x:time_zone"

# The currency a country's current one replaced, dated by CLDR (data_gen.world.adapters.former_currencies).
FORMER_CURRENCY = "x:former_currency"

# The city an airport serves (airportsdata, checked against country-json; data_gen.world.adapters.airports).
AIRPORT_CITY = "P931"

# A country's highest point, a named summit, and its lowest point, a named place below the coast's sea level or
# inland (CIA World Factbook; data_gen.world.adapters.elevations).
HIGHEST_POINT = "P610"
LOWEST_POINT = "P1589"

# How many divisions a country's one KGeography map gives it (data_gen.world.adapters.kgeography), all of which the
# world holds: "the state of Germany whose flag is ..." has the answers a reader finds, as P2124 does for members.
DIVISION_COUNT = "x:division_count"


def relation(pid: str) -> Relation:
    """The Relation record of a property id from the table above."""
    try:
        label = _LABELS[pid]
    except KeyError:
        raise KeyError(f"relation {pid!r} is not in data_gen.world.properties; add it with its Wikidata "
                       "label") from None
    return Relation(id=pid, label=label, wikidata=not pid.startswith("x:"))


def relations(pids: set[str] | list[str]) -> list[Relation]:
    return [relation(pid) for pid in sorted(set(pids))]
