"""Behaviour-policy correction weights against hand-computed cases; none of them carries a gradient."""

import math

import pytest
import torch

from rl_core.algorithms import get_preset
from rl_core.formulas.rollout_correction import (
    binary_kl,
    binary_tv,
    correction_weights,
    divergence_gate,
    effective_sample_size,
    gated_is,
    masked_is,
    mismatch_k3_kl,
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
    expected = {
        "rollout_corr/kl": -math.log(4) / 5,
        "rollout_corr/k3_kl": (3.5 - math.log(4)) / 5,
        "rollout_corr/rollout_is_eff_sample_size": 1.3**2 / 2.05,
        "rollout_is_weight_min": 0.5,
        "rollout_is_weight_max": 4.0,
        "rollout_is_weight_p50": 1.0,
        "rollout_is_weight_p95": 3.6,
        "rollout_is_capped_frac": 0.2,
    }
    assert token == pytest.approx(expected, rel=1e-6)
    sequence = rollout_mismatch_metrics(old_logp, behaviour_logp, mask, "sequence", 2.0)
    assert (sequence["rollout_is_weight_min"], sequence["rollout_is_weight_max"]) == pytest.approx((1.0, 4.0))
    assert sequence["rollout_is_capped_frac"] == 0.5


def test_metrics_k3_and_ess_by_hand():
    """k3 = mean(w − 1 − ln w) per token; ESS/N = (mean w)² / mean(w²). In the case above (weights 2, ½, 1, 4, 1):
    k3 = (3.5 − ln 4)/5; ESS/N of the weights capped at C = 2 (2, ½, 1, 2, 1) = 1.3² / 2.05 (mean 6.5/5, mean of
    squares (4 + ¼ + 1 + 4 + 1)/5)."""
    old_logp = torch.tensor([[math.log(2), -math.log(2)], [0.0, math.log(4)]])
    mask = torch.ones_like(old_logp)
    # Σ(w − 1 − ln w) = (1 − ln 2) + (−½ + ln 2) + 0 + (3 − ln 4) = 3.5 − ln 4, over 4 tokens
    assert mismatch_k3_kl(old_logp, torch.zeros_like(old_logp), mask) == pytest.approx((3.5 - math.log(4)) / 4)
    ones = torch.ones(1, 4)
    assert effective_sample_size(torch.tensor([[1.0, 1.0, 1.0, 1.0]]), ones) == pytest.approx(1.0)
    assert effective_sample_size(torch.tensor([[1.0, 0.0, 0.0, 0.0]]), ones) == pytest.approx(0.25)  # one weight: 1/N
    assert effective_sample_size(torch.zeros(1, 4), ones) == 0.0  # nothing carries weight
    # Padding is no sample: [3, 1 | pad] has ESS (2)² / 5 = 0.8 over its two valid tokens, whatever the pad holds.
    assert effective_sample_size(torch.tensor([[3.0, 1.0, 9.0]]), torch.tensor([[1.0, 1.0, 0.0]])) == pytest.approx(0.8)


# verl 0.9.1's ESS (`compute_is_metrics`): on the weights the loss applies, clamped into [0, C], over valid tokens.
def test_the_ess_under_masked_is_counts_the_dropped_tokens_as_carrying_nothing():
    # One response, token weights w = 1, 3, 3 (μ's log-probs 0), C = 2: MIS keeps [1, 0, 0]. ESS/N = (1/3)² / (1/3)
    # = 1/3. (The raw weights capped at C, [1, 2, 2], would claim (5/3)² / 3 = 25/27 = 0.926.)
    old_logp = torch.tensor([[0.0, math.log(3), math.log(3)]], dtype=torch.float64)
    behaviour_logp, mask = torch.zeros_like(old_logp), torch.ones_like(old_logp)
    weights = correction_weights(old_logp, behaviour_logp, mask, "mask", "token", 2.0)
    metrics = rollout_mismatch_metrics(old_logp, behaviour_logp, mask, "token", 2.0, weights)
    assert metrics["rollout_corr/rollout_is_eff_sample_size"] == pytest.approx(1 / 3, abs=1e-6)


def test_the_ess_under_a_sequence_gate_is_of_the_kept_tokens_own_weights():
    # Two responses of two tokens; μ(a_t) = p, π_old(a_t) = q. Response 1: p = 0.5, 0.5, q = 0.5, 0.25: TV 0, 0.25,
    # mean 0.125 ≤ δ = 0.2: kept, its tokens weighted q/p = 1, ½. Response 2: p = 0.8, 0.8, q = 0.4, 0.4: TV mean
    # 0.4 > δ: dropped (0, 0). ESS/N = (1.5/4)² / (1.25/4) = 0.140625 / 0.3125 = 0.45. (The product weights the
    # gate never applies, ½ and ¼, would give (0.375)² / 0.15625 = 0.9.)
    p = torch.tensor([[0.5, 0.5], [0.8, 0.8]], dtype=torch.float64)
    q = torch.tensor([[0.5, 0.25], [0.4, 0.4]], dtype=torch.float64)
    mask = torch.ones_like(p)
    weights = correction_weights(q.log(), p.log(), mask, "mask", "sequence", 2.0, gating="tv", delta=0.2)
    assert weights.flatten().tolist() == pytest.approx([1.0, 0.5, 0.0, 0.0])
    metrics = rollout_mismatch_metrics(q.log(), p.log(), mask, "sequence", 2.0, weights)
    assert metrics["rollout_corr/rollout_is_eff_sample_size"] == pytest.approx(0.45, abs=1e-6)


def test_the_ess_under_sequence_tis_counts_each_response_once_per_token():
    # Response 1: one token, w = 4, capped at C = 2 (then two padding tokens); response 2: three tokens whose product
    # is ½. Per token: 2 | ½, ½, ½: ESS/N = (3.5/4)² / (4.75/4) = (49/64) / (19/16) = 49/76 = 0.644737. (Once per
    # response, 2 and ½: (1.25)² / 2.125 = 25/34 = 0.735.) The same with no correction applied (mode none): the
    # weights TIS would apply.
    old_logp = torch.tensor([[math.log(4), 5.0, 5.0], [math.log(0.5), 0.0, 0.0]], dtype=torch.float64)
    behaviour_logp = torch.zeros_like(old_logp)
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    weights = correction_weights(old_logp, behaviour_logp, mask, "truncate", "sequence", 2.0)
    for applied in (weights, None):
        metrics = rollout_mismatch_metrics(old_logp, behaviour_logp, mask, "sequence", 2.0, applied)
        assert metrics["rollout_corr/rollout_is_eff_sample_size"] == pytest.approx(49 / 76, abs=1e-6)


# μ(a_t) = p, π_old(a_t) = q at three tokens: equal; 0.5 against 0.25; 0.9 against 0.6.
P = torch.tensor([[0.4, 0.5, 0.9]], dtype=torch.float64)
Q = torch.tensor([[0.4, 0.25, 0.6]], dtype=torch.float64)


def test_binary_kl_and_tv_by_hand():
    """KL(Bern(p)‖Bern(q)) = p ln(p/q) + (1 − p) ln((1 − p)/(1 − q)): 0; ½ ln 2 + ½ ln(⅔) = ½ ln(4/3);
    0.9 ln 1.5 + 0.1 ln 0.25. TV = |p − q|: 0, 0.25, 0.3."""
    expected_kl = [0.0, 0.5 * math.log(4 / 3), 0.9 * math.log(1.5) + 0.1 * math.log(0.25)]
    assert binary_kl(Q.log(), P.log())[0].tolist() == pytest.approx(expected_kl)
    assert binary_tv(Q.log(), P.log())[0].tolist() == pytest.approx([0.0, 0.25, 0.3])


def test_binary_kl_stays_finite_at_certain_tokens():
    """μ(a) = 1 exactly (log 0): the clamp into [10⁻⁶, 1 − 10⁻⁶] keeps both logarithms finite."""
    kl = binary_kl(torch.tensor([[math.log(0.5)]]), torch.tensor([[0.0]]))
    assert torch.isfinite(kl).all() and kl.item() > 0


def test_the_gate_per_token_and_per_response():
    """TV 0, 0.25, 0.3 with δ = 0.26: tokens keep, keep, drop; per response the mean 0.55/3 ≈ 0.183 ≤ δ keeps all,
    and with δ = 0.18 drops all. The kept tokens carry w = q/p: 1, ½ (the third dropped)."""
    mask = torch.ones_like(P)
    assert divergence_gate(Q.log(), P.log(), mask, "tv", "token", 0.26)[0].tolist() == [True, True, False]
    assert divergence_gate(Q.log(), P.log(), mask, "tv", "sequence", 0.19)[0].tolist() == [True] * 3
    assert divergence_gate(Q.log(), P.log(), mask, "tv", "sequence", 0.18)[0].tolist() == [False] * 3
    torch.testing.assert_close(
        gated_is(Q.log(), P.log(), mask, "tv", "token", 0.26), torch.tensor([[1.0, 0.5, 0.0]], dtype=torch.float64)
    )


def test_a_response_divergence_is_the_mean_over_its_valid_tokens_only():
    """The padding's TV 0.3 is left out: the response's mean is (0 + 0.25)/2 = 0.125 ≤ 0.13."""
    mask = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)
    assert divergence_gate(Q.log(), P.log(), mask, "tv", "sequence", 0.13)[0, :2].tolist() == [True, True]
    assert divergence_gate(Q.log(), P.log(), mask, "tv", "sequence", 0.12)[0, :2].tolist() == [False, False]


