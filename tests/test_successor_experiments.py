"""The successor experiments are well formed: their arms differ in exactly the knobs they name, every arm's
configuration is valid, and the effect reads keys that the trainer records."""

import math

import pytest

from rl_core.algorithms import get_preset
from rl_core.experiments import get_experiment

NAMES = ("cispo_keeps_gradients", "dppo_rare_tokens", "rollout_staleness", "rollout_correction")


@pytest.mark.parametrize("name", NAMES)
def test_arms_differ_in_exactly_the_named_knobs(name):
    experiment = get_experiment(name)
    configs = [get_preset(arm.preset, **arm.overrides) for arm in experiment.arms]
    fields = set(configs[0].__dataclass_fields__) - {"name", "title", "summary"}
    differing = {f for f in fields if len({repr(getattr(c, f)) for c in configs}) > 1}
    assert differing == set(experiment.knobs)


@pytest.mark.parametrize("name", NAMES)
def test_effect_reads_only_charted_keys(name):
    """Records holding only the charted keys give a finite effect (a key the effect needs but the charts miss
    would make it NaN)."""
    experiment = get_experiment(name)
    fake = {
        arm.label: [dict.fromkeys(experiment.charts, 0.1 * (i + j + 1)) for i in range(3)]
        for j, arm in enumerate(experiment.arms)
    }
    assert math.isfinite(experiment.effect(fake))
