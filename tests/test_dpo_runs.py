"""DPO as a run kind: a `RunConfig` whose algo is a `DPOConfig` is validated by name, planned and trained through a
`Sweep` into the run store (records with the metric names the RL runs use for what they share), answered from the
store when requested again, and is an arm of the `dpo_vs_rl` experiment, whose effect is worked out here by hand
and which the DPO page offers."""

import dataclasses
import math

import pytest
from streamlit.testing.v1 import AppTest

from rl_core.algorithms import get_run_algo
from rl_core.config import DPOConfig, RunConfig
from rl_core.experiments import get_experiment
from rl_core.experiments.dpo_vs_rl import DPO, GRPO
from rl_core.experiments.runner import arm_variant
from rl_core.runs.limits import estimated_step_seconds
from rl_core.runs.reuse import run_key
from rl_core.runs.store import RunStore
from rl_core.runs.sweep import PlannedRun, Sweep
from ui.experiments_panel import experiments_for


def tiny_dpo_run(**knobs) -> RunConfig:
    # Small enough for a test: 4 pairs a step, 8 evaluation samples, a 5-step warm start.
    algo = get_run_algo("dpo", per_device_train_batch_size=4, n_eval_prompts=8, **knobs)
    return RunConfig(algo=algo, task="preference", steps=2, seed=0, sft_steps=5, samples_per_record=2)


def test_a_dpo_run_is_validated_by_name_and_read_back_from_its_stored_form():
    run = tiny_dpo_run()
    run.validate()
    assert RunConfig.from_dict(dataclasses.asdict(run)) == run
    with pytest.raises(ValueError, match=r"beta=0\.0 is out of range; allowed: a number with 0 < x ≤ 10"):
        get_run_algo("dpo", beta=0.0)
    with pytest.raises(ValueError, match=r"loss_type='hinge' is not allowed; choose one of: sigmoid, ipo"):
        get_run_algo("dpo", loss_type="hinge")
    with pytest.raises(ValueError, match=r"unknown knob\(s\) 'num_generations' of dpo"):
        get_run_algo("dpo", num_generations=8)
    with pytest.raises(ValueError, match=r"task='caesar' is out of range; allowed: a task with preference pairs"):
        RunConfig(algo=DPOConfig(), task="caesar").validate()
    with pytest.raises(ValueError, match=r"algorithm 'dpx' is unknown; allowed: .*grpo.*, dpo"):
        get_run_algo("dpx")


@pytest.mark.slow  # the `preference` task's reward model is trained first (300 steps), in a worker process
def test_a_dpo_run_trains_through_a_sweep_into_the_store_and_an_identical_request_is_reused(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    run = tiny_dpo_run()
    first = Sweep([PlannedRun(run, "dpo", {})], store, workers=1)
    [trained] = first.run()
    assert trained.status == "finished" and not trained.reused and trained.final["success_rate"] >= 0
    records = store.steps(trained.id)
    assert [r["step"] for r in records] == [1, 2]
    start = records[0]
    # Step 1 is measured before the first update, where π_θ = π_ref: no KL (up to the round-off between the
    # sampler's and a teacher-forced pass), every implicit reward 0, and DPO's loss −log σ(0) = log 2.
    assert start["kl_exact"] == pytest.approx(0, abs=1e-6) and start["kl_k3"] == pytest.approx(0, abs=1e-6)
    assert start["loss"] == pytest.approx(math.log(2)) and start["rewards/margins"] == 0.0
    assert records[1]["kl_exact"] > 1e-4, "one update moved the policy"
    for record in records:  # what the RL runs of the task record under the same names, and DPO's own
        assert {"success_rate", "reward_mean", "kl_exact", "logps/chosen", "logps/rejected", "eval_loss"} <= set(record)
        assert 0 <= record["success_rate"] <= 1 and record["logps/chosen"] < 0 and record["logps/rejected"] < 0
    samples = store.samples(trained.id, 2)
    assert len(samples) == 2 and all("".join(s["tokens"]).startswith(s["response"]) for s in samples)

    again = Sweep([PlannedRun(tiny_dpo_run(), "dpo", {})], store, workers=1)
    [reused] = again.run()
    assert reused.reused and reused.status == "finished" and reused.records_from == trained.id
    assert store.steps(reused.id) == records
    other = tiny_dpo_run(beta=0.2)
    assert run_key(other) != run_key(run), "another knob is another run"


def test_the_effect_is_worked_out_on_hand_made_records():
    experiment = get_experiment("dpo_vs_rl")

    def records(kl: list[float]) -> list[dict]:
        return [{"step": step, "kl_exact": value} for step, value in enumerate(kl, 1)]

    # The last 10 steps count: GRPO's 1 … 10 average 5.5 (its first two steps, 9 and 9, are left out), DPO's 0.5,
    # with one step whose KL is NaN left out of its mean.
    grpo = records([9.0, 9.0, *range(1, 11)])
    dpo = records([0.0, 0.5, 0.5, 0.5, 0.5, math.nan, 0.5, 0.5, 0.5, 0.5, 0.5])
    assert experiment.effect({GRPO: grpo, DPO: dpo}) == pytest.approx(5.5 - 0.5)
    assert experiment.effect({GRPO: dpo, DPO: grpo}) == pytest.approx(0.5 - 5.5)
    assert experiment.expected == "positive"


def test_the_experiments_arms_are_grpo_with_the_reward_model_and_dpo_and_the_dpo_page_offers_it():
    experiment = get_experiment("dpo_vs_rl")
    assert {label: arm_variant(experiment, arm) for label, arm in zip((GRPO, DPO), experiment.arms)} == {
        GRPO: {"algo": "grpo"},
        DPO: {"algo": "dpo"},
    }
    assert experiment.task == "preference" and "logps/chosen" in experiment.charts
    assert experiment in experiments_for("dpo")


def test_the_dpo_pages_panel_offers_the_experiment_with_each_arms_run_kind(tmp_path, monkeypatch):
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    experiment = get_experiment("dpo_vs_rl")
    at = AppTest.from_string(
        "from ui.experiments_panel import see_it_happen\nsee_it_happen('dpo')\n", default_timeout=60
    ).run()
    assert not at.exception, at.exception
    assert experiment.title in [h.value for h in at.subheader]
    captions = " ".join(c.value for c in at.caption)
    assert f"**{GRPO}** (`algo` grpo) · **{DPO}** (`algo` dpo), differing only in `algo`" in captions
    assert at.button(key="dpo:experiment:dpo_vs_rl:run").disabled is False


def test_a_dpo_steps_estimated_seconds_count_its_samples_and_its_teacher_forced_responses():
    run = RunConfig(algo=get_run_algo("dpo"), task="preference", steps=40)
    # 64 samples, then 2 × 600 held-out responses every 10 steps and 4 × 32 minibatch responses: 64 + 120 + 128
    # responses' worth, each 7.1e-4 s, × 12 / 8 for the task's 12-token limit: 312 × 7.1e-4 × 1.5 = 0.33228 s.
    assert estimated_step_seconds(run) == pytest.approx(0.33228)
