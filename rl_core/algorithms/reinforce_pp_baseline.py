from rl_core.config import AlgoConfig

PRESET = AlgoConfig(
    name="reinforce_pp_baseline",
    title="REINFORCE++-baseline",
    summary="Group-mean baseline (R − mean of the group), then global whitening; k2 KL in the loss.",
    prompts_per_step=8,
    num_generations=8,
    advantage_estimator="reinforce_pp_baseline",
    beta=0.01,
    kl_estimator="k2",
    kl_in="loss",
    policy_loss="clip",
    epsilon=0.2,
    epsilon_high=0.2,
    loss_agg_mode="token-mean",
    ppo_epochs=2,
    num_minibatches=2,
)
