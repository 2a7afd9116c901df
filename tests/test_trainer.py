"""The training loop: records, stopping, reproducibility, failure modes and checkpoints (fast runs)."""

import dataclasses
import json
import math
import threading

import pytest
import torch

from rl_core.algorithms import PRESETS, get_preset
from rl_core.config import RunConfig
from rl_core.engine import sft
from rl_core.engine.models import MODEL_PRESETS
from rl_core.engine.trainer import Trainer, TrainingError, TrainingStopped
from toy_tasks import DEFAULT_TASK

# Every metric the spec asks each step to report (names as recorded).
SPEC_METRICS = {
    "reward_mean",
    "reward_std",
    "success_rate",
    "response_length",
    "response_length_correct",
    "response_length_incorrect",
    "entropy",
    "kl_exact",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "approx_kl",
    "clip_frac",
    "clip_frac_low",
    "clip_frac_high",
    "dual_clip_frac",
    "advantage_mean",
    "advantage_std",
    "advantage_min",
    "advantage_max",
    "grad_norm",
    "step_time",
    "tokens_per_second",
    "policy_loss",
    "beta",
}
SAMPLE_FIELDS = {
    "prompt",
    "response",
    "tokens",
    "reward",
    "success",
    "truncated",
    "advantages",
    "ratios",
    "clipped",
    "entropies",
}


def small_run(algo: str = "grpo", steps: int = 2, **overrides) -> RunConfig:
    preset = PRESETS[algo]
    size = dict(prompts_per_step=4 if preset.num_generations > 1 else 16)
    if algo in ("vapo",):
        size["value_pretrain_steps"] = 2
    return RunConfig(algo=get_preset(algo, **(size | overrides)), task=DEFAULT_TASK, steps=steps, seed=3)


@pytest.mark.parametrize("algo", list(PRESETS))
def test_every_preset_yields_records_with_every_spec_metric(algo):
    records = list(Trainer(small_run(algo)).steps())
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        assert set(record) >= SPEC_METRICS, SPEC_METRICS - set(record)
        assert 0.0 <= record["success_rate"] <= 1.0
        assert 0.0 <= record["clip_frac"] <= 1.0
        assert math.isclose(record["clip_frac"], record["clip_frac_low"] + record["clip_frac_high"], abs_tol=1e-6)
        assert 0.0 <= record["clip_frac_tokens"] <= 1.0
        if PRESETS[algo].policy_loss != "gspo":  # a token-level clip: the token share is its clip fraction
            assert record["clip_frac_tokens"] == record["clip_frac"]
        assert record["kl_k2"] >= 0 and record["kl_k3"] >= 0 and record["kl_exact"] >= -1e-6
        assert record["samples"] and set(record["samples"][0]) >= SAMPLE_FIELDS
        sample = record["samples"][0]
        assert len(sample["tokens"]) == len(sample["advantages"]) == len(sample["ratios"]) == len(sample["entropies"])
    assert ("zero_adv_group_frac" in records[-1]) == (PRESETS[algo].num_generations > 1)
    if PRESETS[algo].use_critic:
        assert {"critic_loss", "explained_variance"} <= set(records[-1])
    if PRESETS[algo].dynamic_sampling:
        assert 0.0 <= records[-1]["dynamic_sampling_dropped_frac"] <= 1.0


