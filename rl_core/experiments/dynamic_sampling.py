"""Dynamic sampling on a sparse task: dropping the groups whose rewards are all equal fills every batch with
groups that carry a gradient, so the policy learns more per sample drawn."""

from rl_core.experiments import Arm, Experiment
from rl_core.experiments._measures import mean_over_steps

PROMPTS, G = 8, 8
SHARED = dict(
    prompts_per_step=PROMPTS, num_generations=G, temperature=1.0, advantage_estimator="grpo", beta=0.0,
    policy_loss="clip", epsilon=0.2, epsilon_high=0.28, loss_agg_mode="token-mean", learning_rate=1e-3,
    ppo_epochs=2, num_minibatches=2, max_resample_rounds=3, overlong_filter=False, overlong_buffer=None,
    skip_no_signal_updates=True,
)
OFF, ON = "dynamic sampling off", "dynamic sampling on"


def samples_drawn(record: dict) -> int:
    """Responses sampled in the step: every resampling round draws a full batch."""
    return int(record.get("dynamic_sampling_rounds", 1)) * PROMPTS * G


def success_at_samples(records, budget: int) -> float:
    """Mean batch success over the steps taken while the samples drawn so far lie in (budget/2, budget]."""
    drawn, window = 0, []
    for record in records:
        drawn += samples_drawn(record)
        if drawn > budget:
            break
        if drawn > budget / 2:
            window.append(record)
    return mean_over_steps(window, "success_rate")


def _effect(runs) -> float:
    budget = min(sum(samples_drawn(r) for r in runs[label]) for label in (OFF, ON))
    return success_at_samples(runs[ON], budget) - success_at_samples(runs[OFF], budget)


EXPERIMENT = Experiment(
    name="dynamic_sampling",
    title="Dynamic sampling on a sparse task",
    claim="On a task where most groups start all wrong, dynamic sampling removes the zero-advantage groups and "
          "reaches a higher success for the same number of samples drawn — on most seeds: 8 of 8 on seeds 0–7, 7 of "
          "8 on the held-out 100–107, 6 of 8 on the held-out 300–307 (mean +0.057, 95 % interval [−0.016, "
          "+0.130]).",
    source="DAPO (Yu et al. 2025), dynamic sampling",
    arms=(
        Arm(OFF, "dapo", {**SHARED, "dynamic_sampling": False}),
        Arm(ON, "dapo", {**SHARED, "dynamic_sampling": True}),
    ),
    knobs=("dynamic_sampling",),
    task="digit_sum",
    # 150 steps: the effect takes that long. At 100 steps it was 7 of 8 on seeds 0–7, at 60 or fewer at most 5 of 8;
    # a 60-step design at twice the learning rate (2e-3) was weak on seeds 0–7 too (5 of 8, [−0.03, +0.05]).
    steps=150,
    metric="batch success over the second half of an equal sample budget, on minus off",
    effect=_effect,
    expected="positive",
    run_fields={"sft_steps": 500, "demo_noise": 0.8},
    pages=("grpo",),
    charts=("success_rate", "zero_adv_group_frac", "dynamic_sampling_rounds"),
)
