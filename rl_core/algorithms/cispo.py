from rl_core.algorithms.grpo import PRESET as GRPO

# CISPO keeps GRPO's group advantages and replaces the clipped surrogate by a clipped, detached IS weight.
PRESET = GRPO.replace(
    name="cispo",
    title="CISPO",
    summary="REINFORCE with a clipped, detached IS weight sg[min(ρ, 5)]: every token keeps its gradient; no KL, token-mean.",
    policy_loss="cispo",
    epsilon_high=5.0,
    beta=0.0,
    loss_agg_mode="token-mean",
)
