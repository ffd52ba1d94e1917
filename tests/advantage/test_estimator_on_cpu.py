"""``neos_turn_credit`` through verl's own dispatch, on one small batch with hand-computed advantages per Table 5 row.

Batch (groups of two, ``norm_adv_by_std_in_grpo=False`` so A = r − mean = ±0.5 and b = 0.5):
  row 0  group g1, success, reward 1                         -> +0.5 on every policy token
  row 1  group g1, failure, assessed; 6 turns, turn 3 has 2 tokens, one observation token after each turn
  row 2  group g2, success
  row 3  group g2, failure, judge fell back (assessed=false) -> −0.5 on every policy token
Row 1's labels: productive t0 (c 1.0); causal_error t1 (s 0.8, c 0.5: s·c = 0.4 < κ_e = 0.5); t2 unlabelled;
recovery t3 (c 1.0); re_derailment t4 (s 1.0, c 0.9); t5 unlabelled. L = 7 policy tokens, μ = η·b·L = 0.07.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl.protocol import DataProto
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from verl.trainer.ppo.ray_trainer import compute_advantage

from verl_ext.advantage.estimator import ESTIMATOR, credit_params_from_config, max_fallback_share_from_config
from verl_ext.advantage.inputs import CreditRow, credit_inputs
from verl_ext.credit import CreditAblation, CreditParams
from verl_ext.credit.labels import CreditLabels, LabelEvent, unassessed

#              t0    t1    t2    t3       t4    t5
FAIL_MASK = [1, 0, 1, 0, 1, 0, 1, 1, 0, 1, 0, 1, 0]
SUCC_MASK = [1, 1, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0]
POLICY = [i for i, m in enumerate(FAIL_MASK) if m]  # token positions of t0, t1, t2, t3, t3, t4, t5

LABELS = CreditLabels(
    assessed=True,
    judge="test",
    num_turns=6,
    events=[
        LabelEvent(turn=1, type="causal_error", severity=0.8, confidence=0.5),
        LabelEvent(turn=3, type="recovery", severity=0.0, confidence=1.0),
        LabelEvent(turn=4, type="re_derailment", severity=1.0, confidence=0.9),
    ],
    productive={0: 1.0},
)

# Expected advantages of row 1's seven policy tokens (t0, t1, t2, t3, t3, t4, t5), by hand:
EXPECTED_FAILURE = {
    # every w = 0 -> N = 0 -> A_i everywhere
    "outcome_only": [-0.5] * 7,
    # w = [λ_p·1 = 0.1, -1, -1, -1, -1, -1]; Ã = 0.5·w; P = 0.05, N = 3.0: α = 1, β = 1
    "productive_only": [0.05, -0.5, -0.5, -0.5, -0.5, -0.5, -0.5],
    # w = [0.1, -max(0.5, 0.4) = -0.5, 0, 0 (recovery neutral), 0 (2nd error not penalised), 0]; α = β = 1
    "first_error": [0.05, -0.25, 0.0, 0.0, 0.0, 0.0, 0.0],
    # + t2 downstream: -λ_d·max(κ_d, 0.4)·γ^0 = -0.2 -> Ã = -0.1; recovery closes the branch; α = β = 1
    "downstream": [0.05, -0.25, -0.1, 0.0, 0.0, 0.0, 0.0],
    # + recovery λ_c·1 = 0.3 -> Ã = 0.15 on both t3 tokens: P = 0.35, N = 0.35, α = (0.35 + 0.07)/0.35 = 1.2,
    #   β = min(1, (1.2·0.35 - 0.07)/0.35) = 1 -> negatives x1.2 (token sum = -μ = -0.07)
    "corrective": [0.05, -0.3, -0.12, 0.15, 0.15, 0.0, 0.0],
    # + t4 re_derailment -max(0.5, 0.9) -> Ã = -0.45, t5 downstream -0.5·0.9·γ^0 = -0.45 -> Ã = -0.225;
    #   P = 0.35, N = 1.025: α = max(1, 0.42/1.025) = 1, β = 1
    "full": [0.05, -0.25, -0.1, 0.15, 0.15, -0.45, -0.225],
}


def _batch() -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    mask = torch.tensor([SUCC_MASK, FAIL_MASK, SUCC_MASK, FAIL_MASK], dtype=torch.int64)
    rewards = torch.zeros(4, len(FAIL_MASK))
    rewards[0, 4] = rewards[2, 4] = 1.0  # outcome reward on the last policy token of the successes
    return rewards, mask, np.array(["g1", "g1", "g2", "g2"], dtype=object)


def _rows() -> list[CreditRow]:
    return [
        CreditRow("g1"),
        CreditRow("g1", LABELS),
        CreditRow("g2"),
        CreditRow("g2", unassessed("test", 6, "invalid")),
    ]


def _algorithm(ablation: str, norm: bool = False):
    return OmegaConf.create(
        {"adv_estimator": ESTIMATOR, "norm_adv_by_std_in_grpo": norm, "neos_credit": {"ablation": ablation}}
    )


def _through_verl(ablation: str, rows: list[CreditRow] | None, norm: bool = False) -> tuple[torch.Tensor, dict]:
    """verl's ``compute_advantage`` (which the v1 trainer reaches for any non-GRPO estimator) on the batch."""
    rewards, mask, uid = _batch()
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask}, non_tensors={"uid": uid}
    )
    config = _algorithm(ablation, norm)
    if rows is None:
        out = compute_advantage(data, adv_estimator=ESTIMATOR, norm_adv_by_std_in_grpo=norm, config=config)
        return out.batch["advantages"], {}
    with credit_inputs(rows) as inputs:
        out = compute_advantage(data, adv_estimator=ESTIMATOR, norm_adv_by_std_in_grpo=norm, config=config)
    assert torch.equal(out.batch["advantages"], out.batch["returns"])
    return out.batch["advantages"], inputs.metrics


