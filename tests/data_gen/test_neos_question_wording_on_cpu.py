"""How Neos questions read (issue 19): no "the class that is the class of which A is an instance", no "the
occupation that is the occupation of C" or "the language that is an official language of B", "who" for a person,
"an" before a vowel; and on the small world, no sentence of a question says the same three words twice."""

import re

import pytest

from data_gen.kg import Edge, Structure
from data_gen.neos.observer import Description
from data_gen.neos.synth import SEED_FREE_VARIANTS, SynthConfig, Synthesizer
from data_gen.neos.verbalize import TemplateVerbalizer, relation_phrase
from data_gen.world.store import World

FLAG = Description("national flag", ("blue", "white"))


def test_a_person_reads_who_and_an_occupation_reads_the_occupation_of():
    structure = Structure(branches=((Edge("country:a", "country:b", "P47", True),
                                     Edge("country:b", "person:p", "P27", False),
                                     Edge("person:p", "occupation:o", "P106", True)),),
                          tail=(), checkpoints=("country:b",))
    kinds = {"country:a": "country", "country:b": "country", "person:p": "person", "occupation:o": "occupation"}
    v = TemplateVerbalizer().verbalize(structure, kinds, {"P47": "", "P27": "", "P106": ""}, ["national flag"],
                                       {"country:b": FLAG}, ambiguous={"country:b"})
    assert v.question == (
        "Let A be the country whose national flag is shown in the image. Let B be a country that shares a border "
        "with A; its national flag is mostly blue and white (by decreasing area). Let C be the person who is a "
        "citizen of B. Let D be the occupation of C. Which occupation is D?")
    assert v.spans == ("shares a border with A", "is a citizen of B", "occupation of C")


def test_instance_and_subclass_read_as_relative_clauses_and_an_goes_before_a_vowel():
    structure = Structure(branches=((Edge("synset:a", "class:b", "P31", True),
                                     Edge("class:b", "organization:c", "P463", False),
                                     Edge("organization:c", "class:d", "P279", True)),),
                          tail=(), checkpoints=("class:b",))
    kinds = {"synset:a": "synset", "class:b": "class", "organization:c": "organization", "class:d": "class"}
    v = TemplateVerbalizer().verbalize(structure, kinds, {"P31": "", "P463": "", "P279": ""}, ["picture"],
                                       {}, ambiguous={"organization:c"})
    assert v.question == (
        "Let A be the kind of thing whose picture is shown in the image. Let B be the class that A is an instance "
        "of. Let C be an organization that is a member of B. Let D be the class that C is a subclass of. Which "
        "class is D?")


@pytest.mark.parametrize("ambiguous, sentence", [
    ((), "Let C be the official language of B."), (("lang:c",), "Let C be an official language of B.")])
def test_a_relation_that_names_the_kind_says_it_once(ambiguous, sentence):
    structure = Structure(branches=((Edge("country:a", "country:b", "P47", True),
                                     Edge("country:b", "lang:c", "P37", True)),), tail=(), checkpoints=("country:b",))
    kinds = {"country:a": "country", "country:b": "country", "lang:c": "language"}
    v = TemplateVerbalizer().verbalize(structure, kinds, {"P47": "", "P37": ""}, ["national flag"],
                                       {"country:b": FLAG}, ambiguous=set(ambiguous))
    assert sentence in v.question and v.spans[1] == "official language of B"


@pytest.mark.parametrize("edge, expected", [
    (Edge("country:B", "org:O", "P463", True), "has B as a member"),
    (Edge("org:O", "country:B", "P463", False), "is a member of B"),
    (Edge("country:B", "nationality:N", "P1549", True), "names the natives of B"),
    (Edge("nationality:N", "country:B", "P1549", False), "is the homeland of B"),
    (Edge("country:B", "river:W", "x:river_in", False), "flows through B"),
    (Edge("river:W", "country:B", "x:river_in", True), "B flows through"),
    (Edge("country:B", "lake:L", "x:lake_in", False), "lies in B"),
    (Edge("mountain:M", "country:B", "x:mountain_in", True), "contains B"),
    (Edge("country:B", "person:P", "P27", False), "is a citizen of B"),
    (Edge("person:P", "country:B", "P27", True), "B is a citizen of"),
    (Edge("occupation:O", "person:P", "P106", False), "has B as an occupation"),
    (Edge("country:B", "animal:A", "x:animal_found_in", False), "is found in B"),
    (Edge("plant:A", "country:B", "x:plant_found_in", True), "B is found in"),
    (Edge("country:B", "food:F", "x:food_associated_with", False), "is associated with B"),
    (Edge("country:B", "artifact:F", "x:artifact_associated_with", False), "is associated with B"),
    (Edge("city:B", "landmark:L", "x:landmark_in", False), "lies in B"),
    (Edge("landmark:L", "city:B", "x:landmark_in", True), "contains B"),
])
def test_the_new_relations_read_as_english(edge, expected):
    assert relation_phrase(edge, "unused label", "B") == expected


_SENTENCE = re.compile(r"Let [A-Z] be .*?(?=\. (?:Let|Which) |\?)")
_SAME_NOUN_TWICE = re.compile(r"\bthe (\w+(?: \w+)?) (?:that|who) is the \1\b")


def _repeated_trigram(sentence: str) -> str | None:
    words = re.findall(r"[a-z]+", sentence.lower())
    seen = set()
    for trigram in zip(words, words[1:], words[2:]):
        if trigram in seen:
            return " ".join(trigram)
        seen.add(trigram)
    return None


def test_no_question_of_the_small_world_repeats_itself(small_world):
    synth = Synthesizer(World.load(small_world), seed=0, config=SynthConfig(seed_free_variants=SEED_FREE_VARIANTS))
    questions = [c.task.question for seed in synth.seeds()[:120] for c in synth.synthesize(seed).candidates
                 if c.task is not None]
    assert len(questions) >= 20
    for question in questions:
        for sentence in _SENTENCE.findall(question):
            assert _repeated_trigram(sentence) is None, sentence
            assert not _SAME_NOUN_TWICE.search(sentence), sentence
            assert not re.search(r"\ba [aeiou]", sentence), sentence
