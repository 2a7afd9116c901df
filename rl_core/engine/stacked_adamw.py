"""R independent AdamW optimisers as one: torch's own AdamW update applied to each run's row of a stacked buffer.

A group of runs keeps each model's parameters in one buffer `[R, N]` (`stacked_runs.Stack`) and each run has its own
learning rate, Adam ε and step count. torch's `AdamW` takes one learning rate per parameter group and one step
count per tensor, so the group calls torch's functional AdamW (`torch.optim.adamw.adamw`, the fused kernel where the
device has one) on the rows: one call for all the runs that share a learning rate and ε, each row a tensor with its
own moments and step count. A run that does not step (`active` False: its update was skipped, or its loss was not
finite) is left out, and keeps its parameters, moments and step count. `clip_grad_norms` clips every row at once.
"""

from __future__ import annotations

import torch
from torch.optim.adamw import adamw

BETAS = (0.9, 0.999)  # torch's defaults, which every optimiser of the lab uses
# torch.optim.AdamW's default ε, which the SFT warm start, DPO (as TRL's DPOTrainer) and the reward model's fit use
ADAM_EPS = 1e-8
# transformers' TrainingArguments default, which TRL's trainers inherit: DPO's and the reward model's gradient clip
MAX_GRAD_NORM = 1.0
CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_'s `max_norm / (norm + 1e-6)`


def clip_grad_norms(grad: torch.Tensor, max_norm: torch.Tensor) -> torch.Tensor:
    """Scale each run's gradient row `[R, N]` in place to an L2 norm of at most `max_norm[r]`, as
    `torch.nn.utils.clip_grad_norm_` does for one model: `g ← g · min(1, max_norm / (‖g‖ + 1e-6))`; returns each
    run's norm before clipping `[R]`."""
    norms = torch.linalg.vector_norm(grad, dim=1)
    grad.mul_((max_norm / (norms + CLIP_EPS)).clamp(max=1.0)[:, None])
    return norms


class StackedAdamW:
    """AdamW (weight decay 0, as every optimiser of the lab) over `buffer` `[R, N]`, run r with learning rate `lr[r]`
    and ε `eps[r]`.

    `state` (`exp_avg`, `exp_avg_sq` `[R, N]`, `step` `[R]`) starts at zero, or continues the given tensors (a
    group re-formed around runs that had trained together or alone)."""

    def __init__(self, buffer: torch.Tensor, lr: torch.Tensor, eps: torch.Tensor, state: dict | None = None):
        self.buffer = buffer
        self.settings = list(zip(lr.tolist(), eps.tolist()))
        self.state = state or {
            "exp_avg": torch.zeros_like(buffer.detach()),
            "exp_avg_sq": torch.zeros_like(buffer.detach()),
            "step": torch.zeros(buffer.shape[0], dtype=buffer.dtype, device=buffer.device),
        }
        # The fused kernel where torch has one for the device (CPU and CUDA); its for-loop form elsewhere.
        self.fused = buffer.device.type in ("cpu", "cuda")

    @classmethod
    def at_torch_defaults(cls, buffer: torch.Tensor, lr: list[float], states: list[dict | None]) -> StackedAdamW:
        """The optimiser of runs that use torch's AdamW as it comes (ε = ADAM_EPS), run r at learning rate `lr[r]`,
        continuing `states[r]` where a run has one (`stacked_state`)."""
        runs = len(lr)
        # float64, so that the settings' `tolist()` gives each rate and ε back exactly
        rates, eps = torch.tensor(lr, dtype=torch.float64), torch.full((runs,), ADAM_EPS, dtype=torch.float64)
        return cls(buffer, rates, eps, stacked_state(states, buffer))

    def learning_rates(self, lr: list[float]) -> None:
        """Run r steps at `lr[r]` from now on (a schedule's rates), with its ε as it was."""
        self.settings = [(rate, eps) for rate, (_, eps) in zip(lr, self.settings)]

    @torch.no_grad()
    def step(self, active: torch.Tensor) -> None:
        """One AdamW update of the runs where `active` `[R]` is True (the buffer's gradient as it is)."""
        together: dict[tuple[float, float], list[int]] = {}
        for r in active.nonzero().flatten().tolist():
            together.setdefault(self.settings[r], []).append(r)
        params, grad, state = self.buffer.detach(), self.buffer.grad, self.state
        for (lr, eps), runs in together.items():
            adamw(
                [params[r] for r in runs],
                [grad[r] for r in runs],
                [state["exp_avg"][r] for r in runs],
                [state["exp_avg_sq"][r] for r in runs],
                [],
                [state["step"][r] for r in runs],
                fused=self.fused,
                amsgrad=False,
                beta1=BETAS[0],
                beta2=BETAS[1],
                lr=lr,
                weight_decay=0.0,
                eps=eps,
                maximize=False,
            )

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
