"""Mixed-group sampler (Neos App. B): every rule on hand-built scenarios, a state round trip, and a property test."""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from verl_ext.trainer.sampler import (
    Admission,
    GroupStatus,
    MixedGroupSampler,
    SamplerConfig,
    SamplerError,
)


def questions(n: int | None = None) -> Iterable[str]:
    """q0, q1, ... (endless when n is None)."""
    return [f"q{i}" for i in range(n)] if n is not None else (f"q{i}" for i in itertools.count())


def make(groups: int = 2, group_size: int = 4, source=None, **kw) -> MixedGroupSampler:
    return MixedGroupSampler(SamplerConfig(groups=groups, group_size=group_size, **kw), source or questions())


def pairs(admissions: list[Admission]) -> list[tuple[str, int]]:
    return [(a.question_id, a.session_index) for a in admissions]


def finish(sampler: MixedGroupSampler, question_id: str, outcomes: dict[int, bool]) -> list[GroupStatus]:
    return [sampler.finish(question_id, s, ok) for s, ok in outcomes.items()]


# ------------------------------------------------------------------------------------------------ config


def test_the_sampler_imports_no_verl_ray_or_torch():
    code = (
        "import sys, verl_ext.trainer.sampler; "
        "loaded = [m for m in ('verl', 'ray', 'torch') if m in sys.modules]; "
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])



def test_config_defaults_are_the_papers_and_derived_ones_follow_b_and_g():
    assert SamplerConfig().model_dump() == {
        "groups": 64,
        "group_size": 8,
        "max_per_group": 12,
        "window": 128,
        "admission_limit": 1024,
    }
    assert SamplerConfig(groups=32).model_dump() == {
        "groups": 32,
        "group_size": 8,
        "max_per_group": 12,
        "window": 64,
        "admission_limit": 512,
    }
    assert SamplerConfig(groups=3, group_size=5).max_per_group == 7  # 5 + 5 // 2
    assert SamplerConfig(groups=3, group_size=5, window=None).window == 6


@pytest.mark.parametrize(
    "kwargs",
    [
        {"group_size": 1},  # a group of one is never mixed
        {"groups": 0},
        {"group_size": 8, "max_per_group": 7},
        {"groups": 4, "window": 3},
        {"admission_limit": 0},
        {"batch": 3},  # unknown key
    ],
)
def test_config_rejects_impossible_settings(kwargs):
    with pytest.raises(ValidationError):
        SamplerConfig(**kwargs)


# ------------------------------------------------------------------------------------------------ admission


def test_admission_limit_bounds_trajectories_in_flight_and_free_slots_bound_each_call():
    sampler = make(groups=2, group_size=4, admission_limit=10)
    assert len(sampler.admit(3)) == 3  # the caller's free slots
    first = sampler.admit(100)
    assert len(first) == 7  # 10 in flight: the limit
    assert sampler.admit(100) == []
    sampler.finish("q0", 0, True)
    sampler.finish("q0", 1, False)
    assert len(sampler.admit(100)) == 2  # two slots released
    assert len(sampler.in_flight()) == 10
    assert sampler.stats.admitted == 12
    with pytest.raises(SamplerError):
        sampler.admit(-1)


def test_window_fills_question_by_question_then_refills_lagging_groups_up_to_max():
    # window 3 questions, G=4, 1.5G=6 per group, ample slots: 3 x 4 initial samples in queue order, then one extra
    # each, round robin by (fewest completed, fewest started, queue order), up to 6 started each.
    sampler = make(groups=2, group_size=4, window=3, admission_limit=100)
    admitted = pairs(sampler.admit(100))
    initial = [(f"q{i // 4}", i) for i in range(12)]
    extras = [("q0", 12), ("q1", 13), ("q2", 14), ("q0", 15), ("q1", 16), ("q2", 17)]
    assert admitted == initial + extras
    assert sampler.stats.questions == 3  # the window: q3 has not entered
    assert sampler.stats.extra_admitted == 6
    assert sampler.admit(100) == []  # every window group is at max_per_group


def test_released_slots_go_to_the_group_with_fewest_completed_samples():
    sampler = make(groups=2, group_size=2, window=3, admission_limit=6)  # max_per_group = 3
    assert pairs(sampler.admit(6)) == [("q0", 0), ("q0", 1), ("q1", 2), ("q1", 3), ("q2", 4), ("q2", 5)]
    assert sampler.finish("q0", 0, True) is GroupStatus.SAMPLING
    assert finish(sampler, "q1", {2: True, 3: False}) == [GroupStatus.SAMPLING, GroupStatus.ELIGIBLE]
    # q0 has 1 completed, q2 has 0: q2 first although it is later in the queue; q1 is eligible and gets nothing
    assert pairs(sampler.admit(1)) == [("q2", 6)]
    assert pairs(sampler.admit(5)) == [("q0", 7)]  # q2 is at 3 = max_per_group; no window room for a new question


