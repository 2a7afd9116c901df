import math

import pytest
import torch

from rl_core.formulas.aggregation import aggregate_loss
from rl_core.formulas.losses import (
    clip_cov_detach_mask,
    clipped_surrogate_loss,
    clipped_value_loss,
    dro_loss,
    entropy_bonus_loss,
    entropy_from_logits,
    gspo_loss,
    gspo_sequence_ratio,
    gspo_token_loss,
    kl_cov_penalty_mask,
    positive_nll_loss,
    vanilla_pg_loss,
)

EPS_LOW, EPS_HIGH = 0.2, 0.28


def _loss_and_grad(ratio: float, advantage: float, dual_clip: float | None = None) -> tuple[float, float]:
    """Clipped loss of one token with `ρ = ratio`, and its derivative with respect to `log π_θ`."""
    old_logp = torch.tensor([-1.0])
    logp = (old_logp + math.log(ratio)).requires_grad_()
    loss = clipped_surrogate_loss(logp, old_logp, torch.tensor([advantage]), EPS_LOW, EPS_HIGH, dual_clip)
    loss.sum().backward()
    return loss.item(), logp.grad.item()


def test_vanilla_pg_loss_and_its_gradient():
    logp = torch.tensor([[-0.5, -2.0]], requires_grad=True)
    advantages = torch.tensor([[2.0, -1.0]])
    loss = vanilla_pg_loss(logp, advantages)
    torch.testing.assert_close(loss, torch.tensor([[1.0, -2.0]]))
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, -advantages)


# (A, ρ, expected loss, clipped): unclipped losses are −ρA with gradient −ρA with respect to log π_θ
SIX_CASES = [
    (1.0, 0.5, -0.5, False),  # A > 0, ρ below the range: the min keeps ρA
    (1.0, 1.1, -1.1, False),  # A > 0, inside
    (1.0, 1.5, -1.28, True),  # A > 0, above: clipped at 1 + ε_high
    (-1.0, 0.5, 0.8, True),  # A < 0, below: clipped at 1 − ε_low
    (-1.0, 1.1, 1.1, False),  # A < 0, inside
    (-1.0, 1.5, 1.5, False),  # A < 0, above: the min keeps ρA
]


@pytest.mark.parametrize("advantage, ratio, expected, clipped", SIX_CASES)
def test_clipped_surrogate_six_cases(advantage, ratio, expected, clipped):
    loss, grad = _loss_and_grad(ratio, 2 * advantage)
    assert loss == pytest.approx(2 * expected)
    if clipped:
        assert grad == 0.0
    else:
        assert grad == pytest.approx(-ratio * 2 * advantage)


def test_clipped_surrogate_at_ratio_one_is_minus_the_advantage():
    logp = torch.tensor([[-0.3, -1.2, -4.0]])
    advantages = torch.tensor([[0.5, -2.0, 0.0]])
    torch.testing.assert_close(clipped_surrogate_loss(logp, logp, advantages, 0.2, 0.2), -advantages)


@pytest.mark.parametrize(
    "advantage, ratio, expected, grad",
    [
        (-1.0, 4.0, 3.0, 0.0),  # ρ > c: the loss is capped at −c·A and has no gradient
        (-1.0, 2.0, 2.0, 2.0),  # 1 + ε_high < ρ < c: unchanged
        (-1.0, 0.5, 0.8, 0.0),  # ordinary clip, unchanged
        (1.0, 4.0, -1.28, 0.0),  # A > 0: dual clip never applies (min(L, −cA) would give −3)
        (1.0, 0.5, -0.5, -0.5),
    ],
)
def test_dual_clip(advantage, ratio, expected, grad):
    loss, gradient = _loss_and_grad(ratio, advantage, dual_clip=3.0)
    assert loss == pytest.approx(expected)
    assert gradient == pytest.approx(grad)


def test_dual_clip_constant_must_exceed_one():
    with pytest.raises(ValueError, match="c must be > 1"):
        _loss_and_grad(1.0, -1.0, dual_clip=1.0)


