"""Per-token losses (minimised): policy-gradient surrogates (vanilla, PPO clip with dual clip, GSPO and
GSPO-token, and the 2025–26 successors CISPO, SAPO and DPPO-Binary-TV), entropy, the clipped critic loss, VAPO's
positive-sample NLL, and the token selections of Clip-Cov / KL-Cov.

Policy losses return `[B, T]`; `aggregation.aggregate_loss` reduces them to a scalar over the valid tokens.
Advantages enter as constants: pass them without a graph.
"""

from __future__ import annotations

import math

import torch

from rl_core.formulas.advantages import broadcast_to_tokens
from rl_core.formulas.masking import masked_mean


def vanilla_pg_loss(logp: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """`L_t = −A_t · log π_θ(a_t|s_t)` per token (on-policy REINFORCE)."""
    return -advantages * logp


def _clipped_objective(
    ratio: torch.Tensor, advantages: torch.Tensor, epsilon_low: float, epsilon_high: float
) -> torch.Tensor:
    """`−min(ρ A, clip(ρ, 1−ε_low, 1+ε_high) A)`, written as the max of the two negated terms."""
    clipped = ratio.clamp(1 - epsilon_low, 1 + epsilon_high)
    return torch.maximum(-advantages * ratio, -advantages * clipped)


def clipped_surrogate_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    epsilon_low: float,
    epsilon_high: float,
    dual_clip: float | None = None,
) -> torch.Tensor:
    """PPO's token-level clipped surrogate with `ρ_t = exp(ℓ_t)`, `ℓ_t = log π_θ − log π_old`:

    `L_t = −min(ρ_t A_t, clip(ρ_t, 1−ε_low, 1+ε_high) A_t)`;
    with dual clip `c > 1` (Ye et al. 2020), for `A_t < 0`: `L_t ← min(L_t, −c·A_t)`, which caps the loss of a
    negative-advantage token whose ratio exploded and zeroes its gradient once `ρ_t > c`.
    The gradient is zero exactly in the clipped cases `A > 0, ρ > 1+ε_high` and `A < 0, ρ < 1−ε_low`.
    Usual settings: ε_low = ε_high = 0.2 (PPO), 0.2 / 0.28 (DAPO's clip-higher), c = 3.
    """
    loss = _clipped_objective(torch.exp(logp - old_logp), advantages, epsilon_low, epsilon_high)
    if dual_clip is None:
        return loss
    if dual_clip <= 1:
        raise ValueError(f"the dual-clip constant c must be > 1; got {dual_clip}")
    return torch.where(advantages < 0, torch.minimum(loss, -dual_clip * advantages), loss)


