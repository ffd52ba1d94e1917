"""Infobox flags: a subdivision's page shows its country's national flag, a subdivision capital's page its
subdivision's flag; a subject with none or several objects of a row, or an object without a flag, gets none."""

from data_gen.world.infobox_flags import show_infobox_flags
from neos_core.world.model import Entity, Image, Page, Triple


def _image(image_id: str, source: str, entity: str, page: str) -> Image:
    return Image(image_id, "", "", f"Flag of {entity}", f"flag of {entity}", source, 4, 3, page, entity)


def test_states_show_their_countrys_flag_and_capitals_their_states():
    titles = ("Germany", "Bavaria", "Munich", "Catalonia", "Baix_Camp", "Border_land", "Atlantis", "Bremen", "Lonely")
    pages = {t: Page(t, "", t, f"{t}.", "test", entity_id=f"e:{t}") for t in titles}
    pages["Bavaria"].image_ids.append("subflag_bavaria")
    kinds = {"Germany": "country", "Bavaria": "subdivision", "Munich": "city", "Catalonia": "subdivision",
             "Baix_Camp": "subdivision", "Border_land": "subdivision", "Atlantis": "country", "Bremen": "city",
             "Lonely": "subdivision"}
    entities = {f"e:{t}": Entity(f"e:{t}", t, k, page_id=t) for t, k in kinds.items()}
    images = [_image("flag_deu", "flag-icons", "e:Germany", "Germany"),
              _image("subflag_bavaria", "kgeography-data", "e:Bavaria", "Bavaria"),
              _image("map_deu", "world-atlas", "e:Germany", "Germany")]  # a map is no flag
    triples = [Triple("e:Bavaria", "P131", "e:Germany"),
               Triple("e:Munich", "P1376", "e:Bavaria"),
               Triple("e:Baix_Camp", "P131", "e:Catalonia"),  # in a subdivision, not a country: no row
               Triple("e:Border_land", "P131", "e:Germany"),
               Triple("e:Border_land", "P131", "e:Atlantis"),  # two countries: neither flag
               Triple("e:Bremen", "P1376", "e:Catalonia"),  # Catalonia has no flag here
               Triple("e:Lonely", "P131", "e:Germany", literal=True)]  # a literal names no entity

    assert show_infobox_flags(pages, entities, images, triples) == 2

    assert pages["Bavaria"].image_ids == ["subflag_bavaria", "flag_deu"]  # after its own flag
    assert pages["Munich"].image_ids == ["subflag_bavaria"]
    for title in ("Germany", "Catalonia", "Baix_Camp", "Border_land", "Atlantis", "Bremen", "Lonely"):
        assert pages[title].image_ids == [], title
    assert show_infobox_flags(pages, entities, images, triples) == 0  # once only
    assert pages["Bavaria"].image_ids == ["subflag_bavaria", "flag_deu"]
