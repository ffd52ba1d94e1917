"""Backward expansion: from a seed to a DAG of identification dependencies (Neos App. A).

Each expanded entity gets a distinguishing set; its neighbours become prerequisites (edges prerequisite ->
identified entity, each edge remembering the direction of its KG fact) and are expanded in turn, breadth first, so
the result is deterministic and shallow nodes are expanded before the node budget runs out. A node is only ever
given its *whole* distinguishing set, so every expanded node is identified by its incoming edges together, except a
pictured one that has none (:func:`expand`): its image, as a visual checkpoint, finishes what its edges begin.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from data_gen.kg.distinguish import DistinguishingConfig, Fact, NotDistinguishable, distinguishing_set
from data_gen.kg.graph import KG


@dataclass(frozen=True, slots=True)
class Edge:
    """``source`` helps identify ``target`` through ``relation``; the KG fact is (source, relation, target) when
    ``forward``, else (target, relation, source)."""

    source: str
    target: str
    relation: str
    forward: bool

    @property
    def fact(self) -> tuple[str, str, str]:
        if self.forward:
            return self.source, self.relation, self.target
        return self.target, self.relation, self.source

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "relation": self.relation, "forward": self.forward}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Edge:
        try:
            edge = cls(data["source"], data["target"], data["relation"], data["forward"])
        except (KeyError, TypeError) as err:
            raise ValueError(f"malformed edge {data!r}: {err}") from None
        if not all(isinstance(v, str) and v for v in (edge.source, edge.target, edge.relation)):
            raise ValueError(f"malformed edge {data!r}: source, target and relation must be non-empty strings")
        if not isinstance(edge.forward, bool):
            raise ValueError(f"malformed edge {data!r}: forward must be a boolean")
        return edge


@dataclass(frozen=True)
class ExpansionConfig:
    """``max_branching`` caps prerequisites per node (the distinguishing-set size); ``max_depth`` is the shortest
    distance to the seed beyond which nodes are not expanded; ``max_nodes`` caps the DAG. ``max_branching``
    replaces ``distinguishing.max_size``: one limit, not two that could disagree. ``seed_distinguishing``, when set,
    is the seed's own (a relation withheld from every other node may still single the seed out); ``seed_facts``,
    when set, is the seed's distinguishing set itself (one of several a caller chose, e.g. by
    :func:`~data_gen.kg.distinguish.convergent_sets`)."""

    max_depth: int = 3
    max_branching: int = 3
    max_nodes: int = 40
    distinguishing: DistinguishingConfig = field(default_factory=DistinguishingConfig)
    seed_distinguishing: DistinguishingConfig | None = None
    seed_facts: tuple[Fact, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("max_depth", "max_branching", "max_nodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class Dag:
    """Nodes in expansion order (seed first) with their depth; ``leaves`` says why a node was not expanded."""

    seed: str
    nodes: tuple[str, ...]
    edges: tuple[Edge, ...]
    depth: Mapping[str, int]
    leaves: Mapping[str, str]

    def incoming(self, node: str) -> tuple[Edge, ...]:
        """Edges from ``node``'s prerequisites."""
        return tuple(e for e in self.edges if e.target == node)

    def outgoing(self, node: str) -> tuple[Edge, ...]:
        """Edges to the entities ``node`` helps identify."""
        return tuple(e for e in self.edges if e.source == node)


def expand(kg: KG, seed: str, config: ExpansionConfig = ExpansionConfig(), pictured: Collection[str] = ()) -> Dag:
    """Expand ``seed`` backwards. Raises :class:`NotDistinguishable` if the seed itself has no distinguishing set.

    A ``pictured`` node (one an image depicts) other than the seed that no set singles out keeps the facts of the
    best attempt: as a visual checkpoint its image tells it apart from the few candidates they leave (Eq. 2 binds
    checkpoints), so it still leads back to an entry anchor."""
    if kg.is_literal(seed):
        raise ValueError(f"seed {seed!r} is a literal; seeds must be entities")
    ds_config = replace(config.distinguishing, max_size=config.max_branching)
    seed_config = replace(config.seed_distinguishing or config.distinguishing, max_size=config.max_branching)
    nodes = [seed]
    depth = {seed: 0}
    edges: list[Edge] = []
    leaves: dict[str, str] = {}
    queue = deque([seed])
    while queue:
        node = queue.popleft()
        if kg.is_literal(node):
            leaves[node] = "literal"
            continue
        if depth[node] >= config.max_depth:
            leaves[node] = "max_depth"
            continue
        facts = config.seed_facts if node == seed else None
        try:
            if facts is None:
                facts = distinguishing_set(kg, node, seed_config if node == seed else ds_config,
                                           exclude=_downstream(edges, node))
        except NotDistinguishable as err:
            if node == seed:
                raise
            if node not in pictured or not err.partial:
                leaves[node] = "not_distinguishable"
                continue
            facts = err.partial
        new = list(dict.fromkeys(f.neighbour for f in facts if f.neighbour not in depth))
        if len(nodes) + len(new) > config.max_nodes:
            leaves[node] = "max_nodes"
            continue
        edges += [Edge(f.neighbour, node, f.relation, forward=not f.outgoing) for f in facts]
        for neighbour in new:
            nodes.append(neighbour)
            depth[neighbour] = depth[node] + 1
            queue.append(neighbour)
    return Dag(seed, tuple(nodes), tuple(edges), depth, leaves)


def _downstream(edges: list[Edge], node: str) -> set[str]:
    """``node`` and every entity it helps identify: using any of them as its prerequisite would close a cycle."""
    reached = {node}
    frontier = [node]
    while frontier:
        current = frontier.pop()
        for edge in edges:
            if edge.source == current and edge.target not in reached:
                reached.add(edge.target)
                frontier.append(edge.target)
    return reached
