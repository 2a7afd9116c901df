"""The experiments' design: arms that differ in exactly the knobs they name, with the knobs a retuned preset could
move spelt out, on tasks and models that exist; and effects read off hand-made records."""

import dataclasses
import math

import pytest

from rl_core.config import RunConfig
from rl_core.engine.models import MODEL_PRESETS
from rl_core.experiments import EXPERIMENTS, get_experiment
from rl_core.experiments.runner import arm_config
from toy_tasks import TASKS


def configs(experiment):
    return {arm.label: dataclasses.asdict(arm_config(arm)) for arm in experiment.arms}


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_arms_differ_in_exactly_the_named_knobs(name):
    experiment = EXPERIMENTS[name]
    arms = list(configs(experiment).values())
    if any(a.keys() != arms[0].keys() for a in arms):  # run kinds (RL against DPO): the whole algorithm differs
        differing = {"algo"}
    else:
        differing = {
            k for k in arms[0] if k not in ("name", "title", "summary") and any(a[k] != arms[0][k] for a in arms)
        }
    assert differing == set(experiment.knobs)
    assert len({arm.label for arm in experiment.arms}) == len(experiment.arms) >= 2


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_the_learning_rate_never_comes_from_a_preset_default(name):
    for arm in EXPERIMENTS[name].arms:
        assert "learning_rate" in arm.overrides, arm.label


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_runs_are_valid(name):
    experiment = EXPERIMENTS[name]
    assert experiment.task in TASKS and experiment.model in MODEL_PRESETS
    assert len(experiment.seeds) >= 3 and experiment.expected in ("positive", "negative")
    for arm in experiment.arms:
        RunConfig(
            algo=arm_config(arm),
            task=experiment.task,
            model=experiment.model,
            steps=experiment.steps,
            **experiment.run_fields,
        ).validate()


def ramp(key, start, stop, steps=10, **constant):
    return [{key: start + (stop - start) * i / (steps - 1), **constant} for i in range(steps)]


def test_clip_higher_effect_reads_the_high_side_clip_share():
    effect = get_experiment("clip_higher").effect
    # means 0.05 and 0.035; the entropy, which the arms also record, must not enter
    runs = {
        "ε_high 0.2": ramp("clip_frac_high", 0.06, 0.04, entropy=0.5),
        "ε_high 0.28": ramp("clip_frac_high", 0.04, 0.03, entropy=1.5),
    }
    assert effect(runs) == pytest.approx(-0.015)


def test_length_bias_effect_against_the_longer_of_the_other_two():
    effect = get_experiment("length_bias").effect
    runs = {
        "seq-mean-token-mean": ramp("truncated_frac", 0.2, 0.0),  # mean 0.1
        "token-mean": ramp("truncated_frac", 0.04, 0.04),
        "seq-mean-token-sum-norm": ramp("truncated_frac", 0.06, 0.06),
    }
    # ln((0.1 + 0.01) / (0.06 + 0.01)) = ln(11 / 7) = 0.4520
    assert effect(runs) == pytest.approx(0.4520, abs=1e-4)
    # Two negligible shares: the floor keeps their ratio near 1 (ln(0.011 / 0.0105) = 0.0465), not ln(0.001/0.0005)
    runs = {
        "seq-mean-token-mean": ramp("truncated_frac", 0.001, 0.001),
        "token-mean": ramp("truncated_frac", 0.0005, 0.0005),
        "seq-mean-token-sum-norm": ramp("truncated_frac", 0, 0),
    }
    assert effect(runs) == pytest.approx(0.0465, abs=1e-4)


def test_dynamic_sampling_compares_success_per_step():
    effect = get_experiment("dynamic_sampling").effect
    # Success per training step, whatever the rounds drawn: on's mean 0.3 minus off's 0.1.
    off = [{"success_rate": 0.1, "dynamic_sampling_rounds": 1}] * 10
    on = [{"success_rate": 0.2, "dynamic_sampling_rounds": 3}] * 5 + [
        {"success_rate": 0.4, "dynamic_sampling_rounds": 1}
    ] * 5
    assert effect({"dynamic sampling off": off, "dynamic sampling on": on}) == pytest.approx(0.2)


def test_adaptive_beta_effect_is_the_drop_in_distance_from_the_target():
    experiment = get_experiment("adaptive_beta")
    fixed, adaptive = (arm.label for arm in experiment.arms)
    target = experiment.arms[1].overrides["target_kl"]
    runs = {fixed: [{"kl_sequence": target * math.e}] * 4, adaptive: [{"kl_sequence": target}] * 4}
    assert experiment.effect(runs) == pytest.approx(1.0)


def test_critic_effect_reads_the_initial_critic_only():
    experiment = get_experiment("critic_from_rm")
    from_rm, pretrained = (arm.label for arm in experiment.arms)
    first = [{"advantage_first_token": 1.5, "advantage_last_token": 0.5}]
    later = [{"advantage_first_token": -9.0, "advantage_last_token": 0.0}] * 19
    flat = [{"advantage_first_token": 0.25, "advantage_last_token": 0.0}] * 20
    # (1.5 − 0.5) − (0.25 − 0): the later steps, after the critic's updates, do not count.
    assert experiment.effect({from_rm: first + later, pretrained: flat}) == pytest.approx(0.75)
