"""Per-token KL estimator statistics against the exact per-state KL: by hand, and on many sampled tokens."""

import math

import pytest
import torch

from rl_core.formulas.kl import kl_exact
from rl_core.formulas.kl_stats import kl_estimator_stats

KEYS = {f"kl_{k}_{s}" for k in ("k1", "k2", "k3") for s in ("bias", "std", "neg_frac")}


def test_statistics_by_hand():
    # Two valid tokens and one padding token. log r = ref − logp: token 1: −ln 2 (r = ½), token 2: +ln 2 (r = 2).
    logp = torch.tensor([[math.log(0.5), math.log(0.25), 0.0]])
    ref_logp = torch.tensor([[math.log(0.25), math.log(0.5), -5.0]])
    exact = torch.tensor([[0.1, 0.3, 99.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    stats = kl_estimator_stats(logp, ref_logp, exact, mask)
    assert set(stats) == KEYS
    ln2 = math.log(2)
    k1, k2, k3 = (ln2, -ln2), (ln2**2 / 2, ln2**2 / 2), (0.5 - 1 + ln2, 2 - 1 - ln2)
    for name, values in (("k1", k1), ("k2", k2), ("k3", k3)):
        errors = (values[0] - 0.1, values[1] - 0.3)
        mean = sum(errors) / 2
        assert stats[f"kl_{name}_bias"] == pytest.approx(mean, abs=1e-6)
        assert stats[f"kl_{name}_std"] == pytest.approx(math.sqrt(sum((e - mean) ** 2 for e in errors) / 2), abs=1e-6)
    assert stats["kl_k1_neg_frac"] == 0.5  # only k1 of the second token is negative; padding is not counted
    assert stats["kl_k2_neg_frac"] == stats["kl_k3_neg_frac"] == 0.0


def test_a_k1_within_rounding_of_zero_is_not_counted_negative():
    # The policy equals the reference up to the rounding of two passes: its k1 values are ±3e-6, -2e-5 is beyond it.
    logp = torch.tensor([[-1.0, -2.0, -0.5, -0.25]])
    ref_logp = logp + torch.tensor([[3e-6, -3e-6, 2e-5, 0.0]])
    stats = kl_estimator_stats(logp, ref_logp, torch.zeros_like(logp), torch.ones_like(logp))
    assert stats["kl_k1_neg_frac"] == 0.25  # only the third token's k1 (−2e-5) is negative beyond ROUNDING


def test_on_many_sampled_tokens_k1_and_k3_are_unbiased_and_k2_is_not():
    # One state, π_θ = P and π_ref = Q far apart; 200 000 tokens drawn from P.
    p = torch.tensor([0.4, 0.3, 0.15, 0.1, 0.05], dtype=torch.float64)
    q = torch.tensor([0.1, 0.2, 0.2, 0.2, 0.3], dtype=torch.float64)
    draws = torch.multinomial(p, 200_000, replacement=True, generator=torch.Generator().manual_seed(0))[None]
    exact = kl_exact(p.log()[None, None], q.log()[None, None]).expand_as(draws)
    stats = kl_estimator_stats(p.log()[draws], q.log()[draws], exact, torch.ones_like(exact))
    # E_P[k2] − KL(P‖Q) = Σ p·½(log q/p)² − Σ p·log(p/q) = 0.5195 − 0.4741 = 0.0454 by hand; the standard errors of
    # the means are below 0.005.
    assert abs(stats["kl_k1_bias"]) < 0.015 and abs(stats["kl_k3_bias"]) < 0.015
    assert stats["kl_k2_bias"] == pytest.approx(0.0454, abs=0.01)
    assert 0.2 < stats["kl_k1_neg_frac"] < 0.6  # the tokens where π_ref is the likelier: indices 2, 3, 4 (30 %)
    assert stats["kl_k2_neg_frac"] == stats["kl_k3_neg_frac"] == 0.0


def test_near_the_reference_k1_spreads_more_than_k3():
    # π_ref a small perturbation of π_θ: k3 ≈ ½(log r)² is second order in log r, k1 first order.
    p = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    q = p * torch.tensor([1.05, 0.95, 1.02, 0.98], dtype=torch.float64)
    q = q / q.sum()
    draws = torch.multinomial(p, 50_000, replacement=True, generator=torch.Generator().manual_seed(1))[None]
    exact = kl_exact(p.log()[None, None], q.log()[None, None]).expand_as(draws)
    stats = kl_estimator_stats(p.log()[draws], q.log()[draws], exact, torch.ones_like(exact))
    assert stats["kl_k1_std"] > 10 * stats["kl_k3_std"]