def test_homogeneous_groups_get_extra_samples_first_up_to_one_and_a_half_g_then_are_deferred():
    sampler = make(groups=1, group_size=2, window=2, admission_limit=4)  # max_per_group = 3
    assert pairs(sampler.admit(4)) == [("q0", 0), ("q0", 1), ("q1", 2), ("q1", 3)]
    finish(sampler, "q0", {0: False, 1: False})  # homogeneous at G
    sampler.finish("q1", 2, True)  # q1 lags: 1 completed
    assert pairs(sampler.admit(1)) == [("q0", 4)]  # homogeneous first, although q1 has fewer completed
    assert pairs(sampler.admit(1)) == [("q1", 5)]  # q0 reached 1.5G started
    assert sampler.finish("q0", 4, False) is GroupStatus.DEFERRED  # still homogeneous at the limit
    assert "q0" not in sampler.eligible() and sampler.stats.deferred == 1
    assert pairs(sampler.admit(1)) == [("q2", 6)]  # its window place goes to the next question
    assert sampler.stats.homogeneous_at_g == 1 and sampler.stats.reached_g == 1
    sampler.finish("q1", 3, False)  # q1 reaches G mixed: 1 of 2 groups homogeneous at G
    metrics = sampler.stats.metrics()
    assert metrics["sampler/homogeneous_share"] == 0.5 and metrics["sampler/deferred"] == 1.0
    assert metrics["sampler/admitted"] == 7 and metrics["sampler/extra_admitted"] == 2


def test_an_extra_sample_that_breaks_homogeneity_makes_the_group_eligible():
    sampler = make(groups=1, group_size=2, window=1, admission_limit=10)
    assert pairs(sampler.admit(2)) == [("q0", 0), ("q0", 1)]
    finish(sampler, "q0", {0: True, 1: True})
    assert pairs(sampler.admit(5)) == [("q0", 2)]  # one extra: 3 = 1.5G
    assert sampler.finish("q0", 2, False) is GroupStatus.ELIGIBLE
    assert sampler.stats.rescued == 1
    selection = sampler.select()
    # 3 completed > G=2: lowest-index success (0) and lowest-index failure (2)
    assert [(g.question_id, g.sessions, g.outcomes) for g in selection.groups] == [("q0", (0, 2), (True, False))]
    assert [(a.question_id, a.session_index) for a in selection.discarded] == [("q0", 1)]


def test_aborted_trajectories_free_their_slot_count_against_the_cap_and_end_in_deferral():
    sampler = make(groups=1, group_size=2, window=1, admission_limit=10)
    sampler.admit(10)  # q0: 0, 1, 2 (max 3 started)
    assert sampler.abort("q0", 0) is GroupStatus.SAMPLING
    assert sampler.finish("q0", 1, True) is GroupStatus.SAMPLING
    assert sampler.admit(10) == []  # 3 started incl. the aborted one: no more
    assert sampler.abort("q0", 2) is GroupStatus.DEFERRED  # can never reach G completed
    assert sampler.stats.aborted == 2
    assert pairs(sampler.admit(10)) == [("q1", 3), ("q1", 4), ("q1", 5)]


# ------------------------------------------------------------------------------------------------ selection


