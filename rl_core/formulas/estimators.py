"""Binds the config's names to the formula functions: which advantage estimator and which policy loss.

Each entry adapts one pure formula to a common call, so the trainer has one code path for every preset.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rl_core.config import GROUP_ESTIMATORS, AlgoConfig
from rl_core.formulas import advantages as adv
from rl_core.formulas import losses
from rl_core.formulas.masking import masked_mean, masked_whiten
from rl_core.formulas.sampling import dynamic_sampling_keep


@dataclass
class AdvantageInputs:
    token_rewards: torch.Tensor  # [B, T] r_t (task reward on the last token, −β·k in reward if used)
    mask: torch.Tensor  # [B, T]
    values: torch.Tensor | None  # [B, T] V(s_t) from the critic, or None
    group_size: int
    baseline: float | None = None  # the running-mean baseline b, when the config asks for one

    @property
    def sequence_rewards(self) -> torch.Tensor:
        """R_i with any in-reward KL folded in: Σ_t r_t."""
        return (self.token_rewards * self.mask).sum(-1)


def _reward_to_go(algo: AlgoConfig, x: AdvantageInputs):
    returns = adv.reward_to_go(x.token_rewards, x.mask, algo.gamma)
    if not algo.use_baseline:
        return returns, returns
    if algo.baseline == "running_mean":
        return adv.constant_baseline(returns, x.mask, x.baseline), returns
    return adv.batch_mean_baseline(returns, x.mask), returns


def _gae(algo: AlgoConfig, x: AdvantageInputs):
    lam_actor = algo.lam
    if algo.length_adaptive_alpha is not None:
        lam_actor = adv.length_adaptive_lambda(x.mask.sum(-1), algo.length_adaptive_alpha)
    advantages, returns = adv.gae(x.token_rewards, x.values, x.mask, algo.gamma, lam_actor)
    if algo.lam_critic is not None:
        _, returns = adv.gae(x.token_rewards, x.values, x.mask, algo.gamma, algo.lam_critic)
    return advantages, returns


def _group(formula):
    def estimate(algo: AlgoConfig, x: AdvantageInputs):
        return adv.broadcast_to_tokens(formula(algo, x.sequence_rewards, x.group_size), x.mask), None

    return estimate


def _normalized(mean: str | None = None, std: str | None = None):
    """A group estimator of the normalisation selector: fixed (mean, std), or the config's knobs where None."""

    def formula(algo: AlgoConfig, R: torch.Tensor, group_size: int) -> torch.Tensor:
        return adv.normalized_advantages(R, group_size, mean or algo.adv_norm_mean, std or algo.adv_norm_std)

    return formula


def _reinforce_pp(algo: AlgoConfig, x: AdvantageInputs):
    return adv.reinforce_pp_advantages(x.token_rewards, x.mask, algo.gamma), None


def _reinforce_pp_baseline(algo: AlgoConfig, x: AdvantageInputs):
    return adv.reinforce_pp_baseline_advantages(x.sequence_rewards, x.mask, x.group_size), None


ADVANTAGE_ESTIMATORS = {
    "reward_to_go": _reward_to_go,
    "gae": _gae,
    # GRPO's estimator is the selector itself (group, group by default; Lite PPO sets std=batch); Dr. GRPO and
    # RLOO are two of its fixed settings.
    "grpo": _group(_normalized()),
    "dr_grpo": _group(_normalized("group", "none")),
    "rloo": _group(_normalized("leave_one_out", "none")),
    "maxrl": _group(lambda algo, R, group_size: adv.maxrl_advantages(R, group_size)),
    "reinforce_pp": _reinforce_pp,
    "reinforce_pp_baseline": _reinforce_pp_baseline,
}


