"""Reasoning structures: paths and two-branch convergent subgraphs of a DAG, kept only if identifiable (Neos §3.3).

A structure starts at visual entry anchors (entities an entry image depicts), passes at least one intermediate
visual checkpoint (an entity bound by newly acquired visual evidence that feeds the next relation) and ends at the
seed. It compiles to Eq. 2's query: every node a variable, every edge its KG fact in stored direction, anchors and
checkpoints bound; it is kept only when the answer set is exactly ``{seed}``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from data_gen.kg.dag import Dag, Edge
from data_gen.kg.graph import KG, Query

MULTIPLE_ENDPOINTS = "multiple_endpoints"
UNRESOLVED = "unresolved"
WRONG_ENDPOINT = "wrong_endpoint"  # a unique answer that is not the seed: the DAG was built on another KG


@dataclass(frozen=True)
class Structure:
    """``branches`` (one for a path, two for a convergent subgraph) each run from an entry anchor to the merge
    node; ``tail`` runs from the merge node to the answer (empty when they coincide).

    ``visual_answer`` marks optional visual answer extraction: the final target is a property read from an image
    of the answer entity rather than the entity itself.
    """

    branches: tuple[tuple[Edge, ...], ...]
    tail: tuple[Edge, ...]
    checkpoints: tuple[str, ...]
    visual_answer: bool = False

    def __post_init__(self) -> None:
        if len(self.branches) not in (1, 2):
            raise ValueError(f"a structure has one or two branches, got {len(self.branches)}")
        for chain in (*self.branches, self.tail):
            for a, b in zip(chain, chain[1:]):
                if a.target != b.source:
                    raise ValueError(f"edges {a} and {b} do not chain")
        if any(not branch for branch in self.branches):
            raise ValueError("every branch needs at least one edge")
        merge = self.branches[0][-1].target
        if any(branch[-1].target != merge for branch in self.branches):
            raise ValueError("branches must end at the same merge node")
        if self.tail and self.tail[0].source != merge:
            raise ValueError(f"tail must start at the merge node {merge!r}")
        seen: list[str] = [n for branch in self.branches for n in _sources(branch)] + [merge]
        seen += [e.target for e in self.tail]
        if len(seen) != len(set(seen)):
            raise ValueError("branches must be disjoint before the merge and no node may repeat")
        if len(self.branches) == 2 and self.branches[0][-1].relation == self.branches[1][-1].relation:
            raise ValueError("convergent branches must constrain the merge node through distinct relations")
        intermediate = set(self.nodes) - set(self.anchors) - {self.answer}
        if not self.checkpoints:
            raise ValueError("a structure needs at least one intermediate visual checkpoint")
        if len(set(self.checkpoints)) != len(self.checkpoints) or not set(self.checkpoints) <= intermediate:
            raise ValueError(f"checkpoints {self.checkpoints} must be distinct intermediate nodes "
                             f"{sorted(intermediate)}")

    @property
    def kind(self) -> str:
        return "path" if len(self.branches) == 1 else "convergent"

    @property
    def anchors(self) -> tuple[str, ...]:
        """Visual entry anchors, one per branch."""
        return tuple(branch[0].source for branch in self.branches)

    @property
    def merge(self) -> str:
        return self.branches[0][-1].target

    @property
    def answer(self) -> str:
        return self.tail[-1].target if self.tail else self.merge

    @property
    def edges(self) -> tuple[Edge, ...]:
        return tuple(e for branch in self.branches for e in branch) + self.tail

    @property
    def nodes(self) -> tuple[str, ...]:
        """Branch nodes in order, then the merge node, then the tail."""
        return (*(n for branch in self.branches for n in _sources(branch)), self.merge,
                *(e.target for e in self.tail))

    def query(self) -> Query:
        """Eq. 2's ``(C, B, out)``: a variable per node, anchors and checkpoints bound, the answer as ``out``."""
        var = {node: f"?x{i}" for i, node in enumerate(self.nodes)}
        constraints = tuple(
            (var[e.source], e.relation, var[e.target]) if e.forward else (var[e.target], e.relation, var[e.source])
            for e in self.edges
        )
        bindings = {var[node]: node for node in (*self.anchors, *self.checkpoints)}
        return Query(constraints, bindings, var[self.answer])

    def to_dict(self) -> dict[str, Any]:
        return {
            "branches": [[e.to_dict() for e in branch] for branch in self.branches],
            "tail": [e.to_dict() for e in self.tail],
            "checkpoints": list(self.checkpoints),
            "visual_answer": self.visual_answer,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Structure:
        try:
            branches = tuple(tuple(Edge.from_dict(e) for e in branch) for branch in data["branches"])
            tail = tuple(Edge.from_dict(e) for e in data["tail"])
            checkpoints = tuple(data["checkpoints"])
            visual_answer = data["visual_answer"]
        except (KeyError, TypeError) as err:
            raise ValueError(f"malformed structure: {err!r}") from None
        if not isinstance(visual_answer, bool) or not all(isinstance(c, str) for c in checkpoints):
            raise ValueError("malformed structure: visual_answer must be a boolean and checkpoints strings")
        return cls(branches, tail, checkpoints, visual_answer)


@dataclass(frozen=True)
class StructureConfig:
    """Hop counts are edges in the whole structure (both branches and the tail)."""

    min_hops: int = 2
    max_hops: int = 4
    max_checkpoints: int = 2
    convergent: bool = True
    visual_answer: bool = True
    max_candidates: int = 1000

    def __post_init__(self) -> None:
        if not 2 <= self.min_hops <= self.max_hops:
            raise ValueError(f"need 2 <= min_hops <= max_hops (a checkpoint sits between two edges), "
                             f"got {self.min_hops}, {self.max_hops}")
        if self.max_checkpoints < 1 or self.max_candidates < 1:
            raise ValueError("max_checkpoints and max_candidates must be >= 1")


@dataclass(frozen=True)
class Enumeration:
    """Identifiable structures, the rejected ones with their reason, and whether ``max_candidates`` cut it short."""

    accepted: tuple[Structure, ...]
    rejected: tuple[tuple[Structure, str], ...]
    truncated: bool

    @property
    def rejection_counts(self) -> dict[str, int]:
        return dict(Counter(reason for _, reason in self.rejected))


def identifiability(kg: KG, structure: Structure) -> str | None:
    """None when the structure's query answers exactly ``{answer}``, else the rejection reason."""
    answers = kg.solve_query(structure.query(), limit=2)
    if not answers:
        return UNRESOLVED
    if len(answers) > 1:
        return MULTIPLE_ENDPOINTS
    return None if answers == {structure.answer} else WRONG_ENDPOINT


def enumerate_structures(kg: KG, dag: Dag, images: Collection[str],
                         config: StructureConfig = StructureConfig(),
                         verdicts: MutableMapping[Structure, str | None] | None = None) -> Enumeration:
    """Every path and (if enabled) convergent structure of ``dag`` ending at its seed, checked against ``kg``.

    ``images`` are the entities an image depicts: only they can be anchors or checkpoints. ``verdicts`` memoises
    :func:`identifiability` on ``kg`` across calls: one seed's DAGs (a DAG per relation variant) share half their
    structures, and solving each again took a quarter of a Neos run.
    """
    accepted: list[Structure] = []
    rejected: list[tuple[Structure, str]] = []
    truncated = False
    for n, structure in enumerate(_candidates(dag, set(images), config)):
        if n == config.max_candidates:
            truncated = True
            break
        if verdicts is None:
            reason = identifiability(kg, structure)
        elif structure in verdicts:
            reason = verdicts[structure]
        else:
            reason = verdicts[structure] = identifiability(kg, structure)
        if reason is None:
            accepted.append(structure)
        else:
            rejected.append((structure, reason))
    return Enumeration(tuple(accepted), tuple(rejected), truncated)


def _candidates(dag: Dag, images: set[str], config: StructureConfig) -> Iterator[Structure]:
    """Structurally valid candidates, paths first, in a fixed order."""
    incoming: dict[str, list[Edge]] = {}
    outgoing: dict[str, list[Edge]] = {}
    for edge in dag.edges:
        incoming.setdefault(edge.target, []).append(edge)
        outgoing.setdefault(edge.source, []).append(edge)
    visual_answer = config.visual_answer and dag.seed in images

    def with_checkpoints(branches: tuple[tuple[Edge, ...], ...], tail: tuple[Edge, ...]) -> Iterator[Structure]:
        nodes = [e.target for branch in branches for e in branch[:-1]]
        nodes += [e.source for e in tail]
        visual = [n for n in nodes if n in images]
        for size in range(1, min(config.max_checkpoints, len(visual)) + 1):
            for checkpoints in combinations(visual, size):
                yield Structure(branches, tail, checkpoints, visual_answer)

    for chain in _chains_into(dag.seed, config.max_hops, incoming):
        if len(chain) >= config.min_hops and chain[0].source in images:
            yield from with_checkpoints((chain,), ())
    if not config.convergent:
        return
    for merge in dag.nodes:
        for tail in _chains_from(merge, dag.seed, config.max_hops - 2, outgoing):
            branches = [c for c in _chains_into(merge, config.max_hops - len(tail) - 1, incoming)
                        if c[0].source in images]
            for a, b in combinations(branches, 2):
                hops = len(a) + len(b) + len(tail)
                if hops < config.min_hops or hops > config.max_hops or a[-1].relation == b[-1].relation:
                    continue
                if set(_sources(a)) & set(_sources(b)):
                    continue
                yield from with_checkpoints((a, b), tail)


def _chains_into(node: str, max_len: int, incoming: Mapping[str, list[Edge]]) -> Iterator[tuple[Edge, ...]]:
    """Edge chains of length 1..max_len ending at ``node``, shortest-suffix first."""
    if max_len < 1:
        return
    for edge in incoming.get(node, ()):
        yield (edge,)
        for chain in _chains_into(edge.source, max_len - 1, incoming):
            yield (*chain, edge)


def _chains_from(node: str, seed: str, max_len: int, outgoing: Mapping[str, list[Edge]]
                 ) -> Iterator[tuple[Edge, ...]]:
    """Edge chains from ``node`` to ``seed`` of length <= max_len (the empty chain when ``node`` is the seed)."""
    if node == seed:
        yield ()
        return
    if max_len < 1:
        return
    for edge in outgoing.get(node, ()):
        for chain in _chains_from(edge.target, seed, max_len - 1, outgoing):
            yield (edge, *chain)


def _sources(chain: tuple[Edge, ...]) -> list[str]:
    return [e.source for e in chain]
