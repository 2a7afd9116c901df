"""A batch of runs trains each run as it trains alone (`rl_core.engine.run_batch`): the same records to 1e-5, the same
weights and gradients, whatever else is in the batch; the same batch twice gives identical records; a run that
fails ends alone; and a batch takes one place under the training cap."""

import math
import os

import pytest
import torch

from rl_core.algorithms import get_preset
from rl_core.config import RunConfig
from rl_core.engine.rollout import SampleRequest
from rl_core.engine.run_batch import stack_key, step_together
from rl_core.engine.tokenizer import build_char_tokenizer
from rl_core.engine.trainer import Trainer, TrainingError
from rl_core.runs.run_stream import END, FAILED, batch_stream
from rl_core.runs.store import RunStore
from toy_tasks import DEFAULT_TASK

TIMING = {"step_time", "tokens_per_second", "elapsed"}
STEPS = 3
# RLHF_LAB_TEST_DEVICE=cuda checks the GPU path on a machine that has one (docs/ARCHITECTURE.md, On a GPU); by
# default the tiny model trains where `auto` puts it, the CPU.
DEVICE = os.environ.get("RLHF_LAB_TEST_DEVICE", "auto")


def run(preset: str, seed: int, **knobs) -> RunConfig:
    return RunConfig(algo=get_preset(preset, **knobs), task=DEFAULT_TASK, steps=STEPS, seed=seed, sft_steps=40,
                     device=DEVICE)


# A clip preset, a critic preset, GSPO and a successor (CISPO), with two seeds, other learning rates and another
# clip range in the same batch: GRPO, GSPO and CISPO share one sampling loop (same G and prompt count), PPO (G = 1,
# 64 prompts) samples in its own.
BATCH = [
    run("grpo", 0),
    run("ppo", 1),
    run("gspo", 1, learning_rate=2e-3),
    run("cispo", 0, learning_rate=5e-4, epsilon_high=4.0),
    run("grpo", 1, epsilon=0.1),
]


def close(a, b, tolerance=1e-5, path="record") -> None:
    """a equals b: numbers to `tolerance` (relative to their size, and absolute), NaN to NaN, the rest exactly."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            close(a[key], b[key], tolerance, f"{path}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            close(x, y, tolerance, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=tolerance, abs=tolerance), path
    else:
        assert a == b, path


def trained(trainers: list[Trainer]) -> tuple[list[list[dict]], list[dict]]:
    """Each run's records and its last items, trained as one batch."""
    records: list[list[dict]] = [[] for _ in trainers]
    ends: list[dict] = [{} for _ in trainers]
    for r, item in batch_stream(trainers):
        if "step" in item:
            records[r].append({k: v for k, v in item.items() if k not in TIMING})
        elif END in item or FAILED in item:
            ends[r] = item
    return records, ends


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def alone(cache):
    """Each run of BATCH trained by itself: its records and trainer."""
    results = []
    for config in BATCH:
        trainer = Trainer(config, cache_dir=cache)
        results.append((trained([trainer])[0][0], trainer))
    return results


@pytest.fixture(scope="module")
def together(cache):
    trainers = [Trainer(config, cache_dir=cache) for config in BATCH]
    records, ends = trained(trainers)
    return records, ends, trainers


@pytest.mark.parametrize("r", range(len(BATCH)), ids=[f"{c.algo.name}-seed{c.seed}" for c in BATCH])
def test_a_run_in_a_batch_equals_the_run_alone(alone, together, r):
    records_alone, trainer_alone = alone[r]
    records, ends, trainers = together
    assert ends[r][END] == "finished" and len(records[r]) == STEPS
    close(records[r], records_alone)  # every record: loss parts, clip fractions, KL, advantages, the token views
    for (name, p_batch), p_alone in zip(trainers[r].policy.named_parameters(), trainer_alone.policy.parameters()):
        torch.testing.assert_close(p_batch, p_alone, rtol=1e-5, atol=1e-5, msg=name)
        torch.testing.assert_close(p_batch.grad, p_alone.grad, rtol=1e-5, atol=1e-5, msg=f"{name}.grad")
    if trainer_alone.critic is not None:
        for p_batch, p_alone in zip(trainers[r].critic.parameters(), trainer_alone.critic.parameters()):
            torch.testing.assert_close(p_batch, p_alone, rtol=1e-5, atol=1e-5)


def test_the_same_batch_twice_gives_identical_records(cache, together):
    again, _ = trained([Trainer(config, cache_dir=cache) for config in BATCH])
    close(again, together[0], tolerance=0.0)


def test_only_requests_that_can_share_a_loop_are_stacked():
    tokenizer = build_char_tokenizer()
    grpo, ppo = (Trainer(run(p, 0)) for p in ("grpo", "ppo"))
    for trainer in (grpo, ppo):
        trainer.policy = torch.nn.Linear(1, 1)  # only its config and device are read
        trainer.policy.config = type("Config", (), dict(vocab_size=40, n_layer=2, n_embd=64, n_head=2,
                                                        n_positions=64, activation_function="gelu_new"))()

    def request(trainer, **changes):
        fields = dict(policy=trainer.policy, tokenizer=tokenizer, prompts=["ab"] * trainer.algo.prompts_per_step,
                      max_new_tokens=8, temperature=1.0, generator=trainer.generator,
                      num_generations=trainer.algo.num_generations)
        return SampleRequest(**(fields | changes))

    assert stack_key(request(grpo)) == stack_key(request(grpo, temperature=0.7, prompts=["xy"] * 8))
    assert stack_key(request(grpo)) != stack_key(request(ppo))  # G = 1 and 64 prompts
    assert stack_key(request(grpo)) != stack_key(request(grpo, max_new_tokens=9))
    assert stack_key(request(grpo, dtype="bfloat16")) is None  # autocast: sampled alone


class Failing:
    """A run whose step fails before it asks for a sample."""

    def step_phases(self):
        raise TrainingError("the critic diverged")
        yield  # a coroutine, as `Trainer.step_phases` is


def test_a_failing_run_ends_alone_and_the_others_step_on(cache):
    trainer = Trainer(run("grpo", 0), cache_dir=cache)
    trainer.prepare()
    outcomes = step_together([Failing(), trainer, Failing()])
    assert outcomes[1]["step"] == 1 and trainer.step_index == 1
    assert all(isinstance(outcomes[r], TrainingError) for r in (0, 2))


def test_a_batch_takes_one_place_under_the_training_cap(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    config = run("grpo", 0)
    a, b, c = (store.add_run(config, "x", {}) for _ in range(3))
    assert store.claim([a, b], cap=1, stopped=lambda: False)
    assert [(store.run(r).status, store.run(r).batch_id) for r in (a, b)] == [("running", a)] * 2
    tries = iter(range(3))
    assert not store.claim(c, cap=1, stopped=lambda: next(tries, None) is None)  # one batch holds the one place
    assert store.claim(c, cap=2, stopped=lambda: False)


def test_a_run_ends_when_its_own_steps_are_done_not_when_the_batch_is(cache):
    """A short run of a batch is finished (and stored as such) before its longer batch-mate's next step."""
    short = RunConfig(algo=get_preset("grpo"), task=DEFAULT_TASK, steps=1, seed=0, sft_steps=40)
    trainers = [Trainer(short, cache_dir=cache), Trainer(run("grpo", 1), cache_dir=cache)]
    items = [(r, END in item, item.get("step")) for r, item in batch_stream(trainers) if "step" in item or END in item]
    assert items.index((0, True, None)) < items.index((1, False, 2))
    assert items[-1] == (1, True, None)
