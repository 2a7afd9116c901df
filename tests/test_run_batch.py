"""A group of runs trains each run as it trains alone (`rl_core.engine.run_group`): the same records to 1e-5, the
same weights and gradients, whatever else is in the group (other seeds, learning rates, clip ranges, losses); the same
group twice gives identical records; a run that fails ends alone; and a batch takes one place under the training cap."""

import math
import os

import pytest
import torch

from rl_core.algorithms import get_preset, get_run_algo
from rl_core.config import RunConfig
from rl_core.engine.models import build_policy
from rl_core.engine.run_batch import groups_of, step_together
from rl_core.engine.trainer import Trainer, TrainingError
from rl_core.runs.run_stream import END, FAILED, batch_stream, trainer_for
from rl_core.runs.store import RunStore
from toy_tasks import DEFAULT_TASK

TIMING = {"step_time", "tokens_per_second", "elapsed"}
STEPS = 2
# RLHF_LAB_TEST_DEVICE=cuda checks the GPU path on a machine that has one (docs/ARCHITECTURE.md, On a GPU); by
# default the tiny model trains where `auto` puts it, the CPU.
DEVICE = os.environ.get("RLHF_LAB_TEST_DEVICE", "auto")


def run(preset: str, seed: int, task: str = DEFAULT_TASK, **knobs) -> RunConfig:
    return RunConfig(algo=get_run_algo(preset, **knobs), task=task, steps=STEPS, seed=seed, sft_steps=40, device=DEVICE)


# GRPO, GSPO and CISPO share one group (same G, prompts and schedule) with other seeds, learning rates and clip
# ranges, so they call their losses apart but train as one program; PPO (G = 1, 64 prompts, a critic) forms a
# group of two; on-policy distillation (a teacher) another; DPO and IPO (another loss and β; the same warm start,
# which spares the test a second reward model and SFT) another, of their kind (`DPOGroup`). The teachers train 40
# steps, not the preset's 600: the runs are compared with themselves, not judged on what they learn.
BATCH = [
    run("grpo", 0),
    run("ppo", 1),
    run("gspo", 1, learning_rate=2e-3),
    run("cispo", 0, learning_rate=5e-4, epsilon_high=4.0),
    run("grpo", 1, epsilon=0.1),
    run("ppo", 0, learning_rate=5e-4, cliprange_value=0.1),
    run("opd", 1, teacher_sft_steps=40),
    run("opd", 0, learning_rate=5e-4, teacher_sft_steps=40),
    run("dpo", 0, task="preference"),
    run("ipo", 0, task="preference", beta=0.3),
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
        # A number above 1e6 in size is a ratio of rounding errors (an explained variance of returns that are all 0
        # up to 1e-9): to 1 %.
        relative = 1e-2 if abs(b) > 1e6 else tolerance
        assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=relative, abs=tolerance), path
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
        trainer = trainer_for(config, cache)
        results.append((trained([trainer])[0][0], trainer))
    return results


@pytest.fixture(scope="module")
def together(cache):
    trainers = [trainer_for(config, cache) for config in BATCH]
    records, ends = trained(trainers)
    return records, ends, trainers


def test_the_batch_forms_the_groups_its_shapes_allow(together):
    _, _, trainers = together
    assert groups_of(trainers) == [[0, 2, 3, 4], [1, 5], [6, 7], [8, 9]]


@pytest.mark.parametrize("r", range(len(BATCH)), ids=[f"{c.algo.name}-seed{c.seed}" for c in BATCH])
def test_a_run_in_a_group_equals_the_run_alone(alone, together, r):
    records_alone, trainer_alone = alone[r]
    records, ends, trainers = together
    assert ends[r][END] == "finished" and len(records[r]) == STEPS
    # The first step to 1e-5: every record (loss parts, clip fractions, KL, advantages, the token views). Later steps
    # are not compared: the stacked passes sum in another order than a run's own (padding, and a batched matmul's
    # kernel), which moves a gradient by rounding (≈ 1e-8), and Adam, which divides each gradient by its own size,
    # turns that into a step of up to the learning rate where a coordinate's gradient is near its ε; whitened
    # advantages of near-equal rewards amplify it further (docs/ARCHITECTURE.md, "A group of runs").
    close(records[r][0], records_alone[0])