def test_b_mixed_groups_are_selected_in_queue_order_and_the_rest_is_cancelled_or_carried():
    sampler = make(groups=2, group_size=2, window=4, admission_limit=8)  # max 3 per group
    assert len(sampler.admit(8)) == 8  # q0: 0,1  q1: 2,3  q2: 4,5  q3: 6,7
    finish(sampler, "q2", {4: True, 5: False})  # eligible first
    sampler.finish("q0", 0, True)
    assert not sampler.ready()
    finish(sampler, "q1", {3: False, 2: True})  # second eligible: ready
    assert sampler.ready() and sampler.eligible() == ["q1", "q2"]
    # free slots still go to unfinished groups until the caller selects: q3 (0 completed), then q0 (q3 is at 1.5G)
    assert pairs(sampler.admit(2)) == [("q3", 8), ("q0", 9)]
    selection = sampler.select()
    assert [(g.question_id, g.sessions) for g in selection.groups] == [("q1", (2, 3)), ("q2", (4, 5))]
    assert [g.outcomes for g in selection.groups] == [(True, False), (True, False)]
    assert pairs(selection.cancel) == [("q0", 1), ("q0", 9), ("q3", 6), ("q3", 7), ("q3", 8)]
    assert pairs(selection.discarded) == [("q0", 0)]  # old-policy outcome of a carried question
    assert selection.carried == ["q0", "q3"]
    assert selection.stats.selected == 4 and selection.stats.cancelled == 5 and selection.stats.mixed_groups == 2
    assert sampler.in_flight() == [] and sampler.batch == 1
    # a cancelled trajectory reported late is recognised and ignored
    assert sampler.finish("q0", 1, True) is GroupStatus.STALE
    assert sampler.stats.late == 1
    # carried questions come first in queue order, sampled afresh with new session indices
    assert pairs(sampler.admit(8)) == [("q0", 10), ("q0", 11), ("q3", 12), ("q3", 13), ("q4", 14), ("q4", 15)] + [
        ("q5", 16),
        ("q5", 17),
    ]
    assert sampler.outcomes("q0") == {}


def test_with_more_than_b_eligible_the_first_b_in_queue_order_are_selected_not_the_first_finished():
    sampler = make(groups=2, group_size=2, window=4, admission_limit=8)
    sampler.admit(8)  # q0: 0,1  q1: 2,3  q2: 4,5  q3: 6,7
    finish(sampler, "q3", {6: True, 7: False})
    finish(sampler, "q2", {4: False, 5: True})
    finish(sampler, "q1", {2: True, 3: False})  # the caller selects late: 3 eligible
    assert sampler.eligible() == ["q1", "q2", "q3"]
    selection = sampler.select()
    assert [g.question_id for g in selection.groups] == ["q1", "q2"]
    assert selection.carried == ["q0", "q3"] and selection.stats.mixed_groups == 3
    assert pairs(selection.discarded) == [("q3", 6), ("q3", 7)] and pairs(selection.cancel) == [("q0", 0), ("q0", 1)]


def test_select_before_ready_is_a_structured_error():
    sampler = make(groups=2, group_size=2)
    sampler.admit(4)
    finish(sampler, "q0", {0: True, 1: False})
    with pytest.raises(SamplerError, match="1 of 2"):
        sampler.select()


def _group_with(outcomes_in_finish_order: list[tuple[int, bool]], group_size: int = 4):
    """Window of one question (B=1); admit 6 sessions (max 1.5G) and report them in the given order."""
    sampler = make(groups=1, group_size=group_size, window=1, admission_limit=100)
    sampler.admit(100)
    for session, ok in outcomes_in_finish_order:
        sampler.finish("q0", session, ok)
    return sampler


@pytest.mark.parametrize(
    ("reports", "kept"),
    [
        # exactly G completed: all of them
        ([(0, True), (1, False), (2, True), (3, True)], (0, 1, 2, 3)),
        # success only in the extra samples (index 5): it displaces index 3
        ([(0, False), (1, False), (2, False), (3, False), (4, False), (5, True)], (0, 1, 2, 5)),
        # failure only at index 4: kept with the lowest success 0, then 1, 2
        ([(0, True), (1, True), (2, True), (3, True), (4, False)], (0, 1, 2, 4)),
        # > G completed and already mixed early: no forced balance (3 successes, 1 failure kept)
        ([(0, True), (1, False), (2, True), (3, True), (4, True), (5, False)], (0, 1, 2, 3)),
        # completion order does not matter, session index does: 3 and 4 finished first
        ([(4, True), (3, False), (5, True), (1, True), (2, True)], (1, 2, 3, 4)),
        # lowest success at 2 and lowest failure at 5, filled by 0, 1 (lowest remaining indices)
        ([(5, False), (4, True), (0, True), (1, True), (2, True), (3, True)], (0, 1, 2, 5)),
    ],
)
def test_retention_rule_for_groups_with_more_than_g_completed(reports, kept):
    sampler = _group_with(reports)
    assert sampler.ready()
    (group,) = sampler.select().groups
    assert group.sessions == kept
    assert group.outcomes == tuple(dict(reports)[i] for i in kept)


# ------------------------------------------------------------------------------------------------ errors, source


