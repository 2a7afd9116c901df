from rl_core.algorithms.grpo import PRESET as GRPO

# DPPO changes only the trust region: GRPO's advantages, KL and aggregation stay.
PRESET = GRPO.replace(
    name="dppo",
    title="DPPO (Binary-TV)",
    summary=(
        "Trust region in probability, not ratio: a token is masked "
        "once p − p_old leaves ±0.15; rare tokens keep learning."
    ),
    policy_loss="dppo_tv",
    dppo_delta_low=0.15,
    dppo_delta_high=0.15,
    dppo_ratio_cap=20.0,
)
