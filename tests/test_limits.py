"""The server's limits: the estimate they are checked against (worked by hand), the refusals by name, a link or
the Compare boxes that ask more, the learner's hour, and every experiment a panel offers staying within them."""

import time
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from rl_core.algorithms import get_preset
from rl_core.config import RunConfig
from rl_core.experiments import EXPERIMENTS
from rl_core.experiments.runner import plan_experiment
from rl_core.runs.limits import ServerLimits, estimated_seconds, estimated_step_seconds
from rl_core.runs.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
HUGE = {"prompts_per_step": 256, "num_generations": 4, "ppo_epochs": 64, "num_minibatches": 1}


def test_the_step_estimate_matches_the_measured_figures_it_comes_from():
    # GRPO's 8 × 8 responses, 2 epochs × 2 minibatches, caesar (8 tokens), tiny:
    # 64 × (4.07e-4 + 2 × 2.95e-4) + 4 × 1.77e-2 = 0.063808 + 0.0708 = 0.134608 s (measured 0.131 s)
    assert estimated_step_seconds(RunConfig(algo=get_preset("grpo"), task="caesar")) == pytest.approx(0.134608)
    # 1,024 responses, 64 epochs of one minibatch: 1024 × (4.07e-4 + 64 × 2.95e-4) + 64 × 1.77e-2 = 20.882688 s
    huge = RunConfig(algo=get_preset("grpo", **HUGE), task="caesar", steps=50)
    assert estimated_step_seconds(huge) == pytest.approx(20.882688)
    # and the evaluation: 256 prompts × 2.28e-4 s = 0.058368 s
    assert estimated_seconds(huge) == pytest.approx(50 * 20.882688 + 0.058368)
    small = RunConfig(algo=get_preset("grpo", **HUGE), task="caesar", model="small")
    assert estimated_step_seconds(small) == pytest.approx(20.882688 * 6.6)
    # digit_sum answers take 32 tokens: four times caesar's 8
    assert estimated_step_seconds(RunConfig(algo=get_preset("grpo"), task="digit_sum")) == pytest.approx(4 * 0.134608)
    # PPO's critic: (64 × (4.07e-4 + 4 × 2.95e-4) + 16 × 1.77e-2) × 1.58 = 0.3848 × 1.58 = 0.60793344 s
    ppo = RunConfig(algo=get_preset("ppo"), task="caesar")
    assert estimated_step_seconds(ppo) == pytest.approx(0.60793344)


@pytest.mark.parametrize(
    "fields, message",
    [
        (
            {"steps": 1_000_000},
            "steps=1000000 is out of range; allowed: at most 2000 on this server (RLHF_LAB_MAX_STEPS)",
        ),
        ({"sft_steps": 20_000}, "sft_steps=20000 is out of range; allowed: at most 2000 on this server"),
        ({"model": "gpt2"}, "model='gpt2' needs a GPU, and this server has none"),
        # 60 × 20.882688 s + 0.058368 s = 1,253.02 s, 20.88 s a step
        (
            {"steps": 60, "algo": get_preset("grpo", **HUGE)},
            "this run would take about 1,253 s (60 steps × 20.88 s, from prompts_per_step × num_generations = 1024 "
            "responses, ppo_epochs=64 and model=tiny); allowed: at most 1,200 s a run on this server",
        ),
        # 20.882688 s × 6.6 = 137.8 s a step on the small model: past the 30 s ceiling whatever its number of steps
        (
            {"steps": 2, "model": "small", "algo": get_preset("grpo", **HUGE)},
            "one step of this run would take about 137.8 s (prompts_per_step × num_generations = 1024 responses, "
            "ppo_epochs=64 and model=small); allowed: at most 30 s a step on this server (RLHF_LAB_MAX_STEP_SECONDS)",
        ),
    ],
)
def test_a_run_beyond_the_limits_is_refused_naming_the_knob_and_the_limit(fields, message):
    run = RunConfig(**({"algo": get_preset("grpo"), "task": "caesar"} | fields))
    with pytest.raises(ValueError) as refused:
        ServerLimits().check_run(run, cuda=False)
    assert str(refused.value).startswith(message)


def test_the_limits_come_from_the_environment_and_a_bad_value_is_refused_by_name():
    limits = ServerLimits.from_env({"RLHF_LAB_MAX_STEPS": "300", "RLHF_LAB_MAX_RUN_SECONDS": "60.5"})
    assert limits.max_steps == 300 and limits.max_run_seconds == 60.5 and limits.max_sft_steps == 2000
    for text in ("0", "-3", "abc", "inf", "2.5"):
        with pytest.raises(ValueError, match="RLHF_LAB_MAX_STEPS=.* is out of range; allowed: a positive integer"):
            ServerLimits.from_env({"RLHF_LAB_MAX_STEPS": text})
    with pytest.raises(ValueError, match="this would queue 61 runs; allowed: at most 60"):
        ServerLimits().check_run_count(61)


def test_a_learner_may_have_two_runs_training_and_two_waiting_by_default():
    limits = ServerLimits()
    limits.check_learner_runs(live=2, queued=1)
    with pytest.raises(ValueError) as refused:
        limits.check_learner_runs(live=2, queued=2)
    assert str(refused.value).startswith(
        "you have 2 runs training and 2 waiting; allowed: at most 2 training and 2 waiting per learner on this "
        "server (RLHF_LAB_MAX_LEARNER_LIVE_RUNS, RLHF_LAB_MAX_LEARNER_QUEUED_RUNS)"
    )
    ServerLimits.from_env({"RLHF_LAB_MAX_LEARNER_QUEUED_RUNS": "5"}).check_learner_runs(live=2, queued=4)


