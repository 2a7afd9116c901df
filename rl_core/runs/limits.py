"""What a run started from the app may ask of the server: limits the instructor sets in the server's environment,
which no link, slider or Compare box can lift, and the estimate of a run's seconds they are checked against.

| variable | default | what it bounds |
| --- | --- | --- |
| RLHF_LAB_MAX_STEPS | 2000 | RL steps of one run |
| RLHF_LAB_MAX_SFT_STEPS | 2000 | SFT warm-start steps of one run |
| RLHF_LAB_MAX_RUN_SECONDS | 1200 | a run's estimated seconds (`estimated_seconds`) |
| RLHF_LAB_MAX_STEP_SECONDS | 30 | one step's estimated seconds (`estimated_step_seconds`) |
| RLHF_LAB_MAX_QUEUED_RUNS | 60 | runs one experiment or Compare sweep may queue |
| RLHF_LAB_LEARNER_SECONDS_PER_HOUR | 3600 | training seconds one learner's runs may use in any hour |
| RLHF_LAB_MAX_LEARNER_LIVE_RUNS | 2 | one learner's live-lab runs training at once |
| RLHF_LAB_MAX_LEARNER_QUEUED_RUNS | 2 | one learner's live-lab runs waiting for a place |
| RLHF_LAB_NEW_LEARNERS_PER_ADDRESS | 100 | new learners (identities) issued to one client address in any hour |

The gpt2 shape (124M parameters) needs a GPU: on a CPU a step takes seconds, so without CUDA it is refused
whatever the link says.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from rl_core.config import EVALUATION_PROMPTS, DPOConfig, RunConfig

# CPU seconds of one RL step, one thread, the tiny model on caesar (8-token answers), fitted by least squares to the
# steps of twelve GRPO shapes (64 to 1,024 responses, 1 to 32 epochs, 1 to 128 updates) at load 11 on the 2-core
# reference machine (`python bench/step_cost.py --rounds 3`; bench/README.md): a response costs SAMPLE_SECONDS to
# sample and score and UPDATE_SECONDS per epoch of updates, and each optimiser update (ppo_epochs × num_minibatches
# of them) MINIBATCH_SECONDS whatever its size (its passes' dispatch, AdamW over every weight). The fit is within
# 0.88-1.21 of eleven shapes (default GRPO 0.131 s measured, 0.135 s fitted; 1,024 responses × 8 epochs × 4
# minibatches 3.48 s, 3.40 s); one minibatch of 256 responses × 8 epochs took 0.63 of its fit.
SAMPLE_SECONDS = 4.07e-4
UPDATE_SECONDS = 2.95e-4
MINIBATCH_SECONDS = 1.77e-2
# The evaluation after the last step (`Trainer.evaluate`: EVALUATION_PROMPTS prompts, one greedy sample each, no
# update) per prompt: 0.058 CPU-s for 256 in the same measurement.
EVALUATION_SECONDS = 2.28e-4
HOUR = 3600.0  # the window of a learner's allowance (RLHF_LAB_LEARNER_SECONDS_PER_HOUR)
REFERENCE_TOKENS = 8  # the answer length those figures were measured at; time grows about linearly with it
MODEL_FACTOR = {"tiny": 1.0, "small": 6.6, "gpt2": 150.0}  # the same steps' time on small (84 s) and gpt2 (10.3 s)
GPT2_PARAMETERS = 124e6  # a loaded model (rl_core.engine.pretrained) scales gpt2's factor by its parameters
# A critic adds its own forward and backward passes: PPO's steps took 1.25-1.63 times the fit's seconds of the same
# shape without one (the median, 1.58, in the same measurement).
CRITIC_FACTOR = 1.58
# CPU seconds of one SFT warm-start step of the tiny model on caesar, its success check after it included: 200
# steps took 4.6 CPU-s (50 steps 1.3) on one thread of the reference CPU (rl_core.engine.sft.sft_policy).
SFT_STEP_SECONDS = 0.023
# An offline DPO step (rl_core.engine.preference_optimisation.DPOTrainer) samples `n_eval_prompts` responses and passes
# responses teacher-forced: every `eval_steps` the held-out pairs' two through the policy (the reference's are
# computed once), and the minibatch's two through both models. A sampled response and one response's share of
# such a pass each cost about DPO_RESPONSE_SECONDS (tiny model on `preference`, one thread: 1.2e-3 s and 1.2e-3 s
# on the loaded CPU, at its 12-token answers).
DPO_RESPONSE_SECONDS = 7.1e-4


def _scale(run: RunConfig) -> float:
    """How much longer a response of `run` takes than one of the measured runs: `tokens / REFERENCE_TOKENS`
    (at least 1) × the model's factor."""
    from toy_tasks import TASKS  # imported late, as RunConfig.validate does: the tasks load torch

    # An unknown task is refused later, by the trainer, with its own message.
    own = None if isinstance(run.algo, DPOConfig) else run.algo.max_new_tokens  # DPO samples at the task's limit
    tokens = own or getattr(TASKS.get(run.task), "max_new_tokens", REFERENCE_TOKENS)
    return max(tokens / REFERENCE_TOKENS, 1.0) * model_factor(run.model)


