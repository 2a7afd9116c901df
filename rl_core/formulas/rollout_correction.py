"""Behaviour-policy (rollout) correction: importance weights between the sampler μ and the trainer's π_old.

Three policies meet in an update: μ sampled the batch (an inference engine, a stale copy of the policy, another
precision or temperature), π_old is the trainer's snapshot at the start of the step (the denominator of PPO's
ratio), π_θ is being trained. The policy gradient assumes samples from π_old; the weights below turn samples from
μ into that expectation. Weights are constants of the loss (no gradient); `old_logp` and `behaviour_logp` are the
`[B, T]` log-probabilities of the sampled tokens under π_old and μ.

Besides gating on the weight itself (TIS caps it, MIS drops what exceeds C), OpenRLHF 0.11 gates on a divergence
between μ and π_old read at the sampled token — a trust region around the sampler: `is_correction_gating` = `ratio`
(the weight), `binary_kl` or `tv`, per token or per response (the response's mean divergence), masking what lies
beyond δ (`is_correction_threshold`); the tokens kept carry their per-token weight π_old/μ.
"""

from __future__ import annotations

import torch

from rl_core.formulas.masking import masked_mean, masked_sum

# A divergence gate is a rejection filter read from μ(a_t) and π_old(a_t) alone; OpenRLHF clamps both into
# [ε, 1 − ε] so that the binary KL's logarithms stay finite when a probability rounds to 0 or 1.
GATE_PROBABILITY_EPS = 1e-6


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


def _sampled_token_probabilities(old_logp: torch.Tensor, behaviour_logp: torch.Tensor):
    """`(p, q) = (μ(a_t), π_old(a_t))`, clamped into [ε, 1 − ε] (ε = 10⁻⁶), detached."""
    eps = GATE_PROBABILITY_EPS
    return (behaviour_logp.detach().exp().clamp(eps, 1 - eps), old_logp.detach().exp().clamp(eps, 1 - eps))


def binary_kl(old_logp: torch.Tensor, behaviour_logp: torch.Tensor) -> torch.Tensor:
    """The binary KL at the sampled token, `[B, T]`: with p = μ(a_t), q = π_old(a_t) (each clamped into
    [10⁻⁶, 1 − 10⁻⁶]), `KL(Bern(p)‖Bern(q)) = p log(p/q) + (1 − p) log((1 − p)/(1 − q))` — the KL between the two
    policies once the vocabulary is folded into "this token" and "any other", ≤ the full KL(μ‖π_old) at that state."""
    p, q = _sampled_token_probabilities(old_logp, behaviour_logp)
    return p * (p / q).log() + (1 - p) * ((1 - p) / (1 - q)).log()


def binary_tv(old_logp: torch.Tensor, behaviour_logp: torch.Tensor) -> torch.Tensor:
    """The total variation at the sampled token, `[B, T]`: `|μ(a_t) − π_old(a_t)|` (each clamped into
    [10⁻⁶, 1 − 10⁻⁶]), the TV distance of Bern(μ(a_t)) and Bern(π_old(a_t)), ≤ the full TV at that state."""
    p, q = _sampled_token_probabilities(old_logp, behaviour_logp)
    return (p - q).abs()


GATE_DIVERGENCES = {"binary_kl": binary_kl, "tv": binary_tv}


def divergence_gate(
    old_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor, gating: str, level: str, delta: float
) -> torch.Tensor:
    """Which tokens the trust region keeps, `[B, T]` bool: per token `1[D_t ≤ δ]`, or per response (`sequence`)
    `1[mean_t D_t ≤ δ]` over its valid tokens, with D the `binary_kl` or `tv` at each sampled token."""
    if gating not in GATE_DIVERGENCES:
        raise ValueError(f"is_correction_gating={gating!r} is not a divergence; allowed: {', '.join(GATE_DIVERGENCES)}")
    if level not in ("token", "sequence"):
        raise ValueError(f"rollout_is_level={level!r} cannot gate a divergence; allowed: token, sequence")
    divergence = GATE_DIVERGENCES[gating](old_logp, behaviour_logp)
    if level == "sequence":
        divergence = masked_mean(divergence, mask, dim=-1)[:, None].expand_as(divergence)
    return divergence <= delta


def gated_is(
    old_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor, gating: str, level: str, delta: float
) -> torch.Tensor:
    """Divergence-gated weights `sg[w_t · 1[D ≤ δ]]`, `[B, T]`: the tokens (or whole responses) whose divergence
    between μ and π_old exceeds δ are dropped; the kept ones carry their per-token weight w_t = π_old/μ."""
    keep = divergence_gate(old_logp, behaviour_logp, mask, gating, level, delta)
    return torch.where(keep, token_is_weights(old_logp, behaviour_logp), 0.0)


