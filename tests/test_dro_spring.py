"""The dro experiment's effect on hand-made records: each arm's approx KL to π_old averaged over the steps that
record it (a missing or NaN value left out), vanilla PG's minus dro's; and the arms as the claim describes them."""

import math

import pytest

from rl_core.algorithms import get_preset
from rl_core.experiments import get_experiment

EXPERIMENT = get_experiment("dro_spring")


def test_the_effect_is_vanilla_s_mean_approx_kl_minus_dro_s():
    vanilla, dro = (arm.label for arm in EXPERIMENT.arms)
    runs = {
        # (0.0 + 0.9) / 2 = 0.45: step 3's NaN and step 4's missing value are left out.
        vanilla: [
            {"step": 1, "approx_kl": 0.0},
            {"step": 2, "approx_kl": 0.9},
            {"step": 3, "approx_kl": math.nan},
            {"step": 4},
        ],
        dro: [{"step": 1, "approx_kl": 0.0}, {"step": 2, "approx_kl": 0.1}, {"step": 3, "approx_kl": 0.2}],  # 0.1
    }
    assert EXPERIMENT.effect(runs) == pytest.approx(0.35)
    assert EXPERIMENT.effect({vanilla: runs[dro], dro: runs[vanilla]}) == pytest.approx(-0.35)
    assert EXPERIMENT.expected == "positive"  # vanilla PG moves further


def test_the_arms_are_vanilla_pg_and_dro_with_eight_updates_per_batch_and_no_other_leash():
    vanilla, dro = (get_preset(arm.preset, **arm.overrides) for arm in EXPERIMENT.arms)
    assert (vanilla.policy_loss, dro.policy_loss, dro.dro_beta) == ("vanilla", "dro", 1.0)
    for config in (vanilla, dro):
        assert config.ppo_epochs * config.num_minibatches == 8 and config.beta == 0.0
    assert "beyond_grpo" in EXPERIMENT.pages
