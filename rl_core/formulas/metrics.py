"""Diagnostics reported every step: clip fractions, explained variance, approximate KL between the old and the
updated policy, advantage statistics, and the share of zero-advantage groups; and the tokens a policy loss silences.

Each statistic is a 0-dim tensor computed without reading a value back to Python (no branch on data, no boolean
indexing), so that a group of runs computes it for every run at once under `torch.func.vmap` and moves all of a
step's records to the host in one transfer (`rl_core.engine.run_group`)."""

from __future__ import annotations

import torch

from rl_core.formulas.kl import kl_k2
from rl_core.formulas.losses import dppo_tv_mask
from rl_core.formulas.masking import masked_mean, masked_var
from rl_core.formulas.sampling import dynamic_sampling_keep


def clip_fractions(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon_low: float,
    epsilon_high: float,
    dual_clip: float | None = None,
) -> dict[str, torch.Tensor]:
    """Fractions of the valid tokens on which a clip is active, given the sign of A:

    * `clip_frac_low`: `ρ < 1 − ε_low` and `A < 0`;
    * `clip_frac_high`: `ρ > 1 + ε_high` and `A > 0`;
    * `clip_frac`: their sum (a token is in at most one of them);
    * `dual_clip_frac`: `A < 0` and `ρ > c` (0 when `dual_clip` is None).

    For GSPO's per-sequence fractions pass `[B, 1]` tensors (sequence ratio, sequence advantage, ones).
    """
    low = (ratio < 1 - epsilon_low) & (advantages < 0)
    high = (ratio > 1 + epsilon_high) & (advantages > 0)
    dual = (advantages < 0) & (ratio > dual_clip) if dual_clip is not None else torch.zeros_like(low)

    def fraction(selected: torch.Tensor) -> torch.Tensor:
        return masked_mean(selected.to(ratio.dtype), mask)

    return {
        "clip_frac": fraction(low | high),
        "clip_frac_low": fraction(low),
        "clip_frac_high": fraction(high),
        "dual_clip_frac": fraction(dual),
    }


def dppo_clip_fractions(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    delta_low: float,
    delta_high: float,
) -> dict[str, torch.Tensor]:
    """DPPO's clip metric, the masked fraction `mean(1 − m_t)` over all valid tokens (verl's `pg_clipfrac` for
    `dppo_tv`), with `m_t` of `dppo_tv_mask`: `clip_frac`; split into `clip_frac_high` (m = 0 with A > 0, the
    probability rose more than δ_high) and `clip_frac_low` (m = 0 with A ≤ 0, it fell more than δ_low — counted
    at A = 0 too, where the mask changes nothing: the share of A ≠ 0 tokens silenced is `silenced_frac`).
    `dual_clip_frac` is 0: DPPO caps the detached weight at c instead."""
    masked = ~dppo_tv_mask(logp.exp(), old_logp.exp(), advantages, delta_low, delta_high)

    def fraction(selected: torch.Tensor) -> torch.Tensor:
        return masked_mean(selected.float(), mask)

    return {
        "clip_frac": fraction(masked),
        "clip_frac_low": fraction(masked & (advantages <= 0)),
        "clip_frac_high": fraction(masked & (advantages > 0)),
        "dual_clip_frac": torch.zeros_like(fraction(masked)),
    }


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`1 − Var(R − V)/Var(R)` over the valid tokens (population variances): 1 perfect, 0 no better than
    predicting the mean return, < 0 harmful.

    When every valid return is the same (`Var(R) = 0`, or no valid token) there is nothing to explain and the
    result is 0.0 rather than NaN or −inf.
    """
    return_var = masked_var(returns, mask)
    nothing_to_explain = return_var == 0
    explained = 1 - masked_var(returns - values, mask) / torch.where(nothing_to_explain, 1.0, return_var)
    return torch.where(nothing_to_explain, 0.0, explained)


def approx_kl(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """KL(π_old ‖ π_θ) estimated with k2 on the sampled tokens: masked mean of `½ (log π_θ − log π_old)²`.

    k2 is chosen because it is never negative and has low variance for small steps, where its bias is of
    third order in `ℓ_t`.
    """
    return masked_mean(kl_k2(logp, old_logp), mask)


def advantage_stats(advantages: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Mean, population std, min and max of the advantages over the valid tokens (all 0 with no valid token)."""
    valid = mask > 0
    mean = masked_mean(advantages, mask)
    std = masked_mean((advantages - mean).square(), mask).sqrt()
    any_valid = valid.any()
    lowest = torch.where(valid, advantages, torch.inf).amin()
    highest = torch.where(valid, advantages, -torch.inf).amax()
    return {
        "mean": mean,
        "std": std,
        "min": torch.where(any_valid, lowest, 0.0),
        "max": torch.where(any_valid, highest, 0.0),
    }


