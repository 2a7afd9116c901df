"""Rollout staleness: the sampler is the policy of k steps ago, π_old is recomputed by the trainer, and the
mismatch between them is measured and corrected."""

import random

import pytest
import torch

from rl_core.algorithms import get_preset
from rl_core.config import RunConfig
from rl_core.engine.models import build_policy
from rl_core.engine.rollout import frozen_response_logits, sample, token_logprobs
from rl_core.engine.tokenizer import build_char_tokenizer
from rl_core.engine.trainer import Trainer
from toy_tasks import DEFAULT_TASK, get_task

MISMATCH_KEYS = {
    "rollout_corr/kl",
    "rollout_is_weight_min",
    "rollout_is_weight_max",
    "rollout_is_weight_p50",
    "rollout_is_weight_p95",
    "rollout_is_capped_frac",
    "rollout_corr/k3_kl",
    "rollout_corr/rollout_is_eff_sample_size",
}


def _trainer(steps: int, **overrides) -> Trainer:
    algo = get_preset("grpo", prompts_per_step=4, learning_rate=3e-3, **overrides)
    trainer = Trainer(RunConfig(algo=algo, task=DEFAULT_TASK, steps=steps, seed=3))
    trainer.prepare()
    return trainer


def _weights(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_the_sampler_is_the_policy_of_k_steps_ago():
    trainer = _trainer(5, rollout_staleness=2)
    history = []
    for step in range(5):
        history.append(_weights(trainer.policy))
        trainer.step()
        expected = history[max(0, step - 2)]
        assert all(torch.equal(a, b) for a, b in zip(_weights(trainer._sampler), expected)), f"step {step + 1}"
    assert not all(torch.equal(a, b) for a, b in zip(history[-1], history[2]))


def test_without_staleness_no_mismatch_is_reported():
    record = next(_trainer(1).steps())
    assert not MISMATCH_KEYS & set(record)


def test_stale_samples_are_reweighted_from_a_recomputed_pi_old():
    trainer = _trainer(4, rollout_staleness=2, rollout_is_mode="truncate", ppo_epochs=1, num_minibatches=1)
    records = list(trainer.steps())
    assert set(records[0]) >= MISMATCH_KEYS
    # Step 1 samples with the current policy: μ = π_old up to the rounding of two different passes.
    assert records[0]["rollout_is_weight_min"] == pytest.approx(1.0, abs=1e-4)
    assert records[0]["rollout_is_weight_max"] == pytest.approx(1.0, abs=1e-4)
    # Later the sampler lags: weights spread, and the mismatch KL (k1 of KL(μ‖π_old) on μ's samples) is positive.
    last = records[-1]
    assert last["rollout_is_weight_min"] < 0.99 < 1.01 < last["rollout_is_weight_max"]
    assert last["rollout_corr/kl"] > 0
    # π_old is the trainer's own snapshot, so one update per batch still starts at ratio 1.
    assert all(r["ratio_mean"] == pytest.approx(1.0, abs=1e-5) for r in records)


def test_a_sampler_at_another_temperature_is_corrected_from_the_first_step():
    trainer = _trainer(1, rollout_temperature=1.5, rollout_is_mode="truncate", ppo_epochs=1, num_minibatches=1)
    record = next(trainer.steps())
    assert record["rollout_corr/kl"] > 0.01
    assert record["rollout_is_weight_min"] < 0.9 and record["rollout_is_weight_max"] > 1.1
    assert record["ratio_mean"] == pytest.approx(1.0, abs=1e-5)


def test_masked_is_silences_the_samples_it_drops():
    trainer = _trainer(4, rollout_staleness=3, rollout_is_mode="mask", rollout_is_threshold=1.001)
    records = list(trainer.steps())
    assert records[-1]["rollout_is_capped_frac"] > 0
    assert records[-1]["silenced_frac"] > 0


def test_a_bfloat16_sampler_is_another_policy_and_float32_removes_the_mismatch():
    """The same weights sampled with bfloat16 kernels: μ ≠ π_old from the first step (k1 and k3 of the mismatch KL
    both positive, the weights' ESS below 1). With the trainer's own float32 kernels the sampler's log-probabilities
    are π_old's: no mismatch is recorded, because there is none to correct."""
    record = next(_trainer(1, rollout_dtype="bfloat16", ppo_epochs=1, num_minibatches=1).steps())
    assert set(record) >= MISMATCH_KEYS
    assert record["rollout_corr/k3_kl"] > 0 and record["rollout_corr/kl"] != 0
    assert record["rollout_corr/rollout_is_eff_sample_size"] < 1
    assert not MISMATCH_KEYS & set(next(_trainer(1, rollout_dtype="float32").steps()))


def test_a_second_pass_differs_by_round_off_and_a_bfloat16_sampler_by_more():
    """The same float32 weights: log-probabilities sampled token by token (KV cache) against one teacher-forced pass
    differ only by round-off; sampled under bfloat16 autocast, by orders of magnitude more. Only the sampler's own
    numbers make μ ≡ π_old exactly, which is why the trainer keeps them."""
    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    policy = build_policy("tiny", tokenizer).eval()
    prompts = get_task(DEFAULT_TASK).sample_prompts(16, random.Random(0))
    largest = {}
    for dtype in ("float32", "bfloat16"):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
            batch = sample(policy, tokenizer, prompts, 8, 1.0, torch.Generator().manual_seed(0), 4)
        recomputed = token_logprobs(frozen_response_logits(policy, batch), batch.response_ids) * batch.response_mask
        largest[dtype] = (recomputed - batch.old_logp).abs().max().item()
    assert largest["float32"] < 1e-5
    assert largest["bfloat16"] > 100 * max(largest["float32"], 1e-7)


def test_a_divergence_gate_drops_what_lies_beyond_delta():
    """A sampler at temperature 1.5 against a trainer at 1: a TV gate at δ = 0.05 drops tokens (recorded as verl's
    masked fraction) and so silences some gradients; at δ = 0.999 it keeps every token."""
    tight = next(
        _trainer(
            1,
            rollout_temperature=1.5,
            rollout_is_mode="mask",
            is_correction_gating="tv",
            is_correction_threshold=0.05,
            ppo_epochs=1,
            num_minibatches=1,
        ).steps()
    )
    assert 0 < tight["rollout_corr/rollout_rs_masked_fraction"] < 1
    assert tight["silenced_frac"] > 0
    loose = next(
        _trainer(
            1,
            rollout_temperature=1.5,
            rollout_is_mode="mask",
            is_correction_gating="tv",
            is_correction_threshold=0.999,
            ppo_epochs=1,
            num_minibatches=1,
        ).steps()
    )
    assert loose["rollout_corr/rollout_rs_masked_fraction"] == 0


@pytest.mark.parametrize(
    "overrides, knob",
    [
        (dict(rollout_staleness=9), "rollout_staleness"),
        (dict(rollout_staleness=-1), "rollout_staleness"),
        (dict(rollout_is_threshold=0.0), "rollout_is_threshold"),
        (dict(rollout_temperature=0.0), "rollout_temperature"),
        (dict(rollout_is_mode="clip"), "rollout_is_mode"),
        (dict(rollout_is_level="prefix"), "rollout_is_level"),
        (dict(kl_gradient="is_corrected", kl_estimator="k2"), "kl_gradient"),
        (dict(policy_loss="cispo", epsilon_high=0.28), "epsilon_high"),
        (dict(policy_loss="dppo_tv", dppo_delta_low=0.0), "dppo_delta_low"),
        (dict(policy_loss="sapo", sapo_tau_neg=0.0), "sapo_tau_neg"),
        (dict(dppo_ratio_cap=0.5), "dppo_ratio_cap"),
    ],
)
def test_bad_successor_knobs_are_refused_by_name(overrides, knob):
    with pytest.raises(ValueError, match=knob):
        get_preset("grpo", **overrides)


def test_checkpoint_keeps_the_stale_samplers_queue(tmp_path):
    expected = [r["reward_mean"] for r in _trainer(4, rollout_staleness=2).steps()]
    trainer = _trainer(4, rollout_staleness=2)
    for _ in range(2):
        trainer.step()
    trainer.save_checkpoint(tmp_path / "ckpt")
    resumed = _trainer(4, rollout_staleness=2)
    resumed.load_checkpoint(tmp_path / "ckpt")
    assert [r["reward_mean"] for r in resumed.steps()] == pytest.approx(expected[2:])