def test_the_first_update_of_a_run_in_a_group_equals_its_first_update_alone(cache):
    """One update (1 epoch × 1 minibatch): the loss parts and the gradient of a run beside others of other seeds,
    learning rates, clip ranges and losses equal its own alone to 1e-5."""
    once = {"ppo_epochs": 1, "num_minibatches": 1}
    configs = [
        run("grpo", 0, **once),
        run("grpo", 1, epsilon=0.1, learning_rate=5e-4, **once),
        run("grpo", 0, policy_loss="cispo", epsilon_high=4.0, **once),
    ]
    alone = Trainer(configs[0], cache_dir=cache)
    group = [Trainer(config, cache_dir=cache) for config in configs]
    for trainer in (alone, *group):
        trainer.prepare()
    record_alone, record = step_together([alone])[0], step_together(group)[0]
    close(
        {k: v for k, v in record.items() if k not in TIMING}, {k: v for k, v in record_alone.items() if k not in TIMING}
    )
    torch.testing.assert_close(
        group[0].group.policy.buffer.grad[0], alone.group.policy.buffer.grad[0], rtol=1e-5, atol=1e-8
    )


def test_the_same_group_twice_gives_identical_records(cache, together):
    again, _ = trained([trainer_for(config, cache) for config in BATCH])
    close(again, together[0], tolerance=0.0)


def test_runs_that_stepped_in_another_group_meanwhile_form_a_new_group(cache):
    """a, b, c step together, then b and c without a (a new group of two), then all three again: b's step must
    start from the weights its step with c left and move the weights its module holds, not resume the first
    group's stale row of it."""
    trainers = [Trainer(run("grpo", seed), cache_dir=cache) for seed in (0, 1, 0)]
    for trainer in trainers:
        trainer.prepare()
    a, b, c = trainers
    step_together(trainers)
    step_together([b, c])
    before = b.policy.transformer.wte.weight.detach().clone()
    record = step_together(trainers)[1]
    assert record["skipped_updates"] < b.algo.ppo_epochs * b.algo.num_minibatches  # so the weights must move
    assert not torch.equal(b.policy.transformer.wte.weight, before)
    assert a.group is b.group is c.group and a.group.trainers == trainers


def test_runs_group_by_shape_not_by_seed_or_knobs():
    def key(preset, seed=0, **knobs):
        trainer = Trainer(run(preset, seed, **knobs))
        trainer.policy = build_policy(trainer.run.model, trainer.tokenizer)  # only its shape is read
        return trainer.group_key()

    assert key("grpo") == key("grpo", seed=3, learning_rate=5e-4, epsilon=0.1, beta=0.0) == key("cispo")
    assert key("grpo") != key("grpo", num_generations=4)  # another batch shape
    assert key("grpo") != key("grpo", max_new_tokens=9)  # another length limit
    assert key("grpo") != key("grpo", ppo_epochs=1)  # another update schedule
    assert key("grpo") != key("grpo", rollout_temperature=0.7)  # a π_old pass the others do not take


def test_a_run_whose_loss_is_nan_ends_alone_and_its_group_mate_trains_as_alone(cache, alone):
    """Run 1 of a group of two gets NaN rewards: it ends with the loss's TrainingError; run 0's records are still
    its records alone."""
    trainers = [Trainer(BATCH[0], cache_dir=cache), Trainer(run("grpo", 1, epsilon=0.1), cache_dir=cache)]
    for trainer in trainers:
        trainer.prepare()
    score = trainers[1].task.score

    def nan_rewards(prompts, responses, truncated):
        scores = score(prompts, responses, truncated)
        return type(scores)(rewards=[math.nan] * len(scores.rewards), successes=scores.successes)

    trainers[1].task.score = nan_rewards
    first = step_together(trainers)
    assert isinstance(first[1], TrainingError) and "the loss became nan" in str(first[1])
    records = [first[0]] + [step_together(trainers[:1])[0] for _ in range(STEPS - 1)]
    close([{k: v for k, v in r.items() if k not in TIMING} for r in records], alone[0][0])


class Failing:
    """A run that samples nothing (as one fitted to preference pairs) whose group's step fails."""

    def group_key(self):
        return ("failing",)

    @classmethod
    def step_group(cls, trainers):
        raise TrainingError("the critic diverged")


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


def test_a_run_in_a_lane_waits_between_its_updates_and_trains_as_it_would(cache, alone):
    """The live loop's lane sets `share_pause`: it is called after each of the run's updates (epochs × minibatches
    of each step) and changes none of its numbers."""
    calls = []
    trainer = trainer_for(BATCH[0], cache)
    trainer.share_pause = lambda: calls.append(trainer.step_index) or 0.0
    records, _ = trained([trainer])
    close(records[0], alone[0][0])
    updates = trainer.algo.ppo_epochs * trainer.algo.num_minibatches
    assert calls == [step for step in range(STEPS) for _ in range(updates)]
