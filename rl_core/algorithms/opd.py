from rl_core.algorithms.grpo import PRESET as GRPO

# The teacher's per-token signal replaces the verifier's reward (Thinking Machines' recipe, verl's
# use_task_rewards=False): every token of every response carries its own advantage, so no group is needed for a
# baseline; G stays GRPO's so that both draw the same samples per step. β = 0: the teacher is the anchor.
PRESET = GRPO.replace(
    name="opd",
    title="On-policy distillation",
    summary="The student samples, a teacher scores every token: advantage sg[log π_T − log π_θ] per token, no "
    "verifier reward.",
    beta=0.0,
    teacher_model="tiny",
    use_task_rewards=False,
    use_policy_gradient=True,
    distillation_loss_mode="k1",
)
