"""Per-token estimators of KL(π_θ ‖ π_ref) from sampled tokens, and the exact per-state KL.

With `log r_t = log π_ref(a_t|s_t) − log π_θ(a_t|s_t)` and `a_t ~ π_θ(·|s_t)`:
k1 and k3 are unbiased for the KL, k2 is biased; k2 and k3 are never negative. In the loss, what matters is the
gradient: `KL_GRADIENTS` offers k3 as it is, importance-corrected, or with k2's gradient.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """`k1 = −log r = log π_θ − log π_ref` per token (unbiased, high variance, can be negative)."""
    return logp - ref_logp


def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """`k2 = ½ (log r)²` per token (biased, low variance, ≥ 0)."""
    return 0.5 * (ref_logp - logp) ** 2


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """`k3 = r − 1 − log r` per token (unbiased, low variance, ≥ 0; GRPO's estimator)."""
    log_ratio = ref_logp - logp
    # expm1 keeps r − 1 exact for tiny log r, where exp(log r) − 1 − log r rounds to small negative values.
    return torch.expm1(log_ratio) - log_ratio


def kl_k3_is_corrected(logp: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """`ρ_t · k3_t` with `ρ_t = π_θ/π_old` (TRL `use_bias_correction_kl`, DeepSeek-V3.2's unbiased KL).

    The tokens were sampled from π_old, so k3 alone estimates the KL of π_old's samples, not π_θ's; weighted by
    ρ its value is unbiased for KL(π_θ‖π_ref). As in the paper and TRL, ρ keeps its gradient: then
    `∂(ρ·k3)/∂log π_θ = ρ·(k3 + 1 − r) = ρ·k1`, the importance-weighted sample of the true gradient
    `E_{π_θ}[k1·∇log π_θ]`. (Plain k3's gradient, `(1 − r)·∇log π_θ`, is the gradient of the reverse KL.)
    """
    return torch.exp(logp - old_logp) * kl_k3(logp, ref_logp)


def kl_k3_with_k2_grad(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3's value with k2's gradient (verl's straight-through `k3+`): `k3 + k2 − sg[k2]`.

    The value stays the unbiased, non-negative k3; the gradient w.r.t. log π_θ is k2's, `log π_θ − log π_ref`
    (= k1), whose expectation on-policy is the true gradient of KL(π_θ‖π_ref).
    """
    k2 = kl_k2(logp, ref_logp)
    return kl_k3(logp, ref_logp).detach() + k2 - k2.detach()


def clamped_kl(kl: torch.Tensor, logp: torch.Tensor, ref_logp: torch.Tensor, bound: float = 10.0) -> torch.Tensor:
    """`min(k, bound)` per token where `π_θ < π_ref`, `k` elsewhere: a guard on the KL term of the loss (verl clamps
    its low-variance KL at 10 on both sides).

    k3's gradient w.r.t. `log π_θ` is `1 − r`, `r = π_ref/π_θ`: at a token the policy has all but ruled out while
    the reference has not (common once entropy has collapsed) `r` runs into the hundreds and that one token's pull
    dwarfs the whole batch's (GRPO, default task: grad norm 11.5 at step 381, then success 0.25–0.75). Beyond the
    bound the clamp passes no gradient. Where `π_θ > π_ref` the pull is at most 1 per token and is the leash that
    keeps the policy near the reference, so that side is left alone.
    """
    return torch.where(kl_guard_capped(kl, logp, ref_logp, bound), bound, kl)


def kl_guard_capped(kl: torch.Tensor, logp: torch.Tensor, ref_logp: torch.Tensor, bound: float = 10.0) -> torch.Tensor:
    """Bool `[B, T]`: where `clamped_kl` caps the term, `π_θ < π_ref` and `k > bound` (the tokens that pass no KL
    gradient; their share is the metric `kl_capped_frac`)."""
    return (logp < ref_logp) & (kl > bound)


def kl_exact(logits: torch.Tensor, ref_logits: torch.Tensor) -> torch.Tensor:
    """`Σ_v π_θ(v|s_t) (log π_θ(v|s_t) − log π_ref(v|s_t))` over the last (vocabulary) dim: `[B,T,V]` → `[B,T]`.

    Terms with `π_θ(v|s_t) = 0` count 0 (the convention 0·log 0 = 0), so `−inf` logits are allowed.
    """
    logp = torch.log_softmax(logits, dim=-1)
    ref_logp = torch.log_softmax(ref_logits, dim=-1)
    p = logp.exp()
    return torch.where(p > 0, p * (logp - ref_logp), 0.0).sum(-1)


KL_ESTIMATORS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "k1": kl_k1,
    "k2": kl_k2,
    "k3": kl_k3,
}

KL_GRADIENTS = ("plain", "is_corrected", "k2_grad")  # the `kl_gradient` knob: how the KL term in the loss is built
