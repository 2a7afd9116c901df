"""Sampling with a stale copy of the policy (as an asynchronous trainer does) slows learning."""

from rl_core.experiments import Arm, Experiment
from rl_core.experiments._measures import mean_difference

# π_old is the trainer's own snapshot (recomputed by a teacher-forced pass), so PPO's ratio and clip are the same
# in every arm: only the sampler differs. 16 prompts × 8 responses per step: with 8 prompts the stale runs' noise
# hides the correction's effect on some seeds. Without a correction the mismatch KL between sampler and trainer
# grows to 0.5–1.6 nats per token here (the policy lurches between samplers); with TIS it stays near 0.2–0.3.
SHARED = dict(
    prompts_per_step=16,
    num_generations=8,
    learning_rate=1e-3,
    ppo_epochs=2,
    num_minibatches=2,
    advantage_estimator="grpo",
    loss_agg_mode="token-mean",
    beta=0.0,
    temperature=1.0,
    dual_clip=None,
    epsilon=0.2,
    epsilon_high=0.2,
    policy_loss="clip",
    rollout_is_level="token",
    rollout_is_threshold=2.0,
)
ON_POLICY = Arm("on-policy (k = 0)", "grpo", {**SHARED, "rollout_staleness": 0, "rollout_is_mode": "none"})
STALE = Arm("k = 8, no correction", "grpo", {**SHARED, "rollout_staleness": 8, "rollout_is_mode": "none"})

EXPERIMENT = Experiment(
    name="rollout_staleness",
    title="Stale rollouts slow learning",
    plain="Training on answers sampled by the policy of 8 steps ago learns more slowly than training on fresh ones.",
    claim="Sampling with the policy of 8 steps ago trains on another distribution than the trainer's π_old: "
    "without a correction it learns more slowly (and less steadily) than sampling on-policy.",
    source="Yao et al. 2025 (Your Efficient RL Framework Secretly Brings You Off-Policy RL Training); "
    "asynchronous RL frameworks (slime, AReaL, prime-rl)",
    arms=(ON_POLICY, STALE),
    knobs=("rollout_staleness",),
    task="caesar",
    # 30 steps (100 before): enough for the effect, and the 16 runs train in about 30 s on 2 CPU cores. Seeds 0–7:
    # 8 of 8, 95 % interval [+0.326, +0.411]; held-out seeds 300–307: 8 of 8, [+0.295, +0.425].
    steps=30,
    metric="batch success averaged over training, on-policy minus k = 8",
    effect=mean_difference("success_rate", ON_POLICY.label, STALE.label),
    expected="positive",
    run_fields={"sft_steps": 200},
    pages=("beyond_grpo",),
    charts=("success_rate", "rollout_corr/kl"),
)
