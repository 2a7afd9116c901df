"""The live lab's bridge: its knobs shown as TRL / verl / OpenRLHF configuration, and a finished run as a UNIPO log."""

import dataclasses
from pathlib import Path

from streamlit.testing.v1 import AppTest

from rl_core.algorithms import get_preset
from rl_core.bridge.export_unipo import validate_unipo
from rl_core.config import RunConfig
from ui.bridge import job_unipo
from ui.jobs import Job, LiveLoop

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def test_the_export_follows_the_knobs_and_switches_framework():
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("app_pages/grpo.py").run()
    assert not at.exception, at.exception
    code = at.get("code")
    trl = [c.value for c in code if "GRPOConfig(" in c.value]
    assert trl and "num_generations=8,  # num_generations=8" in trl[0] and "beta=0.04,  # beta=0.04" in trl[0]
    at.radio(key="grpo:variant").set_value("DAPO").run()
    dapo = [c.value for c in at.get("code") if "GRPOConfig(" in c.value][0]
    assert "epsilon_high=0.28,  # epsilon_high=0.28" in dapo and "# dynamic_sampling=True: does not map" in dapo
    at.radio(key="grpo:export_format").set_value("verl overrides (bash)").run()
    verl = [c.value for c in at.get("code") if "overrides=(" in c.value][0]
    assert "actor_rollout_ref.actor.clip_ratio_high=0.28  # epsilon_high=0.28" in verl
    at.radio(key="grpo:export_format").set_value("OpenRLHF flags (bash)").run()
    openrlhf = [c.value for c in at.get("code") if "flags=(" in c.value][0]
    assert "--actor.eps_clip_low_high 0.2 0.28  # epsilon=0.2: ε_low ε_high" in openrlhf
    assert "# dppo_delta_low=0.15: unused here (policy_loss is not dppo_tv)" in openrlhf
    assert not at.exception, at.exception


def test_a_finished_job_becomes_a_valid_unipo_log_with_every_steps_samples():
    algo = get_preset("grpo", prompts_per_step=2, num_generations=2, ppo_epochs=1, num_minibatches=1)
    run = RunConfig(algo=algo, task="reverse", steps=3, sft_steps=0, samples_per_record=2)
    job = Job(run, LiveLoop(1), label="GRPO · test").start()
    try:
        assert job.join(120)
    finally:
        job.stop()
    document = job_unipo(job)
    validate_unipo(document)
    assert document["header"]["hparams"] == document["header"]["hparams"] | {
        k: v for k, v in dataclasses.asdict(algo).items() if k not in ("name", "title", "summary")
    }
    entries = document["entries"]
    assert [e["step"] for e in entries] == [1, 2, 3]
    # The dashboard keeps every step's sampled responses, so every entry carries its own.
    assert [sum(len(g["responses"]) for g in e["prompts"]) for e in entries] == [2, 2, 2]


def test_a_preset_trl_cannot_take_says_why_instead_of_code():
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("app_pages/ppo.py").run()
    assert any("does not map to TRL's GRPOConfig" in info.value and "OpenRLHF" in info.value for info in at.info)
    at.radio(key="ppo:export_format").set_value("OpenRLHF flags (bash)").run()
    openrlhf = [c.value for c in at.get("code") if "flags=(" in c.value][0]
    assert "--algo.advantage.estimator gae  # advantage_estimator=gae" in openrlhf
    assert not at.exception, at.exception