@pytest.mark.parametrize("ablation", [a.value for a in CreditAblation])
def test_each_table5_row_gives_its_hand_computed_advantages(ablation: str) -> None:
    adv, _ = _through_verl(ablation, _rows())
    assert adv.dtype == torch.float32 and adv.shape == (4, len(FAIL_MASK))
    failure = np.zeros(len(FAIL_MASK))
    failure[POLICY] = EXPECTED_FAILURE[ablation]
    success = 0.5 * np.array(SUCC_MASK, dtype=float)
    np.testing.assert_allclose(adv[1].numpy(), failure, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(adv[0].numpy(), success, rtol=1e-6)  # successes keep A_i
    np.testing.assert_allclose(adv[2].numpy(), success, rtol=1e-6)
    np.testing.assert_allclose(adv[3].numpy(), -0.5 * np.array(FAIL_MASK, dtype=float), rtol=1e-6)  # fallback


def test_rows_differ_between_consecutive_ablations() -> None:
    rows = list(EXPECTED_FAILURE.values())
    assert all(a != b for a, b in itertools.pairwise(rows))


def test_grpo_std_normalisation_is_respected_as_verl_does() -> None:
    # rewards {1, 0}: mean 0.5, unbiased std √0.5; A = ±0.5 / (√0.5 + 1e-6)
    adv, _ = _through_verl("outcome_only", _rows(), norm=True)
    a = 0.5 / (np.sqrt(0.5) + 1e-6)
    np.testing.assert_allclose(adv[0].numpy(), a * np.array(SUCC_MASK), rtol=1e-6)
    # full: Ã = b·w with b = a; α, β are scale-free here (μ scales with b), so tokens scale by a / 0.5
    adv, _ = _through_verl("full", _rows(), norm=True)
    np.testing.assert_allclose(adv[1, POLICY].numpy(), np.array(EXPECTED_FAILURE["full"]) * a / 0.5, rtol=1e-6)


def test_without_credit_inputs_outcome_only_is_verls_grpo_and_other_rows_fail() -> None:
    adv, _ = _through_verl("outcome_only", None)
    rewards, mask, uid = _batch()
    grpo, _ = get_adv_estimator_fn("grpo")(rewards, mask, uid, norm_adv_by_std_in_grpo=False)
    assert torch.equal(adv, grpo)
    with pytest.raises(RuntimeError, match="TurnCreditAdvantageMixin"):
        _through_verl("full", None)


def test_metrics_are_returned_through_the_context() -> None:
    _, metrics = _through_verl("full", _rows())
    # row masses: +0.5·5 (row 0), +0.35 / -1.025 (row 1), +0.5·5 (row 2), -0.5·7 (row 3); averaged over 4 rows
    assert metrics["neos_credit/assessed_share"] == 0.25
    # two failures were judged (rows 1 and 3); row 3's judge fell back with reason "invalid"
    assert metrics["neos_credit/judged_failures"] == 2
    assert metrics["neos_credit/fallback_share"] == 0.5
    assert metrics["neos_credit/fallback/invalid"] == 0.5
    assert metrics["neos_credit/pos_adv_mass"] == pytest.approx((2.5 + 0.35 + 2.5) / 4, rel=1e-6)
    assert metrics["neos_credit/neg_adv_mass"] == pytest.approx((1.025 + 3.5) / 4, rel=1e-6)


def test_in_group_references_are_counted() -> None:
    rows = _rows()
    rows[1] = CreditRow("g1", LABELS.model_copy(update={"reference": "in_group"}))
    rows[3] = CreditRow("g2", unassessed("test", 6, "invalid").model_copy(update={"reference": "verified"}))
    _, metrics = _through_verl("full", rows)
    assert metrics["neos_credit/reference/in_group_share"] == 0.5
    _, metrics = _through_verl("full", _rows())
    assert "neos_credit/reference/in_group_share" not in metrics  # the labels do not record it


def test_rows_must_line_up_with_verls_batch() -> None:
    swapped = _rows()
    swapped[1], swapped[2] = swapped[2], swapped[1]
    with pytest.raises(ValueError, match="uid 'g2' but verl's batch row 1 has 'g1'"):
        _through_verl("full", swapped)
    short = _rows()[:3]
    with pytest.raises(ValueError, match="3 rows for a batch of 4"):
        _through_verl("full", short)


def _fallback_row_1(rows: list[CreditRow], reason: str, caplog, message: str) -> None:
    """Row 1 gets the plain A_i = -0.5 on its policy tokens, every other row keeps its hand-computed advantage, the
    reason is counted and one warning names the row."""
    with caplog.at_level("WARNING", logger="verl_ext.advantage.estimator"):
        adv, metrics = _through_verl("full", rows)
    np.testing.assert_allclose(adv[1].numpy(), -0.5 * np.array(FAIL_MASK, dtype=float), rtol=1e-6)
    np.testing.assert_allclose(adv[3].numpy(), -0.5 * np.array(FAIL_MASK, dtype=float), rtol=1e-6)
    np.testing.assert_allclose(adv[2].numpy(), 0.5 * np.array(SUCC_MASK, dtype=float), rtol=1e-6)
    assert metrics["neos_credit/assessed_share"] == 0
    assert metrics["neos_credit/fallback_share"] == 1.0  # rows 1 and 3 both fell back: above 0.1, so it warns
    assert metrics[f"neos_credit/fallback/{reason}"] == 0.5 and metrics["neos_credit/fallback/invalid"] == 0.5
    warnings = [r.getMessage() for r in caplog.records if r.name == "verl_ext.advantage.estimator"]
    assert len(warnings) == 1 and message in warnings[0] and "2 of 2 judged failures" in warnings[0]


def test_a_label_whose_turn_count_disagrees_with_the_mask_falls_back_for_its_row_only(caplog) -> None:
    rows = _rows()
    rows[1] = CreditRow("g1", LABELS.model_copy(update={"num_turns": 7}))
    _fallback_row_1(rows, "label_turns", caplog, "labelled for 7 turns but its response_mask has 6")


def test_labels_on_a_row_with_positive_advantage_fall_back_for_that_row_only(caplog) -> None:
    rows = _rows()
    rows[0] = CreditRow("g1", CreditLabels(assessed=True, judge="t", num_turns=2, productive={0: 1.0}))
    rows[1] = CreditRow("g1")  # row 1 unjudged: a failure of a mixed group without labels
    with caplog.at_level("WARNING", logger="verl_ext.advantage.estimator"):
        adv, metrics = _through_verl("full", rows)
    np.testing.assert_allclose(adv[0].numpy(), 0.5 * np.array(SUCC_MASK, dtype=float), rtol=1e-6)
    assert metrics["neos_credit/judged_failures"] == 3  # rows 0 (labelled), 1 (unjudged) and 3
    assert metrics["neos_credit/fallback/positive_advantage"] == pytest.approx(1 / 3)
    assert metrics["neos_credit/fallback/unjudged"] == pytest.approx(1 / 3)
    assert "outcome advantage 0.5 > 0" in caplog.text


def test_no_warning_at_or_below_the_threshold(caplog) -> None:
    """Shipped default 0.1; with max_fallback_share 0.5 the batch's 1 of 2 fallbacks is not over it."""
    from verl_ext.credit.fallbacks import DEFAULT_MAX_FALLBACK_SHARE

    assert DEFAULT_MAX_FALLBACK_SHARE == 0.1
    rewards, mask, uid = _batch()
    tensors = {"token_level_rewards": rewards, "response_mask": mask}
    data = DataProto.from_dict(tensors=tensors, non_tensors={"uid": uid})
    config = OmegaConf.create(
        {"adv_estimator": ESTIMATOR, "norm_adv_by_std_in_grpo": False, "neos_credit": {"max_fallback_share": 0.5}}
    )
    with caplog.at_level("WARNING", logger="verl_ext.advantage.estimator"), credit_inputs(_rows()) as inputs:
        compute_advantage(data, adv_estimator=ESTIMATOR, norm_adv_by_std_in_grpo=False, config=config)
    assert inputs.metrics["neos_credit/fallback_share"] == 0.5
    assert not [r for r in caplog.records if r.name == "verl_ext.advantage.estimator"]
    with caplog.at_level("WARNING", logger="verl_ext.advantage.estimator"):
        _through_verl("full", _rows())  # default threshold 0.1 < 0.5: warns
    assert "1 of 2 judged failures (50% > algorithm.neos_credit.max_fallback_share = 10%)" in caplog.text


def test_params_come_from_algorithm_neos_credit() -> None:
    config = OmegaConf.create({"neos_credit": {"gamma": 0.5, "M": 2, "ablation": "downstream"}})
    assert credit_params_from_config(config) == CreditParams(gamma=0.5, M=2.0, ablation=CreditAblation.DOWNSTREAM)
    assert credit_params_from_config(OmegaConf.create({})) == CreditParams()
    with pytest.raises(ValueError, match=r"unknown algorithm.neos_credit keys \['gama'\]"):
        credit_params_from_config({"neos_credit": {"gama": 0.5}})
    with_threshold = OmegaConf.create({"neos_credit": {"gamma": 0.5, "max_fallback_share": 0.25}})
    assert credit_params_from_config(with_threshold) == CreditParams(gamma=0.5)
    assert max_fallback_share_from_config(with_threshold) == 0.25
    assert max_fallback_share_from_config(OmegaConf.create({})) == 0.1
    with pytest.raises(ValueError, match="max_fallback_share must be a number in"):
        max_fallback_share_from_config({"neos_credit": {"max_fallback_share": 1.5}})


@pytest.mark.parametrize("norm", [True, False])
def test_outcome_advantage_equals_verls_grpo_on_random_groups(norm):
    """Groups of 1 to 8 rows, shuffled, with ties and all-equal groups: the same A_i as verl's own estimator."""
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    from verl_ext.advantage.estimator import outcome_advantage

    rng = np.random.default_rng(0)
    index = np.array([f"q{g}" for g in range(40) for _ in range(rng.integers(1, 9))], dtype=object)
    rng.shuffle(index)
    rewards = torch.zeros(len(index), 5)
    rewards[:, -1] = torch.from_numpy(rng.choice([0.0, 0.1, 0.9, 1.0], size=len(index))).float()
    expected, _ = compute_grpo_outcome_advantage(
        rewards, torch.ones_like(rewards), index, epsilon=1e-6, norm_adv_by_std_in_grpo=norm
    )
    got = outcome_advantage(rewards, index, 1e-6, norm)
    np.testing.assert_allclose(got.numpy(), expected[:, 0].numpy(), rtol=1e-5, atol=1e-6)


def _broken_labels(num_turns: int) -> CreditLabels:
    """Labels that break an Eq. 3 input rule (a recovery with no error before it), built without validation, as a
    stale or hand-edited label file could arrive."""
    recovery = LabelEvent(turn=2, type="recovery", severity=0.0, confidence=1.0)
    return CreditLabels.model_construct(
        schema_version=1, assessed=True, judge="t", num_turns=num_turns, events=[recovery], productive={},
        fallback_reason=None,
    )


def test_labels_that_break_an_eq3_rule_fall_back_for_their_row_only(caplog) -> None:
    """Checked before the mask is read: such a row is dropped as label_rules (whatever its turn count)."""
    rows = _rows()
    rows[1] = CreditRow("g1", _broken_labels(num_turns=6))
    _fallback_row_1(rows, "label_rules", caplog, "recovery at turn 2 has no unrecovered error before it")


def test_labelled_failures_by_hand() -> None:
    """Which rows are assessed failures, their labelled turn counts and Eq. 3 weights (row 1 of the batch above:
    w = 0.1, -0.5, -0.2, 0.3, -0.9, -0.45 under the full row), before any mask is read."""
    from verl_ext.advantage.estimator import labelled_failures

    _, _, uid = _batch()
    labelled = labelled_failures(_rows(), uid, 4, CreditParams())
    assert labelled.assessed.tolist() == [False, True, False, False]
    assert labelled.rows.tolist() == [1] and labelled.num_turns.tolist() == [6] and labelled.dropped == {}
    np.testing.assert_allclose(labelled.weights, [[0.1, -0.5, -0.2, 0.3, -0.9, -0.45]], rtol=1e-12)
    broken = _rows()
    broken[1] = CreditRow("g1", _broken_labels(num_turns=6))
    labelled = labelled_failures(broken, uid, 4, CreditParams())
    assert labelled.assessed.tolist() == [False] * 4 and labelled.rows.tolist() == []
    assert labelled.dropped == {1: "label_rules"} and "no unrecovered error" in labelled.first_problem
