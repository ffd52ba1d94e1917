"""``python -m data_gen modalsearch --world DIR --out DIR [--limit N] [--seed S] [--ocr] [--llm-url URL
--llm-model M] [--teacher-url URL --teacher-model M]``: the whole ModalSearch pipeline; with ``--llm-url`` a model
proposes t->t relations and words the terminal questions and backward rewrites, with ``--teacher-url`` a model runs
the expert episodes (``data_gen.common.teacher``; the programmatic expert takes over where its episode cannot be
kept), else every step is offline and uses no model.

Two graphs from disjoint seed sets: ``benchmark`` first, then ``train``, which never enters a benchmark node. Each
graph is built once and saved (``OUT/graph_<name>.json``, atomically, keyed by a fingerprint of world, seed and
settings). Sampling is deterministic given the graph and the accepted paths, so a restart replays the same sequence:
paths already in ``OUT/results.jsonl`` (the append-only log) are skipped, re-accepting the verified ones so that
``c(e)`` evolves as before; nothing is lost or done twice. Then the export (policy data, MEI pairs in
``OUT/mei_sft.jsonl``) and the statistics report with plots.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import random
import re
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path

import aiohttp

from data_gen.common.cli import counts_work, progress, report_output, world_or_exit
from data_gen.common.episode import Expert
from data_gen.common.export import hash_unit
from data_gen.common.llm import SyncChat
from data_gen.common.report import bar_charts
from data_gen.common.stats import SHARE_FILTERS, Shares, diversity, filter_rates, stage_rates
from data_gen.common.teacher import TeacherExpert, TeacherSettings
from data_gen.kg import KG
from data_gen.modalsearch.build import BuildConfig, GraphBuilder
from data_gen.modalsearch.expert import ModalSearchExpert, teacher_brief
from data_gen.modalsearch.export import check_exportable, export, mei_pairs
from data_gen.modalsearch.graph import Graph
from data_gen.modalsearch.llm import LLMRelationProposer, LLMWording
from data_gen.modalsearch.questions import QuestionWriter, Rejection, path_key
from data_gen.modalsearch.relations import CLUE, OfflineRelationProposer
from data_gen.modalsearch.sampler import HOP_SHARES, SEARCH_REQUIRED_SHARE, PathSampler, depth_towards
from data_gen.modalsearch.schema import Outcome
from data_gen.modalsearch.visual import ToolServerImageSearch
from data_gen.neos.observer import NAMED_SOURCES
from neos_core.results import ResultLog
from neos_core.world.store import World
from tool_server.launch import served
from verl_ext.reward.judge import JudgeConfig
from verl_ext.tools.client import ToolServerClient, ToolServerUnavailable

FILTERS = ("text_only", "named_start_image", "ambiguous_hop", "image_detour", "terminal_text", "terminal_image",
           "source_colours", "start_description", "leak", "grammar", *SHARE_FILTERS, "expert")
SEED_KINDS = frozenset({"country", "city", "subdivision", "us_state", "brand", "stamp", "synset", "article",
                        "language", "currency"})
BENCHMARK_SEED_SHARE = 0.1
# No answer type above 7 of a 60-question run (issue 36's diversity goal: at least 13 types, largest 13%): steered
# towards new visual evidence, the sampler meets the same few long-tail facts (an area, a former currency) far more
# often, and at 8 a type four types took 32 of 60 (13 types). A short run keeps 2 a type: one each asks a small graph
# for as many types as questions.
MAX_ANSWER_TYPE_SHARE = 0.12
MIN_ANSWER_TYPE_CAP = 2
BENCHMARK_SHARE = 0.1  # of --limit
GRAPH_VERSION = 4  # part of a saved graph's fingerprint: bump when expansion changes what a graph holds
OUTPUT_FILES = ["train.parquet", "rl.parquet", "benchmark.parquet", "sft.parquet", "sft.jsonl", "references.jsonl",
                "mei_sft.jsonl", "stats.json", "plots/", "results.jsonl"]


def seed_pages(world: World, seed: int) -> tuple[list[str], list[str]]:
    """(benchmark seeds, training seeds): disjoint by a hash of the page id, each in a seeded random order where a
    page's place depends on its id alone (a world that gains or loses other pages keeps the order of the rest)."""
    pages = sorted((p.id for p in world.pages.values()
                    if p.entity_id in world.entities and world.entities[p.entity_id].kind in SEED_KINDS),
                   key=lambda p: hash_unit(f"order:{seed}:{p}"))
    bench = [p for p in pages if hash_unit(f"seed:{p}") < BENCHMARK_SEED_SHARE]
    return bench, [p for p in pages if hash_unit(f"seed:{p}") >= BENCHMARK_SEED_SHARE]


