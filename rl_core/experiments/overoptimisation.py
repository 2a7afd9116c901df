"""Reward-model over-optimisation (Gao et al. 2023): as the policy moves away from the reference, the proxy reward
(the learned Bradley-Terry model of the `preference` task) keeps rising while the gold judge's success falls.

The β = 0 arm carries the claim; the other arm, held near the reference by a KL penalty, is the contrast the
reward-model page draws beside it (proxy and gold against √KL)."""

import math
import statistics

from rl_core.experiments import Experiment
from rl_core.experiments._measures import final_mean, mean_over_steps
from rl_core.experiments.reward_hacking import EXPERIMENT as REWARD_HACKING

# The same two runs as the reward-hacking experiment, read for another claim: how reward and gold move with KL.
ARMS = REWARD_HACKING.arms
FREE = next(arm.label for arm in ARMS if arm.overrides["beta"] == 0.0)
START = 5  # steps whose mean is the SFT policy's level: the first updates have barely moved it


def proxy_rise_and_gold_fall(runs) -> float:
    """The smaller of the proxy reward's rise and the gold success's fall in the β = 0 arm, each from its mean over
    the first START steps to its mean over the last 10: positive only when the proxy rose *and* the gold fell."""
    records = runs[FREE]
    start = records[:START]
    proxy_rise = final_mean(records, "reward_mean") - mean_over_steps(start, "reward_mean")
    gold_fall = mean_over_steps(start, "success_rate") - final_mean(records, "success_rate")
    return min(proxy_rise, gold_fall)


EXPERIMENT = Experiment(
    name="overoptimisation",
    title="Over-optimising the reward model",
    plain="Without a KL penalty, the policy learns to please the learned reward model: its score keeps rising "
    "while the real success rate falls.",
    claim="Optimised without a KL penalty, the policy drifts from the reference and the learned (proxy) reward "
    "keeps rising while the gold judge's success falls below where it started.",
    source="Gao, Schulman & Hilton 2023, Scaling laws for reward model overoptimization",
    arms=ARMS,
    knobs=REWARD_HACKING.knobs,
    task=REWARD_HACKING.task,
    steps=REWARD_HACKING.steps,
    metric="β = 0: the smaller of the proxy reward's rise (standardised units) and the gold success's fall, "
    f"first {START} steps to last 10",
    effect=proxy_rise_and_gold_fall,
    expected="positive",
    run_fields=REWARD_HACKING.run_fields,
    pages=("reward_model",),
    charts=("reward_mean", "success_rate", "kl_exact"),
)


def sqrt_kl_curve(seeds: list[list[dict]], key: str) -> list[tuple[float, float]]:
    """One arm's `key` against √KL, step by step: at each step the mean over seeds of √(per-token exact KL from the
    reference) and of `key` (Gao et al. plot reward against d = √KL). A step some seed lacks is left out."""
    by_step: dict[int, list[dict]] = {}
    for records in seeds:
        for record in records:
            by_step.setdefault(record["step"], []).append(record)
    curve = []
    for step in sorted(by_step):
        rows = by_step[step]
        if len(rows) == len(seeds) and all(r.get("kl_exact") is not None and r.get(key) is not None for r in rows):
            curve.append(
                (
                    statistics.fmean(math.sqrt(max(r["kl_exact"], 0.0)) for r in rows),
                    statistics.fmean(r[key] for r in rows),
                )
            )
    return curve
