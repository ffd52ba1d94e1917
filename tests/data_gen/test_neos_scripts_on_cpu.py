"""Scripts of the world's languages as Neos answers (issue 19), from the Unicode CLDR 49 data of babel 2.19.0.

"Let D be the script of C" is closed: CLDR's likely subtags give the language one script, and a language a territory
has officially in a second script gets none. Read from the script it is open (Cyrillic writes Russian, Ukrainian and
more). Expectations counted by hand from world-countries 5.1.0's 153 language codes and babel's ``global.dat``."""

import io
import pickle
from pathlib import Path

import pytest

from data_gen.kg import KG, Edge, Structure
from data_gen.neos.open_world import CLOSED_WORLD, OPEN_WORLD, PARTIAL, pinning, unlisted
from data_gen.neos.synth import SEED_FREE_VARIANTS, SEED_KINDS, SynthConfig, Synthesizer
from data_gen.neos.verbalize import TemplateVerbalizer, relation_phrase
from data_gen.world.adapters import _cldr, scripts
from data_gen.world.adapters._cldr import GLOBAL, load_cldr
from data_gen.world.adapters._geo import load_world_countries
from data_gen.world.properties import WRITING_SYSTEM
from neos_core.world.model import Entity, Triple
from neos_core.world.sources import SourceCache
from neos_core.world.store import World


@pytest.fixture(scope="module")
def sources() -> dict[str, Path]:
    cache = SourceCache()
    return {name: cache.resolve(name).root for name in scripts.SOURCES}


@pytest.fixture(scope="module")
def out(sources):
    return scripts.contribute(sources, "small")


def _languages_of(contribution, eid: str) -> set[str]:
    return {t.s for t in contribution.triples if t.o == eid}


def test_one_script_for_each_language_cldr_writes_in_one(out):
    # 153 languages: 16 without one script, 137 facts over 19 scripts
    counts = {e.label: len(_languages_of(out, e.id)) for e in out.entities}
    assert len(out.triples) == 137 and len(counts) == 19
    assert {e.kind for e in out.entities} == {"script"}
    assert (counts["Latin"], counts["Cyrillic"], counts["Arabic"], counts["Devanagari"], counts["Ethiopic"]) == (
        103, 8, 7, 3, 2)
    assert _languages_of(out, "script:geor") == {"lang:kat"}  # ka -> ka_Geor_GE
    assert _languages_of(out, "script:cyrl") == {f"lang:{c}" for c in ("bel", "bul", "kaz", "kir", "mkd", "rus",
                                                                        "tgk", "ukr")}
    assert _languages_of(out, "script:deva") == {"lang:hif", "lang:hin", "lang:nep"}
    # Dari's alias is fa_AF, which has no likely subtags of its own: fa's (fa_Arab_IR)
    assert "lang:prs" in _languages_of(out, "script:arab")


def test_the_languages_without_one_script_and_why(sources):
    records = load_world_countries(sources["world-countries"])
    codes = [c for r in records for c in (r["languages"] or {})]
    written, none = scripts.writing_systems(codes, load_cldr(sources["babel"] / GLOBAL))
    assert len(set(codes)) == 153 and len(written) == 137
    assert {c for c, why in none.items() if why == "no likely subtags"} == {"ber", "khi", "nzs", "smi", "zib"}
    # Montenegrin is sr_ME, Serbian's; Hassaniya is official in Latin in Senegal; Chinese in Han (traditional)
    assert {c for c, why in none.items() if why.startswith("official in a second script")} == {
        "aze", "bos", "cnr", "mey", "mon", "msa", "srp", "uzb", "zho"}
    assert none["jpn"] == "a combination or variant of scripts (Jpan)" and none["kor"].endswith("(Kore)")


def test_a_territory_variant_without_official_status_leaves_the_one_script():
    # English in Shavian (en_Shaw in GB, 0 %) is no second official script; Serbian in Latin is
    cldr = {"language_aliases": {"eng": "en", "srp": "sr"},
            "likely_subtags": {"en": "en_Latn_US", "sr": "sr_Cyrl_RS"},
            "territory_languages": {"GB": {"en": {"official_status": "official"},
                                           "en_Shaw": {"official_status": None}},
                                    "RS": {"sr_Latn": {"official_status": "official"}}}}
    assert scripts.writing_systems(["eng", "srp", "xyz"], cldr) == (
        {"eng": "Latn"}, {"srp": "official in a second script (sr)", "xyz": "no likely subtags"})


def test_a_script_page_states_its_languages_under_the_world_labels(out):
    pages = {p.entity_id: p for p in out.pages}
    assert pages["script:geor"].title == "Georgian script"
    assert pages["script:geor"].text == ("The Georgian script (ISO 15924 code Geor) is a writing system. According to "
                                         "Unicode CLDR 49 (likely subtags), Georgian is written in the Georgian "
                                         "script.")
    assert "Arabic, Comorian, Dari, Pashto, Persian (Farsi), Sorani and Urdu are written" in pages["script:arab"].text
    bengali = next(e for e in out.entities if e.id == "script:beng")
    assert (bengali.label, bengali.aliases) == ("Bangla", ["Bangla script"])  # CLDR's English name


