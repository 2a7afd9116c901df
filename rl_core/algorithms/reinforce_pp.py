from rl_core.config import AlgoConfig

PRESET = AlgoConfig(
    name="reinforce_pp",
    title="REINFORCE++",
    summary="Per-token k1 KL in the reward, return-to-go (γ=1), global whitening over the batch; no groups needed.",
    prompts_per_step=64,
    num_generations=1,
    advantage_estimator="reinforce_pp",
    gamma=1.0,
    beta=0.01,
    kl_estimator="k1",
    kl_in="reward",
    policy_loss="clip",
    epsilon=0.2,
    epsilon_high=0.2,
    loss_agg_mode="token-mean",
    ppo_epochs=2,
    num_minibatches=2,
)
