"""CISPO clips the weight, never the gradient: the tokens PPO's clip silences still move."""

from rl_core.experiments import Arm, Experiment
from rl_core.experiments._measures import mean_difference

# Same range in both arms: CISPO's two-sided weight clamp [1 − ε, 1 + ε_high] is PPO's clip range, so the arms
# differ only in what happens outside it (PPO: gradient 0; CISPO: gradient with the clamped weight). Two epochs of
# two minibatches, as in the presets: the later updates see ratios away from 1.
SHARED = dict(
    prompts_per_step=8,
    num_generations=8,
    learning_rate=1e-3,
    ppo_epochs=2,
    num_minibatches=2,
    advantage_estimator="grpo",
    loss_agg_mode="token-mean",
    beta=0.0,
    temperature=1.0,
    dual_clip=None,
    epsilon=0.2,
    epsilon_high=0.2,
    cispo_two_sided=True,
)

EXPERIMENT = Experiment(
    name="cispo_keeps_gradients",
    title="CISPO keeps a gradient on the tokens PPO clips",
    plain="PPO's clip stops learning on the tokens that have already moved far enough; CISPO only caps how much "
    "they count, so far fewer tokens stop learning.",
    claim="With the same range [0.8, 1.2], PPO's clip zeroes the gradient of the tokens whose ratio left it in the "
    "direction of their advantage, while CISPO only clamps their weight and keeps updating them.",
    source="MiniMax-M1 (MiniMax 2025), CISPO; TRL loss_type='cispo', verl's two-sided clamp",
    arms=(
        Arm("PPO clip", "grpo", {**SHARED, "policy_loss": "clip"}),
        Arm("CISPO", "grpo", {**SHARED, "policy_loss": "cispo"}),
    ),
    knobs=("policy_loss",),
    task="caesar",
    steps=40,
    metric="share of valid tokens with A ≠ 0 whose policy gradient is exactly 0, PPO's minus CISPO's",
    effect=mean_difference("silenced_frac", "PPO clip", "CISPO"),
    expected="positive",
    run_fields={"sft_steps": 200},
    pages=("beyond_grpo",),
    charts=("silenced_frac", "clip_frac", "success_rate"),
)
