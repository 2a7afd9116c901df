from rl_core.config import AlgoConfig

PRESET = AlgoConfig(
    name="dr_grpo",
    title="Dr. GRPO",
    summary="GRPO without the std division and with a constant normaliser (seq-mean-token-sum-norm): no length bias.",
    prompts_per_step=8,
    num_generations=8,
    advantage_estimator="dr_grpo",
    beta=0.04,
    kl_estimator="k3",
    kl_in="loss",
    policy_loss="clip",
    epsilon=0.2,
    epsilon_high=0.2,
    loss_agg_mode="seq-mean-token-sum-norm",
    ppo_epochs=2,
    num_minibatches=2,
)
