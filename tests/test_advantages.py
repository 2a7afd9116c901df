import math

import pytest
import torch

from rl_core.formulas.advantages import (
    as_groups,
    batch_mean_baseline,
    broadcast_to_tokens,
    dr_grpo_advantages,
    gae,
    grpo_advantages,
    length_adaptive_lambda,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    reward_to_go,
    rloo_advantages,
)

LENGTHS = [4, 2, 1, 3]
MASK = (torch.arange(4) < torch.tensor(LENGTHS)[:, None]).float()


def _random_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rewards and values `[4, 4]` with garbage on padding, which must never matter."""
    generator = torch.Generator().manual_seed(seed)
    rewards = torch.randn(4, 4, generator=generator)
    values = torch.randn(4, 4, generator=generator)
    return rewards + (1 - MASK) * 1e3, values - (1 - MASK) * 1e3


def _monte_carlo_returns(rewards: torch.Tensor, gamma: float) -> torch.Tensor:
    """`Σ_{t'≥t} γ^{t'−t} r_{t'}` with explicit loops over each response's valid tokens."""
    out = torch.zeros_like(rewards)
    for i, n in enumerate(LENGTHS):
        for t in range(n):
            out[i, t] = sum(gamma ** (k - t) * rewards[i, k] for k in range(t, n))
    return out


def _pad(x: torch.Tensor, value: float) -> torch.Tensor:
    return torch.cat([x, torch.full((x.shape[0], 2), value)], dim=1)


