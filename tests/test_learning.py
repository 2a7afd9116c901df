"""Every preset learns the default task: it beats its SFT starting point by at least 30 points of success.

These are the slow tests (a few seconds to half a minute each); timing targets live in bench/, not here."""

import pytest

from rl_core.algorithms import PRESETS, get_preset
from rl_core.config import RunConfig
from rl_core.trainer import Trainer
from toy_tasks import DEFAULT_TASK

STEPS = 60
# The presets the walk-through promises will solve the default task, not merely improve on it.
SOLVERS = {"grpo", "dapo", "rloo", "reinforce_pp", "ppo"}


@pytest.mark.slow
@pytest.mark.parametrize("algo", list(PRESETS))
def test_preset_lifts_the_sft_policy_on_the_default_task(algo):
    trainer = Trainer(RunConfig(algo=get_preset(algo), task=DEFAULT_TASK, steps=STEPS, seed=0))
    trainer.prepare()
    before = trainer.evaluate()["success_rate"]
    assert 0.2 <= before <= 0.5, f"the SFT policy should succeed 20–50 % of the time, got {before:.2f}"
    for _ in trainer.steps():
        pass
    after = trainer.evaluate()["success_rate"]
    assert after >= before + 0.30, f"{algo}: success {before:.2f} → {after:.2f}"
    if algo in SOLVERS:
        assert after >= 0.9, f"{algo}: success {before:.2f} → {after:.2f}"