async def _graph(builder: GraphBuilder, name: str, seeds: Sequence[str], blocked: frozenset[str], out: Path,
                 fingerprint: str) -> tuple[Graph, dict]:
    path, stats_path = out / f"graph_{name}.json", out / f"graph_{name}.stats.json"
    graph = Graph.load(path, fingerprint)
    if graph is not None and stats_path.is_file():
        return graph, json.loads(stats_path.read_text())
    graph, stats = await builder.build(name, seeds, blocked)
    info = {"counts": graph.counts(), "expansion": dict(stats.counts),
            "seconds": {k: round(v, 2) for k, v in stats.seconds.items()}}
    graph.save(path, fingerprint)
    stats_path.write_text(json.dumps(info, indent=2) + "\n")
    return graph, info


async def _judge(writer: QuestionWriter, expert: Expert, graph: Graph, path, key: str, shares: Shares) -> Outcome:
    """One path: its question (a terminal fact of a type with room in the run first), then (unless its answer or
    answer type already has its share of the run) the expert."""
    t = time.perf_counter()
    result = writer.write(graph, path, shares.full())
    seconds = {"synthesis": time.perf_counter() - t}
    base = {"key": key, "graph": graph.name, "path": list(path.nodes), "seconds": seconds}
    if isinstance(result, Rejection):
        return Outcome(status="rejected", filter=result.filter, detail=result.detail, **base)
    over = shares.over(result.answer.lower(), result.answer_type, result.answer)
    if over is not None:
        return Outcome(status="rejected", filter=over[0], detail=over[1], task=result, **base)
    t = time.perf_counter()
    try:
        solved, record, why = await expert.solve(result)
    except ToolServerUnavailable as err:
        return Outcome(status="error", detail=str(err), task=result, **base)
    seconds["expert"] = time.perf_counter() - t
    return Outcome(status="verified" if solved else "rejected", filter=None if solved else "expert", detail=why,
                   task=result, trajectory=record.model_dump(mode="json"), **base)


