from rl_core.algorithms.grpo import PRESET as GRPO

PRESET = GRPO.replace(
    name="dr_grpo",
    title="Dr. GRPO",
    summary="GRPO without the std division and with a constant normaliser (seq-mean-token-sum-norm): no length bias.",
    advantage_estimator="dr_grpo",
    loss_agg_mode="seq-mean-token-sum-norm",
)
