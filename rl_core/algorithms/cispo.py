from rl_core.algorithms.grpo import PRESET as GRPO

# CISPO keeps GRPO's group advantages and replaces the clipped surrogate by a clipped, detached IS weight.
# Every token keeps its gradient, with a weight up to 5: at GRPO's learning rate of 1e-3 its later updates on a
# batch overshoot (on the default task one seed fell back to 50 % batch success after converging), so CISPO takes
# half that rate.
PRESET = GRPO.replace(
    name="cispo",
    title="CISPO",
    summary=(
        "REINFORCE with a clipped, detached IS weight sg[min(ρ, 5)]: every token keeps its gradient; no KL, token-mean."
    ),
    policy_loss="cispo",
    epsilon_high=5.0,
    beta=0.0,
    loss_agg_mode="token-mean",
    learning_rate=5e-4,
)
