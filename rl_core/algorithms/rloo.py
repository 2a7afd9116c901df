from rl_core.config import AlgoConfig

PRESET = AlgoConfig(
    name="rloo",
    title="RLOO",
    summary="REINFORCE with a leave-one-out baseline; the whole response is one action; k1 KL summed into R.",
    prompts_per_step=16,
    num_generations=4,
    advantage_estimator="rloo",
    beta=0.05,
    kl_estimator="k1",
    kl_in="reward",
    reward_clip=None,
    policy_loss="vanilla",
    loss_agg_mode="seq-mean-token-sum",
    ppo_epochs=1,
    num_minibatches=1,
)