def test_bad_reports_are_structured_errors():
    sampler = make(groups=1, group_size=2, window=1)
    sampler.admit(2)
    sampler.finish("q0", 0, True)
    with pytest.raises(SamplerError, match="already reported"):
        sampler.finish("q0", 0, True)
    with pytest.raises(SamplerError, match="not in flight"):
        sampler.finish("q0", 7, True)
    with pytest.raises(SamplerError, match="not in the active window"):
        sampler.finish("nope", 1, True)
    with pytest.raises(SamplerError, match="bool"):
        sampler.finish("q0", 1, 1)
    with pytest.raises(SamplerError, match=">= 0"):
        sampler.abort("q0", -1)
    with pytest.raises(SamplerError, match="non-empty strings"):
        MixedGroupSampler(SamplerConfig(groups=1, group_size=2), ["", "q1"]).admit(1)


def test_a_finite_source_ends_in_exhaustion_when_the_rest_cannot_make_a_batch():
    sampler = make(groups=2, group_size=2, window=2, source=questions(3))
    rounds = 0
    while not sampler.exhausted():
        for a in sampler.admit(10):
            sampler.finish(a.question_id, a.session_index, a.question_id == "q1" and a.session_index % 2 == 0)
        rounds += 1
        assert rounds < 20
    # q0, q2 always fail -> deferred; q1 mixed but alone: fewer than B, the partial batch is dropped
    assert sampler.eligible() == ["q1"] and not sampler.ready()
    assert sampler.stats.deferred == 2


def test_a_question_repeated_by_the_source_while_in_the_window_waits_for_a_later_batch():
    sampler = make(groups=1, group_size=2, window=2, admission_limit=100, source=["a", "a", "b"])
    assert pairs(sampler.admit(4)) == [("a", 0), ("a", 1), ("a", 2)]  # the repeat stops the window filling this call
    assert pairs(sampler.admit(4)) == [("b", 3), ("b", 4), ("b", 5)]
    finish(sampler, "a", {0: True, 1: False})
    assert sampler.select().carried == ["b"]
    assert pairs(sampler.admit(4)) == [("b", 6), ("b", 7), ("a", 8), ("a", 9)]  # carried first, then the repeat


# ------------------------------------------------------------------------------------------------ checkpoint


def _mid_batch() -> MixedGroupSampler:
    """A sampler in the middle of batch 2: a carried question, a homogeneous group waiting on its extra sample, a
    lagging group, an eligible one, two trajectories in flight."""
    sampler = make(groups=2, group_size=2, window=3, admission_limit=7)  # max 3 per group
    assert len(sampler.admit(7)) == 7  # q0: 0, 1, 6 (a lagging-group extra)  q1: 2, 3  q2: 4, 5
    finish(sampler, "q0", {0: True, 1: False})
    finish(sampler, "q1", {2: True, 3: False})
    assert sampler.select().carried == ["q2"]  # 4, 5, 6 cancelled
    assert pairs(sampler.admit(7)) == [
        ("q2", 7), ("q2", 8), ("q3", 9), ("q3", 10), ("q4", 11), ("q4", 12), ("q2", 13)
    ]  # fmt: skip
    finish(sampler, "q2", {7: False, 8: False})  # homogeneous, its extra (13) in flight
    finish(sampler, "q3", {9: True})
    finish(sampler, "q4", {11: True, 12: False})  # eligible
    return sampler


def _drive(sampler: MixedGroupSampler) -> tuple:
    log: list = [pairs(sampler.admit(7))]
    log.append(sampler.finish("q2", 13, False))
    log.append(pairs(sampler.admit(7)))
    log.append(sampler.finish("q3", 10, False))
    selection = sampler.select()
    return (*log, [(g.question_id, g.sessions) for g in selection.groups], selection.deferred, selection.carried)


def test_state_round_trip_mid_batch_continues_identically():
    original = _mid_batch()
    state = json.loads(json.dumps(original.state_dict()))
    assert state["batch"] == 1 and state["queue"] == [] and state["consumed"] == 5 and len(state["window"]) == 3
    restored = make(groups=2, group_size=2, window=3, admission_limit=7)  # a fresh source from its start
    restored.load_state_dict(state)
    assert restored.state_dict() == original.state_dict()
    assert restored.in_flight() == original.in_flight() == [Admission("q2", 13), Admission("q3", 10)]
    expected = (
        [("q3", 14)],  # q2 is at 1.5G started, q4 is eligible: the lagging q3 gets the slot
        GroupStatus.DEFERRED,  # q2 still homogeneous at 1.5G
        [("q5", 15), ("q5", 16), ("q5", 17)],  # q5 (next from the source, after the 5 consumed) takes q2's place
        GroupStatus.ELIGIBLE,
        [("q3", (9, 10)), ("q4", (11, 12))],  # queue order; q3's extra 14 is cancelled
        ["q2"],
        ["q5"],
    )
    assert _drive(restored) == expected
    assert _drive(original) == expected


