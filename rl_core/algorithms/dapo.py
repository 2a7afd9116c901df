from rl_core.config import AlgoConfig

PRESET = AlgoConfig(
    name="dapo",
    title="DAPO",
    summary="GRPO with clip-higher (0.2/0.28), token-level loss, dynamic sampling, soft overlong punishment, no KL.",
    prompts_per_step=8,
    num_generations=8,
    advantage_estimator="grpo",
    beta=0.0,
    kl_estimator="k3",
    kl_in="loss",
    policy_loss="clip",
    epsilon=0.2,
    epsilon_high=0.28,
    loss_agg_mode="token-mean",
    ppo_epochs=2,
    num_minibatches=2,
    dynamic_sampling=True,
    overlong_buffer=4,
)
