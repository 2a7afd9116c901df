"""On-policy distillation: the student samples, a teacher scores every sampled token, and the student is pushed
toward the teacher on the states it visits itself (Agarwal et al. 2024, GKD; Thinking Machines 2025).

With `log π_θ(y_t)` the student's and `log π_T(y_t)` the teacher's log-probability of the sampled token `y_t`, the
per-token reverse KL KL(π_θ‖π_T) is estimated by `rl_core.formulas.kl`'s k1 / k2 / k3 with the teacher in the
reference's place. Two ways to follow it, verl's `distillation_loss.use_policy_gradient`:

* policy-gradient form (`True`): the negated estimate, detached, is each token's advantage, and the run's policy
  loss (PPO's clip, say) does the rest — for k1 the advantage is `sg[log π_T − log π_θ]`, a dense reward;
* supervised form (`False`): the estimate itself is a loss term and backpropagates through `log π_θ`.

Both functions follow the tensor conventions of `docs/ARCHITECTURE.md`: `[B, T]` per-token tensors, pure.
"""

from __future__ import annotations

import torch

from rl_core.formulas.kl import KL_ESTIMATORS


def reverse_kl_advantages(
    logp: torch.Tensor, teacher_logp: torch.Tensor, mask: torch.Tensor, loss_mode: str = "k1"
) -> torch.Tensor:
    """`A_t = −sg[k(log π_θ(y_t), log π_T(y_t))]` per token, 0 where `mask` is 0 (the policy-gradient form).

    With `loss_mode = "k1"` this is `sg[log π_T(y_t) − log π_θ(y_t)]`: positive where the teacher likes the sampled
    token more than the student does, negative where less. Its expectation over `y_t ~ π_θ` is `−KL(π_θ‖π_T)` at
    that state, so maximising `Σ_t A_t` lowers the reverse KL (mode seeking). k2 and k3 are never negative, so
    their advantages only push down."""
    return -KL_ESTIMATORS[loss_mode](logp, teacher_logp).detach() * mask


def distillation_loss(logp: torch.Tensor, teacher_logp: torch.Tensor, loss_mode: str = "k3") -> torch.Tensor:
    """`ℓ_t = k(log π_θ(y_t), log π_T(y_t))` per token, with its gradient through `log π_θ` (the supervised form).

    k1 `log π_θ − log π_T`, k2 `½ (log π_T − log π_θ)²`, k3 `r − 1 − log r` with `r = π_T/π_θ`; their gradients
    w.r.t. `log π_θ` are 1, `log π_θ − log π_T` and `1 − r`. Only k2's and k3's gradients vanish where the student
    already matches the teacher on the sampled token; k1's pushes every sampled token down equally."""
    return KL_ESTIMATORS[loss_mode](logp, teacher_logp)


# The teacher's demonstrations: the task's own, without the deliberate mistakes the student's warm start learns from.
TEACHER_DEMO_NOISE = 0.0
