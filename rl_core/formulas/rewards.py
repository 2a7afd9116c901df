"""Reward shaping: the per-token reward with the KL penalty folded in, and DAPO's soft overlong punishment."""

from __future__ import annotations

import torch


def kl_penalized_token_rewards(
    sequence_rewards: torch.Tensor,
    kl: torch.Tensor,
    mask: torch.Tensor,
    beta: float | torch.Tensor,
    reward_clip: float | None = None,
) -> torch.Tensor:
    """Per-token rewards `[B, T]` with KL in the reward (deepspeed-chat style):

    `r_t = −β·k(t)` for `t < T`, `r_T = clip(R, −c_R, c_R) − β·k(T)` on each row's last valid token `T`,
    0 on padding. `reward_clip = c_R`; None leaves `R` unclipped. A row without valid tokens gets all zeros.
    """
    valid = mask > 0
    positions = torch.arange(mask.shape[-1], device=mask.device)
    last_position = torch.where(valid, positions, -1).amax(-1, keepdim=True)
    is_last = valid & (positions == last_position)
    final = sequence_rewards if reward_clip is None else sequence_rewards.clamp(-reward_clip, reward_clip)
    rewards = -beta * kl + torch.where(is_last, final[:, None], 0.0)
    return torch.where(valid, rewards, 0.0)


def soft_overlong_punishment(lengths: torch.Tensor, max_length: int, cache_length: int) -> torch.Tensor:
    """DAPO's length penalty `[B]`, added to `R`, with `L_max = max_length` and `L_cache = cache_length`:

    0 if `|y| ≤ L_max − L_cache`; `((L_max − L_cache) − |y|)/L_cache` if `L_max − L_cache < |y| ≤ L_max`;
    −1 beyond. The three pieces are exactly `clamp(((L_max − L_cache) − |y|)/L_cache, −1, 0)`.
    `|y|` counts every response token, a closing EOS included (verl's DAPO: `valid_response_length`).
    `lengths` may be an integer or a float tensor; the result is floating point.
    """
    if not 0 < cache_length <= max_length:
        raise ValueError(f"need 0 < cache_length ≤ max_length; got {cache_length} and {max_length}")
    return ((max_length - cache_length - lengths) / cache_length).clamp(-1.0, 0.0)


def overlong_buffer_length(max_length: int, buffer: int | None, fraction: float) -> int:
    """`L_cache`: `buffer` tokens when given, else `round(fraction · L_max)` and at least 1 (DAPO: 4k of 20k = 0.2)."""
    if buffer is not None:
        return buffer
    return max(1, round(fraction * max_length))
