"""Adaptive β (PPO-penalty): doubling or halving β after each update holds the measured KL near its target;
a fixed β lets it drift."""

import math

from rl_core.experiments import Arm, Experiment
from rl_core.experiments._measures import mean_over_steps

TARGET_KL = 0.5  # nats per response, what the adaptive arm aims at
SHARED = dict(
    prompts_per_step=64,
    num_generations=1,
    temperature=1.0,
    beta=0.01,
    kl_estimator="k1",
    kl_in="reward",
    lam=0.95,
    whiten_advantages=True,
    policy_loss="clip",
    epsilon=0.2,
    epsilon_high=0.2,
    loss_agg_mode="token-mean",
    learning_rate=1e-3,
    ppo_epochs=2,
    num_minibatches=2,
    value_pretrain_steps=0,
)
FIXED, ADAPTIVE = "fixed β = 0.01", f"adaptive β, target {TARGET_KL}"


def _miss(records) -> float:
    """The mean |log(KL / target)| over the second half of the run: how far the KL sits from the target."""
    half = records[len(records) // 2 :]
    return mean_over_steps([{"miss": abs(math.log(max(r["kl_sequence"], 1e-6) / TARGET_KL))} for r in half], "miss")


EXPERIMENT = Experiment(
    name="adaptive_beta",
    title="Adaptive β holds the KL near its target",
    plain="A KL penalty whose strength adjusts itself keeps the policy about as far from the reference as "
    "asked, where the same penalty held fixed lets the distance drift away.",
    claim="PPO-penalty's adaptive β (double when KL > 1.5·target, halve when KL < target/1.5) keeps the measured "
    "KL near its target, while the same starting β held fixed lets it drift away.",
    source="PPO (Schulman et al. 2017), adaptive KL penalty; InstructGPT's KL controller",
    arms=(
        Arm(FIXED, "ppo", {**SHARED, "target_kl": None}),
        Arm(ADAPTIVE, "ppo", {**SHARED, "target_kl": TARGET_KL}),
    ),
    knobs=("target_kl",),
    task="digit_sum",
    # 25 steps (100 before): enough for the effect, and the 16 runs train in about 30 s on 2 CPU cores. Seeds 0–7:
    # 8 of 8, 95 % interval [+0.92, +1.42]; held-out seeds 300–307: 8 of 8, [+0.55, +1.31]. Run again 2026-11-29 on
    # another 2-core machine from an empty cache (`experiment --all`), seeds 0–7 were weak: 6 of 8, [−0.27, +1.33].
    # Seed 7 diverged by its fourth step in both arms alike (KL 43.8 nats a response in each), and the
    # adaptive arm's β then doubled every step to 4×10⁴ without bringing it back, where the fixed arm's KL came
    # back to 2; seed 6's adaptive β fell to 0.003. Seeds 300–307 on that machine: 8 of 8, [+0.63, +1.08].
    steps=25,
    metric="mean |log(KL / target)| over the second half, fixed minus adaptive",
    effect=lambda runs: _miss(runs[FIXED]) - _miss(runs[ADAPTIVE]),
    expected="positive",
    run_fields={"sft_steps": 500},
    pages=("ppo",),
    charts=("kl_sequence", "beta", "success_rate"),
)
