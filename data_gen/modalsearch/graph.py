"""The interleaved multimodal graph G = (V, E) of ModalSearcher §3.1 / App. A.3.

Text nodes are world pages (an entity and its article); image nodes are world images with a description ``d`` and
source-page metadata ``c``. Edges are typed t2t / t2i / i2t and carry a relation: a phrase that describes the edge's
target from its source, with ``{x}`` standing for the source (so a question writer can substitute any reference to
the source, and two edges compose by substitution).

Assembly keeps a hash table of nodes. Proposing an edge to a node already in the table inserts the edge at once;
proposing one to an unseen node queues that node once (never twice: no duplicate expansions) and files a deferred
edge-completion task that inserts the edge when the node is actually expanded. Nodes never expanded (the budget ran
out) never enter the graph, and neither do edges to them.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

NodeKind = Literal["text", "image"]
EdgeKind = Literal["t2t", "t2i", "i2t"]


@dataclass(frozen=True, slots=True)
class Node:
    """``id`` is ``t:<page id>`` or ``i:<image id>``; ``name`` is what a question must not reveal; ``noun`` is how a
    question refers to its kind ("country", "national flag"); ``description`` is the image node's ``d`` (empty for
    text nodes); ``category`` marks generalized category pages, which paths never enter."""

    id: str
    kind: NodeKind
    ref: str  # page id or image id in the world
    name: str
    noun: str
    url: str
    entity: str | None = None
    description: str = ""
    source_page: str | None = None  # image nodes: the page it was found on (c_i)
    stable: bool | None = None  # image nodes: stably retrievable (has t2i in-edges) vs ambiguous
    category: bool = False


@dataclass(frozen=True, slots=True)
class Relation:
    """A proposed relation: ``phrase`` describes the target from ``{x}``; ``unique`` says the phrase singles the
    target out given the source; ``source`` names what wrote it ("kg", "context_template", "llm", ...)."""

    phrase: str
    unique: bool
    source: str = "template"
    kg_relation: str | None = None
    # a visual clue's candidates (names, the target among them): a solver looks at each one's image to choose
    peers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class GraphEdge:
    source: str
    target: str
    kind: EdgeKind
    relation: Relation

    @property
    def key(self) -> tuple[str, str]:
        return self.source, self.target


@dataclass
class Graph:
    name: str
    nodes: dict[str, Node] = field(default_factory=dict)
    out: dict[str, dict[str, GraphEdge]] = field(default_factory=dict)  # source -> target -> edge

    def add_node(self, node: Node) -> None:
        self.nodes[node.id] = node
        self.out.setdefault(node.id, {})

    def add_edge(self, edge: GraphEdge) -> bool:
        """Insert ``edge`` between two nodes of the graph; the first relation proposed for a pair is kept."""
        if edge.source not in self.nodes or edge.target not in self.nodes or edge.source == edge.target:
            return False
        return self.out[edge.source].setdefault(edge.target, edge) is edge

    def edges(self) -> Iterable[GraphEdge]:
        for targets in self.out.values():
            yield from targets.values()

    def has_edge(self, source: str, target: str) -> bool:
        return target in self.out.get(source, {})

    def counts(self) -> dict[str, int]:
        out = {"text_nodes": 0, "image_nodes": 0, "stable_images": 0, "ambiguous_images": 0,
               "t2t": 0, "t2i": 0, "i2t": 0}
        for node in self.nodes.values():
            out[f"{node.kind}_nodes"] += 1
            if node.kind == "image":
                out["stable_images" if node.stable else "ambiguous_images"] += 1
        for edge in self.edges():
            out[edge.kind] += 1
        return out

    # -- persistence: written once per build, atomically, so a resumed run samples from the same graph ----------

    def save(self, path: Path, fingerprint: str) -> None:
        blob = {"name": self.name, "fingerprint": fingerprint, "nodes": [asdict(n) for n in self.nodes.values()],
                "edges": [{**asdict(e), "relation": asdict(e.relation)} for e in self.edges()]}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(blob, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path, fingerprint: str) -> Graph | None:
        """The saved graph, or None when there is none or it was built from other inputs or settings."""
        if not path.is_file():
            return None
        blob = json.loads(path.read_text(encoding="utf-8"))
        if blob.get("fingerprint") != fingerprint:
            return None
        graph = cls(blob["name"])
        for n in blob["nodes"]:
            graph.add_node(Node(**n))
        for e in blob["edges"]:
            r = e["relation"]
            graph.add_edge(GraphEdge(e["source"], e["target"], e["kind"], Relation(**{**r, "peers": tuple(
                r.get("peers", ()))})))
        return graph


@dataclass
class Assembly:
    """The hash table, expansion queue and deferred edge-completion tasks of App. A.3 around a :class:`Graph`.

    ``blocked`` nodes (another graph's, for a disjoint benchmark graph) are never queued."""

    graph: Graph
    max_nodes: int
    blocked: frozenset[str] = frozenset()
    queue: deque[str] = field(default_factory=deque)
    queued: set[str] = field(default_factory=set)
    deferred: dict[str, list[tuple[str, EdgeKind, Relation]]] = field(default_factory=dict)
    deferred_completed: int = 0
    reused: int = 0

    def enqueue(self, node_id: str, *, first: bool = False) -> bool:
        """Queue a node once; ``first`` puts it at the head (image nodes: expansion alternates between a text
        node and the images it led to, so a node budget does not fill with text nodes alone)."""
        if node_id in self.queued or node_id in self.blocked:
            return False
        self.queued.add(node_id)
        if first:
            self.queue.appendleft(node_id)
        else:
            self.queue.append(node_id)
        return True

    def propose(self, source: str, target: str, kind: EdgeKind, relation: Relation) -> None:
        """A validated neighbour: reuse the node if it exists, else queue it with a deferred edge."""
        if target in self.graph.nodes:
            self.reused += 1
            self.graph.add_edge(GraphEdge(source, target, kind, relation))
        elif target not in self.blocked:
            self.deferred.setdefault(target, []).append((source, kind, relation))
            self.enqueue(target, first=kind == "t2i")

    def materialize(self, node: Node) -> None:
        """The node is being expanded: enter it into the table and complete the edges waiting for it."""
        self.graph.add_node(node)
        for source, kind, relation in self.deferred.pop(node.id, []):
            self.deferred_completed += self.graph.add_edge(GraphEdge(source, node.id, kind, relation))

    def full(self) -> bool:
        return len(self.graph.nodes) >= self.max_nodes