def test_gspo_sequence_ratio_is_the_geometric_mean_of_the_token_ratios():
    logp = torch.tensor([[0.1, 0.3, 5.0], [-0.4, 7.0, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    ratio = gspo_sequence_ratio(logp, torch.zeros(2, 3), mask)
    torch.testing.assert_close(ratio, torch.tensor([math.exp(0.2), math.exp(-0.4)]))
    token_ratios = torch.tensor([math.exp(0.1), math.exp(0.3)])
    assert ratio[0].item() == pytest.approx(token_ratios.prod().sqrt().item())


def test_gspo_ratio_equals_the_token_ratio_for_length_one_responses():
    torch.manual_seed(0)
    logp, old_logp = torch.randn(5, 1), torch.randn(5, 1)
    torch.testing.assert_close(gspo_sequence_ratio(logp, old_logp, torch.ones(5, 1)), torch.exp(logp - old_logp)[:, 0])


def test_gspo_ratio_of_an_empty_response_is_one():
    assert gspo_sequence_ratio(torch.ones(1, 2), torch.zeros(1, 2), torch.zeros(1, 2)).item() == 1.0


def test_gspo_loss_by_hand():
    # s = exp(0.2) ≈ 1.2214 with ε = 0.2/0.28: inside for A = 1 (loss −s), and for A = −1 (loss s)
    logp = torch.tensor([[0.1, 0.3, 9.0], [0.1, 0.3, 9.0], [0.5, 0.5, 0.5]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    advantages = torch.tensor([1.0, -1.0, 1.0])
    loss = gspo_loss(logp, torch.zeros(3, 3), advantages, mask, EPS_LOW, EPS_HIGH)
    s = math.exp(0.2)
    # row 2: s = e^0.5 ≈ 1.65 > 1.28 with A > 0, clipped to −1.28 on each of its 3 tokens
    torch.testing.assert_close(loss, torch.tensor([[-s, -s, 0.0], [s, s, 0.0], [-1.28, -1.28, -1.28]]))


def test_gspo_and_gspo_token_share_the_value_and_the_gradient_under_seq_mean_token_mean():
    torch.manual_seed(1)
    mask = (torch.arange(5) < torch.tensor([[5], [3], [1], [4]])).float()
    old_logp = -torch.rand(4, 5) * 2
    # ratios near 1 so that some sequences are inside the range and one (row 3) is clipped
    shift = torch.tensor([[0.05], [-0.1], [0.02], [0.6]]) + 0.01 * torch.randn(4, 5)
    advantages = torch.tensor([1.0, -0.5, 2.0, 1.5])
    gradients, values = [], []
    for loss_fn in (gspo_loss, gspo_token_loss):
        logp = (old_logp + shift).requires_grad_()
        per_token = loss_fn(logp, old_logp, advantages, mask, EPS_LOW, EPS_HIGH)
        aggregate_loss(per_token, mask, "seq-mean-token-mean").backward()
        values.append(per_token.detach())
        gradients.append(logp.grad)
    torch.testing.assert_close(values[0], values[1])
    torch.testing.assert_close(gradients[0], gradients[1])
    assert (gradients[0][3] == 0).all()  # the clipped sequence
    assert (gradients[0][:3][mask[:3] > 0] != 0).all()
    assert (gradients[0][mask == 0] == 0).all()


def test_gspo_token_gradient_is_per_token():
    # with a token-dependent weight on the loss, GSPO-token's gradient follows each token's weight
    logp = torch.zeros(1, 3, requires_grad=True)
    loss = gspo_token_loss(logp, torch.zeros(1, 3), torch.tensor([1.0]), torch.ones(1, 3), 0.2, 0.2)
    (loss * torch.tensor([[1.0, 2.0, 3.0]])).sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.0, -2.0, -3.0]]))


@pytest.mark.parametrize("loss_fn", [gspo_loss, gspo_token_loss])
def test_gspo_losses_ignore_padding_columns(loss_fn):
    torch.manual_seed(2)
    logp, old_logp = -torch.rand(3, 4), -torch.rand(3, 4)
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    advantages = torch.tensor([0.5, -1.0, 2.0])
    plain = loss_fn(logp, old_logp, advantages, mask, 0.2, 0.2)
    pad = torch.full((3, 2), 30.0)
    padded_logp, padded_old_logp = torch.cat([logp, pad], 1), torch.cat([old_logp, -pad], 1)
    padded_mask = torch.cat([mask, torch.zeros(3, 2)], 1)
    padded = loss_fn(padded_logp, padded_old_logp, advantages, padded_mask, 0.2, 0.2)
    torch.testing.assert_close(padded[:, :4], plain)
    assert (padded[:, 4:] == 0).all() and (plain[mask == 0] == 0).all()


def test_entropy_from_logits():
    uniform = torch.zeros(2, 3, 5)
    torch.testing.assert_close(entropy_from_logits(uniform), torch.full((2, 3), math.log(5)))
    two_point = torch.log(torch.tensor([[[0.25, 0.75]]]))
    expected = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert entropy_from_logits(two_point).item() == pytest.approx(expected)
    torch.manual_seed(3)
    logits = torch.randn(2, 4, 6)
    torch.testing.assert_close(entropy_from_logits(logits), torch.distributions.Categorical(logits=logits).entropy())


def test_entropy_with_impossible_tokens_is_finite():
    logits = torch.tensor([[[0.0, -math.inf, 0.0]]])
    assert entropy_from_logits(logits).item() == pytest.approx(math.log(2))


def test_entropy_bonus_loss():
    torch.testing.assert_close(entropy_bonus_loss(torch.tensor([[1.0, 2.0]]), 0.01), torch.tensor([[-0.01, -0.02]]))


def test_clipped_value_loss_by_hand():
    values = torch.tensor([1.5, 1.1, 1.5, 0.5])
    old_values = torch.tensor([1.0, 1.0, 1.0, 1.0])
    returns = torch.tensor([2.0, 2.0, 1.0, 0.0])
    # 1: V clipped to 1.2 → max(0.25, 0.64); 2: inside → 0.81 twice; 3: max(0.25, 0.04);
    # 4: V clipped to 0.8 → max(0.25, 0.64)
    expected = 0.5 * torch.tensor([0.64, 0.81, 0.25, 0.64])
    torch.testing.assert_close(clipped_value_loss(values, old_values, returns, 0.2), expected)


def test_clipped_value_loss_gradient_vanishes_when_the_clipped_term_wins():
    values = torch.tensor([1.5, 1.5], requires_grad=True)
    loss = clipped_value_loss(values, torch.tensor([1.0, 1.0]), torch.tensor([2.0, 1.0]), 0.2)
    loss.sum().backward()
    torch.testing.assert_close(values.grad, torch.tensor([0.0, 0.5]))


def test_positive_nll_loss_by_hand():
    logp = torch.tensor([[-1.0, -2.0, -9.0], [-3.0, -9.0, -9.0], [-5.0, -5.0, -5.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    loss = positive_nll_loss(logp, mask, torch.tensor([True, True, False]))
    assert loss.item() == pytest.approx((1 + 2 + 3) / 3)
    loss.backward()
    torch.testing.assert_close(logp.grad, -torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]) / 3)


def test_positive_nll_loss_without_positives_is_zero_with_zero_gradient():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    loss = positive_nll_loss(logp, torch.ones(1, 2), torch.tensor([False]))
    loss.backward()
    assert loss.item() == 0.0
    assert logp.grad.tolist() == [[0.0, 0.0]]


def _covariance_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """logp, A, mask `[4, 50]` with padding, and cov computed independently over the valid entries."""
    generator = torch.Generator().manual_seed(4)
    logp = -torch.rand(4, 50, generator=generator) * 3
    advantages = torch.randn(4, 50, generator=generator) * 3
    mask = (torch.arange(50) < torch.tensor([[50], [20], [35], [7]])).float()
    valid = mask > 0
    lp, adv = logp[valid].double(), advantages[valid].double()
    cov = torch.zeros(4, 50, dtype=torch.float64)
    cov[valid] = (lp - lp.mean()) * (adv - adv.mean())
    # padding that would win every selection if it were looked at
    return logp - (1 - mask) * 100, advantages + (1 - mask) * 100, mask, cov


def test_clip_cov_selects_the_right_number_of_in_range_valid_tokens():
    logp, advantages, mask, cov = _covariance_batch()
    in_range = (mask > 0) & (cov >= 1.0) & (cov <= 5.0)
    assert in_range.sum() > 10
    for fraction, expected in [(0.02, 2), (0.05, 5), (2e-4, 1), (0.0, 0), (1.0, int(in_range.sum()))]:
        # N = 112 valid tokens: ⌊0.02·112⌋ = 2, ⌊0.05·112⌋ = 5, at least 1, at most all that qualify
        detach = clip_cov_detach_mask(logp, advantages, mask, fraction, 1.0, 5.0, torch.Generator().manual_seed(0))
        assert detach.dtype == torch.bool and detach.shape == mask.shape
        assert detach.sum().item() == expected
        assert not (detach & ~in_range).any()


def test_clip_cov_draws_uniformly_with_the_generator():
    logp, advantages, mask, cov = _covariance_batch()
    in_range = (mask > 0) & (cov >= 1.0) & (cov <= 5.0)

    def draw(seed: int) -> torch.Tensor:
        return clip_cov_detach_mask(logp, advantages, mask, 0.05, 1.0, 5.0, torch.Generator().manual_seed(seed))

    assert torch.equal(draw(7), draw(7))
    counts = sum(draw(seed).double() for seed in range(400))
    # each of the K qualifying tokens is drawn with probability 5/K; binomial standard error over 400 draws
    p = 5 / in_range.sum().item()
    expected, tolerance = 400 * p, 5 * math.sqrt(400 * p * (1 - p))
    assert (counts[in_range] - expected).abs().max().item() < tolerance
    assert counts[in_range].min() > 0


def test_clip_cov_needs_no_gradient_and_leaves_inputs_alone():
    logp, advantages, mask, _ = _covariance_batch()
    logp = logp.clone().requires_grad_()
    before = logp.detach().clone()
    detach = clip_cov_detach_mask(logp, advantages, mask, 0.05, 1.0, 5.0, torch.Generator().manual_seed(0))
    assert not detach.requires_grad
    assert torch.equal(logp.detach(), before)


def test_kl_cov_selects_the_top_covariance_valid_tokens():
    logp, advantages, mask, cov = _covariance_batch()
    selected = kl_cov_penalty_mask(logp, advantages, mask, 0.05)
    assert selected.sum().item() == 5
    threshold = cov[mask > 0].topk(5).values[-1]
    assert torch.equal(selected, (mask > 0) & (cov >= threshold))
    assert kl_cov_penalty_mask(logp, advantages, mask, 1e-4).sum().item() == 1
    assert kl_cov_penalty_mask(logp, advantages, mask, 0.0).sum().item() == 0


@pytest.mark.parametrize("fraction", [-0.1, 1.5])
def test_cov_selections_reject_a_fraction_outside_zero_one(fraction):
    logp, advantages, mask, _ = _covariance_batch()
    with pytest.raises(ValueError, match="fraction"):
        kl_cov_penalty_mask(logp, advantages, mask, fraction)
    with pytest.raises(ValueError, match="fraction"):
        clip_cov_detach_mask(logp, advantages, mask, fraction, 1.0, 5.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_policy_losses_keep_the_dtype_and_leave_inputs_alone(dtype):
    logp = torch.tensor([[-0.5, -1.0]], dtype=dtype)
    old_logp = torch.tensor([[-0.7, -0.9]], dtype=dtype)
    advantages = torch.tensor([[1.0, -1.0]], dtype=dtype)
    mask = torch.ones(1, 2, dtype=dtype)
    copies = [t.clone() for t in (logp, old_logp, advantages)]
    assert clipped_surrogate_loss(logp, old_logp, advantages, 0.2, 0.2, 3.0).dtype == dtype
    assert gspo_loss(logp, old_logp, advantages[:, 0], mask, 0.2, 0.2).dtype == dtype
    assert gspo_token_loss(logp, old_logp, advantages[:, 0], mask, 0.2, 0.2).dtype == dtype
    assert all(torch.equal(a, b) for a, b in zip(copies, (logp, old_logp, advantages)))


def test_dro_loss_and_its_gradient_by_hand():
    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    old_logp = torch.tensor([[-1.5, -2.0, -0.5]])
    advantages = torch.tensor([[2.0, -1.0, 0.4]])
    loss = dro_loss(logp, old_logp, advantages, beta=0.4)
    # −[A·log π − (β/2)(log π − log π_old)²]: −[2·(−1) − 0.2·0.5²] = 2.05; −[(−1)(−2) − 0] = −2; −[0.4·(−0.5)] = 0.2.
    assert loss.tolist() == [pytest.approx([2.05, -2.0, 0.2])]
    loss.sum().backward()
    # −(A − β (log π − log π_old)): −(2 − 0.4·0.5) = −1.8 (the spring weakens the push); at π_θ = π_old the plain
    # policy gradient −A: 1.0 and −0.4.
    assert logp.grad.tolist() == [pytest.approx([-1.8, 1.0, -0.4])]
    # A token whose log-probability has moved by A/β = 2/0.4 = 5 nats feels no gradient.
    moved = torch.tensor([[3.5]], requires_grad=True)
    dro_loss(moved, torch.tensor([[-1.5]]), torch.tensor([[2.0]]), beta=0.4).sum().backward()
    assert moved.grad.item() == pytest.approx(0.0)
