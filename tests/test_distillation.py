"""On-policy distillation: the per-token reverse-KL advantage and the supervised loss (values and gradients worked
out by hand, the advantage's mean against the exact KL), the opd preset and its knobs, and a short run's records."""

import math

import pytest
import torch

from rl_core.algorithms import get_preset
from rl_core.config import RunConfig
from rl_core.engine.trainer import Trainer
from rl_core.formulas.distillation import distillation_loss, reverse_kl_advantages
from rl_core.formulas.kl import kl_exact

# Two valid tokens and one padding position: log r = log π_T − log π_θ is +0.5 and −1.0.
LOGP = torch.tensor([[-1.0, -2.0, -0.5]])
TEACHER = torch.tensor([[-0.5, -3.0, -0.5]])
MASK = torch.tensor([[1.0, 1.0, 0.0]])
E_HALF, E_MINUS_ONE = math.exp(0.5), math.exp(-1.0)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("k1", [0.5, -1.0, 0.0]),  # log π_T − log π_θ
        ("k2", [-0.125, -0.5, 0.0]),  # −½ (log r)²
        ("k3", [-(E_HALF - 1.5), -E_MINUS_ONE, 0.0]),  # −(r − 1 − log r): e^0.5 − 1.5 and e^−1 − 1 + 1
    ],
)
def test_reverse_kl_advantages_by_hand(mode, expected):
    logp = LOGP.clone().requires_grad_()
    advantages = reverse_kl_advantages(logp, TEACHER, MASK, mode)
    torch.testing.assert_close(advantages, torch.tensor([expected]))
    assert not advantages.requires_grad, "the advantage is detached: sg[·]"


def test_the_k1_advantage_averages_to_minus_the_exact_reverse_kl():
    """Σ_y π_θ(y) A(y) = −KL(π_θ‖π_T) at a state, the exact sum over the vocabulary (kl_exact) as the check."""
    student_logits, teacher_logits = torch.tensor([2.0, 0.5, -1.0, 0.0]), torch.tensor([0.0, 1.5, 0.3, -2.0])
    logp, teacher_logp = torch.log_softmax(student_logits, -1), torch.log_softmax(teacher_logits, -1)
    advantages = reverse_kl_advantages(logp[None], teacher_logp[None], torch.ones(1, 4), "k1")[0]
    expected = -kl_exact(student_logits[None], teacher_logits[None])[0]
    torch.testing.assert_close((logp.exp() * advantages).sum(), expected)


@pytest.mark.parametrize(
    ("mode", "value", "gradient"),
    [
        ("k1", [-0.5, 1.0], [1.0, 1.0]),  # log π_θ − log π_T; ∂/∂log π_θ = 1
        ("k2", [0.125, 0.5], [-0.5, 1.0]),  # ½ (log r)²; ∂ = log π_θ − log π_T
        ("k3", [E_HALF - 1.5, E_MINUS_ONE], [1 - E_HALF, 1 - E_MINUS_ONE]),  # r − 1 − log r; ∂ = 1 − r
    ],
)
def test_distillation_loss_values_and_gradients_by_hand(mode, value, gradient):
    logp = LOGP[:, :2].clone().requires_grad_()
    loss = distillation_loss(logp, TEACHER[:, :2], mode)
    torch.testing.assert_close(loss.detach(), torch.tensor([value]))
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([gradient]))


def test_opd_preset_takes_its_signal_from_the_teacher_only():
    opd = get_preset("opd")
    assert (opd.teacher_model, opd.use_task_rewards, opd.use_policy_gradient, opd.distillation_loss_mode) == (
        "tiny",
        False,
        True,
        "k1",
    )
    assert opd.beta == 0.0
    grpo = get_preset("grpo")
    assert grpo.teacher_model is None and grpo.use_task_rewards, "other presets train without a teacher"


