"""verl's own ``rloo`` estimators and ``vanilla`` policy loss are exactly ModalSearcher's RLOO (§3) and Neos Eqs. 4/8/9.

So the recipes use them as they are: no estimator or loss of ours.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn
from verl.workers.config import FSDPActorConfig, PolicyLossConfig


@pytest.mark.parametrize("name", ["rloo", "rloo_vectorized"])
def test_rloo_is_reward_minus_mean_of_the_others(name: str) -> None:
    # ModalSearcher rewards 0.9·acc + 0.1·fmt, 0.1 for agent-error endings: group g = [1.0, 0.0, 0.1, 0.0], h = [1, 1]
    rewards = [1.0, 0.0, 0.1, 0.0, 1.0, 1.0]
    index = np.array(["g", "g", "g", "g", "h", "h"], dtype=object)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 1, 1], [1, 0, 0], [1, 1, 0]])
    token_rewards = torch.zeros(6, 3)
    token_rewards[:, 0] = torch.tensor(rewards)
    adv, returns = get_adv_estimator_fn(name)(token_rewards, mask, index=index)
    # A_i = r_i - mean_{j≠i} r_j:  1 - 0.1/3,  0 - 1.1/3,  0.1 - 1/3,  0 - 1.1/3;  group h: 1 - 1 = 0
    expected = torch.tensor([1 - 0.1 / 3, -1.1 / 3, 0.1 - 1 / 3, -1.1 / 3, 0.0, 0.0])
    torch.testing.assert_close(adv, expected[:, None] * mask, rtol=1e-6, atol=1e-7)
    assert torch.equal(adv, returns)


def test_rloo_variants_differ_only_on_singleton_groups() -> None:
    # mean over j≠i is undefined for a group of one: rloo keeps r_i, rloo_vectorized gives 0 (the safer choice)
    token_rewards, mask, index = torch.tensor([[0.7]]), torch.ones(1, 1), np.array(["solo"], dtype=object)
    assert get_adv_estimator_fn("rloo")(token_rewards, mask, index=index)[0].item() == pytest.approx(0.7)
    assert get_adv_estimator_fn("rloo_vectorized")(token_rewards, mask, index=index)[0].item() == 0.0


def _actor_config(batch_num_tokens: int) -> FSDPActorConfig:
    config = FSDPActorConfig(
        strategy="fsdp",
        clip_ratio=0.2,
        clip_ratio_c=3.0,
        loss_agg_mode="token-mean",
        policy_loss=PolicyLossConfig(loss_mode="vanilla"),
        ppo_micro_batch_size_per_gpu=1,
        rollout_n=8,
    )
    # what verl's workers/utils/losses.py sets before calling the loss: global token count across micro-batches
    config.global_batch_info.update(
        dp_size=1, batch_num_tokens=batch_num_tokens, global_batch_size=2, loss_scale_factor=None
    )
    return config


# (ρ, A) per token; row 1 has three policy tokens, row 2 two and one masked token with absurd values.
RHO = [[1.5, 0.5, 4.0], [1.0, 0.9, 50.0]]
ADV = [[1.0, -1.0, -0.5], [0.25, 2.0, -9.0]]
MASK = [[1, 1, 1], [1, 1, 0]]
# ℓ_dc by hand (ε = 0.2, c_dc = 3):
#   ρ=1.5, A=+1:   min(1.5, 1.2)·1 = 1.2                  (A > 0, clipped at 1 + ε)
#   ρ=0.5, A=-1:   min(-0.5, 0.8·-1) = -0.8; max(-0.8, -3) = -0.8   (A < 0, clipped at 1 − ε)
#   ρ=4.0, A=-0.5: min(-2.0, 1.2·-0.5) = -2.0; max(-2.0, 3·-0.5) = -1.5   (A < 0, dual clip)
#   ρ=1.0, A=0.25: 0.25;   ρ=0.9, A=2: min(1.8, 1.8) = 1.8   (inside the clip range)
# L = -Σ ℓ_dc / Σ|M| = -(1.2 - 0.8 - 1.5 + 0.25 + 1.8) / 5 = -0.19
EXPECTED_LOSS = -0.19


def _loss(rows: slice, batch_num_tokens: int = 5) -> float:
    rho, adv, mask = (torch.tensor(x, dtype=torch.float64)[rows] for x in (RHO, ADV, MASK))
    config = _actor_config(batch_num_tokens)
    loss_fn = get_policy_loss_fn(config.policy_loss.loss_mode)
    loss, _ = loss_fn(
        old_log_prob=torch.zeros_like(rho),
        log_prob=torch.log(rho),
        advantages=adv,
        response_mask=mask,
        loss_agg_mode=config.loss_agg_mode,
        config=config,
        rollout_is_weights=None,
    )
    return float(loss)


def test_vanilla_loss_is_dual_clip_token_mean() -> None:
    assert _loss(slice(0, 2)) == pytest.approx(EXPECTED_LOSS, rel=1e-9)


def test_token_mean_is_over_the_global_batch_across_micro_batches() -> None:
    # two micro-batches of one row each, normalised by the global 5 tokens, add up to the full-batch loss;
    # each row alone: -(1.2 - 0.8 - 1.5)/5 = 0.22 and -(0.25 + 1.8)/5 = -0.41
    first, second = _loss(slice(0, 1)), _loss(slice(1, 2))
    assert (first, second) == (pytest.approx(0.22, rel=1e-9), pytest.approx(-0.41, rel=1e-9))
    assert math.isclose(first + second, EXPECTED_LOSS, rel_tol=1e-9)