def test_load_state_dict_rejects_bad_or_mismatched_states():
    state = _mid_batch().state_dict()
    with pytest.raises(SamplerError, match="fresh sampler"):
        _mid_batch().load_state_dict(state)
    with pytest.raises(SamplerError, match="invalid sampler state"):
        make(groups=2, group_size=2, window=3, admission_limit=7).load_state_dict({**state, "queue": "q1"})
    with pytest.raises(SamplerError, match="mid-batch"):
        make(groups=2, group_size=2, window=3).load_state_dict(state)
    with pytest.raises(SamplerError, match="fewer than"):
        MixedGroupSampler(SamplerConfig(groups=2, group_size=2, window=3, admission_limit=7), ["q0"]).load_state_dict(
            state
        )
    positioned = MixedGroupSampler(SamplerConfig(groups=2, group_size=2, window=3, admission_limit=7), ["q5"])
    positioned.load_state_dict(state, source_positioned=True)
    assert positioned.state_dict() == state


# ------------------------------------------------------------------------------------------------ property


@settings(max_examples=60, deadline=None)
@given(
    groups=st.integers(1, 3),
    group_size=st.integers(2, 4),
    extra_window=st.integers(0, 3),
    limit=st.integers(1, 30),
    seed=st.integers(0, 2**32 - 1),
)
def test_invariants_over_random_outcome_streams(groups, group_size, extra_window, limit, seed):
    rng = random.Random(seed)
    config = SamplerConfig(groups=groups, group_size=group_size, window=groups + extra_window, admission_limit=limit)
    sampler = MixedGroupSampler(config, questions())
    rate: dict[str, float] = {}
    for _ in range(2):
        running: list[Admission] = []
        steps, late = 0, rng.randint(0, 3)  # steps the caller lets pass after ready() before it selects
        while not sampler.ready() or (late and running):
            late -= sampler.ready()
            steps += 1
            assert steps < 20_000
            running += sampler.admit(rng.randint(0, 4))
            assert len(running) <= config.admission_limit
            started = window_started(sampler)
            assert len(started) <= config.window and max(started, default=0) <= config.max_per_group
            if running:
                a = running.pop(rng.randrange(len(running)))
                p = rate.setdefault(a.question_id, rng.choice([0.0, 1.0, rng.random()]))
                if rng.random() < 0.05:
                    sampler.abort(a.question_id, a.session_index)
                else:
                    sampler.finish(a.question_id, a.session_index, rng.random() < p)
        in_flight = set(sampler.in_flight())
        assert in_flight == set(running)
        eligible_order = sampler.eligible()
        completed = {q: sampler.outcomes(q) for q in eligible_order}
        selection = sampler.select()
        assert [g.question_id for g in selection.groups] == eligible_order[:groups]
        assert sum(len(g.sessions) for g in selection.groups) == groups * group_size
        selected = {(g.question_id, s) for g in selection.groups for s in g.sessions}
        assert set(selection.cancel) == in_flight
        assert not selected & {(a.question_id, a.session_index) for a in selection.cancel}
        assert not selected & {(a.question_id, a.session_index) for a in selection.discarded}
        for g in selection.groups:
            outcomes = completed[g.question_id]
            assert True in g.outcomes and False in g.outcomes
            assert g.outcomes == tuple(outcomes[i] for i in g.sessions)
            assert g.sessions == retained_by_rule(outcomes, group_size)


def retained_by_rule(outcomes: dict[int, bool], group_size: int) -> tuple[int, ...]:
    """Test oracle for the paper's retention rule."""
    done = sorted(outcomes)
    if len(done) == group_size:
        return tuple(done)
    success = min(i for i in done if outcomes[i])
    failure = min(i for i in done if not outcomes[i])
    rest = [i for i in done if i not in (success, failure)][: group_size - 2]
    return tuple(sorted([success, failure, *rest]))


def window_started(sampler: MixedGroupSampler) -> list[int]:
    """Trajectories started per window group, from the public state."""
    return [len(g["in_flight"]) + len(g["outcomes"]) + g["aborted"] for g in sampler.state_dict()["window"]]
