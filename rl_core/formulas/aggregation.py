"""Loss aggregation: how a per-token loss `L` `[B, T]` becomes the scalar that is minimised.

The choice decides how much each token weighs, and so whether long responses are under-punished (the length
bias of `seq-mean-token-mean`) or every token counts the same (`token-mean`).
"""

from __future__ import annotations

import torch

from rl_core.formulas.masking import masked_mean, masked_sum

LOSS_AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
    "seq-mean-token-sum",
)


def aggregate_loss(
    loss: torch.Tensor, mask: torch.Tensor, loss_agg_mode: str, max_length: int | None = None
) -> torch.Tensor:
    """Reduce `L` `[B, T]` over the valid tokens to a scalar:

    * `token-mean` (DAPO, VAPO): `Σ_{i,t} m L / Σ_{i,t} m`;
    * `seq-mean-token-mean` (original GRPO): `(1/B') Σ_i (Σ_t m L / |y_i|)`, where the mean runs over the
      B' responses with `|y_i| > 0`: a response without valid tokens (e.g. removed by overlong filtering) has
      no token mean and is left out rather than counted as a zero;
    * `seq-mean-token-sum-norm` (Dr. GRPO): `Σ_{i,t} m L / (B · T_max)` with `T_max = max_length` if given, else
      `loss.shape[1]`; B counts every row, so the normaliser is a constant;
    * `seq-mean-token-sum` (RLOO: the whole response is one action): `(1/B) Σ_i Σ_t m L`, i.e. each response's
      summed log-probability `log π(y_i|x)` weighted by its sequence advantage.

    With no valid token at all every mode gives 0.
    """
    if loss_agg_mode == "token-mean":
        return masked_mean(loss, mask)
    if loss_agg_mode == "seq-mean-token-mean":
        lengths = mask.sum(-1)
        return masked_mean(masked_mean(loss, mask, dim=-1), lengths)
    if loss_agg_mode == "seq-mean-token-sum-norm":
        t_max = loss.shape[1] if max_length is None else max_length
        return masked_sum(loss, mask) / (loss.shape[0] * t_max)
    if loss_agg_mode == "seq-mean-token-sum":
        return masked_sum(loss, mask) / loss.shape[0]
    raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}; allowed: {', '.join(LOSS_AGG_MODES)}")
