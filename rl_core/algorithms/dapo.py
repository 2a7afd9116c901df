from rl_core.algorithms.grpo import PRESET as GRPO

# DAPO is GRPO with four changes, so it is written as exactly those changes.
PRESET = GRPO.replace(
    name="dapo",
    title="DAPO",
    summary="GRPO with clip-higher (0.2/0.28), token-level loss, dynamic sampling, soft overlong punishment, no KL.",
    beta=0.0,
    epsilon_high=0.28,
    loss_agg_mode="token-mean",
    dynamic_sampling=True,
    overlong_punishment=True,  # L_cache = overlong_buffer_fraction (0.2) of the task's limit
)
