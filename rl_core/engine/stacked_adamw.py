"""R independent AdamW optimisers as one: the update of `torch.optim.AdamW` on a stacked buffer `[R, N]`.

AdamW is elementwise, so one update over the runs' stacked parameters is each run's own update, provided every
per-run quantity is a per-run tensor: the learning rate, Adam's ε, the gradient-norm clip and the step count
(whose bias corrections differ once some run skips a step). A run that does not step (`active` False: its update
was skipped, or its loss was not finite) keeps its parameters and moments unchanged. torch's own AdamW takes one
learning rate per parameter group and one step count per tensor, not per row, hence this small module; its update
is the same, operation for operation (`tests/test_stacked_adamw.py` checks it against `torch.optim.AdamW`).
"""

from __future__ import annotations

import torch

BETAS = (0.9, 0.999)  # torch's defaults, which every optimiser of the lab uses
CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_'s `max_norm / (norm + 1e-6)`


def clip_grad_norms(grad: torch.Tensor, max_norm: torch.Tensor) -> torch.Tensor:
    """Scale each run's gradient row `[R, N]` in place to an L2 norm of at most `max_norm[r]`, as
    `torch.nn.utils.clip_grad_norm_` does for one model: `g ← g · min(1, max_norm / (‖g‖ + 1e-6))`; returns each
    run's norm before clipping `[R]`."""
    norms = torch.linalg.vector_norm(grad, dim=1)
    grad.mul_((max_norm / (norms + CLIP_EPS)).clamp(max=1.0)[:, None])
    return norms


class StackedAdamW:
    """AdamW (weight decay 0, as every optimiser of the lab) over `buffer` `[R, N]` with per-run `lr` and `eps` `[R]`.

    `state` (`exp_avg`, `exp_avg_sq` `[R, N]`, `step` `[R]`) starts at zero, or continues the given tensors (a
    group re-formed around runs that had trained together or alone)."""

    def __init__(self, buffer: torch.Tensor, lr: torch.Tensor, eps: torch.Tensor, state: dict | None = None):
        self.buffer, self.lr, self.eps = buffer, lr[:, None], eps[:, None]
        self.state = state or {
            "exp_avg": torch.zeros_like(buffer.detach()),
            "exp_avg_sq": torch.zeros_like(buffer.detach()),
            "step": torch.zeros(buffer.shape[0], dtype=buffer.dtype, device=buffer.device),
        }

    @torch.no_grad()
    def step(self, active: torch.Tensor) -> None:
        """One AdamW update of the runs where `active` `[R]` is True (the buffer's gradient as it is)."""
        beta1, beta2 = BETAS
        grad = self.buffer.grad
        exp_avg, exp_avg_sq, step = self.state["exp_avg"], self.state["exp_avg_sq"], self.state["step"]
        keep = active[:, None]
        new_step = step + active.to(step.dtype)
        new_avg = torch.lerp(exp_avg, grad, 1 - beta1)
        new_avg_sq = torch.addcmul(exp_avg_sq * beta2, grad, grad, value=1 - beta2)
        safe_step = new_step.clamp(min=1)[:, None]  # a run that never stepped: no division by a zero correction
        bias_correction1 = 1 - beta1**safe_step
        bias_correction2_sqrt = (1 - beta2**safe_step).sqrt()
        denom = new_avg_sq.sqrt() / bias_correction2_sqrt + self.eps
        updated = self.buffer - (self.lr / bias_correction1) * (new_avg / denom)
        self.buffer.copy_(torch.where(keep, updated, self.buffer))
        exp_avg.copy_(torch.where(keep, new_avg, exp_avg))
        exp_avg_sq.copy_(torch.where(keep, new_avg_sq, exp_avg_sq))
        step.copy_(new_step)

    def run_state(self, r: int) -> dict:
        """Run r's moments and step count, as views of the stacked state."""
        return {name: tensor[r] for name, tensor in self.state.items()}


def stacked_state(states: list[dict | None], buffer: torch.Tensor) -> dict | None:
    """The stacked state of runs that each carry one (`StackedAdamW.run_state`), zeros for a run that has none;
    None when no run has one."""
    if all(state is None for state in states):
        return None
    zeros = {
        "exp_avg": torch.zeros_like(buffer[0]),
        "exp_avg_sq": torch.zeros_like(buffer[0]),
        "step": torch.zeros((), dtype=buffer.dtype, device=buffer.device),
    }
    return {name: torch.stack([(state or zeros)[name].detach().clone() for state in states]) for name in zeros}
