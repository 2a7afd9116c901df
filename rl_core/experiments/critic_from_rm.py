"""VC-PPO's value-initialisation bias: a critic copied from the reward model has only ever scored finished
responses, so it values early states low; with λ = 0.95 every early δ_t is positive and the first tokens get the
larger advantages. Value pretraining with λ_critic = 1 removes the bias.

β = 0.3 in both arms keeps the policy where the `preference` task's reward model is right, so reward hacking
(its own experiment) does not mask the critic's bias.

The effect is read over the first 20 steps, while the critic still carries its initialisation, and the run ends
there. Designed on seeds 0–7 (8 of 8 positive, 95 % interval [+0.17, +0.33]) and shown on the held-out seeds
100–107 (8 of 8, [+0.17, +0.33]); a second held-out set, 300–307, gave −0.01, +0.06, +0.20, +0.24, +0.28, −0.11,
−0.09, +0.08 (5 of 8, weak): on some seeds the reward-model critic's early values do not favour the first tokens,
and the claim says so. A 10-step window was tried to save time and was weak on 300–307 too (5 of 8)."""

from rl_core.experiments import Arm, Experiment
from rl_core.experiments._measures import mean_over_steps

SHARED = dict(
    prompts_per_step=64, num_generations=1, temperature=1.0, advantage_estimator="gae", lam=0.95,
    whiten_advantages=False, beta=0.3, kl_estimator="k1", kl_in="reward", policy_loss="clip", epsilon=0.2,
    epsilon_high=0.2, loss_agg_mode="token-mean", learning_rate=1e-3, ppo_epochs=2, num_minibatches=2,
    use_critic=True, critic_learning_rate=3e-3,
)
FROM_RM = "critic from the reward model, λ 0.95"
PRETRAINED = "value-pretrained critic, λ_critic 1"
EARLY_STEPS = 20


def first_minus_last(records) -> float:
    """Over the first EARLY_STEPS steps: the first token's mean advantage minus the last token's."""
    early = records[:EARLY_STEPS]
    return mean_over_steps(early, "advantage_first_token") - mean_over_steps(early, "advantage_last_token")


EXPERIMENT = Experiment(
    name="critic_from_rm",
    title="A critic initialised from the reward model favours early tokens",
    claim="A critic initialised from the reward model gives the first tokens of a response larger advantages than "
          "the last with λ = 0.95; value pretraining with λ_critic = 1 removes the bias — on most seeds, not all: 8 "
          "of 8 on seeds 0–7 and on the held-out seeds 100–107, 5 of 8 on the held-out seeds 300–307 (mean effect "
          "+0.08, 95 % interval [−0.04, +0.21]).",
    source="VC-PPO (Yuan et al. 2025), value initialisation bias; VAPO (Yue et al. 2025); seed article 002",
    arms=(
        Arm(FROM_RM, "ppo", {**SHARED, "critic_init": "reward_model", "value_pretrain_steps": 0, "lam_critic": None}),
        Arm(PRETRAINED, "ppo", {**SHARED, "critic_init": "policy", "value_pretrain_steps": 20, "lam_critic": 1.0}),
    ),
    knobs=("critic_init", "value_pretrain_steps", "lam_critic"),
    task="preference",
    steps=EARLY_STEPS,
    metric=f"first-token minus last-token advantage over the first {EARLY_STEPS} steps, from-RM minus pretrained",
    effect=lambda runs: first_minus_last(runs[FROM_RM]) - first_minus_last(runs[PRETRAINED]),
    expected="positive",
    run_fields={"sft_steps": 200},
    pages=("vapo", "ppo"),
    charts=("advantage_first_token", "advantage_last_token", "response_length", "explained_variance"),
)
