"""VC-PPO's value-initialisation bias: a critic copied from the reward model has only ever scored finished
responses, so it tends to value unfinished ones low; then the δ_t are mostly positive, and with λ = 0.95 the first
tokens' advantages sum those of the whole response while the last token's is its own alone: the first tokens get
the larger advantages. Value pretraining with λ_critic = 1 removes the bias.

β = 0.3 in both arms keeps the policy where the `preference` task's reward model is right, so reward hacking
(its own experiment) does not mask the critic's bias.

The effect is read on the first step, from the advantages of the critic as initialised, before its first update;
the 10 steps show the gap close as the critic learns. Windows of the first 20, then 10, then 5 steps were shown on
seeds 0–7 and weak on held-out seeds 300–307 (5 of 8 each): once the critics train, their early advantages move
by more than the initial bias on some seeds. The first step alone reads the initialisation the claim is about; it
was chosen after those windows had failed on 300–307 (and 400–407 had been run), so it was checked on two sets of
seeds run for the first time with it, 500–507 and 600–607 (the claim gives every set's numbers)."""

from rl_core.experiments import Arm, Experiment

SHARED = dict(
    prompts_per_step=64,
    num_generations=1,
    temperature=1.0,
    advantage_estimator="gae",
    lam=0.95,
    whiten_advantages=False,
    beta=0.3,
    kl_estimator="k1",
    kl_in="reward",
    policy_loss="clip",
    epsilon=0.2,
    epsilon_high=0.2,
    loss_agg_mode="token-mean",
    learning_rate=1e-3,
    ppo_epochs=2,
    num_minibatches=2,
    use_critic=True,
    critic_learning_rate=3e-3,
)
FROM_RM = "critic from the reward model, λ 0.95"
PRETRAINED = "value-pretrained critic, λ_critic 1"


def first_minus_last(records) -> float:
    """On the first step, before the critic's first update: the first token's mean advantage minus the last
    token's."""
    return records[0]["advantage_first_token"] - records[0]["advantage_last_token"]


EXPERIMENT = Experiment(
    name="critic_from_rm",
    title="A critic initialised from the reward model favours early tokens",
    plain="A critic copied from the reward model gives the first tokens of an answer much more credit than the "
    "last; training the critic first on the returns removes that tilt.",
    claim="A critic initialised from the reward model gives the first tokens of a response larger advantages than "
    "the last with λ = 0.95; value pretraining with λ_critic = 1 removes the bias. First-token minus "
    "last-token advantage on the first step, from-RM minus pretrained: seeds 0–7, 8 of 8, +1.92 [+1.38, "
    "+2.45]; held-out 500–507, 7 of 8, +1.48 [+0.63, +2.33]; held-out 600–607, 8 of 8, +2.16 [+1.53, "
    "+2.80]; and on 300–307 and 400–407, run before this measure was chosen, 7 of 8, +1.26 [+0.52, +2.00] "
    "and 8 of 8, +1.18 [+0.45, +1.91].",
    source="VC-PPO (Yuan et al. 2025), value initialisation bias; VAPO (Yue et al. 2025)",
    arms=(
        Arm(FROM_RM, "ppo", {**SHARED, "critic_init": "reward_model", "value_pretrain_steps": 0, "lam_critic": None}),
        Arm(PRETRAINED, "ppo", {**SHARED, "critic_init": "policy", "value_pretrain_steps": 20, "lam_critic": 1.0}),
    ),
    knobs=("critic_init", "value_pretrain_steps", "lam_critic"),
    task="preference",
    steps=10,
    metric="first-token minus last-token advantage on the first step, from-RM minus pretrained",
    effect=lambda runs: first_minus_last(runs[FROM_RM]) - first_minus_last(runs[PRETRAINED]),
    expected="positive",
    run_fields={"sft_steps": 200},
    pages=("vapo", "ppo"),
    charts=("advantage_first_token", "advantage_last_token", "response_length", "explained_variance"),
)
