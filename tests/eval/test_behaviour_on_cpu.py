"""Behaviour analyses by hand: ModalSearcher's repeated-search rule at its thresholds (Eq. 11: cosine > 0.9 and
overlap > 0.4 of 5, strictly), truncation, t2i rate, tool mix, error classes. The embedder here is a fixed table of
vectors (the rule's arithmetic is under test; the real MiniLM runs in ``test_eval_run_on_cpu.py``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from verl_ext.eval.behaviour import TrajectorySample, analyse, repeated_searches, search_results
from verl_ext.rollout.record import CallRecord, TrajectoryRecord, TurnRecord


def _results(*pages: str) -> str:
    return "\n".join(f"{i}. P — https://w/{p}" for i, p in enumerate(pages, 1))


def _record(calls: list[CallRecord], ending: str = "answer", errors: int = 0) -> TrajectoryRecord:
    turns = [TurnRecord(index=i, span=(0, 0), text="", outcome="call_ok", calls=[c]) for i, c in enumerate(calls)]
    turns += [TurnRecord(index=len(turns) + j, span=(0, 0), text="x", outcome="no_action", error_class="agent",
                         error_type="bad_format") for j in range(errors)]
    return TrajectoryRecord(protocol="modalsearch", question="q", session_id=None, group_id=None, mei_version=None,
                            termination_reason=ending, turns=turns)


def _search(tool: str, query: str, *pages: str) -> CallRecord:
    return CallRecord(tool_name=tool, arguments={"query": query}, ok=True, observation=_results(*pages))


ANGLE = {"a": 0.0, "a'": math.acos(0.95), "a''": math.acos(0.9), "b": math.pi / 2}


def _embed(texts: list[str]) -> np.ndarray:
    """Unit vectors at fixed angles: cos(a, a') = 0.95, cos(a, a'') = 0.9 exactly, cos(a, b) = 0."""
    return np.array([[math.cos(ANGLE[t]), math.sin(ANGLE[t])] for t in texts])


def test_repeated_search_thresholds() -> None:
    three = ("p1", "p2", "p3", "x1", "x2")
    same3 = ("p1", "p2", "p3", "y1", "y2")
    same2 = ("p1", "p2", "z1", "z2", "z3")
    assert repeated_searches(_record([_search("t2t_search", "a", *three), _search("t2t_search", "a'", *same3)]),
                             _embed) == 1  # 0.95 > 0.9 and 3/5 > 0.4
    assert repeated_searches(_record([_search("t2t_search", "a", *three), _search("t2t_search", "a'", *same2)]),
                             _embed) == 0  # 2/5 is not > 0.4
    assert repeated_searches(_record([_search("t2t_search", "a", *three), _search("t2t_search", "a''", *three)]),
                             _embed) == 0  # cosine 0.9 is not > 0.9
    assert repeated_searches(_record([_search("t2t_search", "a", *three), _search("t2i_search", "a", *three)]),
                             _embed) == 0  # different tools are not paired
    # three near-identical searches: 3 unordered pairs
    assert repeated_searches(_record([_search("t2t_search", q, *three) for q in ("a", "a'", "a")]), _embed) == 3


def test_first_five_distinct_urls_are_the_results() -> None:
    call = _search("t2t_search", "a", "p1", "p1", "p2", "p3", "p4", "p5", "p6")
    assert search_results(call) == [f"https://w/{p}" for p in ("p1", "p2", "p3", "p4", "p5")]


def test_rates_mix_and_errors() -> None:
    samples = [
        TrajectorySample(_record([_search("t2i_search", "a", "p1")]), True,
                         [{"prompt_tokens": 10, "completion_tokens": 4, "latency_s": 1.0}]),
        TrajectorySample(_record([_search("t2t_search", "b", "p1")] * 2, "max_turns", errors=1), False,
                         [{"prompt_tokens": 20, "completion_tokens": 8, "latency_s": 3.0}]),
    ]
    timeout = CallRecord(tool_name="web_visit", arguments={"url": "https://w/p1"}, ok=False, error_class="tool",
                         error_type="timeout", observation="Error (timeout)", latency_s=30.0)
    samples[1].record.turns.append(TurnRecord(index=3, span=(0, 0), text="", outcome="call_error", calls=[timeout],
                                              error_class="tool", error_type="timeout"))
    out = analyse(samples, None)
    assert out["tool_calls"]["by_tool"] == {"t2t_search": 2, "t2i_search": 1, "web_visit": 1}
    assert out["tool_calls"]["share"]["t2t_search"] == pytest.approx(2 / 4)
    assert (out["truncation_rate"], out["t2i_rate"]) == (0.5, 0.5)
    assert out["turns_by_correctness"] == {"correct": [1], "incorrect": [4]}
    assert out["errors_by_class"] == {"agent/bad_format": 1, "tool/timeout": 1}  # the policy's and the tools'
    tool_latency = out["per_turn"]["tool_latency_s"]
    assert (tool_latency["n"], tool_latency["mean"]) == (4, 7.5)  # 0, 0, 0 and 30 s
    assert out["per_turn"]["completion_tokens"]["mean"] == 6 and out["per_turn"]["policy_latency_s"]["median"] == 2
    assert "skipped" in out["repeated_searches"]
