"""The 2025–26 presets learn the default task from every seed: after 20 steps their batches succeed at least
30 points more often than the SFT policy they start from. Each run is independent of the others (its own seed,
its own trainer), so the tests pass in any order."""

import statistics

import pytest

from rl_core.algorithms import get_preset
from rl_core.config import RunConfig
from rl_core.engine.trainer import Trainer
from toy_tasks import DEFAULT_TASK

SUCCESSORS = ("cispo", "sapo", "dppo", "lite_ppo", "maxrl")


@pytest.mark.slow
@pytest.mark.parametrize("seed", (0, 1, 2))
@pytest.mark.parametrize("algo", SUCCESSORS)
def test_successor_preset_lifts_the_sft_policy(algo, seed):
    trainer = Trainer(RunConfig(algo=get_preset(algo), task=DEFAULT_TASK, steps=20, seed=seed, samples_per_record=0))
    trainer.prepare()
    before = trainer.evaluate()["success_rate"]
    success = [record["success_rate"] for record in trainer.steps()]
    # steps 11–20: ten batches of 64 responses, so one unlucky batch cannot decide the test
    after = statistics.fmean(success[10:])
    assert after >= before + 0.30, f"{algo}, seed {seed}: success {before:.2f} → {after:.2f} (steps 11–20)"