def model_factor(model: str) -> float:
    """A preset's measured factor; for a loaded model gpt2's × its parameters / 124 M (at least tiny's 1)."""
    if model in MODEL_FACTOR:
        return MODEL_FACTOR[model]
    from rl_core.engine.pretrained import parameter_count

    return max(MODEL_FACTOR["gpt2"] * parameter_count(model) / GPT2_PARAMETERS, MODEL_FACTOR["tiny"])


def estimated_step_seconds(run: RunConfig) -> float:
    """Seconds one RL step of `run` takes on a CPU like the one it was measured on:
    `(responses × (SAMPLE_SECONDS + UPDATE_SECONDS · ppo_epochs) + ppo_epochs · num_minibatches · MINIBATCH_SECONDS)
    × scale × critic`, where responses = prompts_per_step × num_generations (× every resampling round dynamic
    sampling may take). A DPO step: `(n_eval_prompts + responses passed) × DPO_RESPONSE_SECONDS × scale`."""
    algo = run.algo
    if isinstance(algo, DPOConfig):
        from toy_tasks import TASKS

        held_out = round(algo.holdout_fraction * TASKS[run.task].n_pairs)
        forced = 2 * held_out / algo.eval_steps + 4 * algo.per_device_train_batch_size
        return (algo.n_eval_prompts + forced) * DPO_RESPONSE_SECONDS * _scale(run)
    responses = algo.prompts_per_step * algo.num_generations
    if algo.dynamic_sampling:
        responses *= 1 + algo.max_resample_rounds
    critic = CRITIC_FACTOR if algo.use_critic else 1.0
    updates = algo.ppo_epochs * algo.num_minibatches
    seconds = responses * (SAMPLE_SECONDS + UPDATE_SECONDS * algo.ppo_epochs) + updates * MINIBATCH_SECONDS
    return seconds * _scale(run) * critic


def estimated_evaluation_seconds(run: RunConfig) -> float:
    """Seconds of the evaluation after the last step: `EVALUATION_PROMPTS × EVALUATION_SECONDS × scale`."""
    return EVALUATION_PROMPTS * EVALUATION_SECONDS * _scale(run)


def estimated_seconds(run: RunConfig) -> float:
    """Seconds the whole run takes: its steps, then the evaluation; the SFT warm start is cached and not
    counted."""
    return run.steps * estimated_step_seconds(run) + estimated_evaluation_seconds(run)


def estimated_warm_start_seconds(builds: list[tuple[str, int]]) -> float:
    """Seconds the SFT warm starts `builds` (model, SFT steps) still to train take: Σ steps × SFT_STEP_SECONDS ×
    the model's factor."""
    return sum(steps * SFT_STEP_SECONDS * model_factor(model) for model, steps in builds)


