"""The same toy run in TRL beside ours: TRL's logs as the lab's records, the run settings added to the export, the
refusals, the table by hand, the Compare page overlaying both sides, and (slow) a real two-step TRL run."""

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from rl_core.algorithms import get_preset
from rl_core.bridge import parity
from rl_core.bridge.trl_env import trl_python
from rl_core.config import RunConfig
from rl_core.runs.store import RunStore


def test_trl_logs_become_lab_records_under_the_lab_names():
    logs = [
        {
            "reward": 0.5,
            "kl": 0.01,
            "entropy": 1.2,
            "clip_ratio/region_mean": 0.03,
            "clip_ratio/low_mean": 0.02,
            "clip_ratio/high_mean": 0.01,
            "loss": 0.7,
            "learning_rate": 1e-3,
        },
        {"reward": 0.75, "kl": None, "entropy": 1.0},
    ]  # TRL logs None where a metric had no value
    assert parity.trl_records(logs) == [
        {
            "step": 1,
            "reward_mean": 0.5,
            "kl_k3": 0.01,
            "entropy": 1.2,
            "clip_frac": 0.03,
            "clip_frac_low": 0.02,
            "clip_frac_high": 0.01,
        },
        {"step": 2, "reward_mean": 0.75, "entropy": 1.0},
    ]


def test_the_trl_run_is_as_long_as_ours_and_logs_once_per_generated_batch(tmp_path):
    # grpo: 8 prompts × 8 completions in 2 minibatches (steps_per_generation 2), 2 epochs (num_iterations 2):
    # 4 optimiser steps per generated batch, so 60 batches are 240 of TRL's steps, logged every 4.
    run = RunConfig(algo=get_preset("grpo"), task="caesar", steps=60, seed=3)
    added = parity.trl_run_settings(run, tmp_path)
    assert (added["max_steps"], added["logging_steps"], added["seed"]) == (240, 4, 3)
    assert added["shuffle_dataset"] is False and added["use_cpu"] is True


@pytest.mark.parametrize(
    ("algo", "task", "message"),
    [
        ("dapo", "caesar", "algo='dapo' uses DAPO's sampling or shaping"),
        ("ppo", "caesar", "num_generations=1 does not map to TRL's GRPOConfig"),
        ("grpo", "preference", "task='preference' is not an exact-answer task"),
    ],
)
def test_what_trl_cannot_train_as_the_lab_does_is_refused(algo, task, message):
    with pytest.raises(ValueError, match=message):
        parity.check_parity_run(algo, task)


def stored(store: RunStore, side: str, seed: int, rewards: list[float], sweep: int) -> int:
    run = RunConfig(algo=get_preset("grpo"), task="caesar", steps=len(rewards), seed=seed)
    run_id = store.add_run(run, f"{side} · grpo", {"framework": side}, sweep)
    store.start_run(run_id)
    for step, reward in enumerate(rewards, start=1):
        store.add_step(run_id, {"step": step, "reward_mean": reward, "kl_k3": 0.1 * step})
    store.finish_run(run_id, "finished")
    return run_id


