import math

import pytest
import torch

from rl_core.formulas.losses import clipped_surrogate_loss, dppo_loss
from rl_core.formulas.metrics import (
    advantage_stats,
    approx_kl,
    clip_fractions,
    dppo_clip_fractions,
    explained_variance,
    silenced_tokens,
    zero_advantage_group_fraction,
)

# eight valid tokens covering every case with ε_low = 0.2, ε_high = 0.28, c = 3, plus two padding tokens
RATIO = torch.tensor([[0.5, 0.5, 1.0, 1.5, 1.5, 4.0, 2.0, 0.79, 0.1, 9.0]])
ADV = torch.tensor([[-1.0, 1.0, -1.0, 1.0, -1.0, -1.0, 0.0, -2.0, -1.0, 1.0]])
MASK = torch.tensor([[1.0] * 8 + [0.0, 0.0]])


def test_clip_fractions_by_hand():
    fractions = clip_fractions(RATIO, ADV, MASK, 0.2, 0.28, dual_clip=3.0)
    # low side: tokens 0 and 7 (ρ < 0.8, A < 0); high side: token 3 (ρ > 1.28, A > 0); dual: token 5
    assert fractions == pytest.approx(
        {"clip_frac": 3 / 8, "clip_frac_low": 2 / 8, "clip_frac_high": 1 / 8, "dual_clip_frac": 1 / 8}
    )
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in fractions.values())


def test_metrics_of_several_runs_at_once_equal_each_run_alone():
    """A group of runs computes its metrics under vmap (rl_core.engine.run_group): no branch reads a value."""
    ratios, advs = torch.stack([RATIO, RATIO.flip(-1)]), torch.stack([ADV, -ADV])
    masks = torch.stack([MASK, torch.zeros_like(MASK)])  # the second run has no valid token
    together = torch.func.vmap(lambda r, a, m: clip_fractions(r, a, m, 0.2, 0.28))(ratios, advs, masks)
    stats = torch.func.vmap(advantage_stats)(advs, masks)
    explained = torch.func.vmap(explained_variance)(ratios, advs, masks)
    for run in range(2):
        alone = {k: float(v) for k, v in clip_fractions(ratios[run], advs[run], masks[run], 0.2, 0.28).items()}
        assert {k: v[run] for k, v in together.items()} == pytest.approx(alone)
        alone = {k: float(v) for k, v in advantage_stats(advs[run], masks[run]).items()}
        assert {k: v[run] for k, v in stats.items()} == pytest.approx(alone)
        assert explained[run] == pytest.approx(explained_variance(ratios[run], advs[run], masks[run]))
    assert stats["min"][1] == 0.0 and explained[1] == 0.0


def test_clip_fractions_without_dual_clip_report_zero_for_it():
    assert clip_fractions(RATIO, ADV, MASK, 0.2, 0.28)["dual_clip_frac"] == 0.0


def test_clip_fractions_agree_with_where_the_loss_gradient_vanishes():
    logp = torch.log(RATIO).requires_grad_()
    clipped_surrogate_loss(logp, torch.zeros_like(logp), ADV, 0.2, 0.28).sum().backward()
    zero_grad_with_signal = (logp.grad == 0) & (ADV != 0) & (MASK > 0)
    expected = zero_grad_with_signal.sum().item() / MASK.sum().item()
    assert clip_fractions(RATIO, ADV, MASK, 0.2, 0.28)["clip_frac"] == pytest.approx(expected)


def test_clip_fractions_per_sequence_with_column_tensors():
    ratio = torch.tensor([[1.0001], [1.0005], [0.999]])
    adv = torch.tensor([[1.0], [1.0], [-1.0]])
    fractions = clip_fractions(ratio, adv, torch.ones(3, 1), 3e-4, 4e-4)
    assert fractions["clip_frac_high"] == pytest.approx(1 / 3)
    assert fractions["clip_frac_low"] == pytest.approx(1 / 3)


def test_a_clipped_sequence_counts_every_one_of_its_tokens():
    # GSPO's token share (the trainer's clip_frac_tokens): the sequence ratio broadcast over each response's tokens.
    # Response 0 (3 tokens) has ρ_seq = 1.0005 > 1 + 4e-4 with Â > 0: clipped; response 1 (1 token) is not.
    # Per response 1 of 2 is clipped; per token 3 of 4.
    ratio = torch.tensor([[1.0005], [1.0]]).expand(2, 3)
    adv = torch.tensor([[1.0], [1.0]]).expand(2, 3)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert clip_fractions(ratio, adv, mask, 3e-4, 4e-4)["clip_frac"] == pytest.approx(3 / 4)
    assert clip_fractions(ratio[:, :1], adv[:, :1], torch.ones(2, 1), 3e-4, 4e-4)["clip_frac"] == pytest.approx(1 / 2)


