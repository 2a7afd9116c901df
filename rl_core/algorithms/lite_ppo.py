from rl_core.algorithms.grpo import PRESET as GRPO

# Lite PPO ("Tricks or Traps?", 2025) is GRPO with two of its tricks changed: the std of the whole batch and a
# token-level loss.
PRESET = GRPO.replace(
    name="lite_ppo",
    title="Lite PPO",
    summary=(
        "GRPO with group-mean, batch-std advantage normalisation and token-mean aggregation: two tricks, no critic."
    ),
    adv_norm_mean="group",
    adv_norm_std="batch",
    loss_agg_mode="token-mean",
)
