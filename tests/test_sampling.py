import pytest
import torch

from rl_core.formulas.sampling import dynamic_sampling_keep, overlong_filter_mask


def test_dynamic_sampling_keeps_only_groups_with_different_rewards():
    R = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.5 + 1e-9, 0.5, 0.2, 0.2, 0.3])
    assert dynamic_sampling_keep(R, group_size=3).tolist() == [False, True, False, False, True]


def test_dynamic_sampling_for_zero_one_rewards_keeps_means_strictly_inside():
    torch.manual_seed(0)
    R = torch.randint(0, 2, (64,)).float()
    means = R.reshape(-1, 4).mean(1)
    assert torch.equal(dynamic_sampling_keep(R, 4), (means > 0) & (means < 1))


def test_dynamic_sampling_checks_the_group_size():
    with pytest.raises(ValueError, match="multiple of the group size"):
        dynamic_sampling_keep(torch.zeros(5), 2)


def test_overlong_filter_zeroes_truncated_rows_only():
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    before = mask.clone()
    filtered = overlong_filter_mask(mask, torch.tensor([False, True, False]))
    torch.testing.assert_close(filtered, torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]))
    assert filtered.dtype == mask.dtype
    assert torch.equal(mask, before)