def test_explained_variance_by_hand():
    returns = torch.tensor([[1.0, 2.0, 3.0, 50.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    assert explained_variance(returns, returns, mask) == pytest.approx(1.0)
    assert explained_variance(torch.full((1, 4), 2.0), returns, mask) == pytest.approx(0.0)
    # R − V = (0, 1, −1): Var = 2/3 over Var(R) = 2/3 → 0; R − V = (0, 0, 1): Var = 2/9 → 1 − 1/3
    assert explained_variance(torch.tensor([[1.0, 1.0, 4.0, 0.0]]), returns, mask) == pytest.approx(0.0)
    assert explained_variance(torch.tensor([[1.0, 2.0, 2.0, 0.0]]), returns, mask) == pytest.approx(2 / 3)
    assert explained_variance(-returns, returns, mask) == pytest.approx(1 - 4)


def test_explained_variance_with_constant_returns_is_zero_not_nan():
    returns = torch.full((2, 3), 0.7)
    assert explained_variance(torch.randn(2, 3), returns, torch.ones(2, 3)) == 0.0
    assert explained_variance(returns, returns, torch.zeros(2, 3)) == 0.0


def test_approx_kl_is_the_masked_mean_of_half_squared_log_ratio():
    logp = torch.tensor([[-1.0, -2.0, -3.0]])
    old_logp = torch.tensor([[-1.5, -1.0, 7.0]])
    # (0.5² / 2 + 1² / 2) / 2 = 0.3125
    assert approx_kl(logp, old_logp, torch.tensor([[1.0, 1.0, 0.0]])) == pytest.approx(0.3125)


def test_advantage_stats_by_hand():
    advantages = torch.tensor([[1.0, 3.0, 99.0], [-2.0, 99.0, 99.0]])
    stats = advantage_stats(advantages, torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]))
    # values 1, 3, −2: mean 2/3, population variance (1/9 + 49/9 + 64/9)/3 = 114/27
    assert stats == pytest.approx({"mean": 2 / 3, "std": math.sqrt(114 / 27), "min": -2.0, "max": 3.0})
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in stats.values())
    assert advantage_stats(torch.ones(1, 2), torch.zeros(1, 2)) == {"mean": 0.0, "std": 0.0, "min": 0.0, "max": 0.0}


def test_zero_advantage_group_fraction():
    R = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.3, 0.3])
    assert zero_advantage_group_fraction(R, 2) == pytest.approx(0.75)
    assert zero_advantage_group_fraction(R, 4) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="multiple of the group size"):
        zero_advantage_group_fraction(R, 3)


def test_silenced_tokens_are_those_a_loss_gives_no_gradient_although_a_is_not_zero():
    # A hand-written PPO clip, −min(ρA, clip(ρ, 0.8, 1.2)A) with π_old = 1: ρ = 1.5 with A > 0 and ρ = 0.5 with
    # A < 0 sit on the flat side of the clip; ρ = 1 is inside; A = 0 never counts, whatever the gradient.
    ratio = torch.tensor([[1.5, 1.0, 0.5, 1.5, 0.5]])
    advantages = torch.tensor([[1.0, 1.0, -1.0, 0.0, 1.0]])
    logp = ratio.log().requires_grad_()
    rho = logp.exp()
    loss = -torch.minimum(rho * advantages, rho.clamp(0.8, 1.2) * advantages)
    assert silenced_tokens(loss, logp, advantages).tolist() == [[True, False, True, False, False]]
    loss.sum().backward()  # the graph is kept for the training step's own backward pass
    assert logp.grad[0, 1] == pytest.approx(-1.0)


def test_dppo_clip_fraction_is_the_masked_share_of_all_valid_tokens():
    """Two groups of two responses, two tokens each, δ = 0.15; the second group has equal rewards (A = 0).
    Masked: +0.3 with A > 0, and −0.3, −0.3 with A = 0 (the else-branch of the mask): 3 of 8 = 0.375 (verl's
    pg_clipfrac), 1 of 8 high side, 2 of 8 low side. Silenced (A ≠ 0 and no gradient): only the first, 1/8."""
    p_old = torch.tensor([[0.5, 0.5], [0.5, 0.5], [0.6, 0.5], [0.7, 0.2]])
    p = torch.tensor([[0.8, 0.55], [0.45, 0.5], [0.3, 0.5], [0.4, 0.25]])
    advantages = torch.tensor([[1.0, 1.0], [-1.0, -1.0], [0.0, 0.0], [0.0, 0.0]])
    mask = torch.ones(4, 2)
    logp, old_logp = p.log().requires_grad_(True), p_old.log()
    clips = dppo_clip_fractions(logp.detach(), old_logp, advantages, mask, 0.15, 0.15)
    assert clips == pytest.approx(
        {"clip_frac": 0.375, "clip_frac_low": 0.25, "clip_frac_high": 0.125, "dual_clip_frac": 0.0}
    )
    silenced = silenced_tokens(dppo_loss(logp, old_logp, advantages, 0.15, 0.15, 20.0), logp, advantages)
    assert silenced.float().mean().item() == 0.125
