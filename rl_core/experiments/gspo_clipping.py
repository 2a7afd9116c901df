"""GSPO clips whole responses, far more often than GRPO clips tokens, and still trains stably.

Both arms are measured on one axis, the share of tokens the clip silences, as the GSPO paper counts it (and verl's
pg_clipfrac): a token of a response whose sequence ratio GSPO clips is a clipped token."""

from rl_core.experiments import Arm, Experiment
from rl_core.experiments._measures import mean_difference

# Everything but the policy loss and its clip range is spelt out and the same in both arms (β = 0 in both, as in
# the GSPO paper, so the KL penalty of the GRPO preset is no confound).
SHARED = dict(
    prompts_per_step=8,
    num_generations=8,
    learning_rate=1e-3,
    ppo_epochs=2,
    num_minibatches=2,
    advantage_estimator="grpo",
    loss_agg_mode="seq-mean-token-mean",
    beta=0.0,
    temperature=1.0,
    dual_clip=None,
)

EXPERIMENT = Experiment(
    name="gspo_clipping",
    title="GSPO clips whole responses, and still learns",
    plain="GSPO switches off learning on far more tokens than GRPO, because it clips whole answers, and still "
    "learns as steadily.",
    claim="GSPO's clip silences a far larger share of tokens than GRPO's (it clips whole responses, on their "
    "sequence ratio against a range of 3e-4 / 4e-4), yet its success climbs as steadily as GRPO's.",
    source="GSPO (Zheng et al. 2025, Group Sequence Policy Optimization)",
    arms=(
        Arm("GRPO", "grpo", {**SHARED, "policy_loss": "clip", "epsilon": 0.2, "epsilon_high": 0.2}),
        Arm("GSPO", "gspo", {**SHARED, "policy_loss": "gspo", "epsilon": 3e-4, "epsilon_high": 4e-4}),
    ),
    knobs=("policy_loss", "epsilon", "epsilon_high"),
    task="caesar",
    steps=40,
    metric="share of tokens the clip silences, averaged over training, GSPO minus GRPO",
    effect=mean_difference("clip_frac_tokens", "GSPO", "GRPO"),
    expected="positive",
    run_fields={"sft_steps": 200},
    pages=("gspo",),
    charts=("clip_frac_tokens", "success_rate"),
)
