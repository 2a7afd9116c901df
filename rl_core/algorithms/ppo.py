from rl_core.config import AlgoConfig

PRESET = AlgoConfig(
    name="ppo",
    title="PPO",
    summary="Actor-critic: GAE advantages (λ=0.95), k1 KL folded into per-token rewards, token-level clip ε=0.2.",
    prompts_per_step=64,
    num_generations=1,
    advantage_estimator="gae",
    gamma=1.0,
    lam=0.95,
    whiten_advantages=True,
    beta=0.05,
    kl_estimator="k1",
    kl_in="reward",
    policy_loss="clip",
    epsilon=0.2,
    epsilon_high=0.2,
    loss_agg_mode="token-mean",
    ppo_epochs=4,
    num_minibatches=4,
    # 16 Adam updates per batch (GRPO makes 4): each moves every parameter by about the learning rate whatever the
    # gradient's size, so at GRPO's 1e-3 one batch moved the policy up to 18 nats of approx KL on the default task.
    # A quarter of the rate gives GRPO's movement per batch; ε = 1e-5 as OpenAI Baselines' PPO, so that
    # noise-sized gradients of a solved policy are not blown up to full steps.
    learning_rate=2.5e-4,
    adam_epsilon=1e-5,
    use_critic=True,
    cliprange_value=0.2,
)
