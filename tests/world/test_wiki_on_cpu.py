from data_gen.world.wiki import Article, enrich, is_common_noun, match_articles
from neos_core.world.model import Entity, Page


def ent(eid, label, kind, description="", aliases=(), page=True):
    return Entity(eid, label, kind, description, list(aliases), label.replace(" ", "_") if page else None)


ENTITIES = [
    ent("country:GEO", "Georgia", "country", "sovereign state in Western Asia"),
    ent("us_state:georgia", "Georgia", "us_state", "state of the United States"),
    ent("country:GBR", "United Kingdom", "country", "sovereign state", aliases=["Great Britain", "UK"]),
    ent("country:GMB", "Gambia", "country", "sovereign state in Western Africa"),
    ent("city:2988507", "Paris", "city", "capital of France"),
    ent("city:4717560", "Paris", "city", "city in United States"),
    ent("country:LUX", "Luxembourg", "country", "sovereign state in Western Europe"),
    ent("city:2960316", "Luxembourg", "city", "capital of Luxembourg"),
    ent("x:city", "city", "class", page=False),
]


def art(title, extract="", description=""):
    return Article(title, extract or f"{title} is a thing.", description, "Geography")


def test_matching_rules():
    articles = [
        art("Georgia (country)", description="Country in the Caucasus"),
        art("Georgia (U.S. state)"),
        art("Great Britain", description="Island in the North Atlantic"),
        art("United Kingdom"),
        art("The Gambia"),
        art("Paris", "Paris is the capital and largest city of France.", "Capital of France"),
        art("Luxembourg"),
        art("City"),
    ]
    assert match_articles(articles, ENTITIES) == {
        "Georgia (country)": "country:GEO",
        "Georgia (U.S. state)": "us_state:georgia",
        "United Kingdom": "country:GBR",  # by label, before "Great Britain" could take it as an alias
        "The Gambia": "country:GMB",
        "Paris": "city:2988507",  # "capital", "france" overlap its description
        "Luxembourg": "country:LUX",  # a tie: the entity given first
    }


def test_bare_ambiguous_title_without_context_goes_to_the_first_entity_and_classes_never_match():
    assert match_articles([art("Georgia")], ENTITIES) == {"Georgia": "country:GEO"}
    assert match_articles([art("City")], ENTITIES) == {}


def test_enrich_prefixes_matched_pages_and_keeps_the_rest_as_articles():
    pages = [Page("Georgia", "", "Georgia", "Facts.", "t", entity_id="country:GEO")]
    arts = [art("Cell (biology)"), art("Cell biology"), art("Georgia", "Georgia is a country."), art("Tbilisi", "Tbilisi is a city.")]
    out = enrich(pages, ENTITIES[:1], sorted(arts, key=lambda a: a.title), "full")
    assert pages[0].text == "Georgia is a country.\n\nFacts."
    assert [e.id for e in out.entities] == ["article:Cell_(biology)", "article:Cell_biology", "article:Tbilisi"]
    assert out.pages[2].text == "Tbilisi is a city." and out.pages[2].entity_id == "article:Tbilisi"
    assert out.entities[0].aliases == ["Cell"]


def test_small_keeps_the_articles_the_world_mentions():
    pages = [Page("Georgia", "", "Georgia", "Its capital is Tbilisi.", "t", entity_id="country:GEO")]
    arts = [art("Tbilisi"), art("Zebra", "The zebra is an animal.")]
    assert [e.label for e in enrich(pages, ENTITIES[:1], arts, "small").entities] == ["Tbilisi"]


def test_common_noun_detection_from_the_first_sentence():
    assert is_common_noun("Cat", "The cat (Felis catus) is a small carnivorous mammal.")
    assert not is_common_noun("Paris", "Paris is the capital of France.")