def test_the_unpickler_builds_babel_stand_ins_and_nothing_else():
    class_ref = pickle.dumps(Path("x"))  # pathlib's class: refused
    with pytest.raises(pickle.UnpicklingError, match="not a babel class"):
        _cldr._CldrUnpickler(io.BytesIO(class_ref)).load()


def test_read_from_the_language_closed_and_partial_from_the_script_open():
    assert (WRITING_SYSTEM, True) in CLOSED_WORLD and (WRITING_SYSTEM, True) in PARTIAL
    assert (WRITING_SYSTEM, False) in OPEN_WORLD
    assert "script" in SEED_KINDS
    assert relation_phrase(Edge("lang:C", "script:D", WRITING_SYSTEM, True), "writing system", "C") == \
        "that is the script of C"
    assert relation_phrase(Edge("script:D", "lang:E", WRITING_SYSTEM, False), "writing system", "D") == \
        "that is written in D"


def _kg() -> KG:
    """Georgia's Georgian in the Georgian script; Russia's Russian and Belarus's Belarusian in Cyrillic;
    Serbia's Serbian in none."""
    return KG.from_triples([("country:GEO", "P37", "lang:kat"), ("lang:kat", WRITING_SYSTEM, "script:geor"),
                            ("country:RUS", "P37", "lang:rus"), ("lang:rus", WRITING_SYSTEM, "script:cyrl"),
                            ("country:BLR", "P37", "lang:bel"), ("lang:bel", WRITING_SYSTEM, "script:cyrl"),
                            ("country:SRB", "P37", "lang:srp")])


def test_a_script_step_from_languages_one_of_which_has_none_is_open():
    assert unlisted(_kg(), {"lang:rus", "lang:bel"}, WRITING_SYSTEM, True) is None
    assert unlisted(_kg(), {"lang:rus", "lang:srp"}, WRITING_SYSTEM, True) == (
        "lang:srp may be meant and has no P282 in the world: " + PARTIAL[(WRITING_SYSTEM, True)])


def test_the_language_written_in_a_script_is_open(tmp_path):
    labels = {"country:UKR": "country", "country:RUS": "country", "lang:rus": "language", "script:cyrl": "script",
              "lang:bel": "language"}
    world = World(tmp_path, {}, {e: Entity(e, e, k) for e, k in labels.items()}, {}, {},
                  [Triple("country:RUS", "P37", "lang:rus")], {}, {}, {})
    structure = Structure(branches=((Edge("country:UKR", "country:RUS", "P47", True),
                                     Edge("country:RUS", "lang:rus", "P37", True),
                                     Edge("lang:rus", "script:cyrl", WRITING_SYSTEM, True),
                                     Edge("script:cyrl", "lang:bel", WRITING_SYSTEM, False)),), tail=(),
                          checkpoints=("country:RUS",))
    assert pinning(structure, labels, _kg(), world) == (
        "lang:bel (language): " + OPEN_WORLD[(WRITING_SYSTEM, False)] + ", and nothing stated pins it")


def test_the_script_of_a_language_reads_as_one_sentence():
    structure = Structure(branches=((Edge("country:ARM", "country:GEO", "P47", True),
                                     Edge("country:GEO", "lang:kat", "P37", True),
                                     Edge("lang:kat", "script:geor", WRITING_SYSTEM, True)),), tail=(),
                          checkpoints=("country:GEO",))
    kinds = {"country:ARM": "country", "country:GEO": "country", "lang:kat": "language", "script:geor": "script"}
    v = TemplateVerbalizer().verbalize(structure, kinds, {"P47": "", "P37": "", WRITING_SYSTEM: ""},
                                       ["national flag"], {}, ())
    assert v.question == ("The image shows the national flag of a country. The script of the official language of "
                          "the country that shares a border with that country: which script is it?")
    assert unlisted(_kg(), {"lang:kat"}, WRITING_SYSTEM, True) is None


def test_scripts_of_the_small_world_pass_synthesis(small_world):
    """Every script seed through synthesis (the CLI's variants): some pass grounding and both evidence rules, each
    reads "the script of the official language of ...", a pictured country's; Latin, whose languages are
    many, passes none."""
    synth = Synthesizer(World.load(small_world), seed=0, config=SynthConfig(seed_free_variants=SEED_FREE_VARIANTS))
    seeds = [s for s in synth.seeds() if synth.world.entities[s].kind == "script"]
    assert len(seeds) == 19
    tasks = [c.task for seed in seeds for c in synth.synthesize(seed).candidates if c.task is not None]
    assert {t.answer_type for t in tasks} == {"script"}
    answers = {t.answer for t in tasks}
    assert len(answers) >= 5 and "Latin" not in answers
    for task in tasks:
        assert task.steps[-2].span in ("official language of a country", "official language of the country")
        assert task.steps[-1].span in ("script of the official language", "script of an official language")