def gspo_sequence_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GSPO's length-normalised sequence ratio `s_i = exp((1/|y_i|) Σ_t m_{i,t} ℓ_{i,t})`, `[B]`
    (the geometric mean of the token ratios; 1 for a response without valid tokens)."""
    return torch.exp(masked_mean(logp - old_logp, mask, dim=-1))


def gspo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    seq_advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon_low: float,
    epsilon_high: float,
) -> torch.Tensor:
    """GSPO: `L_i = −min(s_i Â_i, clip(s_i, 1−ε_low, 1+ε_high) Â_i)` per sequence, `Â_i` of shape `[B]`,
    broadcast to the valid tokens of `y_i` (`[B, T]`, 0 on padding), so `seq-mean-token-mean` of it is
    `(1/B) Σ_i L_i`. Paper defaults: ε_low = 3·10⁻⁴, ε_high = 4·10⁻⁴."""
    ratio = gspo_sequence_ratio(logp, old_logp, mask)
    return broadcast_to_tokens(_clipped_objective(ratio, seq_advantages, epsilon_low, epsilon_high), mask)


def gspo_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    seq_advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon_low: float,
    epsilon_high: float,
) -> torch.Tensor:
    """GSPO-token: `s_{i,t} = sg[s_i] · π_θ(y_{i,t}) / sg[π_θ(y_{i,t})]` and
    `L_{i,t} = −min(s_{i,t} Â_i, clip(s_{i,t}, 1−ε_low, 1+ε_high) Â_i)`, 0 on padding.

    `s_{i,t}` equals `s_i` in value, so the loss equals GSPO's; each token gets its own gradient path. With a
    shared advantage and `seq-mean-token-mean` its gradient equals GSPO's.
    """
    sequence_ratio = gspo_sequence_ratio(logp, old_logp, mask).detach()
    ratio = sequence_ratio[:, None] * torch.exp(logp - logp.detach())
    loss = _clipped_objective(ratio, seq_advantages[:, None], epsilon_low, epsilon_high)
    return torch.where(mask > 0, loss, 0.0)


def cispo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    epsilon_high: float,
    epsilon_low: float | None = None,
) -> torch.Tensor:
    """CISPO (MiniMax-M1): `L_t = −sg[min(ρ_t, ε_max)] · A_t · log π_θ(a_t|s_t)` with `ε_max = epsilon_high`
    (TRL's `loss_type="cispo"`; MiniMax and TRL use ε_max = 5).

    With `epsilon_low` given, the weight is clamped to `[1−ε_low, 1+ε_high]` instead (verl's CISPO).
    Gradient: `−sg[w_t]·A_t·∇log π_θ` on every token — the weight is clipped, the gradient is never switched off,
    where PPO's clip zeroes it once the clipped branch wins.
    """
    ratio = torch.exp(logp - old_logp).detach()
    weight = ratio.clamp(max=epsilon_high) if epsilon_low is None else ratio.clamp(1 - epsilon_low, 1 + epsilon_high)
    return -weight * advantages * logp


def dro_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, beta: float) -> torch.Tensor:
    """verl's `dro` policy loss: `L_t = −[A_t · log π_θ(a_t|s_t) − (β/2) (log π_θ(a_t|s_t) − log π_old(a_t|s_t))²]`.

    No ratio and no clip: the policy-gradient term of `vanilla_pg_loss` plus a quadratic spring on the log-ratio to
    the policy that sampled. Gradient: `−(A_t − β (log π_θ − log π_old)) · ∇log π_θ`, the plain policy gradient
    while π_θ = π_old; once a token's log-probability has moved by A_t / β the two cancel and it moves no further.
    """
    return -(advantages * logp - 0.5 * beta * (logp - old_logp) ** 2)


def sapo_gate(ratio: torch.Tensor, tau: float | torch.Tensor) -> torch.Tensor:
    """SAPO's soft gate `g_τ(ρ) = (4/τ)·σ(τ(ρ − 1))`: its slope `dg/dρ = 4σ(1−σ)` is 1 at ρ = 1 (plain policy
    gradient on-policy) and decays smoothly on both sides, where PPO's clip cuts it to 0."""
    return (4 / tau) * torch.sigmoid(tau * (ratio - 1))


def sapo_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, tau_pos: float, tau_neg: float
) -> torch.Tensor:
    """SAPO (soft adaptive policy optimisation): `L_t = −A_t · g_τ(ρ_t)` with τ = τ_pos if `A_t > 0` else τ_neg
    (defaults 1.0 and 1.05: negative tokens' gate decays faster, since pushing a token down spreads mass over
    the whole vocabulary). Gradient w.r.t. log π: `−A_t·ρ_t·4σ(1−σ)`, σ = σ(τ(ρ_t − 1)) — exactly `−A_t` at ρ = 1.
    """
    # In the advantages' dtype: `torch.where` on two Python floats would give float32 even for float64 inputs.
    tau = torch.where(advantages > 0, torch.full_like(advantages, tau_pos), torch.full_like(advantages, tau_neg))
    return -advantages * sapo_gate(torch.exp(logp - old_logp), tau)


def dppo_tv_mask(
    p: torch.Tensor, p_old: torch.Tensor, advantages: torch.Tensor, delta_low: float, delta_high: float
) -> torch.Tensor:
    """DPPO-Binary-TV's trust region in probability: bool `[B, T]`, True where the token is kept:
    `p − p_old ≤ δ_high` if `A_t > 0`, else `p − p_old ≥ −δ_low` (a token leaves the region only by moving its
    probability — not its ratio — too far in the direction its advantage pushes)."""
    change = p - p_old
    return torch.where(advantages > 0, change <= delta_high, change >= -delta_low)


def dppo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    delta_low: float,
    delta_high: float,
    ratio_cap: float,
) -> torch.Tensor:
    """DPPO-Binary-TV (verl `dppo_tv`): `L_t = −m_t · A_t · sg[min(ρ_t, c)] · log π_θ(a_t|s_t)` with the detached
    mask `m_t` of `dppo_tv_mask` (δ = 0.15) and c = 20.

    A rare token (p_old = 0.01 → p = 0.05) has ratio 5 — PPO clips it — while its probability moved by 0.04,
    inside DPPO's band: DPPO keeps its gradient `−A_t·min(ρ_t, c)·∇log π_θ`.
    """
    with torch.no_grad():
        keep = dppo_tv_mask(logp.exp(), old_logp.exp(), advantages, delta_low, delta_high)
        weight = torch.exp(logp - old_logp).clamp(max=ratio_cap)
    return torch.where(keep, -weight * advantages * logp, 0.0)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """`H(π(·|s_t)) = −Σ_v π(v|s_t) log π(v|s_t)` over the last dim, `[B, T, V]` → `[B, T]` (0·log 0 = 0)."""
    logp = torch.log_softmax(logits, dim=-1)
    p = logp.exp()
    return -torch.where(p > 0, p * logp, 0.0).sum(-1)


