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
