"""Advantage estimators: reward-to-go, GAE (plain, decoupled, length-adaptive), the group baselines of
GRPO, Dr. GRPO, RLOO and REINFORCE++, the advantage-normalisation selector, and MaxRL.

Group members are contiguous: response `i` belongs to group `i // G`. Token-level results are 0 on padding.
"""

from __future__ import annotations

import torch

from rl_core.formulas.masking import divide_by_std, masked_deviation, masked_whiten


def as_groups(R: torch.Tensor, group_size: int) -> torch.Tensor:
    """`[B]` → `[B // G, G]`, row `g` holding responses `g·G … g·G + G − 1`; ValueError unless `G ≥ 1` divides `B`."""
    if group_size < 1 or R.shape[0] % group_size:
        raise ValueError(f"the batch size {R.shape[0]} must be a multiple of the group size G = {group_size} ≥ 1")
    return R.reshape(-1, group_size)


def _group_deviations(groups: torch.Tensor) -> torch.Tensor:
    """`R_i − mean_j R_j` per row of `[B // G, G]`, exactly 0 for a group of equal rewards (the rewards are shifted
    by the group's first one before averaging, so the mean's rounding error cannot leave a residue)."""
    shifted = groups - groups[:, :1]
    return shifted - shifted.mean(dim=1, keepdim=True)


def _group_std(groups: torch.Tensor) -> torch.Tensor:
    """The unbiased (`1/(G−1)`) std of each row of `[B // G, G]`, `[B // G, 1]`; 0 for a group of one."""
    deviations = _group_deviations(groups)
    return (deviations.pow(2).sum(dim=1, keepdim=True) / max(groups.shape[1] - 1, 1)).sqrt()


