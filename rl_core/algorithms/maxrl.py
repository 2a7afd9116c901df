from rl_core.algorithms.grpo import PRESET as GRPO

PRESET = GRPO.replace(
    name="maxrl",
    title="MaxRL",
    summary="Advantage (R − mean_g)/mean_g: divide by the group's success rate, so rarely solved prompts weigh most.",
    advantage_estimator="maxrl",
)