def contention(load: float, cores: int, workers: int) -> float:
    """How many times longer CPU-bound work of `workers` processes takes on a machine whose load average is
    `load` on `cores` cores than on an idle one: each of the `load + workers` runnable processes gets
    `cores / (load + workers)` of a core, at most one, so the time grows by `max(1, (load + workers) / cores)`."""
    return max(1.0, (load + workers) / cores)


def _cost_terms(run: RunConfig) -> str:
    """The knobs a step's estimate grows with, for a refusal to name."""
    algo = run.algo
    if isinstance(algo, DPOConfig):
        return (
            f"n_eval_prompts={algo.n_eval_prompts}, per_device_train_batch_size="
            f"{algo.per_device_train_batch_size} and model={run.model}"
        )
    return (
        f"prompts_per_step × num_generations = {algo.prompts_per_step * algo.num_generations} responses, "
        f"ppo_epochs={algo.ppo_epochs} and model={run.model}"
    )


@dataclass(frozen=True)
class ServerLimits:
    """The limits of the module docstring; `from_env` reads them."""

    max_steps: int = 2000
    max_sft_steps: int = 2000
    # Twenty minutes of one thread: the largest run a class bench asks (bench/class_load.py's heavy link, 40 steps of
    # 1,024 responses × 64 epochs × 4 minibatches, 24.3 s a step: 971 s) passes; PPO's preset at the 2,000 steps
    # a link may ask (0.61 s a step) does not.
    max_run_seconds: float = 1200.0
    # A step beyond a turn of the live loop steps in a lane of its own (rl_core.runs.run_loop), sharing its
    # learner's time there; beyond this it would leave a page without a point for longer than a learner waits.
    # The heavy link's step (24.3 s) passes; the same step of the small model (160 s) does not.
    max_step_seconds: float = 30.0
    max_queued_runs: int = 60
    learner_seconds_per_hour: float = 3600.0
    # A learner compares two runs side by side; a third waits, and two more may queue behind it.
    max_learner_live_runs: int = 2
    max_learner_queued_runs: int = 2
    # A class behind one NAT address is one client address: thirty learners, each in two browsers, with room.
    new_learners_per_address: int = 100

    @classmethod
    def from_env(cls, environ=os.environ) -> ServerLimits:
        """The limits from RLHF_LAB_<FIELD> variables; a value that is not a positive number is refused by name."""
        values = {}
        for field in fields(cls):
            variable = f"RLHF_LAB_{field.name.upper()}"
            text = environ.get(variable)
            if text is None:
                continue
            try:
                value = int(text) if field.type == "int" else float(text)
            except ValueError:
                value = 0
            if not 0 < value < float("inf"):
                raise ValueError(
                    f"{variable}={text[:20]!r} is out of range; allowed: a positive "
                    f"{'integer' if field.type == 'int' else 'number'}"
                )
            values[field.name] = value
        return cls(**values)

    def as_table(self) -> list[tuple[str, str, str]]:
        """(variable, value, what it bounds) for the page that describes the server."""
        return [
            ("RLHF_LAB_MAX_STEPS", f"{self.max_steps:,}", "RL steps of one run"),
            ("RLHF_LAB_MAX_SFT_STEPS", f"{self.max_sft_steps:,}", "SFT steps of one run"),
            ("RLHF_LAB_MAX_RUN_SECONDS", f"{self.max_run_seconds:,.0f} s", "a run's estimated duration"),
            ("RLHF_LAB_MAX_STEP_SECONDS", f"{self.max_step_seconds:,.0f} s", "one step's estimated duration"),
            ("RLHF_LAB_MAX_QUEUED_RUNS", f"{self.max_queued_runs:,}", "runs of one experiment or comparison"),
            (
                "RLHF_LAB_LEARNER_SECONDS_PER_HOUR",
                f"{self.learner_seconds_per_hour:,.0f} s",
                "training time of one learner in any hour",
            ),
            (
                "RLHF_LAB_MAX_LEARNER_LIVE_RUNS",
                f"{self.max_learner_live_runs:,}",
                "live-lab runs of one learner training at once",
            ),
            (
                "RLHF_LAB_MAX_LEARNER_QUEUED_RUNS",
                f"{self.max_learner_queued_runs:,}",
                "live-lab runs of one learner waiting for a place",
            ),
            (
                "RLHF_LAB_NEW_LEARNERS_PER_ADDRESS",
                f"{self.new_learners_per_address:,}",
                "new learners from one client address in any hour",
            ),
        ]

    def check_fields(self, cuda: bool, steps: int = 1, sft_steps: int = 0, model: str = "tiny") -> None:
        """ValueError naming the field and the variable that sets its limit, for a run's fields one by one (a
        link's values are checked as they are read)."""
        if steps > self.max_steps:
            raise ValueError(
                f"steps={steps} is out of range; allowed: at most {self.max_steps} on this server (RLHF_LAB_MAX_STEPS)"
            )
        if sft_steps > self.max_sft_steps:
            raise ValueError(
                f"sft_steps={sft_steps} is out of range; allowed: at most {self.max_sft_steps} on "
                "this server (RLHF_LAB_MAX_SFT_STEPS)"
            )
        if model == "gpt2" and not cuda:
            raise ValueError(
                "model='gpt2' needs a GPU, and this server has none (a step would take seconds); allowed: tiny, small"
            )

    def check_run(self, run: RunConfig, cuda: bool) -> None:
        """ValueError naming the field (and the variable that sets the limit) if `run` asks more than allowed."""
        self.check_fields(cuda, run.steps, run.sft_steps, run.model)
        step = estimated_step_seconds(run)
        if step > self.max_step_seconds:
            raise ValueError(
                f"one step of this run would take about {step:,.1f} s ({_cost_terms(run)}); allowed: at most "
                f"{self.max_step_seconds:,.0f} s a step on this server (RLHF_LAB_MAX_STEP_SECONDS)"
            )
        seconds = estimated_seconds(run)
        if seconds > self.max_run_seconds:
            raise ValueError(
                f"this run would take about {seconds:,.0f} s ({run.steps} steps × {seconds / run.steps:.2f} s, "
                f"from {_cost_terms(run)}); allowed: at most {self.max_run_seconds:,.0f} s a run on this server "
                "(RLHF_LAB_MAX_RUN_SECONDS)"
            )

    def check_run_count(self, runs: int) -> None:
        if runs > self.max_queued_runs:
            raise ValueError(
                f"this would queue {runs} runs; allowed: at most {self.max_queued_runs} at once on this "
                "server (RLHF_LAB_MAX_QUEUED_RUNS): fewer seeds or grid values"
            )

    def check_learner_runs(self, live: int, queued: int) -> None:
        """ValueError once a learner has as many live-lab runs training and waiting as they may: another would
        wait behind them (or take a place of the class's)."""
        if live + queued >= self.max_learner_live_runs + self.max_learner_queued_runs:
            raise ValueError(
                f"you have {live} runs training and {queued} waiting; allowed: at most {self.max_learner_live_runs} "
                f"training and {self.max_learner_queued_runs} waiting per learner on this server "
                "(RLHF_LAB_MAX_LEARNER_LIVE_RUNS, RLHF_LAB_MAX_LEARNER_QUEUED_RUNS): stop one or let it end"
            )

    def new_learner_refusal(self) -> str:
        """What a session is told when its client address has had its new learners for the hour."""
        return (
            f"this address has started {self.new_learners_per_address:,} new learners in the last hour; allowed: "
            f"at most {self.new_learners_per_address:,} an hour per address on this server "
            "(RLHF_LAB_NEW_LEARNERS_PER_ADDRESS): open the lab in the browser you used before, or with your "
            "own ?me= link, to train; the pages stay open to read"
        )

    def check_learner(self, spent_seconds: float) -> None:
        """ValueError once a learner's runs trained for the hour's allowance."""
        if spent_seconds >= self.learner_seconds_per_hour:
            raise ValueError(
                f"your runs have trained {spent_seconds:,.0f} s in the last hour; allowed: "
                f"{self.learner_seconds_per_hour:,.0f} s an hour per learner on this server "
                "(RLHF_LAB_LEARNER_SECONDS_PER_HOUR): try again in a few minutes"
            )
