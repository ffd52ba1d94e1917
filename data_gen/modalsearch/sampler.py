"""Constrained path sampling on the interleaved graph (App. A.5, Eqs. 5-6).

A path starts at a random node ``v_0`` with a target depth ``L`` drawn from ``[K_min, K_max] = [1, 4]``. At step
``t`` the candidates are the out-edges ``e = (v_t, r, v')`` with ``v'`` not in the history ``H_t``, ``e`` not
already used, ``v'`` not a category page, no structural shortcut (no earlier node ``v_j``, ``j < t``, has an edge
to ``v'``: the walk would detour) and ``v'``'s name not already exposed in a relation on the path. One exemption:
leaving an image ``v_t`` reached from text ``v_{t-1}``, an edge ``v_{t-1} -> v'`` is not a shortcut, because the
t -> i -> t subpath becomes one composed relation from ``v_{t-1}`` to ``v'`` and the paper accepts that a textual
route may exist beside it (App. A.5); on the offline world an article nearly always names what its own images show,
so without this no t -> i -> t path survives. Each candidate
weighs ``w(e|H_t) = gamma_img(e, H_t) / (1 + alpha * c(e))`` with ``c(e)`` the accepted paths using ``e`` and
``gamma_img = d_t / (d_t + 1)`` when ``v'`` is an image, an image occurs in ``H_t`` and ``d_t = t - j* > 0``
(``j*`` the latest image position), else 1. The next edge is drawn proportionally to the weights. A walk that runs
out of candidates before ``L`` is a dead end; a completed path whose node sequence was drawn before is a duplicate.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from data_gen.common.episode import found
from data_gen.modalsearch.graph import Graph, GraphEdge

K_MIN, K_MAX = 1, 4
ALPHA = 1.0
# Search-required share of the paper's generated data (ModalSearcher, App. C.1: 11,172 of 19,391), and how much more an
# edge bringing new visual evidence weighs while a run's verified questions fall short of it.
SEARCH_REQUIRED_SHARE = 0.5761
VISUAL_BOOST = 4.0
# While the share falls short, a completed path that brings no new visual evidence is drawn again, at most this many
# times: the boost weighs single edges, and an image start followed by text hops (input-only whatever its edges weigh)
# was half of a 60-question run.
VISUAL_REDRAWS = 8
# Reasoning-path lengths of the paper's generated data (ModalSearcher, App. Table 8: 30.45/34.67/27.36/7.52%).
HOP_SHARES: dict[int, float] = {1: 0.3045, 2: 0.3467, 3: 0.2736, 4: 0.0752}


def depth_towards(shares: dict[int, float], verified: Counter[int], rng: random.Random) -> int:
    """A target depth drawn towards ``shares``: each depth weighs its deficit in the next question (its share of
    one more than the verified count, minus its verified count), at least a tenth of its share, so depths whose
    paths die more often (long ones) are drawn more often until the verified mix matches."""
    n = sum(verified.values()) + 1
    depths = sorted(shares)
    weights = [max(shares[k] * 0.1, shares[k] * n - verified[k]) for k in depths]
    return rng.choices(depths, weights=weights)[0]


def gamma_img(next_is_image: bool, history_kinds: Sequence[str]) -> float:
    """Eq. 6. ``history_kinds[j]`` is the kind ("text"/"image") of ``v_j``; ``t = len(history_kinds) - 1``."""
    t = len(history_kinds) - 1
    images = [j for j, kind in enumerate(history_kinds) if kind == "image"]
    if not next_is_image or not images:
        return 1.0
    d = t - images[-1]
    return d / (d + 1) if d > 0 else 1.0


def edge_weight(gamma: float, uses: int, alpha: float = ALPHA) -> float:
    """``w(e|H) = gamma_img / (1 + alpha * c(e))``."""
    return gamma / (1.0 + alpha * uses)


@dataclass(frozen=True, slots=True)
class Path:
    nodes: tuple[str, ...]
    edges: tuple[GraphEdge, ...]

    @property
    def hops(self) -> int:
        return len(self.edges)


def brings_visual_evidence(graph: Graph, path: Path) -> bool:
    """New visual evidence mid-search (ModalSearcher App. B's search-required label): an image after the start, or
    a flag clue, whose candidates' flags the solver fetches."""
    return any(graph.nodes[n].kind == "image" for n in path.nodes[1:]) or any(e.relation.peers for e in path.edges)


@dataclass
class PathSampler:
    graph: Graph
    rng: random.Random
    alpha: float = ALPHA
    k_min: int = K_MIN
    k_max: int = K_MAX
    uses: Counter[tuple[str, str]] = field(default_factory=Counter)  # c(e), by (source, target)
    seen: set[tuple[str, ...]] = field(default_factory=set)
    counts: Counter[str] = field(default_factory=Counter)
    excluded_starts: frozenset[str] = frozenset()  # nodes a question may not start from (images printing a name)

    def __post_init__(self) -> None:
        self._starts = sorted(n for n, node in self.graph.nodes.items()
                              if not node.category and n not in self.excluded_starts)
        self._into: dict[str, set[str]] = {}
        for edge in self.graph.edges():
            self._into.setdefault(edge.target, set()).add(edge.source)

    def candidates(self, history: Sequence[str], used: Sequence[GraphEdge],
                   visual: bool = False) -> list[tuple[GraphEdge, float]]:
        """Eq. 5's ``C_t`` with each candidate's weight, in a deterministic order; ``visual``: an edge that brings
        new visual evidence (to an image, or with a flag clue) weighs ``VISUAL_BOOST`` times more."""
        here = history[-1]
        visited = set(history)
        earlier = set(history[:-1])
        used_keys = {e.key for e in used}
        kinds = [self.graph.nodes[n].kind for n in history]
        if kinds[-1] == "image" and len(history) > 1:
            earlier.discard(history[-2])  # a t2i2t hop: see the module docstring
        out = []
        for target in sorted(self.graph.out.get(here, {})):
            edge = self.graph.out[here][target]
            node = self.graph.nodes[target]
            if target in visited or edge.key in used_keys or node.category:
                continue
            if self._into.get(target, set()) & earlier:
                continue  # a shortcut: an earlier node reaches v' directly
            if any(len(node.name) >= 3 and found(node.name, e.relation.phrase) for e in used):
                continue  # v' is already named in a relation on the path
            weight = edge_weight(gamma_img(node.kind == "image", kinds), self.uses[edge.key], self.alpha)
            if visual and (node.kind == "image" or edge.relation.peers):
                weight *= VISUAL_BOOST
            out.append((edge, weight))
        return out

    def sample(self, depth: int | None = None, visual: bool = False) -> Path | None:
        """One path of ``depth`` hops (default: uniform in ``[k_min, k_max]``), or None for a dead end or a
        duplicate (counted in ``counts``); ``visual``: prefer edges that bring new visual evidence, and draw a
        completed path without any again (``VISUAL_REDRAWS`` times at most, each counted as
        ``sampler_visual_redraw``)."""
        depth = self.rng.randint(self.k_min, self.k_max) if depth is None else depth
        for redraws in range(VISUAL_REDRAWS + 1):
            path = self._walk(depth, visual)
            if path is None or not visual or redraws == VISUAL_REDRAWS or brings_visual_evidence(self.graph, path):
                break
            self.counts["sampler_visual_redraw"] += 1
        if path is None:
            return None
        if path.nodes in self.seen:
            self.counts["sampler_duplicate"] += 1
            return None
        self.seen.add(path.nodes)
        return path

    def _walk(self, depth: int, visual: bool) -> Path | None:
        """A walk of ``depth`` hops from a random start, None at a dead end (counted)."""
        start = self.rng.choice(self._starts)
        history, used = [start], []
        while len(used) < depth:
            options = self.candidates(history, used, visual)
            if not options:
                self.counts["sampler_dead_end"] += 1
                return None
            edge = self.rng.choices([e for e, _ in options], weights=[w for _, w in options])[0]
            history.append(edge.target)
            used.append(edge)
        return Path(tuple(history), tuple(used))

    def accept(self, path: Path) -> None:
        """The path became a question: its edges count as used (``c(e) += 1``)."""
        self.uses.update(e.key for e in path.edges)
