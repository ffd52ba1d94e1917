"""What the ModalSearch mix looks like as a whole: questions a person can read (no repeated words, one name clue,
shallow nesting, bounded length) and path depths drawn towards the paper's hop distribution."""

import random
from collections import Counter

import pytest

from data_gen.modalsearch.questions import grammar_problem, supports
from data_gen.modalsearch.sampler import HOP_SHARES, depth_towards


@pytest.mark.parametrize("question, problem", [
    ("Which currency is used in the country that lies on the continent the continent on which X lies?",
     "repeats 'the continent'"),
    ("What is the capital of the country that shares a border with the country depicted in this image, and whose "
     "name begins with “L”, and whose name begins with “N”?", "2 name clues"),
    ("Which is the city that is in the country that borders the country that uses the currency that is used in the "
     "country depicted in this image?", "5 relative clauses (at most 4)"),
    (" ".join(f"w{i}" for i in range(51)) + "?", "51 words (at most 50)"),
])
def test_an_unreadable_question_is_named_for_why(question, problem):
    assert grammar_problem(question) == problem


def test_a_readable_question_passes_and_a_quoted_sentence_is_not_judged():
    assert grammar_problem("What is the capital of the country that shares a border with the country depicted in "
                           "this image, and whose name begins with “L”?") is None
    assert grammar_problem("Which country uses the currency described as “The the ___ is a currency.” as its "
                           "currency?") is None


def test_the_paper_hop_shares_are_table_8():
    assert HOP_SHARES == {1: 0.3045, 2: 0.3467, 3: 0.2736, 4: 0.0752}
    assert abs(sum(HOP_SHARES.values()) - 1) < 1e-9


def test_depths_are_drawn_towards_the_shares_the_verified_mix_lacks():
    rng = random.Random(0)
    # 30 one-hop questions verified and nothing else: one hop weighs a tenth of its share, the others their deficit
    draws = Counter(depth_towards(HOP_SHARES, Counter({1: 30}), rng) for _ in range(2000))
    assert draws[1] / 2000 < 0.01 and draws[2] > draws[3] > draws[4] > 0
    # nothing verified yet: the weights are the shares themselves
    draws = Counter(depth_towards(HOP_SHARES, Counter(), rng) for _ in range(4000))
    for k, share in HOP_SHARES.items():
        assert abs(draws[k] / 4000 - share) < 0.03


@pytest.mark.parametrize("sentence, relation, label, ok", [
    ("Its capital is Minsk.", "P36", "capital", True),
    ("Minsk is one of the administrative capitals of the CIS.", "P36", "capital", False),  # not of the country
    ("Minsk hosted the 2019 European Games.", "P36", "capital", False),  # names the value, states no relation
    ("It lies in Europe.", "P30", "continent", True),
    ("Europe hosted the games.", "P30", "continent", False),
    ("Official languages: Belarusian and Russian.", "P37", "official language", True),
    ("It is used in Poland.", "P38", "currency", True),  # a currency's page names its countries so
    ("It was first minted in Poland.", "P38", "currency", False),
])
def test_evidence_states_the_relation_not_just_the_value(sentence, relation, label, ok):
    value = {"P36": "Minsk", "P30": "Europe", "P37": "Belarusian", "P38": "Poland"}[relation]
    assert supports(sentence, [value], relation, label) is ok