def test_the_parity_table_by_hand(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    sweep = store.create_sweep({"parity": {}})
    ids = {
        parity.LAB: [stored(store, parity.LAB, 0, [0.2, 0.4], sweep), stored(store, parity.LAB, 1, [0.4, 0.8], sweep)],
        parity.TRL: [stored(store, parity.TRL, 0, [0.2, 0.2], sweep), stored(store, parity.TRL, 1, [0.2, 0.6], sweep)],
    }
    reward = parity.parity_table(store, ids)[0]
    # Lab: run means 0.3 and 0.6 → 0.45 ± √((0.15² + 0.15²)/1) = 0.2121; TRL: 0.2 and 0.4 → 0.3 ± 0.1414.
    # Seed means per step: lab 0.3, 0.6; TRL 0.2, 0.4: the largest gap 0.2.
    assert reward["metric"] == "reward_mean"
    assert reward[f"{parity.LAB}: all steps"] == pytest.approx((0.45, 0.212132), abs=1e-6)
    assert reward[f"{parity.TRL}: all steps"] == pytest.approx((0.3, 0.141421), abs=1e-6)
    assert reward["largest step gap"] == pytest.approx(0.2)
    assert [row["metric"] for row in parity.parity_table(store, ids)] == ["reward_mean", "kl_k3"]


def test_the_compare_page_overlays_both_sides_with_seed_bands(tmp_path, monkeypatch):
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    store = RunStore()
    sweep = store.create_sweep({"parity": {}})
    ids = [stored(store, side, seed, [0.5, 0.7, 0.9], sweep) for side in (parity.LAB, parity.TRL) for seed in (0, 1)]
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app_pages" / "compare.py"), default_timeout=60)
    at.session_state["lab:session"] = "me"
    at.run()
    at.multiselect(key="compare:stored").set_value(ids).run()  # the command line's runs, reopened
    at.button(key="compare:reopen").click().run()
    assert not at.exception, at.exception
    charts = {
        json.loads(c.proto.spec)["layout"]["title"]["text"]: json.loads(c.proto.spec) for c in at.get("plotly_chart")
    }
    kl = charts["KL to the reference (k3 per token; TRL's kl)"]
    names = {trace.get("name") for trace in kl["data"]}
    assert {f"{parity.LAB} · grpo", f"{parity.TRL} · grpo"} <= names
    assert any(trace.get("fill") for trace in kl["data"]), "a band between the seeds"


@pytest.mark.slow
def test_a_short_parity_run_stores_both_sides(tmp_path):
    """Two steps of each side for one seed, through TRL's real GRPOTrainer in its virtualenv."""
    store = RunStore(tmp_path / "runs.sqlite")
    ids = parity.run_parity("grpo", "caesar", 2, [0], trl_python(), store)
    for side in (parity.LAB, parity.TRL):
        (run_id,) = ids[side]
        assert store.run(run_id).status == "finished"
        records = store.steps(run_id)
        assert [r["step"] for r in records] == [1, 2]
        assert all(0 <= r["reward_mean"] <= 1 and r["entropy"] > 0 and r["clip_frac"] >= 0 for r in records)
    assert {row["metric"] for row in parity.parity_table(store, ids)} >= {
        "reward_mean",
        "kl_k3",
        "entropy",
        "clip_frac",
    }


def test_the_trl_dpo_dataset_is_the_labs_own_minibatches_in_order():
    """`lab_minibatches` lists, step by step, exactly the pairs `DPOTraining.update` then draws."""
    import random
    from types import SimpleNamespace

    import torch

    from rl_core.bridge.parity_dpo import lab_minibatches
    from rl_core.engine.models import build_policy
    from rl_core.engine.preference_optimisation import DPOTraining
    from rl_core.engine.reward_model import PreferencePair
    from rl_core.engine.tokenizer import build_char_tokenizer
    from toy_tasks import get_task

    task = get_task("reverse")
    pairs = [PreferencePair(p, task.answer(p), p[:-1]) for p in task.sample_prompts(40, random.Random(0))]
    torch.manual_seed(0)
    training = DPOTraining(
        build_policy("tiny", build_char_tokenizer()), pairs, task, steps=3, batch_size=4, n_eval_prompts=2, seed=0
    )
    planned = lab_minibatches(SimpleNamespace(training=training, run=SimpleNamespace(steps=3)))
    drawn = []
    choices = training.rng.choices
    training.rng.choices = lambda population, k: drawn.extend(choices(population, k=k)) or drawn[-k:]
    for _ in range(3):
        training.update()
    assert len(planned) == 12 and planned == drawn


@pytest.mark.slow
def test_a_short_dpo_parity_run_agrees_with_trl_step_by_step(tmp_path):
    """Three steps of DPO for one seed in the lab and in TRL 1.16's DPOTrainer, on the same minibatches from the same
    warm start: the two logs agree to float32 rounding (measured: at most 2e-6 apart)."""
    from rl_core.bridge import parity_dpo

    store = RunStore(tmp_path / "runs.sqlite")
    ids = parity_dpo.run_dpo_parity(3, [0], trl_python(), store, per_device_train_batch_size=8)
    (lab,), (trl,) = ids[parity_dpo.LAB], ids[parity_dpo.TRL]
    assert store.run(lab).status == store.run(trl).status == "finished"
    for ours, theirs in zip(store.steps(lab), store.steps(trl), strict=True):
        for key in parity_dpo.DPO_KEYS:
            assert ours[key] == pytest.approx(theirs[key], abs=1e-4), (ours["step"], key)
    assert 0 <= parity_dpo.final_success_row(store, ids)[parity_dpo.TRL][0] <= 1
