"""Graph assembly (App. A.3): from seed articles, alternate text-node expansion (t2t relations and t2i visual
expansion) and image-node expansion (i2t linking) over one queue, reusing nodes through the hash table and
completing deferred edges as nodes are expanded. Deterministic given the world, the seeds and ``seed``.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from data_gen.kg import KG
from data_gen.modalsearch.graph import Assembly, Graph, Node, Relation
from data_gen.modalsearch.linking import OfflineImageLinker
from data_gen.modalsearch.relations import K_CAND, OfflineRelationProposer, RelationProposer, is_category, noun
from data_gen.modalsearch.visual import (
    ImageSearch,
    OfflineConsistencyJudge,
    OfflineVisualProposer,
    assess,
    figure_relations,
    offline_stability_screen,
)
from data_gen.neos.observer import IMAGE_KINDS, rapid_ocr
from neos_core.world.store import World


@dataclass(frozen=True)
class BuildConfig:
    max_nodes: int = 1200
    k_cand: int = K_CAND
    ocr: bool = False  # image linking also reads the text in images (RapidOCR); part of a saved graph's fingerprint


@dataclass
class BuildStats:
    counts: Counter[str] = field(default_factory=Counter)
    seconds: Counter[str] = field(default_factory=Counter)


def text_id(page_id: str) -> str:
    return f"t:{page_id}"


def image_id(world_image_id: str) -> str:
    return f"i:{world_image_id}"


class GraphBuilder:
    def __init__(self, world: World, kg: KG, search: ImageSearch, *, seed: int = 0, config: BuildConfig = BuildConfig(),
                 relations: RelationProposer | None = None) -> None:
        self.world = world
        self.kg = kg
        self.search = search
        self.seed = seed
        self.config = config
        self.relations = relations or OfflineRelationProposer(world, kg)
        self.visual = OfflineVisualProposer(world)
        self.judge = OfflineConsistencyJudge(world)
        self.linker = OfflineImageLinker(world, kg, ocr=rapid_ocr() if config.ocr else None)

    async def build(self, name: str, seeds: Sequence[str],
                    blocked: frozenset[str] = frozenset()) -> tuple[Graph, BuildStats]:
        """Expand from ``seeds`` (page ids) until the queue empties or the graph holds ``max_nodes`` nodes."""
        rng = random.Random(f"{self.seed}:{name}")
        stats = BuildStats()
        asm = Assembly(Graph(name), self.config.max_nodes, blocked)
        descriptions: dict[str, str] = {}
        for page_id in seeds:
            asm.enqueue(text_id(page_id))
        while asm.queue and not asm.full():
            node_id = asm.queue.popleft()
            if node_id.startswith("t:"):
                asm.materialize(self.text_node(node_id[2:]))
                t = time.perf_counter()
                await self._expand_text(node_id, asm, rng, stats)
                stats.seconds["text_expansion"] += time.perf_counter() - t
                t = time.perf_counter()
                await self._expand_visual(node_id, asm, descriptions, stats)
                stats.seconds["visual_expansion"] += time.perf_counter() - t
            else:
                asm.materialize(self.image_node(node_id[2:], descriptions.get(node_id, "")))
                t = time.perf_counter()
                for linked in self.linker.link(self.world.images[node_id[2:]]):
                    asm.propose(node_id, text_id(linked.page.id), "i2t", linked.relation)
                stats.seconds["image_expansion"] += time.perf_counter() - t
        graph = asm.graph
        has_t2i = {e.target for e in graph.edges() if e.kind == "t2i"}
        for nid, node in list(graph.nodes.items()):  # stable iff a t2i edge reaches it
            if node.kind == "image":
                graph.nodes[nid] = replace(node, stable=nid in has_t2i)
        stats.counts.update(deferred_edges_completed=asm.deferred_completed, nodes_reused=asm.reused,
                            deferred_edges_dropped=sum(len(v) for v in asm.deferred.values()),
                            i2t_recognized=self.linker.counts.recognized,
                            i2t_recognized_by_ocr=self.linker.counts.recognized_by_ocr,
                            i2t_unverified=self.linker.counts.unverified)
        return graph, stats

    def text_node(self, page_id: str) -> Node:
        page = self.world.pages[page_id]
        return Node(text_id(page_id), "text", page_id, page.title, noun(self.world, page.entity_id), page.url,
                    entity=page.entity_id, category=is_category(self.world, page))

    def image_node(self, world_image_id: str, description: str) -> Node:
        image = self.world.images[world_image_id]
        return Node(image_id(world_image_id), "image", world_image_id, image.caption,
                    IMAGE_KINDS.get(image.source, "image"), image.url, entity=image.entity_id,
                    description=description or image.alt, source_page=image.page_id, stable=False)

    async def _expand_text(self, node_id: str, asm: Assembly, rng: random.Random, stats: BuildStats) -> None:
        page = self.world.pages[node_id[2:]]
        links = sorted(p for p in page.links if p in self.world.pages and text_id(p) not in asm.blocked)
        links = [p for p in links if not is_category(self.world, self.world.pages[p])]
        stats.counts["t2t_links_category_or_blocked"] += len(page.links) - len(links)
        sampled = rng.sample(links, min(self.config.k_cand, len(links)))
        for target in sampled:
            relation = await self.relations.propose(page, self.world.pages[target])
            stats.counts["t2t_candidates"] += 1
            if relation is None:
                stats.counts["t2t_filtered"] += 1
                continue
            asm.propose(node_id, text_id(target), "t2t", relation)

    async def _expand_visual(self, node_id: str, asm: Assembly, descriptions: dict[str, str],
                             stats: BuildStats) -> None:
        page = self.world.pages[node_id[2:]]
        for image, relation in figure_relations(self.world, page):
            stats.counts["visual_page_figures"] += 1
            asm.propose(node_id, image_id(image.id), "t2i", relation)
        for proposal in self.visual.propose(page):
            stats.counts["visual_proposals"] += 1
            if not offline_stability_screen(proposal, page.title):
                stats.counts["visual_screened_out"] += 1
                continue
            result = await assess(proposal, page, self.search, self.judge, self.world)
            if result.node is None:
                stats.counts["visual_no_valid_result"] += 1
                continue
            target = image_id(result.node.id)
            if result.stable:
                stats.counts["visual_stable"] += 1
                descriptions.setdefault(target, proposal.description)
                asm.propose(node_id, target, "t2i",
                            Relation(f"is the {IMAGE_KINDS.get(result.node.source, 'image')} of {{x}}", unique=True,
                                     source="retrievability"))
            else:
                stats.counts["visual_ambiguous"] += 1
                asm.enqueue(target, first=True)  # kept as a possible start node, without a t2i in-edge
