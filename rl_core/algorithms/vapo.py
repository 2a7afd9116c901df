from rl_core.algorithms.ppo import PRESET as PPO

PRESET = PPO.replace(
    name="vapo",
    title="VAPO / VC-PPO",
    summary=(
        "PPO with value pretraining, decoupled (λ_critic=1) and length-adaptive GAE, clip-higher, positive-sample NLL."
    ),
    prompts_per_step=8,
    num_generations=8,
    whiten_advantages=False,
    lam_critic=1.0,
    length_adaptive_alpha=0.5,
    beta=0.0,
    epsilon_high=0.28,
    ppo_epochs=2,
    num_minibatches=2,
    value_pretrain_steps=20,
    positive_nll_coef=0.1,
)
