"""Reward hacking: with β = 0 the policy exploits the learned reward model of the `preference` task (reward up,
gold success down); a KL penalty keeps it where the reward model is right."""

from rl_core.experiments import Arm, Experiment
from rl_core.experiments._measures import final_mean

# Both arms spell out every knob the outcome depends on, so a retuned preset cannot change the experiment.
SHARED = dict(
    prompts_per_step=8,
    num_generations=8,
    learning_rate=1e-3,
    ppo_epochs=2,
    num_minibatches=2,
    advantage_estimator="grpo",
    policy_loss="clip",
    epsilon=0.2,
    epsilon_high=0.2,
    loss_agg_mode="seq-mean-token-mean",
    kl_estimator="k3",
    kl_in="loss",
    target_kl=None,
    temperature=1.0,
)
BETA = 0.6

EXPERIMENT = Experiment(
    name="reward_hacking",
    title="Reward hacking without a KL penalty",
    plain="A KL penalty keeps the policy where the learned reward model is right: with it the real success rate "
    "ends higher than without it.",
    claim="Without a KL penalty the policy exploits the learned reward model: its reward rises while the gold "
    "judge's success falls; a KL penalty holds the policy where the reward model is right.",
    source="InstructGPT (Ouyang et al. 2022) and Gao et al. 2022, reward-model overoptimisation",
    arms=(
        Arm("β = 0", "grpo", {**SHARED, "beta": 0.0}),
        Arm(f"β = {BETA}", "grpo", {**SHARED, "beta": BETA}),
    ),
    knobs=("beta",),
    task="preference",
    # 30 steps (40 before): enough for the effect, and the 16 runs train in about 30 s on 2 CPU cores. Seeds 0–7:
    # 8 of 8, 95 % interval [+0.525, +0.599]; held-out seeds 300–307: 8 of 8, [+0.532, +0.594].
    steps=30,
    metric=f"gold success over the last 10 steps, β = {BETA} minus β = 0",
    effect=lambda runs: final_mean(runs[f"β = {BETA}"], "success_rate") - final_mean(runs["β = 0"], "success_rate"),
    expected="positive",
    run_fields={"sft_steps": 200},
    pages=("ppo", "grpo"),
    charts=("reward_mean", "success_rate", "kl_exact"),
)
