"""Records of the ModalSearch pipeline: one :class:`Task` per synthesized question and one :class:`Outcome` per
sampled path (the lines of ``results.jsonl``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

AGENT_NAME = "modalsearch_react_agent"
DATA_SOURCE = "modalsearch_synth"
Label = Literal["input_only", "search_required", "text_only"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PathNode(_Model):
    id: str
    kind: Literal["text", "image"]
    name: str
    noun: str
    url: str
    entity: str | None = None
    description: str = ""  # image nodes: d_i
    source_page_url: str | None = None  # image nodes: c_i


class PathHop(_Model):
    """A hop of the question: a graph edge, or a composed t2i2t hop whose image ``via`` is the supporting evidence."""

    source: str
    target: str
    kind: Literal["t2t", "t2i", "i2t", "t2i2t"]
    relation: str  # the target described from {x}
    relation_source: str
    via: str | None = None
    peers: list[str] = Field(default_factory=list)  # a flag clue's candidates, whose flags a solver compares


class Terminal(_Model):
    """The terminal question q_L and its verification."""

    modality: Literal["text", "image"]
    template: str
    question: str  # q_L, naming v_L
    answer: str
    evidence: str
    candidates: int
    passed: int
    c_with: int | None = None
    c_without: int | None = None
    ask: str | None = None  # the verified visual ask by name (VISUAL_QUESTIONS); the template may be reworded
    fact: str | None = None  # a text question's relation asked (a KG relation id)


class Task(_Model):
    id: str
    graph: Literal["train", "benchmark"]
    seed: int
    question: str
    answer: str
    aliases: list[str]
    answer_type: str
    nodes: list[PathNode] = Field(min_length=2)
    hops: list[PathHop] = Field(min_length=1)
    modality: str  # e.g. "I-T-T"
    label: Label
    # a closed-book solver answers it (data_gen.modalsearch.closed_book): not search-required whatever its label
    closed_book: bool = False
    start_image_id: str | None = None
    start_image_url: str | None = None
    # a text start: what the question describes it by, for a solver to search (the neighbours a distinguishing set
    # names, or the masked lead sentence it quotes)
    start_clues: list[str] = Field(default_factory=list)
    rewrites: list[str]  # q_L, q_{L-1}, ..., q_0 (before the start node is described)
    terminal: Terminal

    def search_required(self) -> bool:
        """New visual evidence fetched mid-search (the label) that common knowledge cannot replace."""
        return self.label == "search_required" and not self.closed_book

    def ground_truth(self) -> dict[str, Any]:
        return {"target": self.answer, "aliases": self.aliases}

    def task_path(self) -> dict[str, Any]:
        """``verl_ext.credit.offline_judge.TaskPath`` as plain JSON (question, ordered evidence, answer)."""
        evidence = [n.name for n in self.nodes[1:] if n.kind == "text"]
        return {"question": self.question, "evidence": list(dict.fromkeys(evidence)), "answer": self.answer}


class Outcome(_Model):
    """One line of ``results.jsonl``: a sampled path's fate. ``error`` marks infrastructure failures, excluded
    from the rejection rates and retried on restart."""

    key: str
    status: Literal["verified", "rejected", "error"]
    graph: Literal["train", "benchmark"]
    path: list[str]
    filter: str | None = None
    detail: str = ""
    task: Task | None = None
    trajectory: dict[str, Any] | None = None
    seconds: dict[str, float] = Field(default_factory=dict)
