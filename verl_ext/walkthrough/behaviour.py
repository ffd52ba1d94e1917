"""The walkthrough's behaviour policy: a **scripted** one, never a trained policy (no verl import).

A randomly initialised 10M model cannot search, so the words of every turn come from a script and only their
log-probabilities come from the model (``TransformersGenerateClient``'s forced mode scores each scripted turn with a
real forward pass over the real context, images included). The script is the programmatic expert of
``data_gen.neos`` (its verified call sequence for the task, replayed through the real agent loop and tool server)
with seeded deviations (:data:`VARIANTS`, described in :data:`BEHAVIOURS`, which the report prints), so a group of
rollouts holds successes and failures as an RL group does.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Variant = Literal["expert", "wasted_search", "wrong_entity", "recovery"]
VARIANTS: tuple[Variant, ...] = ("expert", "wasted_search", "wrong_entity", "recovery")
SUCCEEDS: dict[Variant, bool] = {"expert": True, "wasted_search": True, "wrong_entity": False, "recovery": False}
# What each variant writes (``k``: the number of expert calls it makes before it deviates, drawn per rollout).
BEHAVIOURS: dict[Variant, str] = {
    "expert": "the expert's verified calls in order, then the task's answer",
    "wasted_search": "the expert's first k calls, one search for a wrong entity of the answer's kind (the group's "
    "distractor), the remaining expert calls, then the task's answer: one wasted turn, still correct",
    "wrong_entity": "the expert's first k calls, then it commits to the distractor: searches it, reads its page "
    "and answers it",
    "recovery": "the expert's first k calls, the same detour to the wrong entity (search, page), a return to the "
    "path (it repeats its last call that names a path entity, else searches the first one), then it answers the "
    "wrong entity anyway: a recovery followed by a re-derailment, so it always fails",
}
# How often each variant is drawn for a rollout: 60% succeed, like a policy that solves most of its questions, so
# most groups are mixed and some are homogeneous (those keep the plain GRPO advantage).
WEIGHTS: tuple[float, ...] = (0.35, 0.25, 0.25, 0.15)

_THOUGHTS = {
    "ReverseImageSearch": "Find which page carries the question image.",
    "WebVisit": "Read this page for the next link of the chain.",
    "TextSearch": "Search for the entity this points to.",
    "FetchImage": "Look at this image to check the visual clue.",
    "CropImage": "Zoom into this part of the image.",
    "ImageSearch": "Search images for the visual clue.",
}


@dataclass(frozen=True)
class Call:
    """One tool call of the script."""

    name: str
    arguments: dict[str, Any]

    def text(self) -> str:
        """The assistant turn that makes this call (Qwen's ``<tool_call>`` format, a short reasoning block first)."""
        body = json.dumps({"name": self.name, "arguments": self.arguments}, ensure_ascii=False)
        return f"<think>{_THOUGHTS.get(self.name, 'Next step.')}</think>\n<tool_call>\n{body}\n</tool_call>"


@dataclass(frozen=True)
class Distractor:
    """A wrong entity of the answer's kind, with the URL of its page."""

    name: str
    page_url: str


@dataclass(frozen=True)
class Plan:
    """What one rollout will write: its variant, the turns in order (the last one is the answer)."""

    variant: Variant
    turns: tuple[str, ...]
    answer: str
    deviation_turn: int | None  # the first turn that leaves the expert's script, if any

    @property
    def expected_success(self) -> bool:
        return SUCCEEDS[self.variant]


def answer_text(name: str) -> str:
    return f"<think>The evidence points to one entity.</think>\nThe answer is {name}."


def _mentions(call: Call, items: Sequence[str]) -> bool:
    text = json.dumps(call.arguments, ensure_ascii=False).lower()
    return any(item.lower() in text for item in items)


def make_plan(
    variant: Variant,
    expert_calls: Sequence[Call],
    answer: str,
    path_items: Sequence[str],
    distractor: Distractor,
    rng: random.Random,
) -> Plan:
    """The turns of one rollout; ``k`` (where a deviation starts) is drawn from ``rng`` after the first call."""
    calls = list(expert_calls)
    if variant == "expert" or not calls:
        return _plan("expert", calls, answer, None)
    k = rng.randint(1, len(calls) - 1) if len(calls) > 1 else 1
    search_wrong = Call("TextSearch", {"query": [distractor.name]})
    visit_wrong = Call("WebVisit", {"url": [distractor.page_url], "goal": f"what is known about {distractor.name}"})
    if variant == "wasted_search":
        return _plan(variant, [*calls[:k], search_wrong, *calls[k:]], answer, k)
    if variant == "wrong_entity":
        return _plan(variant, [*calls[:k], search_wrong, visit_wrong], distractor.name, k)
    lead = next((c for c in reversed(calls[:k]) if _mentions(c, path_items)), None)
    back = lead or Call("TextSearch", {"query": [path_items[0]]})
    return _plan("recovery", [*calls[:k], search_wrong, visit_wrong, back], distractor.name, k)


def _plan(variant: Variant, script: Sequence[Call], answer: str, deviation_turn: int | None) -> Plan:
    return Plan(variant, (*(c.text() for c in script), answer_text(answer)), answer, deviation_turn)


def draw_plans(
    size: int,
    seed: str,
    expert_calls: Sequence[Call],
    answer: str,
    path_items: Sequence[str],
    distractor: Distractor,
) -> list[Plan]:
    """``size`` plans for one question's group, each variant drawn from ``WEIGHTS`` by a generator seeded with
    ``seed`` (so a run is reproducible and two questions differ)."""
    rng = random.Random(seed)
    variants = rng.choices(VARIANTS, weights=WEIGHTS, k=size)
    return [make_plan(v, expert_calls, answer, path_items, distractor, rng) for v in variants]


class _HasRequestId(Protocol):
    request_id: str


@dataclass
class ScriptedBehaviourPolicy:
    """The ``forced`` callback of ``TransformersGenerateClient``: each episode (request id) writes its plan's turns.

    ``bind`` ties a request id to a plan before the episode's first generate call; an unbound request id, or a turn
    past the end of its plan, returns None (the model then writes freely), which never happens in the walkthrough
    because every plan ends with an answer.
    """

    plans: dict[str, Plan] = field(default_factory=dict)
    _next: dict[str, int] = field(default_factory=dict)

    def bind(self, request_id: str, plan: Plan) -> None:
        if self.plans.setdefault(request_id, plan) is not plan:
            raise ValueError(f"request {request_id!r} is already bound to a plan")

    def __call__(self, call: _HasRequestId) -> str | None:
        plan = self.plans.get(call.request_id)
        if plan is None:
            return None
        i = self._next.get(call.request_id, 0)
        self._next[call.request_id] = i + 1
        return plan.turns[i] if i < len(plan.turns) else None


class _Generates(Protocol):
    async def generate(self, request_id: str, **kwargs: Any) -> Any: ...


class PlanBoundClient:
    """The ``server_manager`` one episode sees: binds the episode's request id to its plan, then delegates to the
    shared generate client (one model, one lock, many concurrent episodes, as in a verl rollout worker)."""

    def __init__(self, client: _Generates, policy: ScriptedBehaviourPolicy, plan: Plan) -> None:
        self.client, self.policy, self.plan = client, policy, plan

    async def generate(self, request_id: str, **kwargs: Any) -> Any:
        self.policy.bind(request_id, self.plan)  # the same plan on every turn of the episode
        return await self.client.generate(request_id, **kwargs)
