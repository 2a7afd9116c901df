"""The baseline experiments of the Policy Gradient, RLOO and REINFORCE++ pages: each page offers its own, and the
measures they read are worked out by hand (the second moment of a record, the share of advantage weight on groups
whose rewards are all equal) and recorded by the trainer as the formula says."""

import math
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from rl_core.algorithms import get_preset
from rl_core.config import RunConfig
from rl_core.engine.trainer import Trainer
from rl_core.experiments import get_experiment
from rl_core.experiments._measures import mean_square_over_steps
from rl_core.formulas.advantages import reinforce_pp_advantages, reinforce_pp_baseline_advantages
from rl_core.formulas.metrics import equal_group_weight_share
from ui.experiments_panel import experiments_for

APP = str(Path(__file__).resolve().parents[1] / "app.py")
PAGES = {"policy_gradient": "pg_baseline", "rloo": "rloo_leave_one_out", "reinforce_pp": "reinforce_pp_grouping"}


@pytest.fixture(autouse=True)
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))


@pytest.mark.parametrize("page", PAGES)
def test_each_page_shows_its_baseline_experiment(page):
    assert PAGES[page] in [e.name for e in experiments_for(page)]
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page(f"app_pages/{page}.py").run()
    assert not at.exception, at.exception
    assert get_experiment(PAGES[page]).title in [h.value for h in at.subheader]


def test_mean_square_over_steps_by_hand():
    # (1² + 3²)/2: the NaN step and the step without the key are left out.
    records = [{"grad_norm": 1.0}, {"grad_norm": 3.0}, {"grad_norm": math.nan}, {}]
    assert mean_square_over_steps(records, "grad_norm") == pytest.approx(5.0)
    assert math.isnan(mean_square_over_steps([{}], "grad_norm"))


def test_equal_group_weight_share_by_hand():
    # Groups of two: (1, 1) and (0, 0), (0, 0) have equal rewards; (0, 1) does not. Weight on them 1 + 2 + 0.5 + 0.5
    # (signs do not matter) of 1 + 2 + 3 + 4 + 0.5 + 0.5 + 0 + 0 = 11.
    R = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    advantages = torch.tensor([1.0, -2.0, 3.0, -4.0, 0.5, -0.5, 0.0, 0.0])
    assert equal_group_weight_share(advantages, R, 2) == pytest.approx(4 / 11)
    assert math.isnan(equal_group_weight_share(torch.zeros(8), R, 2))  # no weight anywhere


def test_batch_normalisation_weighs_a_solved_prompt_and_the_group_baseline_does_not():
    """Two prompts, two samples each, rewards (1, 1) and (0, 1), two tokens per response. Batch-wide: R − 3/4 is
    (1/4, 1/4) and (−3/4, 1/4), so the solved prompt holds 1/2 of the weight 3/2 — a third, whatever the std
    divides by. Group mean first: the solved prompt's responses get exactly 0."""
    R = torch.tensor([1.0, 1.0, 0.0, 1.0])
    mask = torch.ones(4, 2)
    token_rewards = torch.zeros(4, 2)
    token_rewards[:, -1] = R
    batch = reinforce_pp_advantages(token_rewards, mask).mean(-1)
    group = reinforce_pp_baseline_advantages(R, mask, 2).mean(-1)
    assert equal_group_weight_share(batch, R, 2) == pytest.approx(1 / 3)
    assert equal_group_weight_share(group, R, 2) == 0.0


def test_the_trainer_records_the_share_from_the_advantages_it_trained_on():
    """Recomputed from the step's own sample views (every response of the batch, each with its reward and token
    advantages); absent with one response per prompt, where there are no groups."""
    run = RunConfig(
        algo=get_preset("reinforce_pp", prompts_per_step=4, num_generations=4, beta=0.0),
        task="caesar",
        steps=1,
        seed=0,
        samples_per_record=16,
    )
    record = next(Trainer(run).steps())
    samples = record["samples"]
    assert len(samples) == 16
    R = torch.tensor([s["reward"] for s in samples])
    seq_advantages = torch.tensor([sum(s["advantages"]) / len(s["advantages"]) for s in samples])
    assert record["equal_group_weight_share"] == pytest.approx(equal_group_weight_share(seq_advantages, R, 4))
    single = RunConfig(algo=get_preset("reinforce_pp", prompts_per_step=4), task="caesar", steps=1, seed=0)
    assert "equal_group_weight_share" not in next(Trainer(single).steps())