def test_single_on_policy_update_has_ratio_one_and_no_clipping():
    """π_θ = π_old when the only update's loss is computed: the clip cannot fire (the spec's teaching trap)."""
    run = small_run("grpo", ppo_epochs=1, num_minibatches=1, epsilon=0.01, epsilon_high=0.01)
    record = next(Trainer(run).steps())
    assert record["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    assert record["clip_frac"] == 0.0
    assert record["approx_kl"] == pytest.approx(0.0, abs=1e-10)


def test_several_updates_per_batch_move_the_ratio_and_clip():
    run = small_run("grpo", ppo_epochs=4, num_minibatches=2, epsilon=0.01, epsilon_high=0.01, learning_rate=3e-3)
    records = list(Trainer(run).steps())
    assert any(r["clip_frac"] > 0 for r in records)


def test_same_seed_gives_the_same_curve_and_another_seed_does_not():
    keys = ("reward_mean", "entropy", "kl_exact", "policy_loss", "clip_frac")
    first = [[r[k] for k in keys] for r in Trainer(small_run(steps=3)).steps()]
    second = [[r[k] for k in keys] for r in Trainer(small_run(steps=3)).steps()]
    assert first == second
    other = RunConfig(**{**small_run(steps=3).__dict__, "seed": 4})
    assert [[r[k] for k in keys] for r in Trainer(other).steps()] != first


def test_stop_event_set_from_another_thread_ends_the_run_between_steps():
    stop = threading.Event()
    trainer = Trainer(small_run(steps=50), stop_event=stop)
    seen = []
    for record in trainer.steps():
        seen.append(record["step"])
        if record["step"] == 2:
            threading.Thread(target=stop.set).start()
            threading.Event().wait(0.05)
    assert seen == [1, 2]


def test_nan_reward_stops_with_a_clear_message(monkeypatch):
    trainer = Trainer(small_run())
    trainer.prepare()
    real_score = trainer.task.score

    def poisoned(prompts, responses, truncated):
        scores = real_score(prompts, responses, truncated)
        return type(scores)([math.nan] * len(scores.rewards), scores.successes)

    monkeypatch.setattr(trainer.task, "score", poisoned)
    with pytest.raises(TrainingError, match=r"step 1: the loss became nan"):
        next(trainer.steps())


def test_invalid_config_fails_before_any_work(monkeypatch):
    monkeypatch.setattr(sft, "train_sft", lambda *a, **k: pytest.fail("trained despite a bad config"))
    with pytest.raises(ValueError, match="num_generations"):
        Trainer(
            RunConfig(
                algo=get_preset("grpo").__class__(**{**get_preset("grpo").__dict__, "num_generations": 1}),
                task=DEFAULT_TASK,
            )
        )
    with pytest.raises(ValueError, match="steps"):
        Trainer(RunConfig(algo=get_preset("grpo"), task=DEFAULT_TASK, steps=0))
    with pytest.raises(ValueError, match="allowed: "):
        Trainer(RunConfig(algo=get_preset("grpo"), task="no-such-task"))
    with pytest.raises(ValueError, match="model"):
        Trainer(RunConfig(algo=get_preset("grpo"), task=DEFAULT_TASK, model="huge"))


def test_sft_checkpoint_is_cached_on_disk(tmp_path, monkeypatch):
    first = Trainer(small_run(), cache_dir=tmp_path)
    first.prepare()
    monkeypatch.setattr(sft, "train_sft", lambda *a, **k: pytest.fail("SFT ran again instead of loading the cache"))
    second = Trainer(small_run(), cache_dir=tmp_path)
    second.prepare()
    for a, b in zip(first.policy.parameters(), second.policy.parameters()):
        torch.testing.assert_close(a, b)


def test_sft_trains_at_the_model_presets_learning_rate_and_caches_per_rate(tmp_path, monkeypatch):
    rates = []
    real_train_sft = sft.train_sft

    def spy(*args, **kwargs):
        rates.append(kwargs["learning_rate"])
        return real_train_sft(*args, **kwargs)

    monkeypatch.setattr(sft, "train_sft", spy)
    run = dataclasses.replace(small_run(), sft_steps=3)
    Trainer(run, cache_dir=tmp_path).prepare()
    Trainer(run, cache_dir=tmp_path).prepare()  # cached: no second SFT at the same rate
    monkeypatch.setitem(MODEL_PRESETS, "tiny", dataclasses.replace(MODEL_PRESETS["tiny"], sft_learning_rate=1e-4))
    Trainer(run, cache_dir=tmp_path).prepare()  # a checkpoint trained at another rate is not reused
    assert rates == [3e-3, 1e-4]


def test_a_checkpoint_being_trained_in_another_thread_is_waited_for_not_trained_twice(tmp_path, monkeypatch):
    calls = []
    entered, release = threading.Event(), threading.Event()
    real_train_sft = sft.train_sft

    def slow_train_sft(*args, **kwargs):
        calls.append(threading.current_thread().name)
        entered.set()
        release.wait(10)
        return real_train_sft(*args, **kwargs)

    monkeypatch.setattr(sft, "train_sft", slow_train_sft)
    run = dataclasses.replace(small_run(), sft_steps=3)
    first = Trainer(run, cache_dir=tmp_path)
    warm_start = threading.Thread(target=first.prepare, name="warm-start")
    warm_start.start()
    assert entered.wait(10)
    waits = []
    second = Trainer(run, cache_dir=tmp_path)
    waiter = threading.Thread(target=lambda: second.prepare(lambda *p: waits.append(p)), name="train")
    waiter.start()
    waiter.join(0.6)
    assert waiter.is_alive() and ("sft", 0, 3) in waits, "the second caller waits, and says so"
    release.set()
    warm_start.join(10)
    waiter.join(10)
    assert calls == ["warm-start"]
    for a, b in zip(first.policy.parameters(), second.policy.parameters()):
        torch.testing.assert_close(a, b)


def test_a_caller_waiting_for_a_checkpoint_can_be_stopped(tmp_path, monkeypatch):
    held = threading.Lock()
    held.acquire()  # as if another thread were training this checkpoint
    monkeypatch.setattr(sft, "_checkpoint_lock", lambda folder: held)
    trainer = Trainer(dataclasses.replace(small_run(), sft_steps=3), cache_dir=tmp_path)
    threading.Timer(0.5, trainer.stop_event.set).start()
    with pytest.raises(TrainingStopped, match="stopped during sft"):
        trainer.prepare()


def test_checkpoint_round_trip_resumes_the_same_curve(tmp_path):
    reference = Trainer(small_run("ppo", steps=3))
    expected = [r["reward_mean"] for r in reference.steps()]
    trainer = Trainer(small_run("ppo", steps=3))
    trainer.prepare()
    next(trainer.steps())
    trainer.save_checkpoint(tmp_path / "ckpt")
    resumed = Trainer(small_run("ppo", steps=3))
    resumed.prepare()
    resumed.load_checkpoint(tmp_path / "ckpt")
    assert resumed.step_index == 1
    assert [r["reward_mean"] for r in resumed.steps()] == pytest.approx(expected[1:])


def test_interrupted_checkpoint_write_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    trainer = Trainer(small_run())
    trainer.prepare()
    folder = trainer.save_checkpoint(tmp_path / "ckpt")
    before = sorted(p.name for p in folder.rglob("*"))
    step_before = json.loads((folder / "trainer_state.json").read_text())["step_index"]
    next(trainer.steps())

    def killed(*args, **kwargs):
        raise KeyboardInterrupt("killed while writing")

    monkeypatch.setattr(torch, "save", killed)
    with pytest.raises(KeyboardInterrupt):
        trainer.save_checkpoint(tmp_path / "ckpt")
    assert sorted(p.name for p in folder.rglob("*")) == before
    assert json.loads((folder / "trainer_state.json").read_text())["step_index"] == step_before
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]  # no half-written folder left behind