def test_reward_to_go_by_hand():
    rewards = torch.tensor([[1.0, 2.0, 3.0], [5.0, 7.0, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    # row 0: 1 + ½·2 + ¼·3 = 2.75, 2 + ½·3 = 3.5, 3
    torch.testing.assert_close(reward_to_go(rewards, mask, 0.5), torch.tensor([[2.75, 3.5, 3.0], [5.0, 0.0, 0.0]]))


def test_reward_to_go_matches_explicit_sums():
    rewards, _ = _random_batch(0)
    torch.testing.assert_close(reward_to_go(rewards, MASK, 0.9), _monte_carlo_returns(rewards, 0.9))


def test_padding_anywhere_gets_zero_and_passes_nothing_back():
    rewards = torch.tensor([[5.0, 1.0, 2.0], [1.0, 7.0, 1.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.0, 1.0]])
    torch.testing.assert_close(reward_to_go(rewards, mask, 1.0), torch.tensor([[0.0, 3.0, 2.0], [1.0, 0.0, 1.0]]))
    advantages, returns = gae(rewards, torch.ones(2, 3), mask, 1.0, 1.0)
    torch.testing.assert_close(returns, torch.tensor([[0.0, 3.0, 2.0], [1.0, 0.0, 1.0]]))
    torch.testing.assert_close(advantages, torch.tensor([[0.0, 2.0, 1.0], [0.0, 0.0, 0.0]]))


def test_batch_mean_baseline_by_hand():
    returns = torch.tensor([[1.0, 2.0, 3.0], [6.0, 50.0, 50.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    torch.testing.assert_close(batch_mean_baseline(returns, mask), torch.tensor([[-2.0, -1.0, 0.0], [3.0, 0.0, 0.0]]))


def test_gae_by_hand():
    rewards = torch.tensor([[0.0, 1.0]])
    values = torch.tensor([[0.5, 0.8]])
    # δ_1 = 1 + 0 − 0.8 = 0.2, δ_0 = 0 + 0.8 − 0.5 = 0.3; A_1 = 0.2, A_0 = 0.3 + 0.5·0.2 = 0.4
    advantages, returns = gae(rewards, values, torch.ones(1, 2), gamma=1.0, lam=0.5)
    torch.testing.assert_close(advantages, torch.tensor([[0.4, 0.2]]))
    torch.testing.assert_close(returns, torch.tensor([[0.9, 1.0]]))


def test_gae_with_lambda_one_is_the_monte_carlo_return_minus_the_value():
    rewards, values = _random_batch(1)
    advantages, returns = gae(rewards, values, MASK, gamma=0.9, lam=1.0)
    monte_carlo = _monte_carlo_returns(rewards, 0.9)
    torch.testing.assert_close(advantages, (monte_carlo - values) * MASK)
    torch.testing.assert_close(returns, monte_carlo)


def test_gae_with_lambda_zero_is_the_td_error():
    rewards, values = _random_batch(2)
    advantages, _ = gae(rewards, values, MASK, gamma=0.9, lam=0.0)
    delta = torch.zeros(4, 4)
    for i, n in enumerate(LENGTHS):
        for t in range(n):
            next_value = values[i, t + 1] if t + 1 < n else 0.0
            delta[i, t] = rewards[i, t] + 0.9 * next_value - values[i, t]
    torch.testing.assert_close(advantages, delta)


def test_gae_with_gamma_one_lambda_one_and_zero_values_is_the_reward_to_go():
    rewards, _ = _random_batch(3)
    advantages, returns = gae(rewards, torch.zeros(4, 4), MASK, gamma=1.0, lam=1.0)
    torch.testing.assert_close(advantages, reward_to_go(rewards, MASK, 1.0))
    torch.testing.assert_close(returns, advantages)


def test_gae_end_reward_reaches_token_t_with_weight_gamma_lambda_to_the_distance():
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
    advantages, _ = gae(rewards, torch.zeros(1, 4), torch.ones(1, 4), gamma=0.9, lam=0.5)
    torch.testing.assert_close(advantages, 0.45 ** torch.tensor([[3.0, 2.0, 1.0, 0.0]]))


def test_gae_with_one_lambda_per_response_equals_row_by_row_runs():
    rewards, values = _random_batch(4)
    lam = torch.tensor([0.0, 0.5, 0.9, 1.0])
    advantages, returns = gae(rewards, values, MASK, 0.95, lam)
    for i in range(4):
        row_advantages, row_returns = gae(rewards[i : i + 1], values[i : i + 1], MASK[i : i + 1], 0.95, lam[i].item())
        torch.testing.assert_close(advantages[i : i + 1], row_advantages)
        torch.testing.assert_close(returns[i : i + 1], row_returns)


def test_gae_ignores_padding_columns():
    rewards, values = _random_batch(5)
    advantages, returns = gae(rewards, values, MASK, 0.9, 0.7)
    padded_advantages, padded_returns = gae(_pad(rewards, 9.0), _pad(values, -9.0), _pad(MASK, 0.0), 0.9, 0.7)
    torch.testing.assert_close(padded_advantages[:, :4], advantages)
    torch.testing.assert_close(padded_returns[:, :4], returns)
    assert (padded_advantages[:, 4:] == 0).all() and (padded_returns[:, 4:] == 0).all()
    assert (advantages[MASK == 0] == 0).all() and (returns[MASK == 0] == 0).all()


def test_length_adaptive_lambda_by_hand():
    lam = length_adaptive_lambda(torch.tensor([4, 10, 100]), alpha=0.5)
    torch.testing.assert_close(lam, torch.tensor([0.5, 0.8, 0.98]))


def test_length_adaptive_lambda_is_floored_at_zero_for_very_short_responses():
    lam = length_adaptive_lambda(torch.tensor([0.0, 1.0, 2.0]), alpha=0.5)
    assert lam.tolist() == [0.0, 0.0, 0.0]


def test_grpo_by_hand_uses_the_unbiased_std():
    # mean 0.25; unbiased std √((0.75² + 3·0.25²)/3) = 0.5 (the population std would be √0.1875 ≈ 0.433)
    advantages = grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), group_size=4, eps=0.0)
    torch.testing.assert_close(advantages, torch.tensor([1.5, -0.5, -0.5, -0.5]))
    with_eps = grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), group_size=4)
    torch.testing.assert_close(with_eps, torch.tensor([0.75, -0.25, -0.25, -0.25]) / (0.5 + 1e-6))


def test_grpo_normalises_each_group_on_its_own():
    R = torch.tensor([1.0, 0.0, 0.0, 0.0, 10.0, 20.0, 30.0, 40.0])
    advantages = grpo_advantages(R, group_size=4)
    torch.testing.assert_close(advantages[:4], grpo_advantages(R[:4], 4))
    std = torch.tensor([10.0, 20.0, 30.0, 40.0]).std().item()
    torch.testing.assert_close(advantages[4:], torch.tensor([-15.0, -5.0, 5.0, 15.0]) / (std + 1e-6))


@pytest.mark.parametrize("formula", [grpo_advantages, dr_grpo_advantages, rloo_advantages])
@pytest.mark.parametrize("reward", [0.7, 0.1, 1 / 3])
def test_group_advantages_are_exactly_zero_for_equal_rewards(formula, reward):
    # the float mean of eight copies of 0.7 is not 0.7; GRPO would divide that residue by a std of its size
    R = torch.cat([torch.full((8,), reward), torch.tensor([0.0, 1.0] * 4)])
    advantages = formula(R, 8)
    assert advantages[:8].tolist() == [0.0] * 8
    assert (advantages[8:] != 0).all()


def test_grpo_gives_zero_for_groups_of_one():
    assert grpo_advantages(torch.tensor([1.0, 0.0, 3.0]), group_size=1).tolist() == [0.0, 0.0, 0.0]


def test_dr_grpo_by_hand():
    advantages = dr_grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 4.0, 4.0, 6.0]), group_size=4)
    torch.testing.assert_close(advantages, torch.tensor([0.75, -0.25, -0.25, -0.25, -2.0, 0.0, 0.0, 2.0]))