async def run(args: argparse.Namespace, url: str, world: World | None = None) -> dict:
    """The pipeline into ``args.out`` with the tool server at ``url``; ``world`` when already loaded."""
    world = world or World.load(args.world)
    kg = KG.from_triples((t.s, t.p, t.o) for t in world.triples if not t.literal)
    bench_seeds, train_seeds = seed_pages(world, args.seed)
    plan = (("benchmark", bench_seeds[: max(1, args.seeds // 4)], args.benchmark_nodes),
            ("train", train_seeds[: args.seeds], args.max_nodes))
    quotas = _quotas(args.limit)
    log = ResultLog(args.out / "results.jsonl", Outcome)
    report: dict = {"graphs": {}, "sampler": {}}
    with ExitStack() as models:
        wording = None
        if args.llm_url:
            config = JudgeConfig(url=args.llm_url, model=args.llm_model, max_tokens=512)
            wording = LLMWording(models.enter_context(SyncChat(config)))
        writer = QuestionWriter(world, kg, seed=args.seed, wording=wording, text_only=args.text_only)
        report["question_wording"] = writer.wording.name
        await _sample(args, url, world, kg, plan, quotas, log, writer, report)
        report["terminal_facts_not_asked"] = dict(writer.counts)
        if wording is not None:
            report["llm_wording"] = wording.usage.report()
    log.close()
    return report


async def _sample(args: argparse.Namespace, url: str, world: World, kg: KG, plan, quotas: dict[str, int | None],
                  log: ResultLog, writer: QuestionWriter, report: dict) -> None:
    """Graphs, then paths and questions on each, into ``log``; sampler and relation counts into ``report``."""
    async with ToolServerClient(url) as client, aiohttp.ClientSession() as http:
        search = ToolServerImageSearch(client)
        blocked: frozenset[str] = frozenset()
        expert: Expert = ModalSearchExpert(client, world)
        teacher = TeacherSettings.from_args(args)
        if teacher is not None:
            expert = teacher.expert(client, http, "modalsearch", expert, lambda task: teacher_brief(world, task),
                                    check_exportable)
        relations = OfflineRelationProposer(world, kg)
        if args.llm_url:
            relations = LLMRelationProposer(JudgeConfig(url=args.llm_url, model=args.llm_model), http, relations)
        report["relation_proposer"] = relations.name
        shares = Shares.of_run(args.limit, MAX_ANSWER_TYPE_SHARE, MIN_ANSWER_TYPE_CAP)
        searching: set[str] = set()  # verified paths whose question is search-required (probe included)
        for o in log.outcomes():
            if o.status == "verified" and o.task:
                shares.count(o.task.answer.lower(), o.task.answer_type)
                if o.task.search_required():
                    searching.add(o.key)
        for name, seeds, budget in plan:
            config = BuildConfig(max_nodes=budget, ocr=args.ocr)
            builder = GraphBuilder(world, kg, search, seed=args.seed, config=config, relations=relations)
            fingerprint = hashlib.sha256(json.dumps(
                [GRAPH_VERSION, world.manifest.get("content_hash"), args.seed, name, seeds, budget, sorted(blocked),
                 asdict(builder.config), relations.name, args.llm_url and args.llm_model]).encode()).hexdigest()[:20]
            graph, info = await _graph(builder, name, seeds, blocked, args.out, fingerprint)
            report["graphs"][name] = info
            blocked = frozenset(graph.nodes)
            named = frozenset(n for n, node in graph.nodes.items()
                              if node.kind == "image" and world.images[node.ref].source in NAMED_SOURCES)
            sampler = PathSampler(graph, random.Random(f"{args.seed}:{name}:paths"), excluded_starts=named)
            verified = draws = searched = 0
            hops: Counter[int] = Counter()
            depths = random.Random(f"{args.seed}:{name}:depths")
            bar = progress(quotas[name], 0, args.attempts, f"modalsearch {name}", "draw")
            start = time.perf_counter()
            for _ in range(args.attempts):
                if quotas[name] is not None and verified >= quotas[name]:
                    break
                draws += 1
                bar.update(1 if counts_work(quotas[name]) else 0)
                path = sampler.sample(depth_towards(HOP_SHARES, hops, depths),
                                      visual=searched < SEARCH_REQUIRED_SHARE * (verified + 1))
                if path is None:
                    continue
                key = path_key(name, path)
                if key not in log.done:
                    outcome = await _judge(writer, expert, graph, path, key, shares)
                    log.append(outcome)
                    if outcome.status == "verified" and outcome.task:
                        shares.count(outcome.task.answer.lower(), outcome.task.answer_type)
                        if outcome.task.search_required():
                            searching.add(key)
                if log.statuses.get(key) == "verified":
                    sampler.accept(path)
                    verified += 1
                    hops[path.hops] += 1
                    searched += key in searching  # the label alone would count closed-book questions
                    bar.update(0 if counts_work(quotas[name]) else 1)
                bar.set_postfix(verified=verified, draws=draws)
            bar.close()
            report["sampler"][name] = {**dict(sampler.counts), "draws": draws,
                                       "seconds": round(time.perf_counter() - start, 2)}
        await search.close()
        if isinstance(relations, LLMRelationProposer):
            report["llm_relations"] = {"calls": relations.calls, "fallbacks": relations.fallbacks}
        if isinstance(expert, TeacherExpert):
            report["teacher"] = expert.report()


def _quotas(limit: int | None) -> dict[str, int | None]:
    if limit is None:
        return {"benchmark": None, "train": None}
    bench = min(limit, max(1, math.ceil(limit * BENCHMARK_SHARE)))
    return {"benchmark": bench, "train": limit - bench}


def statistics(outcomes: Sequence[Outcome], run_report: dict) -> dict:
    """Rejections per filter (rate = rejected / entering it), stage throughput, distributions of the verified."""
    judged = [o for o in outcomes if o.status != "error"]
    verified = [o.task for o in judged if o.status == "verified" and o.task]
    return {
        "paths_judged": len(judged), "infrastructure_errors_excluded": len(outcomes) - len(judged),
        "verified": len(verified), "filters": filter_rates(judged, FILTERS),
        "stages": stage_rates(outcomes, outcomes, ("synthesis", "expert")),
        "hops": dict(sorted(Counter(len(t.nodes) - 1 for t in verified).items())),
        "modality_path_types": dict(Counter(t.modality for t in verified).most_common()),
        "labels": dict(Counter(t.label for t in verified).most_common()),
        # new visual evidence fetched mid-search (App. C.1: 57.6% of the paper's generated data) that a closed-book
        # solver cannot replace; without the probe, the label alone; the probe moved the difference
        "search_required_share": share(sum(t.search_required() for t in verified), len(verified)),
        "search_required_share_without_probe": share(sum(t.label == "search_required" for t in verified),
                                                     len(verified)),
        "closed_book_moved": sum(t.label == "search_required" and t.closed_book for t in verified),
        "closed_book_solved": sum(t.closed_book for t in verified),
        "answer_types": dict(Counter(t.answer_type for t in verified).most_common()),
        "terminal_modality": dict(Counter(t.terminal.modality for t in verified).most_common()),
        "by_graph": dict(Counter(t.graph for t in verified)),
        "diversity": diversity([t.answer for t in verified], [t.answer_type for t in verified],
                               [relation_type(h.relation) for t in verified for h in t.hops],
                               [f"{t.modality}: {t.terminal.template}" for t in verified]),
        **run_report,
    }


def share(part: int, whole: int) -> float:
    return round(part / max(1, whole), 4)


_QUOTED = re.compile(" \u201c[^\u201d]*\u201d")


def relation_type(phrase: str) -> str:
    """A hop's relation without what varies per question: the name clue ("whose name begins with “G” and that is
    part of {x}" is "is part of {x}") and a context template's quoted sentence."""
    return _QUOTED.sub("", CLUE.sub("", phrase))


def plots(stats: dict, out: Path) -> list[str]:
    sampler = Counter()
    for counts in stats["sampler"].values():
        sampler.update({k: v for k, v in counts.items() if k.startswith("sampler_")})
    rejections = {**{k: v["rejected"] for k, v in stats["filters"].items()}, **sampler}
    return bar_charts({"hops": stats["hops"], "modality_path_types": stats["modality_path_types"],
                       "labels": stats["labels"], "rejections_per_filter": rejections,
                       "answer_types": stats["answer_types"], "relations": stats["diversity"]["relations"],
                       "skeletons": stats["diversity"]["skeletons"],
                       "top_answers": stats["diversity"]["top_answers"]}, out, "ModalSearch")


def report(args: argparse.Namespace, run_report: dict) -> dict:
    """Export, statistics and plots from everything in the log (this run and earlier ones)."""
    log = ResultLog(args.out / "results.jsonl", Outcome)
    outcomes = log.outcomes()
    log.close()
    stats = statistics(outcomes, run_report)
    stats["splits"] = export(outcomes, args.world, args.out)
    stats["mei_pairs"] = mei_pairs(outcomes, args.world, args.out, args.out / "tool_server_cache")
    stats["plots"] = plots(stats, args.out / "plots")
    return stats


def main(args: argparse.Namespace) -> int:
    world = world_or_exit(args.world, "modalsearch")  # before the output directory or a tool server exists
    if world is None:
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with served(args.world, "--cache-dir", str(args.out / "tool_server_cache")) as url:
        run_report = asyncio.run(run(args, url, world))
    stats = report(args, run_report)
    stats["wall_seconds_this_run"] = round(time.perf_counter() - start, 1)
    (args.out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    print(json.dumps({k: stats[k] for k in ("verified", "filters", "stages", "labels", "splits")}, indent=2))
    report_output(args.out, stats["verified"], "questions", OUTPUT_FILES)
    return 0
