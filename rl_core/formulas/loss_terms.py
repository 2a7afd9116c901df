"""The minimised loss as a list of named terms: `total = Σ_k c_k · ℓ_k`, each `ℓ_k` one of the spec's formulas
and `c_k` its coefficient from the config (a term whose coefficient is 0 is left out).

A new method is one entry in `LOSS_TERMS`; the trainer records each active term under its name (the dashboard's
"loss parts"), and the total is their sum. Per-token terms are aggregated like the policy loss
(`loss_agg_mode`), so every term weighs its tokens the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rl_core.config import AlgoConfig
from rl_core.formulas import kl
from rl_core.formulas.aggregation import aggregate_loss
from rl_core.formulas.distillation import distillation_loss
from rl_core.formulas.estimators import policy_loss
from rl_core.formulas.losses import entropy_from_logits, kl_cov_penalty_mask, positive_nll_loss
from rl_core.formulas.masking import masked_mean


@dataclass
class LossInputs:
    """What a term may read: one minibatch of the update, `[B, T]` unless said otherwise."""

    algo: AlgoConfig
    logits: torch.Tensor  # [B, T, V] of π_θ
    logp: torch.Tensor  # log π_θ of the sampled tokens (Clip-Cov's selected tokens already detached)
    old_logp: torch.Tensor  # log π_old
    ref_logp: torch.Tensor  # log π_ref
    advantages: torch.Tensor
    mask: torch.Tensor
    beta: float | torch.Tensor  # the current KL coefficient (adaptive with target_kl)
    max_length: int  # T_max of seq-mean-token-sum-norm
    positive: torch.Tensor | None = None  # [B] bool, VAPO's responses to imitate
    policy_weights: torch.Tensor | None = None  # [B, T] or [B, 1] rollout-correction weights sg[w] (TIS / MIS)
    teacher_logp: torch.Tensor | None = None  # log π_T of the sampled tokens, when a teacher scores them

    def aggregate(self, per_token: torch.Tensor) -> torch.Tensor:
        return aggregate_loss(per_token, self.mask, self.algo.loss_agg_mode, self.max_length)


def policy_per_token(x: LossInputs) -> torch.Tensor:
    """The configured policy loss `[B, T]` (`rl_core.formulas.estimators.POLICY_LOSSES`), times the rollout-correction
    weight `sg[w]` when the batch was sampled by another policy than π_old."""
    per_token = policy_loss(x.algo, x.logp, x.old_logp, x.advantages, x.mask)
    return per_token if x.policy_weights is None else per_token * x.policy_weights


def policy_term(x: LossInputs) -> torch.Tensor:
    return x.aggregate(policy_per_token(x))


KL_IN_LOSS: dict[str, Callable[[LossInputs], torch.Tensor]] = {
    "plain": lambda x: kl.KL_ESTIMATORS[x.algo.kl_estimator](x.logp, x.ref_logp),
    "is_corrected": lambda x: kl.kl_k3_is_corrected(x.logp, x.old_logp, x.ref_logp),
    "k2_grad": lambda x: kl.kl_k3_with_k2_grad(x.logp, x.ref_logp),
}


def kl_term(x: LossInputs) -> torch.Tensor:
    """The per-token KL to the reference (`kl_estimator`, built as `kl_gradient` says), guarded by `clamped_kl`
    where π_θ < π_ref, aggregated."""
    return x.aggregate(kl.clamped_kl(KL_IN_LOSS[x.algo.kl_gradient](x), x.logp, x.ref_logp))


def kl_capped_fraction(x: LossInputs) -> torch.Tensor:
    """The share of valid tokens whose KL term `clamped_kl` caps at 10 (π_θ < π_ref and k > 10)."""
    capped = kl.kl_guard_capped(KL_IN_LOSS[x.algo.kl_gradient](x).detach(), x.logp.detach(), x.ref_logp)
    return masked_mean(capped.float(), x.mask)


def kl_cov_term(x: LossInputs) -> torch.Tensor:
    """KL-Cov: `|log π_θ − log π_old|` on the highest-covariance tokens (`kl_cov_penalty_mask`), aggregated."""
    selected = kl_cov_penalty_mask(x.logp, x.advantages, x.mask, x.algo.cov_fraction).to(x.logp.dtype)
    return x.aggregate((x.logp - x.old_logp).abs() * selected)


def distillation_term(x: LossInputs) -> torch.Tensor:
    """The supervised form of on-policy distillation: `k(log π_θ, log π_T)` per token (`distillation_loss_mode`),
    guarded by `clamped_kl` where π_θ < π_T as the KL term is (k3's pull `r − 1` runs into the hundreds at a token
    the teacher likes and the student has all but ruled out), aggregated."""
    per_token = distillation_loss(x.logp, x.teacher_logp, x.algo.distillation_loss_mode)
    return x.aggregate(kl.clamped_kl(per_token, x.logp, x.teacher_logp))


def _supervised_distillation(algo: AlgoConfig) -> bool:
    return algo.teacher_model is not None and not algo.use_policy_gradient


@dataclass(frozen=True)
class LossTerm:
    name: str  # the record key
    label: str  # for charts
    coefficient: Callable[[AlgoConfig, float], float]  # (config, current β) → c_k; 0 switches the term off
    value: Callable[[LossInputs], torch.Tensor]  # ℓ_k, a scalar


LOSS_TERMS: tuple[LossTerm, ...] = (
    LossTerm("policy_loss", "policy term", lambda algo, beta: 1.0, policy_term),
    LossTerm("kl_loss", "KL term", lambda algo, beta: beta if algo.kl_in == "loss" else 0.0, kl_term),
    LossTerm(
        "kl_cov_loss",
        "KL-Cov term",
        lambda algo, beta: algo.kl_cov_coef if algo.cov_mode == "kl_cov" else 0.0,
        kl_cov_term,
    ),
    # `−c_ent · H`: minimising it raises the entropy.
    LossTerm(
        "entropy_loss",
        "entropy term",
        lambda algo, beta: -algo.entropy_coef,
        lambda x: x.aggregate(entropy_from_logits(x.logits)),
    ),
    LossTerm(
        "positive_nll_loss",
        "positive-sample NLL",
        lambda algo, beta: algo.positive_nll_coef,
        lambda x: positive_nll_loss(x.logp, x.mask, x.positive),
    ),
    LossTerm(
        "distillation_loss",
        "distillation term",
        lambda algo, beta: algo.distillation_loss_coef if _supervised_distillation(algo) else 0.0,
        distillation_term,
    ),
)


def loss_parts(x: LossInputs) -> dict[str, torch.Tensor]:
    """Each active term `c_k · ℓ_k` by name (the policy term always); the minimised total is their sum."""
    parts = {}
    for term in LOSS_TERMS:
        coefficient = term.coefficient(x.algo, x.beta)
        # A tensor coefficient is β of a group of runs (`rl_core.engine.run_group`), whose runs share one loss only
        # when their β are all nonzero.
        if term.name == "policy_loss" or isinstance(coefficient, torch.Tensor) or coefficient != 0:
            parts[term.name] = coefficient * term.value(x)
    return parts
