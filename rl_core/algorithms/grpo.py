from rl_core.config import AlgoConfig

PRESET = AlgoConfig(
    name="grpo",
    title="GRPO",
    summary="No critic: each response's advantage is its reward standardised within its group of G; k3 KL in the loss.",
    prompts_per_step=8,
    num_generations=8,
    advantage_estimator="grpo",
    beta=0.04,
    kl_estimator="k3",
    kl_in="loss",
    policy_loss="clip",
    epsilon=0.2,
    epsilon_high=0.2,
    loss_agg_mode="seq-mean-token-mean",
    ppo_epochs=2,
    num_minibatches=2,
)
