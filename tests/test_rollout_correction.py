"""Behaviour-policy correction weights against hand-computed cases; none of them carries a gradient."""

import math

import pytest
import torch

from rl_core.rollout_correction import (
    masked_is,
    rollout_mismatch_metrics,
    sequence_is_weights,
    token_is_weights,
    truncated_is,
)

# Row 0: π_old/μ = 2 on both tokens; row 1: 3 on its one valid token (the padding holds garbage).
OLD = torch.log(torch.tensor([[0.5, 0.4], [0.9, 0.7]]))
BEHAVIOUR = torch.log(torch.tensor([[0.25, 0.2], [0.3, 1e-9]]))
MASK = torch.tensor([[1.0, 1.0], [1.0, 0.0]])


def test_token_weights_by_hand():
    torch.testing.assert_close(token_is_weights(OLD, BEHAVIOUR)[MASK > 0], torch.tensor([2.0, 2.0, 3.0]))


def test_sequence_weight_is_the_product_and_geometric_its_per_token_mean():
    torch.testing.assert_close(sequence_is_weights(OLD, BEHAVIOUR, MASK), torch.tensor([4.0, 3.0]))
    torch.testing.assert_close(sequence_is_weights(OLD, BEHAVIOUR, MASK, geometric=True), torch.tensor([2.0, 3.0]))


def test_tis_caps_and_mis_drops():
    weights = torch.tensor([0.5, 2.0, 3.0, 10.0])
    torch.testing.assert_close(truncated_is(weights, 2.0), torch.tensor([0.5, 2.0, 2.0, 2.0]))
    torch.testing.assert_close(masked_is(weights, 2.0), torch.tensor([0.5, 2.0, 0.0, 0.0]))


def test_weights_are_constants_of_the_loss():
    old = OLD.clone().requires_grad_()
    for weights in (
        token_is_weights(old, BEHAVIOUR),
        sequence_is_weights(old, BEHAVIOUR, MASK),
        truncated_is(token_is_weights(old, BEHAVIOUR), 2.0),
        masked_is(token_is_weights(old, BEHAVIOUR), 2.0),
    ):
        assert not weights.requires_grad


def test_token_weights_make_behaviour_samples_unbiased_for_pi_old():
    """Σ_a μ(a)·w(a)·f(a) = Σ_a π_old(a)·f(a): the reweighted expectation over a whole vocabulary."""
    pi_old = torch.tensor([0.1, 0.6, 0.3], dtype=torch.float64)
    mu = torch.tensor([0.3, 0.3, 0.4], dtype=torch.float64)
    f = torch.tensor([1.0, -2.0, 5.0], dtype=torch.float64)
    weights = token_is_weights(pi_old.log(), mu.log())
    assert (mu * weights * f).sum().item() == pytest.approx((pi_old * f).sum().item())
    assert (mu * f).sum().item() != pytest.approx((pi_old * f).sum().item())
    assert math.isclose((mu * weights).sum().item(), 1.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_mismatch_metrics_by_hand_in_any_float_dtype(dtype):
    """Token weights w = π_old/μ of 2, ½ | 1, 4, 1 (μ's log-probs 0): the mismatch KL mean(log μ − log π_old) is
    (−ln 2 + ln 2 − 0 − ln 4 − 0)/5; sorted weights ½, 1, 1, 2, 4: median 1, 95th percentile 2 + 0.8·(4 − 2) = 3.6
    (linear interpolation at 0.95·4 = 3.8); one of five above C = 2. Per response: w = 1 and 4."""
    old_logp = torch.tensor([[math.log(2), -math.log(2), 100.0], [0.0, math.log(4), 0.0]], dtype=dtype)
    behaviour_logp = torch.zeros_like(old_logp)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], dtype=dtype)  # the 100 is padding
    token = rollout_mismatch_metrics(old_logp, behaviour_logp, mask, "token", 2.0)
    expected = {"rollout_mismatch_kl": -math.log(4) / 5, "rollout_is_weight_min": 0.5, "rollout_is_weight_max": 4.0,
                "rollout_is_weight_p50": 1.0, "rollout_is_weight_p95": 3.6, "rollout_is_capped_frac": 0.2}
    assert token == pytest.approx(expected, rel=1e-6)
    sequence = rollout_mismatch_metrics(old_logp, behaviour_logp, mask, "sequence", 2.0)
    assert (sequence["rollout_is_weight_min"], sequence["rollout_is_weight_max"]) == pytest.approx((1.0, 4.0))
    assert sequence["rollout_is_capped_frac"] == 0.5
