"""The KL term's gradient: k3 as it is, importance-corrected (ρ·k3), and k3's value with k2's gradient — checked by
hand on one token and, over a whole vocabulary, against autograd of the exact KL(π_θ‖π_ref)."""

import math

import pytest
import torch

from rl_core.formulas.kl import kl_exact, kl_k1, kl_k3, kl_k3_is_corrected, kl_k3_with_k2_grad

THETA = torch.tensor([1.0, 0.2, -0.5, 0.3, -1.2], dtype=torch.float64)  # π_θ's logits
OLD = torch.tensor([0.4, 0.6, -0.2, 0.1, -0.9], dtype=torch.float64)  # π_old's logits: the sampler
REF = torch.tensor([-0.3, 0.5, 0.4, -0.1, 0.2], dtype=torch.float64)


def test_is_corrected_by_hand():
    # π_θ = ½, π_old = ¼ (ρ = 2), π_ref = ¼ (r = ½): k3 = ½ − 1 + ln 2, k1 = ln 2
    logp = torch.tensor([math.log(0.5)], requires_grad=True)
    old, ref = torch.tensor([math.log(0.25)]), torch.tensor([math.log(0.25)])
    value = kl_k3_is_corrected(logp, old, ref)
    assert value.item() == pytest.approx(2 * (0.5 - 1 + math.log(2)))
    value.backward()
    assert logp.grad.item() == pytest.approx(2 * math.log(2))  # ρ·k1


def test_k2_gradient_by_hand():
    logp = torch.tensor([math.log(0.5)], requires_grad=True)
    ref = torch.tensor([math.log(0.25)])
    value = kl_k3_with_k2_grad(logp, ref)
    assert value.item() == pytest.approx(kl_k3(logp, ref).item())  # k3's value
    value.backward()
    assert logp.grad.item() == pytest.approx(math.log(2))  # k2's gradient, log π_θ − log π_ref


def _exact_kl_gradient() -> torch.Tensor:
    theta = THETA.clone().requires_grad_()
    kl_exact(theta, REF).backward()
    return theta.grad


def _expected_gradient(estimator, sampler_logits: torch.Tensor | None) -> tuple[float, torch.Tensor]:
    """`Σ_a q(a) · estimator(a)` and its gradient w.r.t. θ, the tokens a drawn from q = softmax(sampler) (a
    constant), or from π_θ itself (detached) when `sampler_logits` is None: the exact expectation of the
    per-token term over the vocabulary."""
    theta = THETA.clone().requires_grad_()
    logp = torch.log_softmax(theta, -1)
    q = (logp if sampler_logits is None else torch.log_softmax(sampler_logits, -1)).detach().exp()
    value = (q * estimator(logp)).sum()
    value.backward()
    return value.item(), theta.grad


def test_is_corrected_k3_off_policy_has_the_true_kl_value_and_gradient():
    old_logp, ref_logp = torch.log_softmax(OLD, -1), torch.log_softmax(REF, -1)
    value, grad = _expected_gradient(lambda logp: kl_k3_is_corrected(logp, old_logp, ref_logp), OLD)
    assert value == pytest.approx(kl_exact(THETA, REF).item())
    torch.testing.assert_close(grad, _exact_kl_gradient())
    # Without the correction, k3 on π_old's samples is off in value and in gradient.
    plain_value, plain_grad = _expected_gradient(lambda logp: kl_k3(logp, ref_logp), OLD)
    assert plain_value != pytest.approx(value, rel=1e-3)
    assert not torch.allclose(plain_grad, _exact_kl_gradient(), atol=1e-3)


def test_k3_with_k2_gradient_on_policy_has_the_true_kl_gradient_and_plain_k3_does_not():
    ref_logp = torch.log_softmax(REF, -1)
    _, grad = _expected_gradient(lambda logp: kl_k3_with_k2_grad(logp, ref_logp), None)
    torch.testing.assert_close(grad, _exact_kl_gradient())
    # plain k3's expected gradient is that of the reverse KL(π_ref‖π_θ)
    _, plain_grad = _expected_gradient(lambda logp: kl_k3(logp, ref_logp), None)
    theta = THETA.clone().requires_grad_()
    kl_exact(REF, theta).backward()
    torch.testing.assert_close(plain_grad, theta.grad)


def test_k1_is_the_gradient_direction_of_both_corrections():
    logp, old, ref = torch.tensor([-0.7]), torch.tensor([-0.7]), torch.tensor([-1.9])
    # on-policy (ρ = 1) the IS-corrected value is k3 and its gradient k1, like k3 with k2's gradient
    for variant in (lambda lp: kl_k3_is_corrected(lp, old, ref), lambda lp: kl_k3_with_k2_grad(lp, ref)):
        leaf = logp.clone().requires_grad_()
        variant(leaf).backward()
        assert leaf.grad.item() == pytest.approx(kl_k1(logp, ref).item())
