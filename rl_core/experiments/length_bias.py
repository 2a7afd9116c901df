"""The length bias of per-response normalisation: seq-mean-token-mean divides each response's loss by its
length, so a long wrong answer's tokens are punished less than a short one's and long wrong answers survive."""

from rl_core.experiments import Arm, Experiment
from rl_core.experiments._measures import mean_over_steps

SHARED = dict(
    prompts_per_step=8, num_generations=8, temperature=1.0, advantage_estimator="grpo", beta=0.0,
    policy_loss="clip", epsilon=0.2, epsilon_high=0.2, learning_rate=1e-3, ppo_epochs=2, num_minibatches=2,
    dynamic_sampling=False, overlong_filter=False, overlong_buffer=None, entropy_coef=0.0,
)
SEQ_MEAN, TOKEN_MEAN, SUM_NORM = "seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"


def _effect(runs) -> float:
    """Mean length of wrong answers under seq-mean-token-mean minus the longer of the other two aggregations'."""
    wrong = {label: mean_over_steps(records, "response_length_incorrect") for label, records in runs.items()}
    return wrong[SEQ_MEAN] - max(wrong[TOKEN_MEAN], wrong[SUM_NORM])


EXPERIMENT = Experiment(
    name="length_bias",
    title="Per-response normalisation lets long wrong answers grow",
    claim="Under seq-mean-token-mean wrong answers grow longer than under token-mean or Dr. GRPO's constant "
          "normaliser (seq-mean-token-sum-norm), because each response's penalty is divided by its length.",
    source="DAPO (Yu et al. 2025), token-level loss; Dr. GRPO (Liu et al. 2025); seed article 001",
    arms=tuple(Arm(mode, "grpo", {**SHARED, "loss_agg_mode": mode}) for mode in (SEQ_MEAN, TOKEN_MEAN, SUM_NORM)),
    knobs=("loss_agg_mode",),
    task="digit_sum",
    steps=200,
    metric="mean length of wrong answers (tokens) over training, seq-mean-token-mean minus the longer of the others",
    effect=_effect,
    expected="positive",
    run_fields={"sft_steps": 500},
    pages=("grpo", "dr_grpo"),
    charts=("response_length_incorrect", "response_length_correct", "success_rate"),
)
