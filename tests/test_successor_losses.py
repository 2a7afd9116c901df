"""CISPO, SAPO, DPPO-Binary-TV and dro: values and gradients (w.r.t. log π_θ) against hand-computed cases."""

import math

import pytest
import torch

from rl_core.algorithms import get_preset
from rl_core.config import RunConfig
from rl_core.engine.trainer import Trainer
from rl_core.formulas.estimators import policy_loss
from rl_core.formulas.losses import (
    cispo_loss,
    clipped_surrogate_loss,
    dppo_loss,
    dppo_tv_mask,
    dro_loss,
    sapo_gate,
    sapo_loss,
)
from toy_tasks import DEFAULT_TASK

OLD_LOGP = -1.0


def _one_token(loss_fn, ratio: float, advantage: float, *args) -> tuple[float, float]:
    """Loss of one token with `ρ = ratio` (π_old(a) = e⁻¹) and its derivative w.r.t. log π_θ."""
    old_logp = torch.tensor([OLD_LOGP], dtype=torch.float64)
    logp = (old_logp + math.log(ratio)).requires_grad_()
    loss = loss_fn(logp, old_logp, torch.tensor([advantage], dtype=torch.float64), *args)
    loss.sum().backward()
    return loss.item(), logp.grad.item()


@pytest.mark.parametrize(
    "ratio, advantage, weight",
    [(1.5, 2.0, 1.5), (8.0, 2.0, 5.0), (0.3, -1.0, 0.3), (8.0, -1.0, 5.0)],
)
def test_cispo_one_sided_cap_by_hand(ratio, advantage, weight):
    loss, grad = _one_token(cispo_loss, ratio, advantage, 5.0)
    logp = OLD_LOGP + math.log(ratio)
    assert loss == pytest.approx(-weight * advantage * logp)
    assert grad == pytest.approx(-weight * advantage)  # the weight is a constant: ∂L/∂log π = −w·A


@pytest.mark.parametrize("ratio, weight", [(0.5, 0.8), (1.1, 1.1), (1.5, 1.28)])
def test_cispo_two_sided_clamps_the_weight_to_the_ppo_range(ratio, weight):
    _, grad = _one_token(cispo_loss, ratio, 1.0, 0.28, 0.2)
    assert grad == pytest.approx(-weight)


@pytest.mark.parametrize(
    "ratio, advantage", [(0.5, 1.0), (1.1, 1.0), (1.5, 1.0), (0.5, -1.0), (1.1, -1.0), (1.5, -1.0)]
)
def test_cispo_moves_every_token_ppo_moves_the_same_and_the_ones_ppo_clips_too(ratio, advantage):
    _, ppo_grad = _one_token(clipped_surrogate_loss, ratio, advantage, 0.2, 0.2)
    _, cispo_grad = _one_token(cispo_loss, ratio, advantage, 5.0)
    assert cispo_grad == pytest.approx(-ratio * advantage)
    if ppo_grad != 0:
        assert cispo_grad == pytest.approx(ppo_grad)  # unclipped PPO: −ρA as well


def test_sapo_gate_by_hand():
    ratio = torch.tensor([1.0, 2.0, 0.0])
    # σ(0) = ½, σ(1) = 0.7310586, σ(−1) = 0.2689414
    torch.testing.assert_close(sapo_gate(ratio, 1.0), torch.tensor([2.0, 4 * 0.7310586, 4 * 0.2689414]))
    assert sapo_gate(torch.tensor(1.0), 2.0).item() == pytest.approx(1.0)  # (4/τ)·½


@pytest.mark.parametrize(
    "ratio, advantage, tau",
    [(1.0, 1.0, 1.0), (2.0, 1.0, 1.0), (0.5, 1.0, 1.0), (1.0, -1.0, 1.05), (3.0, -2.0, 1.05), (0.2, -2.0, 1.05)],
)
def test_sapo_value_and_gradient_by_hand(ratio, advantage, tau):
    loss, grad = _one_token(sapo_loss, ratio, advantage, 1.0, 1.05)
    sigma = 1 / (1 + math.exp(-tau * (ratio - 1)))
    assert loss == pytest.approx(-advantage * 4 / tau * sigma)
    assert grad == pytest.approx(-advantage * ratio * 4 * sigma * (1 - sigma))  # the spec's A·ρ·4σ(1−σ)


def test_sapo_gradient_is_plain_policy_gradient_on_policy_and_fades_without_a_cut():
    _, on_policy = _one_token(sapo_loss, 1.0, 1.0, 1.0, 1.05)
    assert on_policy == pytest.approx(-1.0)
    # Where PPO's clip has switched the gradient off (ρ = 3, A > 0), SAPO's is still there, and it fades far out.
    _, ppo_grad = _one_token(clipped_surrogate_loss, 3.0, 1.0, 0.2, 0.2)
    _, sapo_grad = _one_token(sapo_loss, 3.0, 1.0, 1.0, 1.05)
    assert ppo_grad == 0.0 and sapo_grad < -0.4
    _, far = _one_token(sapo_loss, 12.0, 1.0, 1.0, 1.05)
    assert -0.01 < far < 0


