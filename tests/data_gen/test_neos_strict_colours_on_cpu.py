"""Colour words a person would agree with (issue 36): questions state a checkpoint's colours as the grounding check
reads them (near shades merged, no area order), so a reader who takes the words literally learns nothing more; the
strict-reading ablation finds the old wording's leaks ("mostly dark blue and yellow (by decreasing area)") and none
in the new (the ablation on a hand-made world: test_neos_evidence_rules_on_cpu.py)."""

from data_gen.neos.observer import Description
from data_gen.neos.strict_colours import StrictDescription, strict_reading

def test_the_stated_colours_are_merged_and_unordered():
    d = Description("national flag", ("dark blue", "yellow"))
    assert d.render() == "its national flag is mostly blue and yellow"
    assert Description("locator map", ("white", "light blue", "red")).clause() == \
        "locator map is mostly blue, red and white"


def test_the_literal_reading_takes_shades_and_order_at_their_word():
    old = strict_reading("its national flag is mostly dark blue and yellow (by decreasing area)")
    assert old == StrictDescription("national flag", ("dark blue", "yellow"), (), ordered=True)
    assert old.matches(Description("national flag", ("dark blue", "yellow")))
    assert not old.matches(Description("national flag", ("yellow", "dark blue")))  # the order stated
    assert not old.matches(Description("national flag", ("blue", "yellow")))  # the shade stated
    new = strict_reading("a country whose national flag is mostly blue and yellow, and that ...")
    assert new == StrictDescription("national flag", ("blue", "yellow"), ())
    assert new.matches(Description("national flag", ("yellow", "dark blue")))
    assert strict_reading("whose flag is striped") is None
