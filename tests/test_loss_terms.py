"""The loss as a list of named terms: each term is its formula times its coefficient, the total is their sum, a term
with a zero coefficient is absent, and the trainer records exactly the active terms."""

import pytest
import torch

from rl_core.algorithms import get_preset
from rl_core.config import RunConfig
from rl_core.engine.trainer import Trainer
from rl_core.formulas.aggregation import aggregate_loss
from rl_core.formulas.kl import kl_k3
from rl_core.formulas.loss_terms import LOSS_TERMS, LossInputs, loss_parts
from rl_core.formulas.losses import clipped_surrogate_loss, entropy_from_logits, positive_nll_loss
from toy_tasks import DEFAULT_TASK


def _inputs(algo, **extra) -> LossInputs:
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 3, 5, generator=generator, requires_grad=True)
    tokens = torch.randint(0, 5, (4, 3), generator=generator)
    logp = torch.log_softmax(logits, -1).gather(-1, tokens[..., None]).squeeze(-1)
    old_logp = logp.detach() + 0.1 * torch.randn(4, 3, generator=generator)
    ref_logp = logp.detach() - 0.3
    advantages = torch.tensor([[1.0] * 3, [-1.0] * 3, [0.5] * 3, [0.0] * 3])
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]])
    return LossInputs(algo, logits, logp, old_logp, ref_logp, advantages, mask, 0.04, 3, **extra)


def test_grpo_total_is_policy_plus_beta_times_k3():
    algo = get_preset("grpo")
    x = _inputs(algo)
    parts = loss_parts(x)
    assert list(parts) == ["policy_loss", "kl_loss"]
    policy = aggregate_loss(
        clipped_surrogate_loss(x.logp, x.old_logp, x.advantages, 0.2, 0.2), x.mask, "seq-mean-token-mean"
    )
    kl = aggregate_loss(kl_k3(x.logp, x.ref_logp), x.mask, "seq-mean-token-mean")
    torch.testing.assert_close(parts["policy_loss"], policy)
    torch.testing.assert_close(parts["kl_loss"], 0.04 * kl)


def test_every_term_enters_with_its_coefficient():
    algo = get_preset(
        "grpo",
        entropy_coef=0.01,
        positive_nll_coef=0.2,
        cov_mode="kl_cov",
        cov_fraction=0.5,
        teacher_model="tiny",
        use_policy_gradient=False,
        distillation_loss_mode="k2",
        distillation_loss_coef=0.5,
    )
    positive = torch.tensor([True, False, False, False])
    x = _inputs(algo, positive=positive)
    x.teacher_logp = x.logp.detach() + 0.2  # the teacher likes every sampled token more: log r = 0.2
    parts = loss_parts(x)
    assert list(parts) == [t.name for t in LOSS_TERMS]
    entropy = aggregate_loss(entropy_from_logits(x.logits), x.mask, "seq-mean-token-mean")
    torch.testing.assert_close(parts["entropy_loss"], -0.01 * entropy)
    torch.testing.assert_close(parts["positive_nll_loss"], 0.2 * positive_nll_loss(x.logp, x.mask, positive))
    assert parts["kl_cov_loss"] > 0
    # k2 = ½ · 0.2² = 0.02 on every token, whatever the aggregation; times c = 0.5
    torch.testing.assert_close(parts["distillation_loss"], torch.tensor(0.5 * 0.02))


def test_the_distillation_term_acts_only_in_the_supervised_form():
    for knobs in ({}, {"teacher_model": "tiny"}, {"teacher_model": "tiny", "use_policy_gradient": True}):
        assert "distillation_loss" not in loss_parts(_inputs(get_preset("grpo", **knobs)))


def test_rollout_weights_multiply_the_policy_term_only():
    algo = get_preset("cispo")
    weights = torch.tensor([[2.0], [0.0], [1.0], [1.0]])
    plain, weighted = loss_parts(_inputs(algo)), loss_parts(_inputs(algo, policy_weights=weights))
    x = _inputs(algo)
    per_token = -torch.exp(x.logp - x.old_logp).detach().clamp(max=5.0) * x.advantages * x.logp
    torch.testing.assert_close(weighted["policy_loss"], aggregate_loss(per_token * weights, x.mask, "token-mean"))
    assert not torch.allclose(plain["policy_loss"], weighted["policy_loss"])


@pytest.mark.parametrize("kl_gradient", ["plain", "is_corrected", "k2_grad"])
def test_kl_gradient_changes_the_kl_terms_gradient_not_on_policy_value(kl_gradient):
    algo = get_preset("grpo", kl_gradient=kl_gradient)
    x = _inputs(algo)
    x.old_logp = x.logp.detach()  # on-policy: every variant has k3's value
    kl = loss_parts(x)["kl_loss"]
    torch.testing.assert_close(kl, 0.04 * aggregate_loss(kl_k3(x.logp, x.ref_logp), x.mask, "seq-mean-token-mean"))


def test_trainer_records_the_active_terms_and_their_sum():
    algo = get_preset("grpo", prompts_per_step=4, entropy_coef=0.01, ppo_epochs=1, num_minibatches=1)
    record = next(Trainer(RunConfig(algo=algo, task=DEFAULT_TASK, steps=1, seed=3)).steps())
    names = ("policy_loss", "kl_loss", "entropy_loss")
    assert set(names) <= set(record) and "kl_cov_loss" not in record and "positive_nll_loss" not in record
    assert record["total_loss"] == pytest.approx(sum(record[n] for n in names), abs=1e-6)


@pytest.mark.parametrize("loss", ["clip", "cispo"])
def test_token_views_mark_the_tokens_the_loss_silences(loss):
    """PPO's clip silences exactly the tokens it clips; CISPO (same range, two-sided) silences none of them."""
    algo = get_preset(
        "grpo",
        prompts_per_step=4,
        policy_loss=loss,
        cispo_two_sided=True,
        epsilon_high=0.2,
        learning_rate=1e-2,
        ppo_epochs=4,
        num_minibatches=2,
    )
    records = list(Trainer(RunConfig(algo=algo, task=DEFAULT_TASK, steps=3, seed=3, samples_per_record=16)).steps())
    views = [v for r in records for v in r["samples"]]
    clipped = [c for v in views for c in v["clipped"]]
    silenced = [s for v in views for s in v["silenced"]]
    assert any(clipped)
    assert silenced == (clipped if loss == "clip" else [False] * len(clipped))