def test_rloo_by_hand():
    # leave-one-out baselines: 0, 1/3, 1/3, 1/3
    advantages = rloo_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), group_size=4)
    torch.testing.assert_close(advantages, torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3]))


@pytest.mark.parametrize("group_size", [2, 3, 6])
def test_rloo_leave_one_out_form_equals_the_scaled_mean_form(group_size):
    R = torch.randn(12, generator=torch.Generator().manual_seed(group_size))
    scaled = group_size / (group_size - 1) * dr_grpo_advantages(R, group_size)
    torch.testing.assert_close(rloo_advantages(R, group_size), scaled)


def test_rloo_needs_two_responses_per_group():
    with pytest.raises(ValueError, match="G ≥ 2"):
        rloo_advantages(torch.tensor([1.0, 2.0]), group_size=1)


@pytest.mark.parametrize("formula", [grpo_advantages, dr_grpo_advantages, rloo_advantages, as_groups])
def test_group_functions_reject_a_batch_not_divisible_by_the_group_size(formula):
    with pytest.raises(ValueError, match="multiple of the group size"):
        formula(torch.zeros(6), 4)


def test_reinforce_pp_is_globally_whitened_reward_to_go():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [-0.5, 2.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    # returns over the valid tokens: 1, 1, 1, 1.5, 2 → mean 1.3, population variance 0.16
    expected = (torch.tensor([[1.0, 1.0, 1.0], [1.5, 2.0, 1.3]]) - 1.3) / (0.4 + 1e-8) * mask
    advantages = reinforce_pp_advantages(rewards, mask)
    torch.testing.assert_close(advantages, expected)
    # a single response (G = 1): returns 1, 0, −1 → mean 0, population std √(2/3)
    single = reinforce_pp_advantages(torch.tensor([[1.0, 1.0, -1.0]]), torch.ones(1, 3))
    torch.testing.assert_close(single, torch.tensor([[1.0, 0.0, -1.0]]) * math.sqrt(1.5))
    # equal returns carry no signal: exactly 0, not a rounding residue blown up by the whitening
    flat_rewards = torch.tensor([[0.0, 0.0, 0.7], [0.0, 0.7, 0.0]])
    flat = reinforce_pp_advantages(flat_rewards, torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]))
    assert flat.abs().max().item() == 0.0


def test_reinforce_pp_baseline_by_hand():
    R = torch.tensor([1.0, 0.0, 1.0, 1.0])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    # group means 0.5 and 1 → 0.5, −0.5, 0, 0 on 2, 1, 1, 3 tokens: valid values 0.5, 0.5, −0.5, 0, 0, 0, 0
    values = torch.tensor([0.5, 0.5, -0.5, 0.0, 0.0, 0.0, 0.0])
    mean, std = values.mean(), values.std(correction=0)
    advantages = reinforce_pp_baseline_advantages(R, mask, group_size=2)
    torch.testing.assert_close(advantages[mask > 0], (values - mean) / (std + 1e-8))
    assert (advantages[mask == 0] == 0).all()


def test_reinforce_pp_baseline_ignores_padding_columns():
    R = torch.tensor([1.0, 0.0, 1.0, 1.0])
    plain = reinforce_pp_baseline_advantages(R, MASK, group_size=2)
    torch.testing.assert_close(reinforce_pp_baseline_advantages(R, _pad(MASK, 0.0), 2)[:, :4], plain)
    rewards, _ = _random_batch(6)
    torch.testing.assert_close(
        reinforce_pp_advantages(_pad(rewards, 7.0), _pad(MASK, 0.0))[:, :4], reinforce_pp_advantages(rewards, MASK)
    )


def test_broadcast_to_tokens():
    torch.testing.assert_close(
        broadcast_to_tokens(torch.tensor([2.0, -1.0, 5.0, 0.5]), MASK),
        torch.tensor([[2.0] * 4, [-1.0, -1.0, 0, 0], [5.0, 0, 0, 0], [0.5, 0.5, 0.5, 0]]),
    )


def test_inputs_are_untouched():
    rewards, values = _random_batch(7)
    copies = rewards.clone(), values.clone(), MASK.clone()
    gae(rewards, values, MASK, 0.9, torch.full((4,), 0.5))
    reward_to_go(rewards, MASK, 0.9)
    reinforce_pp_advantages(rewards, MASK)
    assert torch.equal(rewards, copies[0]) and torch.equal(values, copies[1]) and torch.equal(MASK, copies[2])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dtype_is_kept(dtype):
    rewards, values = (x.to(dtype) for x in _random_batch(8))
    mask = MASK.to(dtype)
    advantages, returns = gae(rewards, values, mask, 1.0, length_adaptive_lambda(mask.sum(-1), 0.5))
    assert advantages.dtype == returns.dtype == dtype
    assert reward_to_go(rewards, mask, 1.0).dtype == dtype
    assert grpo_advantages(rewards[:, 0], 2).dtype == dtype
