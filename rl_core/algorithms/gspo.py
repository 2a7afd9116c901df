from rl_core.algorithms.grpo import PRESET as GRPO

PRESET = GRPO.replace(
    name="gspo",
    title="GSPO",
    summary="Sequence-level ratio (length-normalised geometric mean of token ratios) clipped at 1−3e-4 / 1+4e-4.",
    beta=0.0,
    policy_loss="gspo",
    epsilon=3e-4,
    epsilon_high=4e-4,
)