def mismatch_k3_kl(old_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor) -> float:
    """k3 of KL(μ‖π_old) on μ's samples, verl's `rollout_corr/k3_kl`: `mean(w − 1 − log w)` with w = π_old/μ over
    the valid tokens — never negative, unlike k1's `mean(log μ − log π_old)` (`rollout_corr/kl`)."""
    log_w = (old_logp - behaviour_logp).detach()
    return masked_mean(torch.expm1(log_w) - log_w, mask).item()


def effective_sample_size(weights: torch.Tensor, mask: torch.Tensor) -> float:
    """The importance weights' effective sample size as a share of the sample, over the valid tokens, as verl 0.9.1
    computes `rollout_corr/rollout_is_eff_sample_size`: `ESS/N = (mean_t w_t)² / mean_t(w_t²)` with the means over
    the tokens of `mask` and `weights` `[B, T]` per token or `[B, 1]` per response (then each response counts once
    per valid token, as verl broadcasts it). 1 when all weights are equal, 1/N when one token carries everything;
    a dropped (zero) weight counts as a sample that carries nothing. 0 when every weight is 0."""
    weights = weights.detach().expand_as(mask)
    mean_square = masked_mean(weights.square(), mask)
    if mean_square == 0:
        return 0.0
    return (masked_mean(weights, mask).square() / mean_square).item()


def correction_weights(
    old_logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    level: str,
    threshold: float,
    gating: str = "ratio",
    delta: float = 0.0,
) -> torch.Tensor | None:
    """The weights `sg[w]` the policy loss is multiplied by (`[B, T]` per token, `[B, 1]` per response), or None
    with `mode = none`: gated on the weight (`ratio`: TIS caps it at C, MIS drops what exceeds C, at `level`) or on
    a divergence (`binary_kl`, `tv`: `gated_is`, mask only)."""
    if mode == "none":
        return None
    if gating in GATE_DIVERGENCES:
        return gated_is(old_logp, behaviour_logp, mask, gating, level, delta)
    correct = truncated_is if mode == "truncate" else masked_is
    weights = correct(is_weights(old_logp, behaviour_logp, mask, level), threshold)
    return weights if level == "token" else weights[:, None]


def rollout_mismatch_metrics(
    old_logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    mask: torch.Tensor,
    level: str,
    threshold: float,
    weights: torch.Tensor | None = None,
) -> dict[str, float]:
    """How far the sampler μ is from π_old, on μ's samples, under verl's names: the mismatch KL
    `rollout_corr/kl = mean(log μ − log π_old)` over the valid tokens (k1 of KL(μ‖π_old), ≥ 0 in expectation),
    `rollout_corr/k3_kl` (k3 of it, ≥ 0 always), the effective sample size of the weights the loss applies
    (`rollout_corr/rollout_is_eff_sample_size`), the min / max / median / 95th percentile of the weights π_old/μ at
    `level` and their share above C; with the loss's `weights` (`correction_weights`), the share of valid tokens they
    drop (`rollout_corr/rollout_rs_masked_fraction`). Over the valid tokens or the non-empty responses; any float
    dtype.

    The ESS is verl 0.9.1's: on the applied weights (`weights`; without them, as under `mode = none`, the weights
    TIS would apply at `level`), clamped into [0, C], over the valid tokens (`effective_sample_size`). So what masked
    IS or a divergence gate drops counts as a sample carrying nothing, a gate's kept tokens carry their own w_t (not
    the response's product it never applies), and a response-level weight counts once per token."""
    level_weights = is_weights(old_logp, behaviour_logp, mask, level)
    applied = (
        weights
        if weights is not None
        else correction_weights(old_logp, behaviour_logp, mask, "truncate", level, threshold)
    )
    valid = level_weights[mask > 0] if level == "token" else level_weights[mask.sum(-1) > 0]
    # torch.quantile wants q in the input's dtype.
    p50, p95 = torch.quantile(valid, torch.tensor([0.5, 0.95], dtype=valid.dtype, device=valid.device)).tolist()
    metrics = {
        "rollout_corr/kl": masked_mean(behaviour_logp - old_logp, mask).item(),
        "rollout_corr/k3_kl": mismatch_k3_kl(old_logp, behaviour_logp, mask),
        "rollout_corr/rollout_is_eff_sample_size": effective_sample_size(applied.clamp(0, threshold), mask),
        "rollout_is_weight_min": valid.min().item(),
        "rollout_is_weight_max": valid.max().item(),
        "rollout_is_weight_p50": p50,
        "rollout_is_weight_p95": p95,
        "rollout_is_capped_frac": (valid > threshold).float().mean().item(),
    }
    if weights is not None:
        dropped = (weights.expand_as(mask) == 0).to(mask.dtype)
        metrics["rollout_corr/rollout_rs_masked_fraction"] = masked_mean(dropped, mask).item()
    return metrics
