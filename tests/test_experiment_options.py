"""Engine options the experiments need: running-mean baseline, critic from the reward model, the no-signal step
skip, and the per-step records they read (a skewed group's advantage weight against a balanced one's, first and
last token advantages)."""

import math

import pytest
import torch

from rl_core.algorithms import get_preset
from rl_core.config import RunConfig
from rl_core.engine.trainer import Trainer
from rl_core.formulas.advantages import constant_baseline, dr_grpo_advantages, grpo_advantages, running_mean_update
from rl_core.formulas.metrics import first_last_token_advantages, skewed_group_weight_ratio
from toy_tasks.base import Scores
from toy_tasks.preference import PreferenceTask


def test_running_mean_update_by_hand():
    assert running_mean_update(1.0, 0.0) == pytest.approx(0.9)
    assert running_mean_update(0.5, 1.5, decay=0.5) == pytest.approx(1.0)


def test_constant_baseline_subtracts_b_on_valid_tokens_only():
    returns = torch.tensor([[2.0, 1.0, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    assert torch.equal(constant_baseline(returns, mask, 0.5), torch.tensor([[1.5, 0.5, 0.0]]))


def test_trainer_keeps_the_running_mean_across_steps():
    run = RunConfig(
        algo=get_preset("pg", prompts_per_step=16, baseline="running_mean", beta=0.0), task="caesar", steps=3, seed=0
    )
    records = list(Trainer(run).steps())
    means = [r["reward_mean"] for r in records]
    # Step 1 uses its own mean; each later step the average of the earlier ones, b ← 0.9·b + 0.1·mean(R).
    assert records[0]["baseline"] == pytest.approx(means[0], abs=1e-6)
    assert records[1]["baseline"] == pytest.approx(means[0], abs=1e-6)
    assert records[2]["baseline"] == pytest.approx(0.9 * means[0] + 0.1 * means[1], abs=1e-6)


def test_skewed_weight_ratio_by_hand():
    # Group 1: one of four above its mean (skewed); group 2: two of four (balanced); group 3: all equal, no signal,
    # so its (made-up) advantages must not count.
    R = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    advantages = torch.tensor([3.0, -1.0, -1.0, -1.0, 1.0, 1.0, -1.0, -1.0, 5.0, 5.0, 5.0, 5.0])
    assert skewed_group_weight_ratio(advantages, R, 4) == pytest.approx(1.5 / 1.0)
    assert math.isnan(skewed_group_weight_ratio(advantages[4:], R[4:], 4))  # no skewed group with a signal
    assert math.isnan(skewed_group_weight_ratio(advantages[:4], R[:4], 4))  # no balanced group


def test_std_division_raises_the_skewed_weight():
    """Worked out by hand for p = 1/4 against p = 1/2 (unbiased std, as GRPO): Dr. GRPO's mean |Â| is 1.5/4 against
    2/4, a ratio of 0.75; GRPO divides them by the stds 0.5 and √(1/3), a ratio of √3/2 ≈ 0.866."""
    R = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    grpo = skewed_group_weight_ratio(grpo_advantages(R, 4), R, 4)
    dr_grpo = skewed_group_weight_ratio(dr_grpo_advantages(R, 4), R, 4)
    assert dr_grpo == pytest.approx(0.75)
    assert grpo == pytest.approx(math.sqrt(3) / 2, abs=1e-3)


def test_first_and_last_token_advantages_by_hand():
    advantages = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 0.0], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    stats = first_last_token_advantages(advantages, mask)
    assert stats == {"advantage_first_token": 2.5, "advantage_last_token": 4.0}  # the empty row is left out


def test_skip_no_signal_keeps_the_policy_where_adam_momentum_would_move_it(monkeypatch):
    """Step 1 has signal; step 2's rewards are all equal. Without the skip Adam's momentum still moves the policy."""
    moved = {}
    for skip in (True, False):
        run = RunConfig(
            algo=get_preset("grpo", prompts_per_step=4, beta=0.0, skip_no_signal_updates=skip),
            task="caesar",
            steps=2,
            seed=0,
        )
        trainer = Trainer(run)
        trainer.prepare()
        score = trainer.task.score
        first = next(trainer.steps())
        assert first["skipped_updates"] == 0
        before = [p.detach().clone() for p in trainer.policy.parameters()]
        monkeypatch.setattr(trainer.task, "score", lambda p, r, t: Scores([0.0] * len(p), [False] * len(p)))
        second = next(trainer.steps())
        monkeypatch.setattr(trainer.task, "score", score)
        assert second["skipped_updates"] == (4 if skip else 0)  # 2 epochs × 2 minibatches
        moved[skip] = max((p - b).abs().max().item() for p, b in zip(trainer.policy.parameters(), before))
    assert moved[True] == 0.0
    assert moved[False] > 0.0


def test_critic_from_the_reward_model_is_a_trainable_copy(monkeypatch):
    monkeypatch.setattr(PreferenceTask, "n_pairs", 64)
    monkeypatch.setattr(PreferenceTask, "rm_steps", 2)
    run = RunConfig(
        algo=get_preset("ppo", prompts_per_step=8, critic_init="reward_model"),
        task="preference",
        steps=1,
        seed=0,
        sft_steps=5,
    )
    trainer = Trainer(run)
    trainer.prepare()
    reward_model, critic = trainer.task.reward_model, trainer.critic
    assert critic is not reward_model
    for (name, a), (_, b) in zip(reward_model.state_dict().items(), critic.state_dict().items()):
        assert torch.equal(a, b), name
    assert all(p.requires_grad for p in critic.parameters())
    assert not any(p.requires_grad for p in reward_model.parameters())
    next(trainer.steps())  # the critic trains; the reward model it came from stays as it was
    assert not torch.equal(next(critic.parameters()), next(reward_model.parameters()))


def test_critic_from_the_reward_model_needs_a_critic_and_a_reward_model():
    with pytest.raises(ValueError, match="use_critic"):
        get_preset("grpo", critic_init="reward_model")
    with pytest.raises(ValueError, match="critic_init='reward_model'.*task=caesar, which has no learned reward model"):
        Trainer(RunConfig(algo=get_preset("ppo", critic_init="reward_model"), task="caesar"))