def entropy_bonus_loss(entropy: torch.Tensor, coef: float) -> torch.Tensor:
    """`L_t = −c_ent · H(π_θ(·|s_t))` per token: minimising it raises the entropy."""
    return -coef * entropy


def clipped_value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip_range: float
) -> torch.Tensor:
    """Critic loss per token: `½ · max((V − R_t)², (clip(V, V_old − ε_v, V_old + ε_v) − R_t)²)`."""
    clipped = old_values + (values - old_values).clamp(-clip_range, clip_range)
    return 0.5 * torch.maximum((values - returns) ** 2, (clipped - returns) ** 2)


def positive_nll_loss(logp: torch.Tensor, mask: torch.Tensor, positive: torch.Tensor) -> torch.Tensor:
    """VAPO's positive-sample NLL, a scalar: `−Σ_{i∈pos} Σ_t m_{i,t} log π_θ / Σ_{i∈pos} |y_i|`;
    `positive` is a `[B]` bool; 0 (with a zero gradient) when no response is positive."""
    return -masked_mean(logp, mask * positive[:, None].to(mask.dtype))


def _token_covariance(logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`cov_t = (log π_θ(a_t) − mean log π_θ) · (A_t − mean A)`, means over the batch's valid tokens; no grad."""
    with torch.no_grad():
        logp = logp.detach()
        return (logp - masked_mean(logp, mask)) * (advantages - masked_mean(advantages, mask))


def _selection_size(fraction: float, valid_count: int) -> int:
    """`max(⌊fraction · N⌋, 1)` tokens out of N valid ones (0 when the fraction or N is 0), as the paper's code."""
    if not 0 <= fraction <= 1:
        raise ValueError(f"the token fraction must lie in [0, 1]; got {fraction}")
    if fraction == 0 or valid_count == 0:
        return 0
    return max(math.floor(fraction * valid_count), 1)


def clip_cov_detach_mask(
    logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_fraction: float,
    cov_low: float,
    cov_high: float,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Clip-Cov (Cui et al. 2025): bool `[B, T]`, True for the tokens whose gradient is detached.

    `I_clip` = `n = max(⌊r·N⌋, 1)` tokens drawn uniformly without replacement (with `generator`) among the valid
    tokens with `ω_low ≤ cov_t ≤ ω_high`, where N counts all valid tokens, `r = clip_fraction`,
    `ω_low, ω_high = cov_low, cov_high`; fewer when fewer tokens qualify. Paper defaults: r = 2·10⁻⁴,
    ω_low = 1, ω_high = 5. The paper's code also leaves out tokens that the PPO clip already holds constant;
    this selection sees no ratio, and detaching such a token changes nothing but uses up one of the n.
    """
    valid = mask > 0
    cov = _token_covariance(logp, advantages, mask)
    candidates = torch.nonzero((valid & (cov >= cov_low) & (cov <= cov_high)).flatten()).squeeze(-1)
    n = min(_selection_size(clip_fraction, int(valid.sum())), candidates.numel())
    device = generator.device if generator is not None else candidates.device
    order = torch.randperm(candidates.numel(), generator=generator, device=device).to(candidates.device)
    selected = torch.zeros(valid.numel(), dtype=torch.bool, device=valid.device)
    selected[candidates[order[:n]]] = True
    return selected.reshape(valid.shape)


def kl_cov_penalty_mask(
    logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, top_fraction: float
) -> torch.Tensor:
    """KL-Cov (Cui et al. 2025): bool `[B, T]`, True for the `max(⌊k·N⌋, 1)` valid tokens with the largest
    `cov_t` (N valid tokens, `k = top_fraction`); those tokens get the extra penalty `β_KL·|log π_θ − log π_old|`.
    Paper defaults: k = 2·10⁻³ (Qwen2.5-7B) or 2·10⁻⁴ (32B), β_KL = 1.
    """
    if not 0 <= top_fraction <= 1:
        raise ValueError(f"the token fraction must lie in [0, 1]; got {top_fraction}")
    valid = mask > 0
    cov = torch.where(valid, _token_covariance(logp, advantages, mask), -torch.inf).flatten()
    count = valid.sum()
    # n as a tensor and the selection as ranks (equal covariances: the earlier token first), so that a group of runs
    # selects each run's tokens under vmap, where no count may be read back.
    n = torch.where((count == 0) | (top_fraction == 0), 0, (top_fraction * count).floor().clamp(min=1))
    rank = torch.argsort(torch.argsort(cov, descending=True, stable=True))
    return ((rank < n) & valid.flatten()).reshape(valid.shape)
