"""CPU per run of the evaluation after the last step (`Trainer.evaluate`: 256 fresh prompts, one sample each, scored
by the task), for a group of R runs trained together.

R runs of one preset (default `grpo` on the default task, the tiny model, one CPU thread) — warm starts of seeds
0–3 in turn, each run its own clip range ε = 0.2 + 0.001·r, as `bench/run_batch.py` — are prepared and stepped
`--steps` times as one group (untimed), so that their policies differ as a sweep's do at their end. Then, back to
back in this process, `--repeats` times each in turns (the median printed), with process-CPU clocks: every run's
evaluation one run after another by the single-run sampler over its own module (`rollout.sample`, transformers'
layers), one run after another as a group of one each (`Trainer.evaluate`), and all R as one program
(`run_batch.evaluate_together`, what a sweep's batch does at its end). Printed: process-CPU seconds per run of
each path, their ratios to the first, whether all three gave every run the same numbers, and the load average
before and after.

Run from the repository root:
    python bench/evaluation.py [--runs 8] [--algo grpo] [--task caesar] [--steps 2] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from rl_core.algorithms import get_preset  # noqa: E402
from rl_core.config import RunConfig  # noqa: E402
from rl_core.engine.evaluation import EVALUATION_PROMPTS, EVALUATION_SEED, scored  # noqa: E402
from rl_core.engine.rollout import sample  # noqa: E402
from rl_core.engine.run_batch import evaluate_together, step_together  # noqa: E402
from rl_core.engine.trainer import Trainer  # noqa: E402
from toy_tasks import DEFAULT_TASK  # noqa: E402


def prepared(algo: str, task: str, runs: int, steps: int) -> list[Trainer]:
    trainers = [
        Trainer(RunConfig(algo=get_preset(algo, epsilon=0.2 + 0.001 * r), task=task, steps=10**6, seed=r % 4))
        for r in range(runs)
    ]
    for trainer in trainers:
        trainer.prepare()
    for _ in range(steps):
        step_together(trainers)
    return trainers


def single_run_sampler(trainer: Trainer) -> dict:
    """A run's evaluation sampled by `rollout.sample` over its own module."""
    evaluation = trainer.evaluation()
    prompts = evaluation.task.sample_prompts(EVALUATION_PROMPTS, random.Random(EVALUATION_SEED))
    generator = torch.Generator().manual_seed(EVALUATION_SEED)
    rollout = sample(
        evaluation.policy, evaluation.tokenizer, prompts, evaluation.max_new_tokens, evaluation.temperature, generator
    )
    return scored(evaluation, rollout)


def timed(paths: dict, runs: int, repeats: int) -> dict[str, tuple[float, list[dict]]]:
    """Each path's median over `repeats` of its process-CPU seconds per run, and its results; the paths take turns
    within each repeat, so that a change in the machine's load falls on all of them alike."""
    seconds: dict[str, list[float]] = {name: [] for name in paths}
    results = {}
    for _ in range(repeats):
        for name, evaluate in paths.items():
            started = time.process_time()
            results[name] = evaluate()
            seconds[name].append((time.process_time() - started) / runs)
    return {name: (sorted(seconds[name])[repeats // 2], results[name]) for name in paths}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--algo", default="grpo")
    parser.add_argument("--task", default=DEFAULT_TASK)
    parser.add_argument("--steps", type=int, default=2, help="steps trained together before the evaluation")
    parser.add_argument("--repeats", type=int, default=1, help="timings of each path (the median is printed)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(
        f"{args.algo} on {args.task}, tiny model, 1 thread, R = {args.runs}; load average "
        f"{os.getloadavg()[0]:.1f} before",
        flush=True,
    )
    trainers = prepared(args.algo, args.task, args.runs, args.steps)
    paths = {
        "single-run sampler, one run after another": lambda: [single_run_sampler(t) for t in trainers],
        "groups of one, one run after another": lambda: [t.evaluate() for t in trainers],
        "all runs as one program": lambda: evaluate_together(trainers),
    }
    measured = timed(paths, args.runs, args.repeats)
    first = next(iter(measured.values()))
    for name, (seconds, _) in measured.items():
        print(f"{name}: {seconds:.4f} CPU s per run ({seconds / first[0]:.2f}×)")
    print(f"every run's numbers the same on all paths: {all(r == first[1] for _, r in measured.values())}")
    print(f"load average {os.getloadavg()[0]:.1f} after")


if __name__ == "__main__":
    main()
