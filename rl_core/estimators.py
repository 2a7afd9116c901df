"""Binds the config's names to the formula functions: which advantage estimator and which policy loss.

Each entry adapts one pure formula to a common call, so the trainer has one code path for every preset.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rl_core import advantages as adv
from rl_core import losses
from rl_core.config import GROUP_ESTIMATORS, AlgoConfig
from rl_core.masking import masked_mean, masked_whiten
from rl_core.sampling import dynamic_sampling_keep


@dataclass
class AdvantageInputs:
    token_rewards: torch.Tensor  # [B, T] r_t (task reward on the last token, −β·k in reward if used)
    mask: torch.Tensor  # [B, T]
    values: torch.Tensor | None  # [B, T] V(s_t) from the critic, or None
    group_size: int

    @property
    def sequence_rewards(self) -> torch.Tensor:
        """R_i with any in-reward KL folded in: Σ_t r_t."""
        return (self.token_rewards * self.mask).sum(-1)


def _reward_to_go(algo: AlgoConfig, x: AdvantageInputs):
    returns = adv.reward_to_go(x.token_rewards, x.mask, algo.gamma)
    advantages = adv.batch_mean_baseline(returns, x.mask) if algo.use_baseline else returns
    return advantages, returns


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
        return adv.broadcast_to_tokens(formula(x.sequence_rewards, x.group_size), x.mask), None

    return estimate


def _reinforce_pp(algo: AlgoConfig, x: AdvantageInputs):
    return adv.reinforce_pp_advantages(x.token_rewards, x.mask, algo.gamma), None


def _reinforce_pp_baseline(algo: AlgoConfig, x: AdvantageInputs):
    return adv.reinforce_pp_baseline_advantages(x.sequence_rewards, x.mask, x.group_size), None


ADVANTAGE_ESTIMATORS = {
    "reward_to_go": _reward_to_go,
    "gae": _gae,
    "grpo": _group(adv.grpo_advantages),
    "dr_grpo": _group(adv.dr_grpo_advantages),
    "rloo": _group(adv.rloo_advantages),
    "reinforce_pp": _reinforce_pp,
    "reinforce_pp_baseline": _reinforce_pp_baseline,
}


def effective_reward_clip(algo: AlgoConfig) -> float | None:
    """`c_R` where the spec puts it: on the scalar reward placed on the last token (PPO, REINFORCE++, PG, VAPO).

    A group estimator (GRPO, DAPO, Dr. GRPO, GSPO, RLOO, REINFORCE++-baseline) compares R within its group, so R
    reaches it unclipped."""
    return None if algo.advantage_estimator in GROUP_ESTIMATORS else algo.reward_clip


def whitens_noise_only(algo: AlgoConfig, sequence_rewards: torch.Tensor, beta: float) -> bool:
    """Whether this batch's advantages would be noise blown up to unit scale, so that no policy step should follow.

    Whitening (PPO's option, REINFORCE++'s global normalisation) divides the advantages by their batch std. When
    no reward differs from another (within each group; the whole batch when G = 1), what is left to divide is the
    critic's error and the small in-reward KL penalty, and whitening turns it into a full-size push: on the
    default task PPO's solved batches moved the policy by 0.1–18 nats of approx KL and the next batch failed.
    Only when the policy loss is the sole term (no KL in the loss, no entropy bonus, no KL-Cov)."""
    whitens = algo.whiten_advantages or algo.advantage_estimator == "reinforce_pp"
    group_size = algo.num_generations if algo.num_generations > 1 else len(sequence_rewards)
    other_terms = (algo.kl_in == "loss" and beta > 0) or algo.entropy_coef > 0 or algo.cov_mode == "kl_cov"
    return whitens and not other_terms and not bool(dynamic_sampling_keep(sequence_rewards, group_size).any())


def estimate_advantages(algo: AlgoConfig, x: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`(advantages [B, T], critic targets [B, T] or None)` as the config says, whitened if asked."""
    advantages, returns = ADVANTAGE_ESTIMATORS[algo.advantage_estimator](algo, x)
    if algo.whiten_advantages:
        advantages = masked_whiten(advantages, x.mask)
    return advantages, returns


def policy_loss(
    algo: AlgoConfig, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Per-token policy loss `[B, T]` of the configured kind (GSPO's per-sequence loss broadcast to tokens)."""
    if algo.policy_loss == "vanilla":
        return losses.vanilla_pg_loss(logp, advantages)
    if algo.policy_loss == "clip":
        return losses.clipped_surrogate_loss(logp, old_logp, advantages, algo.epsilon, algo.epsilon_high, algo.dual_clip)
    # GSPO uses one advantage per sequence: every token of a response carries the same value.
    sequence_advantages = masked_mean(advantages, mask, dim=-1)
    gspo = losses.gspo_loss if algo.policy_loss == "gspo" else losses.gspo_token_loss
    return gspo(logp, old_logp, sequence_advantages, mask, algo.epsilon, algo.epsilon_high)
