"""A stale sampler slows learning; truncated importance sampling (TIS) reweights its samples back to π_old."""

from rl_core.experiments import Arm, Experiment
from rl_core.experiments._successor_measures import mean_over_steps

# π_old is the trainer's own snapshot (recomputed by a teacher-forced pass), so PPO's ratio and clip are the same
# in every arm; the stale arms differ only in the correction. At k = 4 the lab's policy moves too little between
# samplers for the correction to matter reliably; at k = 8 the mismatch KL is ≈ 0.9 nats per token.
SHARED = dict(
    prompts_per_step=8, num_generations=8, learning_rate=1e-3, ppo_epochs=2, num_minibatches=2,
    advantage_estimator="grpo", loss_agg_mode="token-mean", beta=0.0, temperature=1.0, dual_clip=None,
    epsilon=0.2, epsilon_high=0.2, policy_loss="clip", rollout_is_level="token", rollout_is_threshold=2.0,
)
ON_POLICY, STALE, TIS = "on-policy (k = 0)", "k = 8, no correction", "k = 8, TIS"

EXPERIMENT = Experiment(
    name="rollout_staleness",
    title="Stale rollouts, with and without TIS",
    claim="Sampling with the policy of 8 steps ago trains on the wrong distribution and learns more slowly than "
          "on-policy; multiplying the policy loss by the truncated weight min(π_old/μ, 2) recovers part of it.",
    source="Yao et al. 2025 (Your Efficient RL Framework Secretly Brings You Off-Policy RL Training: TIS); "
           "verl rollout_correction, TRL vllm_importance_sampling_correction",
    arms=(
        Arm(ON_POLICY, "grpo", {**SHARED, "rollout_staleness": 0, "rollout_is_mode": "none"}),
        Arm(STALE, "grpo", {**SHARED, "rollout_staleness": 8, "rollout_is_mode": "none"}),
        Arm(TIS, "grpo", {**SHARED, "rollout_staleness": 8, "rollout_is_mode": "truncate"}),
    ),
    knobs=("rollout_staleness", "rollout_is_mode"),
    task="caesar",
    steps=100,
    metric="batch success averaged over training, k = 8 with TIS minus k = 8 without correction",
    effect=lambda runs: mean_over_steps(runs[TIS], "success_rate") - mean_over_steps(runs[STALE], "success_rate"),
    expected="positive",
    run_fields={"sft_steps": 200},
    pages=("beyond_grpo",),
    charts=("success_rate", "rollout_mismatch_kl", "rollout_is_capped_frac"),
)
