"""Issue 19: no Neos task answered a country. A country's greedy distinguishing set takes one fact twice (two
borders) or three facts, which no reasoning structure states (a path states one fact into its answer, a convergent
structure two of distinct relations), and the one neighbour that singles it out (San Marino for Italy) was itself
never identified, so no chain led back from it to an entry image. Now the seed also gets a DAG per distinguishing set
a structure can state (``convergent_sets``), and a pictured node keeps its best attempt (its image finishes it as a
checkpoint). On the small world, country seeds yield tasks that pass every evidence rule."""

from dataclasses import replace

import pytest

from data_gen.kg import Structure
from data_gen.neos.observer import IMAGE_KINDS, Description
from data_gen.neos.synth import CONVERGENT_VARIANTS, SEED_FREE_VARIANTS, SynthConfig, Synthesizer
from neos_core.world.store import World

# the CLI's, but for the closed-book probe: every country answer below goes through common facts alone
CONFIG = SynthConfig(seed_free_variants=SEED_FREE_VARIANTS, convergent_variants=CONVERGENT_VARIANTS, closed_book=False)


@pytest.fixture(scope="module")
def synth(small_world) -> Synthesizer:
    return Synthesizer(World.load(small_world), seed=0, config=CONFIG)


@pytest.mark.parametrize("country, checkpoint, kind", [
    ("country:ITA", "country:SMR", "path"),  # "a country whose official language is that of A; its flag is ..."
    ("country:IDN", "country:TLS", "path"),  # Timor-Leste, in A's region, borders only Indonesia
    # the country of A's region bordering a neighbour of B (Czechia until its "Central Europe" was contested by
    # UN M49's Eastern Europe: data_gen.world.corroborate)
    ("country:DEU", "country:LUX", "convergent"),
])
def test_a_country_seed_yields_tasks_that_need_their_images(synth, country, checkpoint, kind):
    tasks = [c.task for c in synth.synthesize(country).candidates if c.task is not None]
    assert any(checkpoint in t.structure["checkpoints"] and t.structure_type == kind for t in tasks), tasks
    for task in tasks:
        assert task.answer_entity == country and task.answer_type == "country"
        # the answer's own flag or map never starts the search: every entry image is another country's
        assert country not in {e.entity_id for e in task.entry_images}
        assert any(step.checkpoint for step in task.steps)
        # a strong model solves it without a tool (recognised images, borders, regions, languages): the CLI's
        # closed-book probe rejects it
        bound = {s.target: Description(IMAGE_KINDS[synth.world.images[s.checkpoint_image_id].source],
                                       tuple(s.checkpoint_colours)) for s in task.steps if s.checkpoint}
        structure = Structure.from_dict(task.structure)
        assert synth.closed_book.solves(structure, {a: synth.entry_image(a)[2] for a in structure.anchors}, bound)


def test_germany_needs_a_seed_set_of_distinct_relations(synth):
    # greedy: Denmark (bordering Germany alone; its flag is not told apart in Northern Europe); the pair Western
    # Europe and a border with Czechia comes only from the convergent sets
    alone = Synthesizer(synth.world, seed=0, config=replace(CONFIG, convergent_variants=()))
    assert not [c for c in alone.synthesize("country:DEU").candidates if c.task is not None]
