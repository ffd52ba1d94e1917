"""Behaviour analyses of trajectories, as the papers report them (no verl import).

Input: ``TrajectoryRecord``s (the harness's, or ``extra_fields["neos_trajectory"]`` exported during training) with
their correctness and, where known, per-turn token counts and latencies.

- tool-call distribution (Neos Fig. 4): calls per tool, share of all calls, mean per trajectory;
- turns split by correctness (Neos Fig. 5);
- truncation rate: trajectories that ran out of turns (``termination_reason == "max_turns"``, ModalSearcher Eq. 8);
- repeated searches (ModalSearcher App. C.3, Eqs. 9–11): within a trajectory, unordered pairs of search calls of the
  same tool whose query embeddings have cosine > 0.9 and whose top-5 results share more than 0.4 · 5 items. A call's
  query is its ``query`` argument (Neos' TextSearch/ImageSearch take a list: joined); its results are the first five
  distinct URLs its observation lists, in order. Image-query searches (reverse image search) have no query text and
  are not counted. The embedding model is a parameter (``embed.minilm`` by default);
- t2i invocation rate: trajectories with at least one text-to-image search (``t2i_search``, Neos' ``ImageSearch``);
- errors by class and type (agent: malformed turns, bad arguments; tool: timeouts, unavailable);
- tokens and latency per turn (policy completion tokens and reply time; tool latency per call).
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np

from verl_ext.rollout.record import CallRecord, TrajectoryRecord

SEARCH_TOOLS = frozenset({"TextSearch", "ImageSearch", "t2t_search", "t2i_search"})  # text-query searches
T2I_TOOLS = frozenset({"t2i_search", "ImageSearch"})
COSINE_THRESHOLD = 0.9  # ModalSearcher Eq. 11
OVERLAP_THRESHOLD = 0.4  # of RESULTS_COMPARED, ModalSearcher Eq. 11
RESULTS_COMPARED = 5
_URL = re.compile(r"https?://[^\s<>\"')\]]+")

Embed = Callable[[list[str]], np.ndarray]  # texts -> (n, d) embeddings


@dataclass
class TrajectorySample:
    """One trajectory for analysis."""

    record: TrajectoryRecord
    correct: bool | None  # None: unjudged
    turn_stats: list[dict[str, Any]] = field(default_factory=list)  # prompt/completion tokens, latency_s per turn


def search_query(call: CallRecord) -> str | None:
    query = call.arguments.get("query")
    if isinstance(query, list):
        query = " | ".join(str(q) for q in query)
    return query if isinstance(query, str) and query.strip() else None


def search_results(call: CallRecord) -> list[str]:
    """The first ``RESULTS_COMPARED`` distinct URLs of the observation, in order."""
    urls = list(dict.fromkeys(u.rstrip(".,;") for u in _URL.findall(call.observation)))
    return urls[:RESULTS_COMPARED]


def repeated_searches(record: TrajectoryRecord, embed: Embed) -> int:
    """R(τ): pairs of searches with query cosine > 0.9 and result overlap > 0.4 (ModalSearcher Eqs. 9–11)."""
    calls = [c for t in record.turns for c in t.calls if c.ok and c.tool_name in SEARCH_TOOLS and search_query(c)]
    if len(calls) < 2:
        return 0
    vectors = embed([search_query(c) or "" for c in calls])
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True).clip(min=1e-12)
    results = [set(search_results(c)) for c in calls]
    count = 0
    for i, j in combinations(range(len(calls)), 2):
        if calls[i].tool_name != calls[j].tool_name:
            continue
        cosine = float(vectors[i] @ vectors[j])
        overlap = len(results[i] & results[j]) / RESULTS_COMPARED
        count += cosine > COSINE_THRESHOLD and overlap > OVERLAP_THRESHOLD
    return count


def _describe(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"n": 0, "mean": None, "median": None, "p90": None}
    ordered = sorted(values)
    return {"n": len(values), "mean": statistics.fmean(values), "median": statistics.median(values),
            "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]}


def analyse(episodes: Sequence[TrajectorySample], embed: Embed | None) -> dict[str, Any]:
    """Every analysis as plain JSON; ``embed`` None leaves the repeated-search count out (reported as skipped)."""
    n = len(episodes)
    calls = [c for e in episodes for t in e.record.turns for c in t.calls]
    tools = Counter(c.tool_name for c in calls)
    errors: Counter[str] = Counter()
    for e in episodes:
        for t in e.record.turns:
            if t.error_class:
                errors[f"{t.error_class}/{t.error_type}"] += 1
    turns = {label: [len(e.record.turns) for e in episodes if e.correct is ok]
             for label, ok in (("correct", True), ("incorrect", False))}
    stats = [s for e in episodes for s in e.turn_stats]
    out: dict[str, Any] = {
        "trajectories": n,
        "tool_calls": {"total": len(calls), "per_trajectory": len(calls) / n if n else 0.0,
                       "by_tool": dict(tools.most_common()),
                       "share": {k: v / len(calls) for k, v in tools.most_common()} if calls else {}},
        "turns_by_correctness": turns,
        "termination": dict(Counter(e.record.termination_reason for e in episodes).most_common()),
        "truncation_rate": sum(e.record.termination_reason == "max_turns" for e in episodes) / n if n else 0.0,
        "t2i_rate": sum(any(c.tool_name in T2I_TOOLS for t in e.record.turns for c in t.calls)
                        for e in episodes) / n if n else 0.0,
        "errors_by_class": dict(errors.most_common()),
        "per_turn": {
            "completion_tokens": _describe([s["completion_tokens"] for s in stats
                                            if s.get("completion_tokens") is not None]),
            "prompt_tokens": _describe([s["prompt_tokens"] for s in stats if s.get("prompt_tokens") is not None]),
            "policy_latency_s": _describe([s["latency_s"] for s in stats if s.get("latency_s") is not None]),
            "tool_latency_s": _describe([c.latency_s for c in calls]),
        },
    }
    if embed is None:
        out["repeated_searches"] = {"skipped": "no embedding model (--no-embeddings or the [eval] extra missing)"}
    else:
        counts = [repeated_searches(e.record, embed) for e in episodes]
        out["repeated_searches"] = {"per_trajectory": sum(counts) / n if n else 0.0, "total": sum(counts),
                                    "trajectories_with_any": sum(c > 0 for c in counts)}
    return out
