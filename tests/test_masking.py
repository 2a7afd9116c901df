import math

import pytest
import torch

from rl_core.formulas.masking import masked_deviation, masked_mean, masked_sum, masked_var, masked_whiten

X = torch.tensor([[1.0, 2.0, 3.0], [4.0, 100.0, -100.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])


def test_masked_sum_and_mean_by_hand():
    assert masked_sum(X, MASK).item() == 10.0
    assert masked_mean(X, MASK).item() == 2.5
    assert masked_sum(X, MASK, dim=-1).tolist() == [6.0, 4.0]
    assert masked_mean(X, MASK, dim=-1).tolist() == [2.0, 4.0]
    assert masked_mean(X, MASK, dim=0).tolist() == [2.5, 2.0, 3.0]


def test_masked_var_is_the_population_variance():
    # valid values 1, 2, 3, 4: mean 2.5, squared deviations 2.25 + 0.25 + 0.25 + 2.25 = 5, over N = 4
    assert masked_var(X, MASK).item() == pytest.approx(1.25)


def test_padding_holding_inf_or_nan_does_not_leak():
    x = X.clone()
    x[1, 1], x[1, 2] = math.inf, math.nan
    assert masked_sum(x, MASK).item() == 10.0
    assert masked_var(x, MASK).item() == pytest.approx(1.25)
    assert torch.isfinite(masked_whiten(x, MASK)).all()


def test_empty_mask_gives_zero_with_finite_gradient():
    x = torch.tensor([[1.0, 2.0]], requires_grad=True)
    mean = masked_mean(x, torch.zeros(1, 2))
    mean.backward()
    assert mean.item() == 0.0
    assert x.grad.tolist() == [[0.0, 0.0]]
    assert masked_mean(x.detach(), torch.zeros(1, 2), dim=-1).tolist() == [0.0]


def test_whiten_gives_mean_zero_and_population_std_one_over_valid_tokens():
    torch.manual_seed(0)
    x = torch.randn(4, 6) * 3 + 5
    mask = (torch.arange(6) < torch.tensor([[6], [2], [5], [1]])).float()
    white = masked_whiten(x, mask)
    valid = white[mask > 0]
    assert valid.mean().item() == pytest.approx(0.0, abs=1e-6)
    assert valid.std(correction=0).item() == pytest.approx(1.0, abs=1e-6)
    assert (white[mask == 0] == 0).all()
    # independent route: whiten the selected values directly
    chosen = x[mask > 0]
    expected = (chosen - chosen.mean()) / (((chosen - chosen.mean()) ** 2).mean().sqrt() + 1e-8)
    torch.testing.assert_close(valid, expected)


@pytest.mark.parametrize("value", [7.0, 0.7, 0.1])
def test_equal_values_have_exactly_zero_deviation_variance_and_whitened_value(value):
    # the float mean of many copies of 0.7 misses 0.7 by a rounding error; it must not survive
    x = torch.full((3, 7), value)
    mask = torch.ones(3, 7)
    assert (masked_deviation(x, mask) == 0).all()
    assert masked_var(x, mask).item() == 0.0
    assert (masked_whiten(x, mask) == 0).all()


def test_deviation_from_the_masked_mean():
    torch.testing.assert_close(masked_deviation(X, MASK)[MASK > 0], torch.tensor([-1.5, -0.5, 0.5, 1.5]))
    assert masked_deviation(X, torch.zeros(2, 3)).isfinite().all()


def test_padding_columns_change_nothing():
    padded_x = torch.cat([X, torch.full((2, 2), 55.0)], dim=1)
    padded_mask = torch.cat([MASK, torch.zeros(2, 2)], dim=1)
    assert masked_mean(padded_x, padded_mask).item() == masked_mean(X, MASK).item()
    assert masked_var(padded_x, padded_mask).item() == masked_var(X, MASK).item()
    torch.testing.assert_close(masked_whiten(padded_x, padded_mask)[:, :3], masked_whiten(X, MASK))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dtype_is_kept_and_inputs_are_untouched(dtype):
    x, mask = X.to(dtype), MASK.to(dtype)
    before = x.clone(), mask.clone()
    assert masked_whiten(x, mask).dtype == dtype
    assert masked_mean(x, mask).dtype == dtype
    assert torch.equal(x, before[0]) and torch.equal(mask, before[1])


def test_whitening_a_batch_whose_std_is_below_the_floor_gives_zero():
    """Values 1 and 1 + 1e-9 (population std 5e-10): 0, not ±5e-10/(5e-10 + 1e-8) = ±0.0476."""
    x = torch.tensor([[1.0, 1.0 + 1e-9, 7.0]], dtype=torch.float64)
    assert masked_whiten(x, torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)).tolist() == [[0.0, 0.0, 0.0]]
