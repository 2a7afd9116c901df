"""The adaptive KL coefficient of PPO-penalty."""

from __future__ import annotations


def adaptive_beta(beta: float, measured_kl: float, target_kl: float) -> float:
    """After an update: `β ← 2β` if `KL > 1.5·KL_target`, `β ← β/2` if `KL < KL_target/1.5`, else β unchanged."""
    if target_kl <= 0:
        raise ValueError(f"target_kl must be > 0; got {target_kl}")
    if measured_kl > 1.5 * target_kl:
        return 2 * beta
    if measured_kl < target_kl / 1.5:
        return beta / 2
    return beta
