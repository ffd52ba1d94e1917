"""The records the Neos pipeline writes: one :class:`Task` per synthesized question, one :class:`Outcome` per
processed candidate (what ``results.jsonl`` holds, one line each, so a restart knows exactly what is done).
They live below the packages: ``data_gen`` writes them, the walkthrough (``verl_ext.walkthrough``) reads them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

AGENT_NAME = "neos_search_agent"
DATA_SOURCE = "neos_synth"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EntryImage(_Model):
    """A question image: the visual entry anchor of one branch."""

    image_id: str
    url: str
    entity_id: str  # the anchor it depicts (never shown to the policy)


class Alternative(_Model):
    """Another candidate the step leaves open before its checkpoint image is looked at, and what its image shows:
    the expert checks one and rejects it, as a searcher that cannot know the answer would."""

    name: str
    image_id: str
    image_url: str
    colours: list[str]


class Step(_Model):
    """One hop of the verified reasoning path: identify ``target`` from ``source`` through the KG fact ``fact``.

    ``evidence`` lists what an agent must retrieve for the step (names, page URLs, image ids); ``span`` is the part
    of the question that states the step (the coverage check looks for it in the final text).
    """

    index: int
    source: str
    target: str
    relation: str
    relation_label: str
    forward: bool  # the fact is (source, relation, target) when True, else (target, relation, source)
    fact: tuple[str, str, str]
    source_name: str
    target_name: str
    source_page_url: str | None
    target_page_url: str | None
    checkpoint: bool  # the target is bound by new visual evidence
    checkpoint_image_id: str | None = None
    checkpoint_image_url: str | None = None
    checkpoint_description: str | None = None  # the blind observer's words for that image
    checkpoint_colours: list[str] | None = None  # the colours those words state, shades merged, unordered
    alternatives: list[Alternative] = Field(default_factory=list)  # other candidates of a checkpoint, by name
    span: str


class Task(_Model):
    id: str
    world_hash: str
    seed: int  # the pipeline seed it was drawn under
    structure_type: Literal["path", "convergent"]
    structure: dict[str, Any]  # data_gen.kg.Structure.to_dict()
    question: str
    entry_images: list[EntryImage] = Field(min_length=1)
    answer: str
    answer_entity: str  # the seed entity of step 1: structures end at their seed
    answer_type: str = ""  # the answer entity's kind in the world ("city", "river", ...); "" in older logs
    aliases: list[str]
    steps: list[Step] = Field(min_length=2)

    def evidence(self) -> list[str]:
        """The ordered items a successful trajectory retrieves: every entity name on the path, anchors first."""
        names = [s.source_name for s in self.steps if s.source in {e.entity_id for e in self.entry_images}]
        names += [s.target_name for s in self.steps if s.target != self.answer_entity]
        return list(dict.fromkeys(names))

    def task_path(self) -> dict[str, Any]:
        """``verl_ext.credit.offline_judge.TaskPath`` as plain JSON (question, ordered evidence, answer)."""
        return {"question": self.question, "evidence": self.evidence(), "answer": self.answer}

    def ground_truth(self) -> dict[str, Any]:
        return {"target": self.answer, "aliases": self.aliases}


Status = Literal["verified", "rejected", "error", "seed_done"]


class Outcome(_Model):
    """One line of ``results.jsonl``: a candidate structure's fate (or a seed marked fully processed).

    ``filter`` names the stage that rejected it; ``error`` marks infrastructure failures, which are excluded from
    the rejection rates (they are neither accepted nor counted against a filter) and retried on restart.
    """

    key: str
    status: Status
    filter: str | None = None
    detail: str = ""
    task: Task | None = None
    trajectory: dict[str, Any] | None = None  # the expert's TrajectoryRecord (JSON) for verified tasks
    counts: dict[str, int] = Field(default_factory=dict)  # seed_done: structures rejected per reason
    probes: dict[str, bool] = Field(default_factory=dict)  # probe name -> solved
    seconds: dict[str, float] = Field(default_factory=dict)  # stage -> wall time spent on this candidate


def dedupe(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """The verified tasks, one per question over the same entry images: what the export splits and the walkthrough
    rolls out."""
    seen: set[tuple[str, tuple[str, ...]]] = set()
    kept = []
    for o in sorted((o for o in outcomes if o.status == "verified" and o.task), key=lambda o: o.key):
        sig = (" ".join(o.task.question.lower().split()), tuple(e.image_id for e in o.task.entry_images))
        if sig not in seen:
            seen.add(sig)
            kept.append(o)
    return kept
