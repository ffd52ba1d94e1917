"""MEI SFT selection: all valid calls of successes; productive/corrective turns of selected, assessed failures."""

from verl_ext.credit.labels import CreditLabels, LabelEvent, unassessed
from verl_ext.mei.selection import RolloutResult, eligible_turns, select_calls

from .conftest import mei_record, trajectory


def labels(num_turns: int, events=(), productive=None) -> CreditLabels:
    return CreditLabels(assessed=True, judge="test", num_turns=num_turns,
                        events=[LabelEvent(turn=t, type=k, severity=s, confidence=c) for t, k, s, c in events],
                        productive=productive or {})


# Failure f1 (5 turns: 4 tool turns + answer): t0 productive, t1 causal error, t2 downstream (unlabelled),
# t3 recovery -> eligible turns {0: productive, 3: corrective}.
F1_LABELS = labels(5, events=[(1, "causal_error", 0.8, 0.9), (3, "recovery", 0.0, 0.7)], productive={0: 0.6})


def test_eligible_turns_follow_the_rule():
    f1 = trajectory("f1", [["a"], ["b"], ["c"], ["d"]])
    assert eligible_turns(RolloutResult(f1, success=True, selected=False)) is None  # every turn
    assert eligible_turns(RolloutResult(f1, success=False, selected=True, labels=F1_LABELS)) == {
        0: "productive", 3: "corrective"}
    assert eligible_turns(RolloutResult(f1, success=False, selected=False, labels=F1_LABELS)) == {}
    assert eligible_turns(RolloutResult(f1, success=False, selected=True, labels=unassessed("j", 5, "timeout"))) == {}
    assert eligible_turns(RolloutResult(f1, success=False, selected=True, labels=None)) == {}


def test_hand_computed_selection():
    # success s1: turn 0 calls x1 (valid), x2 (fallback); turn 1 calls x3 (repaired), x4 (not in the log).
    s1 = trajectory("s1", [["x1", "x2"], ["x3", "x4"]])
    # failure f1 (selected, assessed): a (t0 productive, valid), b (t1 error), c (t2), d (t3 corrective, retried),
    # plus d2 at t3 (error outcome) and x1 again at t2 (a cached result shared with s1: ineligible turn anyway).
    f1 = trajectory("f1", [["a"], ["b"], ["c", "x1"], ["d", "d2"]])
    # failure f2: not selected for optimisation -> nothing, even its productive turn.
    f2 = trajectory("f2", [["e"]])
    f2_labels = labels(2, productive={0: 1.0})
    # success s2 shares a (cached) with f1: retained once, under f1's reason (f1 comes first).
    s2 = trajectory("s2", [["g"], ["a"]])
    log = [mei_record("x1"), mei_record("x2", "fallback"), mei_record("x3", "repaired"), mei_record("a"),
           mei_record("b"), mei_record("c"), mei_record("d", "retried"), mei_record("d2", "error"),
           mei_record("e"), mei_record("g", messages=None)]
    out = select_calls(
        [RolloutResult(s1, True, True), RolloutResult(f1, False, True, F1_LABELS),
         RolloutResult(f2, False, False, f2_labels), RolloutResult(s2, True, False)],
        log,
    )
    assert [(r.call.call_id, r.reason, r.trajectory_session, r.turn) for r in out.retained] == [
        ("x1", "success", "s1", 0), ("x3", "success", "s1", 1), ("a", "productive", "f1", 0),
        ("d", "corrective", "f1", 3)]
    assert dict(out.counts) == {
        "retained_success": 2, "retained_productive": 1, "retained_corrective": 1,
        "skipped_fallback": 1, "missing": 1,  # s1
        "ineligible_turn": 3, "skipped_error": 1,  # f1: b, c, x1 at ineligible turns; d2 an error
        "ineligible_trajectory": 1,  # f2
        "skipped_no_messages": 1, "duplicate": 1,  # s2: g has no logged input, a already retained
    }
    assert out.retained[1].call.output["rational"] == "r-x3"


def test_log_by_id_mapping_is_accepted():
    s1 = trajectory("s1", [["x1"]])
    out = select_calls([RolloutResult(s1, True, True)], {"x1": mei_record("x1")})
    assert [r.call.call_id for r in out.retained] == ["x1"]
