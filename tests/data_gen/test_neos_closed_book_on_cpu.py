"""The closed-book probe (issue 36): a strong VLM recognises countries' flags and maps and knows their capitals,
currencies, languages, regions, demonyms and neighbours; a task it solves without a tool is rejected, one with a
step it cannot take (a capital's time zone, an unrecognised image) is kept. Hand-made KG, answers worked out by
hand."""

from data_gen.kg import KG, Edge, Structure
from data_gen.neos.closed_book import ClosedBookSolver
from data_gen.neos.observer import Description

# A borders B and C; B's flag is blue and white, C's green; B's capital is b, which keeps time zone t.
KG_TOY = KG.from_triples([("country:A", "P47", "country:B"), ("country:A", "P47", "country:C"),
                          ("country:B", "P36", "city:b"), ("country:C", "P36", "city:c"),
                          ("city:b", "x:time_zone", "tz:t"), ("city:c", "x:time_zone", "tz:t")])
KINDS = {"country:A": "country", "country:B": "country", "country:C": "country", "city:b": "city",
         "city:c": "city", "tz:t": "time_zone", "subdivision:S": "subdivision"}
FLAGS = {"country:B": ("blue", "white"), "country:C": ("green",)}
BLUE_WHITE = Description("national flag", ("white", "blue"))
SOLVER = ClosedBookSolver(KG_TOY, KINDS, lambda e, d: e in FLAGS and Description(d.kind, FLAGS[e]).matches(d))
CAPITAL = Structure(branches=((Edge("country:A", "country:B", "P47", True),
                               Edge("country:B", "city:b", "P36", True)),), tail=(), checkpoints=("country:B",))


def test_a_chain_of_common_facts_from_a_recognised_flag_is_solved():
    assert SOLVER.solves(CAPITAL, {"country:A": "flag-icons"}, {"country:B": BLUE_WHITE})
    assert SOLVER.solves(CAPITAL, {"country:A": "world-atlas-unlabelled"}, {"country:B": BLUE_WHITE})


def test_a_description_that_leaves_two_countries_is_not_solved():
    # "a country bordering A whose flag is mostly green or blue-white": the colours fit neither alone
    both = Description("national flag", ("red",))
    assert not SOLVER.solves(CAPITAL, {"country:A": "flag-icons"}, {"country:B": both})


def test_a_step_beyond_common_knowledge_needs_a_tool():
    zone = Structure(branches=((Edge("country:A", "country:B", "P47", True), Edge("country:B", "city:b", "P36", True),
                                Edge("city:b", "tz:t", "x:time_zone", True)),), tail=(), checkpoints=("country:B",))
    assert not SOLVER.solves(zone, {"country:A": "flag-icons"}, {"country:B": BLUE_WHITE})


def test_an_image_it_does_not_recognise_needs_a_tool():
    assert not SOLVER.solves(CAPITAL, {"country:A": "kgeography-data"}, {"country:B": BLUE_WHITE})
    from_subdivision = Structure(branches=((Edge("subdivision:S", "country:B", "P131", True),
                                            Edge("country:B", "city:b", "P36", True)),), tail=(),
                                 checkpoints=("country:B",))
    assert not SOLVER.solves(from_subdivision, {"subdivision:S": "kgeography-data"}, {"country:B": BLUE_WHITE})



def _former_currency(country: str, currency: str) -> Structure:
    """"the former currency of a country, whose flag is ..., that borders A"."""
    return Structure(branches=((Edge("country:A", country, "P47", True),
                                Edge(country, currency, "x:former_currency", True)),), tail=(), checkpoints=(country,))


def test_a_former_currency_is_common_only_for_a_euro_country():
    # A borders B (blue-white flag, euro; before it the mark) and C (green flag, its own cedi; before it the old
    # cedi). "the former currency of the blue-white neighbour of A" is textbook (the euro changeover); the green
    # neighbour's is not, nor is a step from a set that holds a country without the euro.
    kg = KG.from_triples([("country:A", "P47", "country:B"), ("country:A", "P47", "country:C"),
                          ("country:B", "P38", "currency:EUR"), ("country:C", "P38", "currency:GHS"),
                          ("country:B", "x:former_currency", "currency:DEM"),
                          ("country:C", "x:former_currency", "currency:GHC")])
    solver = ClosedBookSolver(kg, KINDS, lambda e, d: e in FLAGS and Description(d.kind, FLAGS[e]).matches(d))
    flag = {"country:A": "flag-icons"}
    assert solver.solves(_former_currency("country:B", "currency:DEM"), flag, {"country:B": BLUE_WHITE})
    green = Description("national flag", ("green",))
    assert not solver.solves(_former_currency("country:C", "currency:GHC"), flag, {"country:C": green})
    # were C's flag blue and white too, both neighbours would stay, one without the euro: no step for the model
    alike = ClosedBookSolver(kg, KINDS, lambda e, d: e in ("country:B", "country:C") and BLUE_WHITE.matches(d))
    assert not alike.solves(_former_currency("country:B", "currency:DEM"), flag, {"country:B": BLUE_WHITE})
