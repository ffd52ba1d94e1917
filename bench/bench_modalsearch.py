"""ModalSearch pipeline throughput per stage on the small world, and the effect of the edge-reuse penalty.

Each repeat runs the whole pipeline (``python -m data_gen modalsearch``) into a fresh directory with the same seed,
so the data (graphs, paths, questions, rejections) are identical across repeats and only the timings vary; the
medians are reported. Stages: graph construction (text expansion, visual expansion through the tool server's
``t2i_search``, image linking), question synthesis (composition, terminal question and its verification,
rewriting), the programmatic expert (real ModalSearcher tool calls), and end to end.

The one comparable figure: edge reuse on the training graph with ``alpha = 1`` (the paper's penalty) against
``alpha = 0`` (no penalty) measured in the same run: the share of distinct edges among the edges of 500 accepted
paths (higher = more diverse paths).

    PYTHONPATH=. .venv/bin/python bench/bench_modalsearch.py --world WORLD_DIR --limit 300 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
from pathlib import Path

from data_gen.modalsearch import cli as pipeline
from data_gen.modalsearch import flags
from data_gen.modalsearch.graph import Graph
from data_gen.modalsearch.sampler import PathSampler
from neos_core.usage import OneLineParser, positive_int


def distinct_edge_share(graph: Graph, alpha: float, paths: int = 500, seed: int = 0) -> float:
    sampler = PathSampler(graph, random.Random(seed), alpha=alpha)
    edges, accepted = [], 0
    for _ in range(paths * 20):
        path = sampler.sample()
        if path is None:
            continue
        sampler.accept(path)
        edges += [e.key for e in path.edges]
        accepted += 1
        if accepted == paths:
            break
    return len(set(edges)) / len(edges)


def one_run(world: Path, limit: int, out: Path) -> dict:
    args = flags.parser(OneLineParser()).parse_args(["--world", str(world), "--out", str(out),
                                                       "--limit", str(limit)])
    pipeline.main(args)
    return json.loads((out / "stats.json").read_text())


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python bench/bench_modalsearch.py", description="ModalSearch pipeline throughput per "
                      "stage on the small world (medians over repeats of the same seeded run), and the distinct-edge "
                      "share of paths with the edge-reuse penalty against without it.")
    p.add_argument("--world", type=Path, required=True, metavar="DIR", help="a built small world")
    p.add_argument("--limit", type=positive_int, default=300, metavar="N",
                   help="verified questions per run, the pipeline's --limit (default: 300)")
    p.add_argument("--repeat", type=positive_int, default=3, metavar="N",
                   help="runs into fresh directories; medians are reported (default: 3)")
    return p


def main_bench() -> None:
    p = parser()
    args = p.parse_args()
    if not (args.world / "manifest.json").is_file():
        p.error(f"--world: {args.world} is not a built world")
    runs, tmp = [], Path(tempfile.mkdtemp(prefix="bench_modalsearch_"))
    for i in range(args.repeat):
        runs.append(one_run(args.world, args.limit, tmp / f"run{i}"))
    figures: dict[str, list[float]] = {}
    for stats in runs:
        graph_s = sum(sum(g["seconds"].values()) for g in stats["graphs"].values())
        nodes = sum(g["counts"]["text_nodes"] + g["counts"]["image_nodes"] for g in stats["graphs"].values())
        judged = stats["paths_judged"]
        for key, value in {
            "graph nodes/min": 60 * nodes / graph_s,
            "visual expansion s": sum(g["seconds"].get("visual_expansion", 0) for g in stats["graphs"].values()),
            "synthesis questions/min": stats["stages"]["synthesis"]["per_minute"],
            "expert questions/min": stats["stages"]["expert"]["per_minute"],
            "verified/min end to end": 60 * stats["verified"] / stats["wall_seconds_this_run"],
            "paths judged": judged,
        }.items():
            figures.setdefault(key, []).append(value)
    last = runs[-1]
    print(json.dumps({"graphs": {k: v["counts"] for k, v in last["graphs"].items()},
                      "filters": last["filters"], "labels": last["labels"], "hops": last["hops"],
                      "modality_path_types": last["modality_path_types"], "splits": last["splits"]}, indent=1))
    for key, values in figures.items():
        print(f"{key:28s} median {statistics.median(values):9.1f}   runs {[round(v, 1) for v in values]}")
    graph = Graph.load(tmp / "run0" / "graph_train.json", json.loads((tmp / "run0" / "graph_train.json")
                                                                      .read_text())["fingerprint"])
    with_penalty, without = distinct_edge_share(graph, 1.0), distinct_edge_share(graph, 0.0)
    print(f"distinct-edge share over 500 paths: alpha=1 {with_penalty:.3f}, alpha=0 {without:.3f}, "
          f"ratio {with_penalty / without:.2f}x")


if __name__ == "__main__":
    main_bench()
