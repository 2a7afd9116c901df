from rl_core.config import AlgoConfig

PRESET = AlgoConfig(
    name="gspo",
    title="GSPO",
    summary="Sequence-level ratio (length-normalised geometric mean of token ratios) clipped at 1−3e-4 / 1+4e-4.",
    prompts_per_step=8,
    num_generations=8,
    advantage_estimator="grpo",
    beta=0.0,
    kl_estimator="k3",
    kl_in="loss",
    policy_loss="gspo",
    epsilon=3e-4,
    epsilon_high=4e-4,
    loss_agg_mode="seq-mean-token-mean",
    ppo_epochs=2,
    num_minibatches=2,
)
