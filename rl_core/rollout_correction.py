"""Behaviour-policy (rollout) correction: importance weights between the sampler μ and the trainer's π_old.

Three policies meet in an update: μ sampled the batch (an inference engine, a stale copy of the policy, another
precision or temperature), π_old is the trainer's snapshot at the start of the step (the denominator of PPO's
ratio), π_θ is being trained. The policy gradient assumes samples from π_old; the weights below turn samples from
μ into that expectation. Weights are constants of the loss (no gradient); `old_logp` and `behaviour_logp` are the
`[B, T]` log-probabilities of the sampled tokens under π_old and μ.
"""

from __future__ import annotations

import torch

from rl_core.masking import masked_mean, masked_sum


def token_is_weights(old_logp: torch.Tensor, behaviour_logp: torch.Tensor) -> torch.Tensor:
    """Per token `w_t = π_old(a_t|s_t) / μ(a_t|s_t) = exp(log π_old − log μ)`, `[B, T]`."""
    return torch.exp(old_logp - behaviour_logp).detach()


def sequence_is_weights(
    old_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor, geometric: bool = False
) -> torch.Tensor:
    """Per response `w_i = exp(Σ_t m_{i,t} log w_{i,t})` (the likelihood ratio of the whole response), or with
    `geometric` its per-token geometric mean `exp(Σ_t m log w_t / |y_i|)`, `[B]` (1 for an empty response)."""
    log_w = (old_logp - behaviour_logp).detach()
    total = masked_mean(log_w, mask, dim=-1) if geometric else masked_sum(log_w, mask, dim=-1)
    return torch.exp(total)


def truncated_is(weights: torch.Tensor, threshold: float) -> torch.Tensor:
    """TIS: `sg[min(w, C)]` — large weights are capped at C (C = 2), keeping every sample, biased a little."""
    return weights.detach().clamp(max=threshold)


def masked_is(weights: torch.Tensor, threshold: float) -> torch.Tensor:
    """MIS: `sg[w · 1[w ≤ C]]` — samples whose weight exceeds C are dropped instead of capped."""
    weights = weights.detach()
    return torch.where(weights <= threshold, weights, 0.0)


def is_weights(old_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    """π_old/μ per token `[B, T]` (`token`), or per response `[B]` (`sequence`: the product, `geometric`: its
    per-token geometric mean)."""
    if level == "token":
        return token_is_weights(old_logp, behaviour_logp)
    return sequence_is_weights(old_logp, behaviour_logp, mask, geometric=level == "geometric")


def rollout_mismatch_metrics(
    old_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor, level: str, threshold: float
) -> dict[str, float]:
    """How far the sampler μ is from π_old, on μ's samples: the mismatch KL `mean(log μ − log π_old)` over the
    valid tokens (k1 of KL(μ‖π_old), ≥ 0 in expectation; verl's `rollout_corr/kl`), and the weights' min / max /
    median / 95th percentile and the share above C (capped by TIS, dropped by MIS) at `level`, over the valid
    tokens or the non-empty responses. Any float dtype."""
    weights = is_weights(old_logp, behaviour_logp, mask, level)
    valid = weights[mask > 0] if level == "token" else weights[mask.sum(-1) > 0]
    # torch.quantile wants q in the input's dtype.
    p50, p95 = torch.quantile(valid, torch.tensor([0.5, 0.95], dtype=valid.dtype, device=valid.device)).tolist()
    return {
        "rollout_mismatch_kl": masked_mean(behaviour_logp - old_logp, mask).item(),
        "rollout_is_weight_min": valid.min().item(),
        "rollout_is_weight_max": valid.max().item(),
        "rollout_is_weight_p50": p50,
        "rollout_is_weight_p95": p95,
        "rollout_is_capped_frac": (valid > threshold).float().mean().item(),
    }