# (p_old, p, A, kept by DPPO, clipped by PPO at ε = 0.2)
DPPO_CASES = [
    (0.01, 0.05, 1.0, True, True),  # rare token: ratio 5, probability moved by 0.04
    (0.50, 0.70, 1.0, False, True),  # common token pushed up by 0.2 > δ_high
    (0.50, 0.60, 1.0, True, False),
    (0.50, 0.30, -1.0, False, True),  # pushed down by 0.2 > δ_low
    (0.50, 0.30, 1.0, True, False),  # moving against its advantage: never masked
    (0.02, 0.001, -1.0, True, True),  # rare token pushed down: ratio 0.05, probability moved by 0.019
]


@pytest.mark.parametrize("p_old, p, advantage, kept, ppo_clipped", DPPO_CASES)
def test_dppo_mask_by_hand_next_to_ppo_clip(p_old, p, advantage, kept, ppo_clipped):
    mask = dppo_tv_mask(torch.tensor([p]), torch.tensor([p_old]), torch.tensor([advantage]), 0.15, 0.15)
    assert mask.item() is kept
    old_logp = torch.tensor([math.log(p_old)], dtype=torch.float64)
    logp = torch.tensor([math.log(p)], dtype=torch.float64, requires_grad=True)
    clipped_surrogate_loss(logp, old_logp, torch.tensor([advantage], dtype=torch.float64), 0.2, 0.2).sum().backward()
    assert (logp.grad.item() == 0) is ppo_clipped


@pytest.mark.parametrize("p_old, p, advantage, kept, ppo_clipped", DPPO_CASES)
def test_dppo_loss_value_and_gradient_by_hand(p_old, p, advantage, kept, ppo_clipped):
    old_logp = torch.tensor([math.log(p_old)], dtype=torch.float64)
    logp = torch.tensor([math.log(p)], dtype=torch.float64, requires_grad=True)
    loss = dppo_loss(logp, old_logp, torch.tensor([advantage], dtype=torch.float64), 0.15, 0.15, 20.0)
    loss.sum().backward()
    weight = min(p / p_old, 20.0)
    if kept:
        assert loss.item() == pytest.approx(-weight * advantage * math.log(p))
        assert logp.grad.item() == pytest.approx(-weight * advantage)
    else:
        assert loss.item() == 0.0 and logp.grad.item() == 0.0


def test_dppo_caps_the_weight_of_a_huge_ratio():
    old_logp = torch.tensor([math.log(0.001)])
    logp = torch.tensor([math.log(0.05)], requires_grad=True)  # ratio 50
    dppo_loss(logp, old_logp, torch.tensor([1.0]), 0.15, 0.15, 20.0).sum().backward()
    assert logp.grad.item() == pytest.approx(-20.0)


def test_sapo_keeps_float64_temperatures():
    """On-policy (ρ = 1) the gate is (4/τ)·½, so L = −A·2/τ: with A = −1 and τ_neg = 1.05 exactly 2/1.05 in float64
    (a float32 τ = 1.0499999523 would be off by 9e-8)."""
    logp = torch.zeros(2, dtype=torch.float64)
    loss = sapo_loss(logp, logp, torch.tensor([-1.0, 1.0], dtype=torch.float64), tau_pos=1.0, tau_neg=1.05)
    assert loss.dtype == torch.float64
    assert abs(loss[0].item() - 2 / 1.05) < 1e-15 and loss[1].item() == -2.0


def test_policy_loss_dro_is_verls_dro_with_dro_beta():
    """A = 2, log π_old = −1.5, log π_θ = −1: L = −[2·(−1) − (0.4/2)·0.25] = 2.05 (β = 0.4)."""
    algo = get_preset("grpo", policy_loss="dro", dro_beta=0.4)
    logp, old, adv = torch.tensor([[-1.0]]), torch.tensor([[-1.5]]), torch.tensor([[2.0]])
    assert policy_loss(algo, logp, old, adv, torch.ones_like(adv)).item() == pytest.approx(2.05)
    torch.testing.assert_close(policy_loss(algo, logp, old, adv, torch.ones_like(adv)), dro_loss(logp, old, adv, 0.4))


def test_dro_trains_and_never_silences_a_token():
    """Two updates per batch: the second sees π_θ ≠ π_old, yet the spring only shrinks the gradient, so no token
    with A ≠ 0 gets exactly none."""
    algo = get_preset("grpo", policy_loss="dro", dro_beta=1.0, prompts_per_step=4, ppo_epochs=2, num_minibatches=1)
    trainer = Trainer(RunConfig(algo=algo, task=DEFAULT_TASK, steps=2, seed=3))
    records = list(trainer.steps())
    assert all(math.isfinite(r["total_loss"]) and r["silenced_frac"] == 0 for r in records)
    assert records[-1]["approx_kl"] > 0  # the second update moved off π_old