@pytest.mark.parametrize(
    ("knobs", "named"),
    [
        (dict(teacher_model=None, use_task_rewards=False), "use_task_rewards"),
        (dict(teacher_model="gpt2"), "teacher_model"),
        (dict(teacher_sft_steps=0), "teacher_sft_steps"),
        (dict(distillation_loss_mode="k4"), "distillation_loss_mode"),
        (dict(distillation_loss_coef=-1.0), "distillation_loss_coef"),
    ],
)
def test_refused_distillation_knobs_are_named(knobs, named):
    with pytest.raises(ValueError, match=rf"^{named}="):
        get_preset("opd", **knobs)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One cache for the module's short runs: their warm start and teacher are trained once."""
    return tmp_path_factory.mktemp("cache")


def _short_run(cache, **knobs) -> list[dict]:
    algo = get_preset("opd", prompts_per_step=4, num_generations=4, teacher_sft_steps=50, **knobs)
    trainer = Trainer(RunConfig(algo, task="caesar", steps=2, seed=0, sft_steps=20), cache_dir=cache)
    setup = trainer.prepare()
    assert 0.0 <= setup["teacher_success_rate"] <= 1.0
    return list(trainer.steps())


def test_policy_gradient_form_advantages_are_the_teachers_log_ratio(cache):
    records = _short_run(cache)
    for record in records:
        assert record["teacher_kl_exact"] >= 0.0 and math.isfinite(record["teacher_kl"])
        assert "distillation_loss" not in record, "the policy-gradient form adds no loss term"
        for sample in record["samples"]:
            # No task reward: each token's advantage is log π_T − log π_θ(as sampled), nothing else.
            expected = [t - o for t, o in zip(sample["teacher_log_probs"], sample["old_log_probs"])]
            assert sample["advantages"] == pytest.approx(expected, abs=1e-5)
        # teacher_kl is k1's mean over tokens: minus the mean advantage.
        assert record["teacher_kl"] == pytest.approx(-record["advantage_mean"], abs=1e-5)


def test_supervised_form_is_a_loss_term_beside_zero_advantages(cache):
    records = _short_run(cache, use_policy_gradient=False, distillation_loss_mode="k3")
    for record in records:
        assert record["advantage_mean"] == record["advantage_std"] == 0.0
        assert record["distillation_loss"] > 0.0, "k3 of a student that differs from its teacher"
        assert record["skipped_updates"] == 0, "the loss term moves the policy though no advantage does"


def test_whitened_equal_task_rewards_skip_no_step_when_a_teacher_speaks(cache):
    """REINFORCE++ whitening skips a batch whose rewards are all equal as noise only; a teacher's per-token signal
    is not noise, so such a batch is still stepped."""
    records = _short_run(cache, advantage_estimator="reinforce_pp", use_task_rewards=True, whiten_advantages=True)
    assert all(r["skipped_updates"] == 0 for r in records)


def test_runs_without_a_teacher_record_nothing_of_it(cache):
    algo = get_preset("grpo", prompts_per_step=2, num_generations=2)
    trainer = Trainer(RunConfig(algo, task="caesar", steps=1, seed=0, sft_steps=20), cache_dir=cache)
    assert "teacher_success_rate" not in trainer.prepare() and trainer.teacher is None
    record = next(trainer.steps())
    assert "teacher_kl" not in record and "teacher_log_probs" not in record["samples"][0]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_the_student_closes_on_its_teacher_and_succeeds(tmp_path, seed):
    """30 steps of opd on the default task: the KL to the teacher falls and the batch success ends above 0.9,
    though the verifier's reward never reaches the loss."""
    trainer = Trainer(RunConfig(get_preset("opd"), task="caesar", steps=30, seed=seed), cache_dir=tmp_path)
    records = list(trainer.steps())
    first = sum(r["teacher_kl_exact"] for r in records[:3]) / 3
    last = sum(r["teacher_kl_exact"] for r in records[-3:]) / 3
    assert last < first / 2, (first, last)
    assert sum(r["success_rate"] for r in records[-3:]) / 3 > 0.9
