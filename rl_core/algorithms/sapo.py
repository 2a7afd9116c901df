from rl_core.algorithms.grpo import PRESET as GRPO

PRESET = GRPO.replace(
    name="sapo",
    title="SAPO",
    summary=(
        "A soft gate (4/τ)·σ(τ(ρ−1)) instead of the hard clip: the gradient decays smoothly off-policy; τ 1.0 / 1.05."
    ),
    policy_loss="sapo",
    sapo_tau_pos=1.0,
    sapo_tau_neg=1.05,
    beta=0.0,
)
