"""The constants of a step's and an evaluation's estimate (`rl_core.runs.limits`), fitted to CPU seconds measured here.

One CPU thread, the tiny model on caesar (8-token answers), one run at a time (`Trainer.step`, a group of one, as
a run alone in the live loop steps). For each shape (responses = prompts_per_step × num_generations, ppo_epochs,
num_minibatches) of GRPO a run is prepared and stepped once untimed (its first step's one-off costs); then, round
after round (`--rounds`), every run steps once, each step timed with the thread's CPU clock: a shape's seconds are
its steps' median. A least-squares fit of

    step = responses · SAMPLE_SECONDS + responses · ppo_epochs · UPDATE_SECONDS + ppo_epochs · num_minibatches ·
           MINIBATCH_SECONDS

(per response sampled and scored, per response per epoch of updates, per optimiser update whatever its size) is
printed with each shape's measured seconds, the fit's and their ratio. Then the same for PPO's shapes (a critic) at
the fitted constants: the median ratio is CRITIC_FACTOR. Then the evaluation after the last step
(`Trainer.evaluate`: EVALUATION_PROMPTS prompts sampled greedily, no update) of the default run, once a round:
its median ÷ EVALUATION_PROMPTS is EVALUATION_SECONDS. The load average before and after is printed; the clock is
the thread's CPU, so a busy machine lengthens the wall, not the numbers (other than through shared caches).

Run from the repository root:
    python bench/step_cost.py [--rounds 3] [--out step_cost.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from rl_core.algorithms import get_preset  # noqa: E402
from rl_core.config import EVALUATION_PROMPTS, RunConfig  # noqa: E402
from rl_core.engine.trainer import Trainer  # noqa: E402

TASK = "caesar"
# (prompts_per_step, num_generations, ppo_epochs, num_minibatches): responses from 16 to 1,024, epochs from 1 to 32,
# updates from 1 to 128, so that no term's column is a multiple of another's.
GRPO_SHAPES = [
    (8, 8, 2, 2),
    (16, 4, 1, 1),
    (4, 4, 4, 4),
    (4, 4, 16, 4),
    (8, 8, 8, 8),
    (32, 8, 2, 2),
    (32, 8, 8, 1),
    (32, 8, 8, 8),
    (64, 8, 1, 4),
    (128, 4, 4, 4),
    (256, 4, 8, 4),
    (64, 4, 32, 4),
]
PPO_SHAPES = [(64, 1, 4, 4), (32, 1, 2, 1), (128, 1, 8, 4)]


def trainer_of(algo: str, shape: tuple[int, int, int, int], rounds: int) -> Trainer:
    """A prepared run of `algo` with `shape`, stepped once (its first step's one-off costs)."""
    prompts, generations, epochs, minibatches = shape
    config = get_preset(
        algo, prompts_per_step=prompts, num_generations=generations, ppo_epochs=epochs, num_minibatches=minibatches
    )
    trainer = Trainer(RunConfig(algo=config, task=TASK, steps=rounds + 1, seed=0))
    trainer.prepare()
    trainer.step()
    return trainer


def thread_seconds(work) -> float:
    """Thread-CPU seconds of `work()`."""
    started = time.thread_time()
    work()
    return time.thread_time() - started


def columns(shape: tuple[int, int, int, int]) -> list[float]:
    """The fit's terms for `shape`: responses, responses × epochs, updates."""
    prompts, generations, epochs, minibatches = shape
    responses = prompts * generations
    return [responses, responses * epochs, epochs * minibatches]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed steps (and evaluations) of each run")
    parser.add_argument("--out", type=Path, help="write the measurements and the fit as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"tiny model on {TASK}, 1 thread, thread-CPU seconds; load average {os.getloadavg()[0]:.1f} before")
    shapes = [("grpo", shape) for shape in GRPO_SHAPES] + [("ppo", shape) for shape in PPO_SHAPES]
    trainers = [trainer_of(algo, shape, args.rounds) for algo, shape in shapes]
    evaluated = trainer_of("grpo", (8, 8, 2, 2), args.rounds)  # the default run
    # Round after round, every run one step: a change in the machine's load falls on all of them alike.
    steps: list[list[float]] = [[] for _ in shapes]
    evaluations = []
    for _ in range(args.rounds):
        for seconds, trainer in zip(steps, trainers, strict=True):
            seconds.append(thread_seconds(trainer.step))
        evaluations.append(thread_seconds(evaluated.evaluate))
    measured = [statistics.median(seconds) for seconds in steps]
    grpo = [seconds for (algo, _), seconds in zip(shapes, measured, strict=True) if algo == "grpo"]
    terms = np.array([columns(shape) for shape in GRPO_SHAPES], dtype=float)
    fit, *_ = np.linalg.lstsq(terms, np.array(grpo), rcond=None)
    sample, update, minibatch = fit.tolist()
    print(f"SAMPLE_SECONDS = {sample:.3e}, UPDATE_SECONDS = {update:.3e}, MINIBATCH_SECONDS = {minibatch:.3e}")
    print("(prompts, generations, ppo_epochs, num_minibatches): measured s, fitted s (no critic), measured ÷ fitted")
    rows, critic_ratios = [], []
    for (algo, shape), seconds in zip(shapes, measured, strict=True):
        fitted = float(np.dot(columns(shape), fit))
        if algo == "ppo":
            critic_ratios.append(seconds / fitted)
        rows.append({"algo": algo, "shape": shape, "seconds": seconds, "fitted": fitted})
        print(f"  {algo} {shape}: {seconds:.4f}, {fitted:.4f}, {seconds / fitted:.2f}")
    critic = statistics.median(critic_ratios)
    print(f"CRITIC_FACTOR = {critic:.2f} (the median of ppo's ratios)")
    evaluation = statistics.median(evaluations)
    per_prompt = evaluation / EVALUATION_PROMPTS
    print(f"evaluation: {evaluation:.4f} s for {EVALUATION_PROMPTS} prompts; EVALUATION_SECONDS = {per_prompt:.3e}")
    print(f"load average {os.getloadavg()[0]:.1f} after")
    if args.out:
        constants = {
            "SAMPLE_SECONDS": sample,
            "UPDATE_SECONDS": update,
            "MINIBATCH_SECONDS": minibatch,
            "CRITIC_FACTOR": critic,
            "EVALUATION_SECONDS": per_prompt,
        }
        args.out.write_text(json.dumps({"constants": constants, "rows": rows, "evaluation": evaluation}, indent=1))


if __name__ == "__main__":
    main()