def test_correction_weights_for_every_gate():
    mask = torch.ones_like(P)
    assert correction_weights(Q.log(), P.log(), mask, "none", "token", 2.0) is None
    # ratio gate: w = 1, ½, ⅔ — none above C = 0.6 except 1 (capped by TIS, dropped by MIS)
    torch.testing.assert_close(
        correction_weights(Q.log(), P.log(), mask, "truncate", "token", 0.6),
        torch.tensor([[0.6, 0.5, 0.6]], dtype=torch.float64),
    )
    torch.testing.assert_close(
        correction_weights(Q.log(), P.log(), mask, "mask", "token", 0.6),
        torch.tensor([[0.0, 0.5, 0.0]], dtype=torch.float64),
    )
    # sequence level: one weight [B, 1], the product ⅓
    torch.testing.assert_close(
        correction_weights(Q.log(), P.log(), mask, "truncate", "sequence", 2.0),
        torch.tensor([[1 / 3]], dtype=torch.float64),
    )
    torch.testing.assert_close(
        correction_weights(Q.log(), P.log(), mask, "mask", "token", 2.0, "binary_kl", 0.15),
        torch.tensor([[1.0, 0.5, 0.0]], dtype=torch.float64),
    )  # KLs 0, 0.144, 0.226


def test_the_masked_fraction_counts_the_valid_tokens_dropped():
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    q = torch.cat([Q, Q]).log()
    p = torch.cat([P, P]).log()
    weights = correction_weights(q, p, mask, "mask", "token", 2.0, "tv", 0.26)  # drops token 3 of row 0 only
    metrics = rollout_mismatch_metrics(q, p, mask, "token", 2.0, weights)
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(1 / 4)
    assert "rollout_corr/rollout_rs_masked_fraction" not in rollout_mismatch_metrics(q, p, mask, "token", 2.0)


def test_bad_gates_are_refused_naming_the_knob():
    mask = torch.ones_like(P)
    with pytest.raises(ValueError, match="is_correction_gating='kl'.*binary_kl, tv"):
        divergence_gate(Q.log(), P.log(), mask, "kl", "token", 0.1)
    with pytest.raises(ValueError, match="rollout_is_level='geometric'"):
        divergence_gate(Q.log(), P.log(), mask, "tv", "geometric", 0.1)


@pytest.mark.parametrize(
    "overrides, knob",
    [
        (dict(is_correction_gating="tv", rollout_is_mode="truncate"), "rollout_is_mode"),
        (
            dict(is_correction_gating="binary_kl", rollout_is_mode="mask", rollout_is_level="geometric"),
            "rollout_is_level",
        ),
        (dict(is_correction_gating="chi2"), "is_correction_gating"),
        (dict(is_correction_threshold=0.0), "is_correction_threshold"),
        (dict(is_correction_threshold=1.0), "is_correction_threshold"),
        (dict(rollout_dtype="float16"), "rollout_dtype"),
    ],
)
def test_the_config_refuses_gates_that_do_not_exist(overrides, knob):
    with pytest.raises(ValueError, match=f"^{knob}="):
        get_preset("grpo").replace(**overrides)
