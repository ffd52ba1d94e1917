"""The strict-reading ablation (issue 36): does a task's answer stay unique without its entry image when a reader
takes the colour words literally?

The grounding check and the evidence rules read a checkpoint's colours as a person does (unordered, near shades
merged: :meth:`data_gen.neos.observer.Description.matches`). A question that states more than that reading uses
(an exact shade, "dark blue"; an order, "by decreasing area") lets a literal reader narrow further than the
ablation assumed: "mostly dark blue and yellow (by decreasing area)" picked Sweden without the entry image in 21
of 60 tasks before questions stated the merged, unordered colours. :func:`strictly_unique_without_entry_image`
re-runs the entry-image ablation with each checkpoint read literally from its stated words; on questions that state
only what the reading uses it must find none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from data_gen.kg import Structure
from data_gen.neos.observer import COLOURS, IMAGE_KINDS, SHADE_OF, Description
from neos_core.neos_tasks import Task

_KIND = "|".join(sorted(set(IMAGE_KINDS.values()), key=len, reverse=True))
_COLOUR = "|".join(sorted(COLOURS, key=len, reverse=True))
_CLAUSE = re.compile(rf"({_KIND}) is mostly ((?:{_COLOUR})(?:(?:, | and )(?:{_COLOUR}))*)( \(by decreasing area\))?"
                     r"(?: and shows the words \"([^\"]*)\")?")


@dataclass(frozen=True, slots=True)
class StrictDescription(Description):
    """A checkpoint's words taken literally: the stated names are all its colours, in that order when an order is
    stated; a shade name ("dark blue") fits that shade alone, a colour name ("blue") the colour and its shades."""

    ordered: bool = False

    def matches(self, other: Description | None) -> bool:
        if other is None or other.kind != self.kind or len(other.colours) != len(self.colours):
            return False
        if tuple(w.lower() for w in other.text) != tuple(w.lower() for w in self.text):
            return False
        if self.ordered:
            return all(_fits(s, o) for s, o in zip(self.colours, other.colours))
        return all(any(_fits(s, o) for o in other.colours) for s in self.colours)


def _fits(stated: str, seen: str) -> bool:
    return stated == seen or SHADE_OF.get(seen) == stated


def strict_reading(text: str) -> StrictDescription | None:
    """The literal reading of a colour clause ("its national flag is mostly dark blue and yellow (by decreasing
    area)"); None when ``text`` holds none."""
    m = _CLAUSE.search(text)
    if m is None:
        return None
    colours = tuple(c for c in re.split(r", | and ", m.group(2)) if c)
    words = tuple(m.group(4).split()) if m.group(4) else ()
    return StrictDescription(m.group(1), colours, words, ordered=bool(m.group(3)))


def strictly_unique_without_entry_image(synth, task: Task) -> bool:
    """Whether ``task``'s answer is the only one left without an entry image when every checkpoint is read
    literally from the words its question states (``synth``: the :class:`data_gen.neos.synth.Synthesizer` of the
    task's world)."""
    structure = Structure.from_dict(task.structure)
    bound: dict[str, Description] = {}
    for step in task.steps:
        if step.checkpoint:
            reading = strict_reading(step.checkpoint_description or "")
            if reading is None or (step.checkpoint_description or "").removeprefix("its ") not in task.question:
                return False
            bound[step.target] = reading
    nouns = synth.nouns(structure)
    if isinstance(nouns, str):
        return False
    return synth.entry_image_decoration(structure, bound, set(), nouns) is not None


def strict_ablation(synth, tasks: list[Task]) -> dict[str, int]:
    """``stats.json`` → ``strict_colour_ablation``: of the verified tasks, how many the literal reading solves
    without their entry image (must be 0)."""
    return {"tasks": len(tasks),
            "unique_without_entry_image": sum(strictly_unique_without_entry_image(synth, t) for t in tasks)}