def effective_reward_clip(algo: AlgoConfig) -> float | None:
    """`c_R` where the spec puts it: on the scalar reward placed on the last token (PPO, REINFORCE++, PG, VAPO).

    A group estimator (GRPO, DAPO, Dr. GRPO, GSPO, RLOO, REINFORCE++-baseline) compares R within its group, so R
    reaches it unclipped."""
    return None if algo.advantage_estimator in GROUP_ESTIMATORS else algo.reward_clip


def whitens_noise_only(algo: AlgoConfig, sequence_rewards: torch.Tensor, beta: float) -> torch.Tensor:
    """Whether this batch's advantages would be noise blown up to unit scale, so that no policy step should follow.

    Whitening (PPO's option, REINFORCE++'s global normalisation) divides the advantages by their batch std. When
    no reward differs from another (within each group; the whole batch when G = 1), what is left to divide is the
    critic's error and the small in-reward KL penalty, and whitening turns it into a full-size push: on the
    default task PPO's solved batches moved the policy by 0.1–18 nats of approx KL and the next batch failed.
    Only when the policy loss is the sole term (no KL in the loss, no entropy bonus, no KL-Cov). `beta` is the run's
    current β (a group of runs passes one of theirs: they share a loss only when their β are all 0 or all not)."""
    whitens = algo.whiten_advantages or algo.advantage_estimator == "reinforce_pp"
    group_size = algo.num_generations if algo.num_generations > 1 else len(sequence_rewards)
    other_terms = (algo.kl_in == "loss" and beta > 0) or algo.entropy_coef > 0 or algo.cov_mode == "kl_cov"
    # A 0-dim bool tensor, read by no branch, so that a group of runs decides it for every run under vmap.
    return ~dynamic_sampling_keep(sequence_rewards, group_size).any() & (whitens and not other_terms)


def estimate_advantages(algo: AlgoConfig, x: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`(advantages [B, T], critic targets [B, T] or None)` as the config says, whitened if asked."""
    advantages, returns = ADVANTAGE_ESTIMATORS[algo.advantage_estimator](algo, x)
    if algo.whiten_advantages:
        advantages = masked_whiten(advantages, x.mask)
    return advantages, returns


def _gspo(formula):
    def loss(algo: AlgoConfig, logp, old_logp, advantages, mask):
        # GSPO uses one advantage per sequence: every token of a response carries the same value.
        sequence_advantages = masked_mean(advantages, mask, dim=-1)
        return formula(logp, old_logp, sequence_advantages, mask, algo.epsilon, algo.epsilon_high)

    return loss


POLICY_LOSSES = {
    "vanilla": lambda algo, logp, old_logp, advantages, mask: losses.vanilla_pg_loss(logp, advantages),
    "clip": lambda algo, logp, old_logp, advantages, mask: losses.clipped_surrogate_loss(
        logp, old_logp, advantages, algo.epsilon, algo.epsilon_high, algo.dual_clip
    ),
    "gspo": _gspo(losses.gspo_loss),
    "gspo_token": _gspo(losses.gspo_token_loss),
    "cispo": lambda algo, logp, old_logp, advantages, mask: losses.cispo_loss(
        logp, old_logp, advantages, algo.epsilon_high, algo.epsilon if algo.cispo_two_sided else None
    ),
    "sapo": lambda algo, logp, old_logp, advantages, mask: losses.sapo_loss(
        logp, old_logp, advantages, algo.sapo_tau_pos, algo.sapo_tau_neg
    ),
    "dppo_tv": lambda algo, logp, old_logp, advantages, mask: losses.dppo_loss(
        logp, old_logp, advantages, algo.dppo_delta_low, algo.dppo_delta_high, algo.dppo_ratio_cap
    ),
    "dro": lambda algo, logp, old_logp, advantages, mask: losses.dro_loss(logp, old_logp, advantages, algo.dro_beta),
}


def policy_loss(
    algo: AlgoConfig, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Per-token policy loss `[B, T]` of the configured kind (GSPO's per-sequence loss broadcast to tokens)."""
    return POLICY_LOSSES[algo.policy_loss](algo, logp, old_logp, advantages, mask)
