import math

import pytest
import torch

from rl_core.formulas.kl import KL_ESTIMATORS, clamped_kl, kl_exact, kl_guard_capped, kl_k1, kl_k2, kl_k3

# π_θ and π_ref over a 5-token vocabulary, far enough apart that k2's bias is large.
P = torch.tensor([0.4, 0.3, 0.15, 0.1, 0.05], dtype=torch.float64)
Q = torch.tensor([0.1, 0.2, 0.2, 0.2, 0.3], dtype=torch.float64)


def test_estimators_by_hand():
    logp = torch.tensor([math.log(0.5)])
    ref_logp = torch.tensor([math.log(0.25)])
    # log r = log(0.25 / 0.5) = −ln 2, r = 0.5
    assert kl_k1(logp, ref_logp).item() == pytest.approx(math.log(2))
    assert kl_k2(logp, ref_logp).item() == pytest.approx(0.5 * math.log(2) ** 2)
    assert kl_k3(logp, ref_logp).item() == pytest.approx(0.5 - 1 + math.log(2))


def test_estimators_vanish_when_the_policies_agree():
    logp = torch.log(torch.tensor([[0.2, 0.7]]))
    for estimator in KL_ESTIMATORS.values():
        assert torch.equal(estimator(logp, logp), torch.zeros_like(logp))


def test_k1_can_be_negative_while_k2_and_k3_never_are():
    torch.manual_seed(0)
    logp, ref_logp = torch.randn(1000) * 2, torch.randn(1000) * 2
    assert (kl_k1(logp, ref_logp) < 0).any()
    assert (kl_k2(logp, ref_logp) >= 0).all()
    assert (kl_k3(logp, ref_logp) >= 0).all()


def test_registry():
    assert {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3} == KL_ESTIMATORS


def test_exact_kl_by_hand():
    logits = torch.log(torch.tensor([[[0.25, 0.75]]]))
    ref_logits = torch.zeros(1, 1, 2)  # uniform
    expected = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
    assert kl_exact(logits, ref_logits).shape == (1, 1)
    assert kl_exact(logits, ref_logits).item() == pytest.approx(expected)
    assert expected == pytest.approx(0.1308121, abs=1e-7)


def test_exact_kl_matches_torch_kl_div_and_ignores_logit_shifts():
    torch.manual_seed(1)
    logits, ref_logits = torch.randn(3, 4, 7), torch.randn(3, 4, 7)
    expected = torch.nn.functional.kl_div(
        torch.log_softmax(ref_logits, -1), torch.log_softmax(logits, -1), log_target=True, reduction="none"
    ).sum(-1)
    torch.testing.assert_close(kl_exact(logits, ref_logits), expected)
    torch.testing.assert_close(kl_exact(logits + 3.0, ref_logits - 2.0), expected)
    torch.testing.assert_close(kl_exact(logits, logits), torch.zeros(3, 4))


def test_exact_kl_with_impossible_tokens_is_finite():
    logits = torch.tensor([[[0.0, -math.inf, 1.0]]])
    ref_logits = torch.tensor([[[0.0, 0.0, 0.0]]])
    p = torch.softmax(logits, -1)[0, 0]
    expected = p[0] * math.log(p[0] * 3) + p[2] * math.log(p[2] * 3)
    assert kl_exact(logits, ref_logits).item() == pytest.approx(expected.item())


@pytest.fixture(scope="module")
def sampled_log_ratios():
    """`log r = log π_ref(a) − log π_θ(a)` for 100 000 tokens `a ~ π_θ` (seeded)."""
    generator = torch.Generator().manual_seed(0)
    tokens = torch.multinomial(P, 100_000, replacement=True, generator=generator)
    return P.log()[tokens], Q.log()[tokens]


def _standard_errors_away(samples: torch.Tensor, value: float) -> float:
    return abs(samples.mean().item() - value) / (samples.std().item() / math.sqrt(samples.numel()))


@pytest.mark.parametrize("name", ["k1", "k3"])
def test_k1_and_k3_are_unbiased_on_a_sampled_categorical(sampled_log_ratios, name):
    exact = kl_exact(P.log(), Q.log()).item()
    samples = KL_ESTIMATORS[name](*sampled_log_ratios)
    assert _standard_errors_away(samples, exact) < 4


def test_k2_is_biased_on_a_sampled_categorical(sampled_log_ratios):
    exact = kl_exact(P.log(), Q.log()).item()
    samples = kl_k2(*sampled_log_ratios)
    assert _standard_errors_away(samples, exact) > 10
    # ... while it is an unbiased estimate of its own expectation E_π_θ[½ (log r)²]
    own_expectation = (P * 0.5 * (Q.log() - P.log()) ** 2).sum().item()
    assert _standard_errors_away(samples, own_expectation) < 4


def test_the_kl_guard_caps_only_where_the_policy_is_below_the_reference():
    kl = torch.tensor([12.0, 12.0, 5.0, 15.0])
    logp, ref_logp = torch.tensor([-3.0, 0.0, -3.0, -3.0]), torch.tensor([0.0, -3.0, 0.0, 0.0])
    assert kl_guard_capped(kl, logp, ref_logp).tolist() == [True, False, False, True]
    assert clamped_kl(kl, logp, ref_logp).tolist() == [10.0, 12.0, 5.0, 10.0]


def test_the_capped_share_counts_valid_tokens_of_the_loss_kl():
    """k3 = r − 1 − log r with log r = log π_ref − log π_θ: at log r = 10, e^10 − 11 ≈ 22015 (capped); at log r = 1,
    e − 2 (kept); at log r = −10 π_θ > π_ref (never capped). The fourth token would be capped but is padding: 1/3."""
    from rl_core.algorithms import get_preset
    from rl_core.formulas.loss_terms import LossInputs, kl_capped_fraction

    logp = torch.tensor([[-10.0, -1.0, 0.0, -10.0]], requires_grad=True)
    ref_logp = torch.tensor([[0.0, 0.0, -10.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    inputs = LossInputs(get_preset("grpo"), None, logp, logp.detach(), ref_logp, torch.zeros(1, 4), mask, 0.04, 4)
    assert kl_capped_fraction(inputs) == pytest.approx(1 / 3)
