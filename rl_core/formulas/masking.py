"""Reductions over the valid tokens of a `[B, T]` batch.

Every statistic in the engine (means, variances, whitening) is taken over the tokens with `m_t = 1` only, so
padding never changes a result. Padding entries are selected away rather than multiplied by 0, which keeps
results finite even where a padded entry holds `inf` or `nan`.
"""

from __future__ import annotations

import torch


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """`Σ_t m_t x_t` over `dim` (over every element when `dim` is None)."""
    selected = torch.where(mask > 0, x, 0.0)
    return selected.sum() if dim is None else selected.sum(dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """`Σ_t m_t x_t / Σ_t m_t` over `dim` (over every element when `dim` is None).

    A reduction with no valid token gives 0 (not NaN), with a zero gradient.
    """
    count = masked_sum(torch.ones_like(x), mask, dim)
    # Dividing by 1 where the count is 0 keeps the value (0) and its gradient finite.
    return masked_sum(x, mask, dim) / count.masked_fill(count == 0, 1)


def masked_deviation(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`x − x̄` with `x̄` the mean over all valid tokens (padding entries are meaningless).

    The values are first shifted by one of the valid values (their maximum), which changes nothing in exact
    arithmetic but makes equal values give exactly 0: their plain float mean can miss them by a rounding
    error, which a later division by a std of the same size would blow up to order 1.
    """
    valid = mask > 0
    shift = torch.where(valid, x, -torch.inf).amax().detach()
    shifted = x - torch.where(valid.any(), shift, 0.0)
    return shifted - masked_mean(shifted, mask)


def masked_var(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Population variance over all valid tokens: `Σ m (x − x̄)² / Σ m`; exactly 0 when the values are equal."""
    return masked_mean(masked_deviation(x, mask) ** 2, mask)


STD_FLOOR = 1e-6  # a std below this is an all-equal group or batch up to rounding: it carries no signal


def divide_by_std(centred: torch.Tensor, std: torch.Tensor, eps: float) -> torch.Tensor:
    """`x/(σ + ε)` where `σ ≥ 1e-6`, and 0 where `σ < 1e-6` (broadcast): an all-equal group, or a batch std over
    equal rewards, gives advantage 0, never `x/ε` — a deviation from a batch mean divided by a group's std of 0
    would otherwise reach 1e5 or more (fp32 std blow-ups such as NeMo-RL's −2075 from a std of 4.6e-4 + ε)."""
    return torch.where(std < STD_FLOOR, torch.zeros_like(centred), centred / (std + eps))


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """`(x − x̄)/(σ + ε)` over all valid tokens of the batch, 0 on padding and everywhere if `σ < 1e-6`
    (`divide_by_std`).

    `σ = √masked_var` is the population standard deviation, so the result has mean 0 and population std 1
    (up to ε) over the valid tokens. (TRL's and verl's `masked_whiten` use the Bessel-corrected variance and
    `rsqrt(var + ε)`; OpenRLHF's REINFORCE++ normalisation uses the population variance, as here. The two
    differ by the factor `√(N/(N−1))` over N valid tokens.)
    """
    whitened = divide_by_std(masked_deviation(x, mask), masked_var(x, mask).sqrt(), eps)
    return torch.where(mask > 0, whitened, 0.0)
