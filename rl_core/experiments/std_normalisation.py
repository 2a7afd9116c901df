"""Dividing by the group's standard deviation (GRPO) gives more weight to groups that are almost always right or
almost always wrong than Dr. GRPO's mean-only advantage does."""

from rl_core.experiments import Arm, Experiment
from rl_core.experiments._measures import mean_difference

SHARED = dict(
    prompts_per_step=8, num_generations=8, temperature=1.0, beta=0.04, kl_estimator="k3", kl_in="loss",
    policy_loss="clip", epsilon=0.2, epsilon_high=0.2, loss_agg_mode="token-mean", learning_rate=1e-4,
    ppo_epochs=2, num_minibatches=2, dynamic_sampling=False,
)
# A small learning rate keeps both arms' policies close together, so the difference in weight comes mostly from
# the normalisation. Their batches (same seed, same draws) still part after 2–4 steps, even at 1e-5, and the
# drift between batches is as large as the effect: on this lab's CPU seed 0 comes out at −0.003 (weak verdict).

EXPERIMENT = Experiment(
    name="std_normalisation",
    title="Std normalisation up-weights near-solved and near-failed prompts",
    claim="GRPO's division by the group's reward std gives groups that are almost always right or almost always "
          "wrong a larger share of the advantage weight than Dr. GRPO's mean-only advantage.",
    source="Dr. GRPO (Liu et al. 2025, 'Understanding R1-Zero-like training')",
    arms=(
        Arm("GRPO (mean and std)", "grpo", {**SHARED, "advantage_estimator": "grpo"}),
        Arm("Dr. GRPO (mean only)", "grpo", {**SHARED, "advantage_estimator": "dr_grpo"}),
    ),
    knobs=("advantage_estimator",),
    task="digit_sum",
    steps=60,
    metric="share of Σ|Â| on skewed groups (≤ 1/4 or ≥ 3/4 of the group right), GRPO minus Dr. GRPO",
    effect=mean_difference("skewed_group_adv_share", "GRPO (mean and std)", "Dr. GRPO (mean only)"),
    expected="positive",
    run_fields={"sft_steps": 500},
    pages=("grpo", "labs_advantages"),
    charts=("skewed_group_adv_share", "success_rate"),
)