def test_every_experiment_a_panel_offers_is_within_the_default_limits():
    limits = ServerLimits()
    for experiment in EXPERIMENTS.values():
        runs = [arm_run.planned.run for arm_run in plan_experiment(experiment)]
        limits.check_run_count(len(runs))
        for run in runs:
            limits.check_run(run, cuda=False)


def test_a_learners_training_seconds_are_counted_over_the_last_hour(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    now = time.time()
    for started, finished, session in (
        (now - 7200, now - 5400, "me"),
        (now - 4200, now - 1800, "me"),
        (now - 600, None, "me"),
        (now - 600, now, "other"),
    ):
        run_id = store.add_run(RunConfig(algo=get_preset("grpo"), task="caesar"), "grpo", session=session)
        with store._write() as db:
            db.execute(
                "UPDATE runs SET status = ?, started_at = ?, finished_at = ? WHERE id = ?",
                ("running" if finished is None else "finished", started, finished, run_id),
            )
    # the second run's last 1,800 s of its 2,400, and the running one's 600 s so far; not the first, nor others'
    assert store.training_seconds("me", since=now - 3600) == pytest.approx(2400, abs=2)
    with pytest.raises(ValueError, match="your runs have trained 2,400 s in the last hour; allowed: 2,000 s"):
        ServerLimits(learner_seconds_per_hour=2000).check_learner(2400)


# ---------------------------------------------------------------------------------------------- the pages
def open_with_url(page: str, **params) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    at.switch_page(f"app_pages/{page}.py")
    for name, value in params.items():
        at.query_params[name] = value
    return at.run()


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("steps", "1000000", "steps=1000000 is out of range; allowed: at most 2000 on this server"),
        ("sft_steps", "20000", "sft_steps=20000 is out of range; allowed: at most 2000"),
        ("model", "gpt2", "model='gpt2' is not one of: tiny, small"),
    ],
)
def test_a_link_cannot_lift_a_limit(name, value, message, monkeypatch, tmp_path):
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    if name == "model" and torch.cuda.is_available():
        pytest.skip("with a GPU the gpt2 shape is allowed")
    at = open_with_url("grpo", **{name: value})
    assert not at.exception
    assert len(at.warning) == 1 and message in at.warning[0].value, [w.value for w in at.warning]
    assert not at.button(key="grpo:train").disabled, "the default kept, Train works"


def test_a_slider_value_beyond_a_lowered_limit_disables_train(monkeypatch, tmp_path):
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    monkeypatch.setenv("RLHF_LAB_MAX_STEPS", "100")
    at = open_with_url("grpo")
    at.select_slider(key="grpo:steps").set_value(300).run()
    assert any("steps=300 is out of range; allowed: at most 100 on this server" in e.value for e in at.error)
    assert at.button(key="grpo:train").disabled


def test_the_compare_page_refuses_a_sweep_beyond_the_limits(monkeypatch, tmp_path):
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    at = AppTest.from_file(str(ROOT / "app_pages" / "compare.py"), default_timeout=60)
    at.session_state["lab:session"] = "me"
    at.run()
    at.number_input(key="compare:steps").set_value(60).run()
    at.text_area(key="compare:extra").set_value(
        "prompts_per_step=256\nnum_generations=4\nppo_epochs=64\nnum_minibatches=1"
    ).run()
    # 60 × 20.882688 s + 0.058368 s (test_the_step_estimate_matches_the_measured_figures_it_comes_from)
    assert any("this run would take about 1,253 s" in e.value for e in at.error), [e.value for e in at.error]
    assert at.button(key="compare:run").disabled


def test_a_learner_past_the_hours_allowance_cannot_train(monkeypatch, tmp_path):
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    monkeypatch.setenv("RLHF_LAB_LEARNER_SECONDS_PER_HOUR", "60")
    store = RunStore()
    run_id = store.add_run(RunConfig(algo=get_preset("grpo"), task="caesar"), "grpo", session="me")
    store.start_run(run_id)
    with store._write() as db:
        db.execute("UPDATE runs SET started_at = ? WHERE id = ?", (time.time() - 100, run_id))
    store.finish_run(run_id, "finished")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.session_state["lab:session"] = "me"
    at.run()
    at.switch_page("app_pages/grpo.py").run()
    assert any("your runs have trained 100 s in the last hour; allowed: 60 s" in w.value for w in at.warning)
    assert at.button(key="grpo:train").disabled


def test_the_overview_shows_the_servers_limits(monkeypatch, tmp_path):
    monkeypatch.setenv("RLHF_LAB_MAX_STEPS", "300")
    monkeypatch.setenv("RLHF_LAB_STORE_MAX_MB", "50")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()  # the overview is its first page
    assert not at.exception
    table = next(frame.value for frame in at.dataframe if "variable" in frame.value.columns)
    shown = dict(zip(table["variable"], table["value"]))
    assert shown["RLHF_LAB_MAX_STEPS"] == "300" and shown["RLHF_LAB_STORE_MAX_MB"] == "50 MB"
    assert shown["RLHF_LAB_MAX_RUN_SECONDS"] == "1,200 s" and shown["RLHF_LAB_MAX_TRAININGS"] == "2"
    assert shown["RLHF_LAB_MAX_LIVE_RUNS"] == "40" and shown["RLHF_LAB_MAX_STEP_SECONDS"] == "30 s"
    assert shown["RLHF_LAB_MAX_LEARNER_LIVE_RUNS"] == "2" and shown["RLHF_LAB_MAX_LEARNER_QUEUED_RUNS"] == "2"
