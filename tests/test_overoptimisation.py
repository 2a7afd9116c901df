"""The over-optimisation experiment's measure and its √KL curves, on records written by hand."""

import math

import pytest

from rl_core.experiments.overoptimisation import EXPERIMENT, FREE, proxy_rise_and_gold_fall, sqrt_kl_curve


def records(rewards, successes):
    return [{"step": i + 1, "reward_mean": r, "success_rate": s} for i, (r, s) in enumerate(zip(rewards, successes))]


def runs(free_records):
    return {arm.label: free_records if arm.label == FREE else [] for arm in EXPERIMENT.arms}


def test_the_effect_is_the_smaller_of_the_proxy_rise_and_the_gold_fall():
    # 15 steps: the first 5 average reward 0 and success 0.5; the last 10 average reward 2 and success 0.1.
    rewards = [0.0] * 5 + [2.0] * 10
    successes = [0.5] * 5 + [0.1] * 10
    assert proxy_rise_and_gold_fall(runs(records(rewards, successes))) == pytest.approx(0.4)  # min(2, 0.4)
    # The proxy rising while the gold success rises too is no over-optimisation: min(2, −0.3) < 0.
    assert proxy_rise_and_gold_fall(runs(records(rewards, [0.5] * 5 + [0.8] * 10))) == pytest.approx(-0.3)
    # Nor is the gold success falling while the proxy falls with it: min(−1, 0.4).
    assert proxy_rise_and_gold_fall(runs(records([1.0] * 5 + [0.0] * 10, successes))) == pytest.approx(-1.0)


def test_the_effect_reads_only_the_unpenalised_arm():
    free = records([0.0] * 5 + [2.0] * 10, [0.5] * 5 + [0.1] * 10)
    held = records([0.0] * 15, [0.9] * 15)
    by_arm = {arm.label: free if arm.label == FREE else held for arm in EXPERIMENT.arms}
    assert proxy_rise_and_gold_fall(by_arm) == pytest.approx(0.4)
    assert EXPERIMENT.arms[0].overrides["beta"] == 0.0 and EXPERIMENT.arms[0].label == FREE


def test_sqrt_kl_curve_averages_over_seeds_step_by_step():
    seed_a = [{"step": 1, "kl_exact": 0.25, "reward_mean": 1.0}, {"step": 2, "kl_exact": 1.0, "reward_mean": 3.0}]
    seed_b = [{"step": 1, "kl_exact": 1.0, "reward_mean": 2.0}]  # stopped after one step
    # Step 1: √0.25 = 0.5 and √1 = 1 average 0.75, rewards 1.5; step 2 lacks seed b and is left out.
    assert sqrt_kl_curve([seed_a, seed_b], "reward_mean") == [(0.75, 1.5)]
    # A slightly negative KL (rounding of an exact KL near 0) counts as 0, never as a NaN.
    curve = sqrt_kl_curve([[{"step": 1, "kl_exact": -1e-9, "reward_mean": 0.0}]], "reward_mean")
    assert curve == [(0.0, 0.0)] and not math.isnan(curve[0][0])