def broadcast_to_tokens(seq_values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`A_{i,t} = Â_i` on every valid token of response `i`, 0 on padding: `[B]` → `[B, T]`."""
    return torch.where(mask > 0, seq_values[:, None], 0.0)


def reward_to_go(token_rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """`G_t = Σ_{t'≥t} γ^{t'−t} r_{t'}` over the valid tokens, computed backwards as `G_t = r_t + γ G_{t+1}`;
    padding contributes nothing and gets 0."""
    valid = mask > 0
    rewards = torch.where(valid, token_rewards, 0.0)
    following = torch.zeros_like(rewards[:, 0])
    returns = []
    for t in reversed(range(rewards.shape[1])):
        following = torch.where(valid[:, t], rewards[:, t] + gamma * following, 0.0)
        returns.append(following)
    return torch.stack(returns[::-1], dim=1)


def batch_mean_baseline(returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`A_t = G_t − b` with `b` the mean return over all valid tokens of the batch; 0 on padding."""
    return torch.where(mask > 0, masked_deviation(returns, mask), 0.0)


def running_mean_update(baseline: float, batch_mean: float, decay: float = 0.9) -> float:
    """`b ← decay·b + (1 − decay)·mean(R)`: an exponential moving average of the batches' mean returns."""
    return decay * baseline + (1 - decay) * batch_mean


def constant_baseline(returns: torch.Tensor, mask: torch.Tensor, baseline: float) -> torch.Tensor:
    """`A_t = G_t − b` with one given `b` (a running mean kept across batches); 0 on padding."""
    return torch.where(mask > 0, returns - baseline, 0.0)


def gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    lam: float | torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation → `(advantages, returns)`, both `[B, T]` and 0 on padding.

    `δ_t = r_t + γ V(s_{t+1}) − V(s_t)` with `V(s_{T+1}) = 0` after each row's last valid token,
    `A_t = δ_t + γλ A_{t+1}` computed backwards, critic targets `R_t = A_t + V(s_t)`.
    λ = 0 gives TD(0) (`A_t = δ_t`); λ = 1 gives the Monte-Carlo return minus `V(s_t)`.
    `lam` is a float, or a `[B]` tensor with one λ per response (VAPO's length-adaptive λ).
    """
    valid = mask > 0
    rewards = torch.where(valid, token_rewards, 0.0)
    values = torch.where(valid, values, 0.0)
    decay = gamma * torch.as_tensor(lam, dtype=values.dtype, device=values.device)
    next_value = torch.zeros_like(values[:, 0])
    next_advantage = torch.zeros_like(values[:, 0])
    advantages = []
    for t in reversed(range(values.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        next_advantage = torch.where(valid[:, t], delta + decay * next_advantage, 0.0)
        next_value = values[:, t]
        advantages.append(next_advantage)
    advantages = torch.stack(advantages[::-1], dim=1)
    return advantages, torch.where(valid, advantages + values, 0.0)


def length_adaptive_lambda(lengths: torch.Tensor, alpha: float) -> torch.Tensor:
    """VAPO's per-response `λ_actor = 1 − 1/(α·|y|)` (so that `Σ_t λ^t = 1/(1 − λ) = α·|y|`), floored at 0.

    The formula is negative when `α·|y| < 1`, outside GAE's range λ ∈ [0, 1]; such responses get λ = 0 (TD(0)).
    """
    return (1 - 1 / (alpha * lengths)).clamp(min=0.0)


def grpo_advantages(R: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """GRPO: `Â_i = (R_i − mean_j R_j)/(std_j R_j + ε)` within each group of G, `[B]` → `[B]`.

    `std` is the unbiased (Bessel-corrected, `1/(G−1)`) standard deviation, as in the reference
    implementations (TRL, verl and OpenRLHF all call `torch.std`). A group whose std is below 1e-6 (equal
    rewards, up to rounding) gets exactly 0, and so does a group of one (G = 1).
    """
    groups = as_groups(R, group_size)
    return divide_by_std(_group_deviations(groups), _group_std(groups), eps).reshape(R.shape)


def dr_grpo_advantages(R: torch.Tensor, group_size: int) -> torch.Tensor:
    """Dr. GRPO: `Â_i = R_i − mean_j R_j` within each group (no division by the std), `[B]` → `[B]`."""
    return _group_deviations(as_groups(R, group_size)).reshape(R.shape)


def rloo_advantages(R: torch.Tensor, group_size: int) -> torch.Tensor:
    """RLOO: `Â_i = R_i − (1/(G−1)) Σ_{j≠i} R_j` (= `G/(G−1)·(R_i − mean_j R_j)`), `[B]` → `[B]`; needs G ≥ 2."""
    if group_size < 2:
        raise ValueError(f"RLOO's leave-one-out baseline needs a group size G ≥ 2; got {group_size}")
    groups = as_groups(R, group_size)
    shifted = groups - groups[:, :1]  # exact zeros for a group of equal rewards, as in `_group_deviations`
    others_mean = (shifted.sum(dim=1, keepdim=True) - shifted) / (group_size - 1)
    return (shifted - others_mean).reshape(R.shape)


def reinforce_pp_advantages(token_rewards: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """REINFORCE++: `G_t = Σ_{t'≥t} γ^{t'−t} r_{t'}`, then `A_t = (G_t − mean G)/(std G + 1e-8)` with the mean
    and (population) std over all valid tokens of the whole batch — not per group, so G = 1 works."""
    return masked_whiten(reward_to_go(token_rewards, mask, gamma), mask)


def reinforce_pp_baseline_advantages(R: torch.Tensor, mask: torch.Tensor, group_size: int) -> torch.Tensor:
    """REINFORCE++-baseline: `R_i − mean_group(R)` broadcast to the tokens of `y_i`, then whitened over all
    valid tokens of the batch as in `reinforce_pp_advantages`."""
    return masked_whiten(broadcast_to_tokens(dr_grpo_advantages(R, group_size), mask), mask)


ADV_NORM_MEANS = ("group", "leave_one_out", "batch", "none")
ADV_NORM_STDS = ("group", "batch", "none")


def normalized_advantages(R: torch.Tensor, group_size: int, mean: str, std: str, eps: float = 1e-6) -> torch.Tensor:
    """The advantage-normalisation selector (after AReaL's NormConfig): `Â_i = (R_i − b_i) / (s_i + ε)`, `[B]`.

    `b_i` (mean): `group` the mean of `y_i`'s group; `leave_one_out` the mean of the other G − 1 members
    (= `G/(G−1)·(R_i − mean_g)` in total); `batch` the mean over the whole batch; `none` 0.
    `s_i` (std): `group` the std of the group's rewards, `batch` the std of the batch's rewards (both unbiased,
    `1/(n−1)`, as GRPO's); `none` divides by nothing (ε is not added either). Where `s_i < 1e-6` the advantage is
    0 (`divide_by_std`): a batch mean with an all-equal group's std would otherwise divide by ε alone.
    GRPO is (group, group), Dr. GRPO (group, none), RLOO (leave_one_out, none), Lite PPO (group, batch).
    """
    if mean not in ADV_NORM_MEANS:
        raise ValueError(f"adv_norm_mean={mean!r} is not allowed; choose one of: {', '.join(ADV_NORM_MEANS)}")
    if std not in ADV_NORM_STDS:
        raise ValueError(f"adv_norm_std={std!r} is not allowed; choose one of: {', '.join(ADV_NORM_STDS)}")
    groups = as_groups(R, group_size)  # validates G before any branch
    if mean == "group":
        centred = dr_grpo_advantages(R, group_size)
    elif mean == "leave_one_out":
        centred = rloo_advantages(R, group_size)
    elif mean == "batch":
        centred = masked_deviation(R, torch.ones_like(R))
    else:
        centred = R
    if std == "none":
        return centred
    # The batch's std is that of one group holding the whole batch.
    scale = _group_std(groups if std == "group" else R.reshape(1, -1))
    return divide_by_std(centred, scale.expand_as(groups).reshape(R.shape), eps)


def maxrl_advantages(R: torch.Tensor, group_size: int) -> torch.Tensor:
    """MaxRL: `Â_i = (R_i − mean_g) / mean_g`, dividing by the group's success rate (for rewards in [0, 1]), `[B]`;
    0 for a group with `mean_g = 0`. A correct answer gets `(1 − p)/p` with p the group's success rate — G − 1 for a
    prompt solved once in G draws: the estimate of `∇log P(success) = ∇P/P` rather than of `∇P`, which puts
    the weight on the hard prompts.
    """
    groups = as_groups(R, group_size)
    success_rate = groups.mean(dim=1, keepdim=True)
    deviations = _group_deviations(groups)
    safe = torch.where(success_rate == 0, 1.0, success_rate)
    return torch.where(success_rate == 0, 0.0, deviations / safe).reshape(R.shape)
