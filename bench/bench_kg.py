"""Identifiability checks per minute on a synthetic KG of realistic shape, against a naive nested-loop solve.

The KG imitates a Wikidata slice: typed entities (people, works, organisations, places), relations with their
usual fan-outs, power-law object popularity (a few hub countries, cities and genres), taxonomic P31 links and
literal values. Structures come from the real pipeline (expand -> enumerate_structures) on sampled seeds; a check
is ``identifiability(kg, structure)``: compile to Eq. 2's query, solve with ``limit=2``, compare with ``{seed}``.

    PYTHONPATH=. .venv/bin/python bench/bench_kg.py     # ~50k entities, ~500k triples, seed 0
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

import numpy as np

from data_gen.kg import (
    KG,
    ExpansionConfig,
    NotDistinguishable,
    Query,
    Structure,
    enumerate_structures,
    expand,
    identifiability,
)
from neos_core.usage import OneLineParser, nonnegative_int, positive_float, positive_int

# kind -> share of entities
KINDS = {"person": 0.40, "work": 0.27, "org": 0.15, "city": 0.12, "region": 0.04, "genre": 0.006,
         "country": 0.004, "class": 0.004}
# subject kind -> (relation, object kind, mean facts per subject); object kind "literal:<name>" draws values.
SCHEMA = {
    "person": [("P31", "class", 1), ("P19", "city", 1), ("P20", "city", 0.6), ("P27", "country", 1),
               ("P54", "org", 0.8), ("P108", "org", 1.2), ("P69", "org", 1), ("P463", "org", 0.6),
               ("P569", "literal:year", 1), ("P166", "work", 0.4)],
    "work": [("P31", "class", 1), ("P50", "person", 1.2), ("P86", "person", 0.5), ("P136", "genre", 1.3),
             ("P495", "country", 1), ("P361", "work", 0.4), ("P577", "literal:year", 1), ("P161", "person", 2.0),
             ("P123", "org", 0.7)],
    "org": [("P31", "class", 1), ("P159", "city", 1), ("P17", "country", 1), ("P112", "person", 0.7),
            ("P571", "literal:year", 1), ("P749", "org", 0.3), ("P127", "org", 0.3)],
    "city": [("P31", "class", 1), ("P17", "country", 1), ("P131", "region", 1), ("P1082", "literal:population", 1),
             ("P47", "city", 1.5)],
    "region": [("P31", "class", 1), ("P17", "country", 1), ("P36", "city", 1)],
    "country": [("P31", "class", 1), ("P36", "city", 1), ("P30", "region", 1)],
    "genre": [("P279", "genre", 1)],
    "class": [("P279", "class", 1)],
}
LITERALS = {"year": [str(y) for y in range(1500, 2026)], "population": [str(10_000 * k) for k in range(1, 3000)]}


def synthetic_kg(n_entities: int, scale: float, seed: int) -> tuple[list[tuple[str, str, str]], set[str]]:
    """Triples (power-law object popularity, geometric fan-out) and the literal terms among the objects."""
    rng = np.random.default_rng(seed)
    pools = {kind: [f"{kind}:{i}" for i in range(max(3, int(n_entities * share)))] for kind, share in KINDS.items()}
    popularity = {}
    for kind, pool in {**pools, **{f"literal:{k}": v for k, v in LITERALS.items()}}.items():
        weights = 1.0 / np.arange(1, len(pool) + 1) ** 1.05
        popularity[kind] = (np.array(pool, dtype=object)[rng.permutation(len(pool))], weights / weights.sum())
    triples: list[tuple[str, str, str]] = []
    for kind, pool in pools.items():
        for relation, obj_kind, mean in SCHEMA[kind]:
            # Geometric counts: most subjects have the mean, a long tail has many more.
            counts = rng.geometric(1.0 / (1.0 + mean * scale), size=len(pool)) - 1
            objects, weights = popularity[obj_kind]
            drawn = iter(rng.choice(objects, size=int(counts.sum()), p=weights))
            for subject, count in zip(pool, counts):
                for _ in range(count):
                    obj = next(drawn)
                    if obj != subject:
                        triples.append((subject, relation, obj))
    literals = {o for _, _, o in triples if o.isdigit()}
    return triples, literals


def naive_solve(triples: list[tuple[str, str, str]], query: Query) -> set[str]:
    """Nested-loop join over the unindexed triple list, constraints in the given order: the baseline."""
    answers: set[str] = set()

    def walk(i: int, env: dict[str, str]) -> None:
        if i == len(query.constraints):
            answers.add(env[query.out])
            return
        pattern = query.constraints[i]
        for triple in triples:
            added: dict[str, str] = {}
            ok = True
            for term, value in zip(pattern, triple):
                if term.startswith("?"):
                    bound = env.get(term) or added.setdefault(term, value)
                    if bound != value:
                        ok = False
                        break
                elif term != value:
                    ok = False
                    break
            if ok:
                walk(i + 1, {**env, **added})

    walk(0, dict(query.bindings))
    return answers


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python bench/bench_kg.py", description="Identifiability checks per minute on a "
                      "synthetic KG shaped like a Wikidata slice, against a naive nested-loop solve of a sample of "
                      "the same checks.")
    p.add_argument("--entities", type=positive_int, default=50_000, metavar="N",
                   help="entities of the synthetic KG (default: 50000, ~500k triples)")
    p.add_argument("--scale", type=positive_float, default=1.4, metavar="X",
                   help="multiplies every relation's mean fan-out (default: 1.4)")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the KG and the sampling (default: 0)")
    p.add_argument("--seeds", type=positive_int, default=300, metavar="N",
                   help="seed entities to expand into structures (default: 300)")
    p.add_argument("--baseline-sample", type=positive_int, default=10, metavar="N",
                   help="checks also run by the naive solve, which is slow (default: 10)")
    p.add_argument("--min-seconds", type=positive_float, default=10.0, metavar="SECONDS",
                   help="repeat the checks for at least this long (default: 10)")
    return p


def main() -> None:
    args = parser().parse_args()

    start = time.perf_counter()
    triples, literals = synthetic_kg(args.entities, args.scale, args.seed)
    kg = KG.from_triples(triples, literals=literals)
    entities = {t for t in kg.terms() if not kg.is_literal(t)}
    print(f"KG: {len(entities):,} entities, {len(literals):,} literals, {len(kg):,} triples, "
          f"max degree {max(kg.degree(e) for e in entities):,}; built in {time.perf_counter() - start:.1f}s")

    rng = np.random.default_rng(args.seed + 1)
    ordered = sorted(entities)
    images = {e for e, keep in zip(ordered, rng.random(len(ordered)) < 0.3) if keep}
    candidates = [e for e in ordered if e.startswith(("person:", "work:", "org:"))]
    seeds = [candidates[i] for i in rng.choice(len(candidates), size=args.seeds, replace=False)]

    start = time.perf_counter()
    structures: list[Structure] = []
    reasons: Counter[str] = Counter()
    accepted = not_distinguishable = 0
    for seed in seeds:
        try:
            dag = expand(kg, seed, ExpansionConfig(max_depth=3, max_branching=3, max_nodes=30))
        except NotDistinguishable:
            not_distinguishable += 1
            continue
        found = enumerate_structures(kg, dag, images)
        accepted += len(found.accepted)
        reasons.update(found.rejection_counts)
        structures += list(found.accepted) + [s for s, _ in found.rejected]
    pipeline_s = time.perf_counter() - start
    print(f"pipeline: {len(seeds)} seeds ({not_distinguishable} not distinguishable) -> {len(structures):,} "
          f"candidate structures, {accepted:,} identifiable, rejected {dict(reasons)}; "
          f"expand+enumerate {pipeline_s:.1f}s")
    if not structures:
        raise SystemExit("no candidate structures: nothing to measure")

    checks = 0
    start = time.perf_counter()
    while time.perf_counter() - start < args.min_seconds:
        for structure in structures:
            identifiability(kg, structure)
        checks += len(structures)
    indexed_rate = checks / (time.perf_counter() - start) * 60
    kinds = Counter(s.kind for s in structures)
    print(f"indexed: {indexed_rate:,.0f} checks/minute on one core ({checks:,} checks; {dict(kinds)})")

    sample = [structures[i] for i in rng.choice(len(structures), size=min(args.baseline_sample, len(structures)),
                                                replace=False)]
    start = time.perf_counter()
    for structure in sample:
        query = structure.query()
        assert naive_solve(triples, query) == kg.solve_query(query), "baseline and solver disagree"
    naive_rate = len(sample) / (time.perf_counter() - start) * 60
    print(f"naive nested loop: {naive_rate:,.1f} checks/minute on {len(sample)} sampled structures "
          f"(answers agree with the solver)")
    print(f"speed-up: {indexed_rate / naive_rate:,.0f}x")


if __name__ == "__main__":
    main()