def zero_advantage_group_fraction(R: torch.Tensor, group_size: int) -> torch.Tensor:
    """Fraction of groups whose rewards are all equal (so every group advantage in them is 0)."""
    return 1.0 - dynamic_sampling_keep(R, group_size).float().mean()


def skewed_group_weight_ratio(seq_advantages: torch.Tensor, R: torch.Tensor, group_size: int) -> torch.Tensor:
    """How much a response in a *skewed* group weighs against one in a *balanced* group: the mean `|Â_i|` over the
    responses of skewed groups divided by the mean `|Â_i|` over those of balanced groups. A group is skewed when at
    most a quarter, or at least three quarters, of its members score above the group mean (with 0/1 rewards: nearly
    always wrong or nearly always right), balanced otherwise; groups whose rewards are all equal carry no signal
    and are left out. NaN when the batch lacks either kind.

    With 0/1 rewards and success fraction p a response's mean weight is `2p(1−p)` without the std division
    (Dr. GRPO) and `2√(p(1−p))` with it (GRPO, up to the n−1 in the std), so the ratio against p = 1/2 is `4p(1−p)`
    against `2√(p(1−p))`: 0.44 against 0.66 at p = 1/8. It is a per-response weight, so unlike a share of the
    batch's total it does not move with how many groups of each kind the batch happens to hold."""
    groups = R.reshape(-1, group_size)
    above = (groups > groups.mean(dim=1, keepdim=True)).float().mean(dim=1)
    signal = dynamic_sampling_keep(R, group_size)
    skewed = signal & ((above <= 0.25) | (above >= 0.75))
    balanced = signal & ~skewed
    weight = seq_advantages.abs().reshape(-1, group_size)

    def mean_weight(groups: torch.Tensor) -> torch.Tensor:
        return (weight * groups[:, None]).sum() / (groups.sum() * group_size).clamp(min=1)

    ratio = mean_weight(skewed) / torch.where(balanced.any(), mean_weight(balanced), 1.0)
    return torch.where(skewed.any() & balanced.any(), ratio, torch.nan)


def equal_group_weight_share(seq_advantages: torch.Tensor, R: torch.Tensor, group_size: int) -> torch.Tensor:
    """The share of the batch's advantage weight that falls on responses whose group's rewards are all equal:
    `Σ_{i in equal groups} |Â_i| / Σ_i |Â_i|` (groups of G contiguous responses; NaN when every `Â_i` is 0).

    Nothing tells such responses apart (a prompt every sample solved, or none did), so a group baseline gives them
    0; a baseline taken over the whole batch gives them `R − mean_batch R`, the prompt's difficulty."""
    weight = seq_advantages.abs().reshape(-1, group_size)
    total = weight.sum()
    equal = (weight * ~dynamic_sampling_keep(R, group_size)[:, None]).sum()
    return torch.where(total == 0, torch.nan, equal / torch.where(total == 0, 1.0, total))


def first_last_token_advantages(advantages: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """The mean advantage of every response's first token and of its last valid token (VC-PPO: a critic that
    values early states too low gives the first tokens the larger advantages), over the non-empty responses; 0 for
    an empty batch."""
    lengths = mask.sum(-1).long()
    rows = (lengths > 0).to(advantages.dtype)
    first = advantages[:, 0]
    last = advantages.gather(1, (lengths - 1).clamp(min=0)[:, None]).squeeze(1)
    return {"advantage_first_token": masked_mean(first, rows), "advantage_last_token": masked_mean(last, rows)}


def silenced_tokens(per_token_loss: torch.Tensor, logp: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """`[B, T]` bool: where `∂L_t/∂ log π_θ(a_t) = 0` although `A_t ≠ 0` — the loss gives the token no gradient
    (PPO's active clip, DPPO's mask, MIS's dropped samples; never CISPO or SAPO). `logp` must be in the graph of
    `per_token_loss`, which is kept for a later backward pass."""
    (gradient,) = torch.autograd.grad(per_token_loss.sum(), logp, retain_graph=True)
    return (gradient == 0) & (advantages != 0)
