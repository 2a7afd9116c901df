from rl_core.config import AlgoConfig

PRESET = AlgoConfig(
    name="pg",
    title="Policy Gradient (REINFORCE)",
    summary="Reward-to-go minus a batch-mean baseline, vanilla −A·log π loss, one on-policy update per batch.",
    prompts_per_step=64,
    num_generations=1,
    advantage_estimator="reward_to_go",
    use_baseline=True,
    gamma=1.0,
    beta=0.0,
    kl_estimator="k1",
    kl_in="reward",
    policy_loss="vanilla",
    loss_agg_mode="seq-mean-token-mean",
    ppo_epochs=1,
    num_minibatches=1,
)
