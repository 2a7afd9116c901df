"""Whole training steps of R runs: one after another (each a batch of one) against one batch of R.

For R runs of one preset (default `grpo` on its default task, the tiny model, one CPU thread), seeds 0 … R − 1,
each prepared from its cached SFT warm start, `--steps` steps are timed twice on fresh trainers: every run stepped
alone in turn (`Trainer.step`), and all R stepped together (`run_batch.step_together`, sampling stacked). Printed:
process-CPU and wall milliseconds per run-step, the speed-up (alone ÷ together, CPU) and the load average before
and after. Warm starts are trained first if missing and are not timed.

Run from the repository root:
    python bench/run_batch.py [--runs 1 4 8] [--algo grpo] [--steps 10]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from rl_core.algorithms import get_preset  # noqa: E402
from rl_core.config import RunConfig  # noqa: E402
from rl_core.engine.run_batch import step_together  # noqa: E402
from rl_core.engine.trainer import Trainer  # noqa: E402
from toy_tasks import DEFAULT_TASK  # noqa: E402


def prepared(algo: str, runs: int, steps: int) -> list[Trainer]:
    trainers = [Trainer(RunConfig(algo=get_preset(algo), task=DEFAULT_TASK, steps=steps, seed=seed))
                for seed in range(runs)]
    for trainer in trainers:
        trainer.prepare()
    return trainers


def timed(work) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    work()
    return time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--algo", default="grpo")
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{args.algo} on {DEFAULT_TASK}, tiny model, 1 thread, {args.steps} steps; load average "
          f"{os.getloadavg()[0]:.1f} before")
    print("R | alone CPU ms/run-step | together CPU ms/run-step | alone wall | together wall | speed-up (CPU)")
    for runs in args.runs:
        alone = prepared(args.algo, runs, args.steps)
        together = prepared(args.algo, runs, args.steps)

        def one_after_another():
            for trainer in alone:
                for _ in range(args.steps):
                    trainer.step()

        def as_one_batch():
            for _ in range(args.steps):
                step_together(together)

        cpu_alone, wall_alone = timed(one_after_another)
        cpu_together, wall_together = timed(as_one_batch)
        per = 1000 / (runs * args.steps)
        print(f"{runs} | {cpu_alone * per:.1f} | {cpu_together * per:.1f} | {wall_alone * per:.1f} | "
              f"{wall_together * per:.1f} | {cpu_alone / cpu_together:.2f}×")
    print(f"load average {os.getloadavg()[0]:.1f} after")


if __name__ == "__main__":
    main()
