"""DAPO's batch filters: dynamic sampling (drop groups that carry no signal) and overlong filtering."""

from __future__ import annotations

import torch

from rl_core.formulas.advantages import as_groups


def dynamic_sampling_keep(R: torch.Tensor, group_size: int, atol: float = 1e-6) -> torch.Tensor:
    """Bool `[B // G]`: keep group g iff its rewards are not all equal, i.e. `max_j R_j − min_j R_j > atol`.

    A group of equal rewards has zero group advantage for every member, hence no gradient. For 0/1 rewards
    this keeps exactly the groups whose mean lies strictly between 0 and 1. A group of one is never kept.
    """
    groups = as_groups(R, group_size)
    return (groups.amax(dim=1) - groups.amin(dim=1)) > atol


def overlong_filter_mask(mask: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """The loss mask with every response cut by the length limit (`truncated` `[B]` bool) zeroed."""
    return torch.where(truncated[:, None], 0.0, mask)
