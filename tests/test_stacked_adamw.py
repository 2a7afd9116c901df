"""R AdamWs as one (`rl_core.engine.stacked_adamw`) against torch's own `torch.optim.AdamW` and
`clip_grad_norm_`, one per run: the independent route."""

import torch

from rl_core.engine.stacked_adamw import StackedAdamW, clip_grad_norms, stacked_state

LEARNING_RATES = [1e-3, 5e-4, 3e-3]
EPSILONS = [1e-8, 1e-6, 1e-8]


def test_each_row_steps_as_its_own_adamw_and_a_run_that_skips_keeps_its_state():
    torch.manual_seed(0)
    start = torch.randn(3, 50)
    stacked = start.clone().requires_grad_()
    optimiser = StackedAdamW(stacked, torch.tensor(LEARNING_RATES), torch.tensor(EPSILONS))
    alone = [start[r].clone().requires_grad_() for r in range(3)]
    torch_optimisers = [
        torch.optim.AdamW([p], lr=lr, eps=eps, weight_decay=0.0, foreach=False)
        for p, lr, eps in zip(alone, LEARNING_RATES, EPSILONS)
    ]
    for step in range(6):
        gradient = torch.randn(3, 50) * torch.tensor([1.0, 1e-3, 10.0])[:, None]
        gradient[1, :5] = 0.0  # coordinates whose gradient is 0
        active = torch.tensor([True, step % 2 == 0, step != 3])  # run 1 skips every other step, run 2 one step
        stacked.grad = gradient.clone()
        optimiser.step(active)
        for r in range(3):
            if active[r]:
                alone[r].grad = gradient[r].clone()
                torch_optimisers[r].step()
    for r in range(3):
        torch.testing.assert_close(stacked.detach()[r], alone[r].detach(), rtol=1e-6, atol=1e-7)
        state = torch_optimisers[r].state[alone[r]]
        torch.testing.assert_close(optimiser.state["exp_avg"][r], state["exp_avg"], rtol=1e-6, atol=1e-9)
        torch.testing.assert_close(optimiser.state["exp_avg_sq"][r], state["exp_avg_sq"], rtol=1e-6, atol=1e-12)
        assert optimiser.state["step"][r].item() == state["step"].item()
    assert optimiser.state["step"].tolist() == [6.0, 3.0, 5.0]


def test_a_group_formed_again_continues_each_runs_moments():
    """Runs that trained in one group (or alone) carry their state into the next: stacked again, rows reordered."""
    torch.manual_seed(1)
    buffer = torch.randn(2, 8).requires_grad_()
    first = StackedAdamW(buffer, torch.tensor([1e-3, 1e-3]), torch.tensor([1e-8, 1e-8]))
    buffer.grad = torch.randn(2, 8)
    first.step(torch.tensor([True, True]))
    swapped = buffer.detach()[[1, 0]].clone().requires_grad_()
    state = stacked_state([first.run_state(1), None, first.run_state(0)], torch.cat([swapped, swapped[:1]]))
    assert state["step"].tolist() == [1.0, 0.0, 1.0]
    torch.testing.assert_close(state["exp_avg"][0], first.state["exp_avg"][1])
    assert not state["exp_avg"][1].any()  # a run that has not trained yet starts from zero moments


def test_each_rows_gradient_is_clipped_as_clip_grad_norm_clips_one_model():
    torch.manual_seed(2)
    gradient = torch.randn(3, 40) * torch.tensor([0.1, 3.0, 30.0])[:, None]
    max_norm = torch.tensor([1.0, 1.0, 5.0])
    clipped = gradient.clone()
    norms = clip_grad_norms(clipped, max_norm)
    for r in range(3):
        parameter = torch.zeros(40, requires_grad=True)
        parameter.grad = gradient[r].clone()
        norm = torch.nn.utils.clip_grad_norm_([parameter], max_norm[r].item())
        torch.testing.assert_close(norms[r], norm)
        torch.testing.assert_close(clipped[r], parameter.grad)
    assert torch.equal(clipped[0], gradient[0])  # within its bound: untouched
