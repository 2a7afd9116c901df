"""CPU per seed-step of SFT warm starts trained as one group of R seeds, against R = 1.

For each R (default 1, 2, 4, 8), R tiny policies (seeds 0 … R−1, one CPU thread) fit the task's demonstrations
with `sft.train_sft` as one group: one step untimed, then `--steps` steps timed with the process-CPU clock. Printed
per task and R: milliseconds per seed-step, the ratio to R = 1 measured in the same process, and the share of a
step spent drawing and encoding the demonstrations (Python, per seed), with the load average before and after.

Run from the repository root:
    python bench/sft_group.py [--tasks caesar coin_flip] [--runs 1 2 4 8] [--steps 20]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from rl_core.engine import sft  # noqa: E402
from rl_core.engine.pretrained import initial_policy, sft_learning_rate  # noqa: E402
from rl_core.engine.tokenizer import build_char_tokenizer  # noqa: E402
from toy_tasks import get_task  # noqa: E402


def seed_step_ms(task_name: str, runs: int, steps: int) -> tuple[float, float]:
    """CPU ms per seed-step of `runs` seeds trained as one group, and the share of it spent on the demonstrations."""
    task, tokenizer = get_task(task_name), build_char_tokenizer()
    policies = []
    for seed in range(runs):
        torch.manual_seed(seed)
        policies.append(initial_policy("tiny", tokenizer))
    seeds = list(range(runs))
    train = lambda n: sft.train_sft(  # noqa: E731
        policies, tokenizer, task, n, task.default_demo_noise, seeds, sft_learning_rate("tiny")
    )
    train(1)  # untimed: first calls allocate
    drawing = [0.0]
    real_batch = sft.demonstration_batch

    def timed_batch(*args, **kwargs):
        started = time.process_time()
        try:
            return real_batch(*args, **kwargs)
        finally:
            drawing[0] += time.process_time() - started

    sft.demonstration_batch = timed_batch
    try:
        started = time.process_time()
        train(steps)
        spent = time.process_time() - started
    finally:
        sft.demonstration_batch = real_batch
    return 1000 * spent / (steps * runs), drawing[0] / spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["caesar", "coin_flip"])
    parser.add_argument("--runs", nargs="+", type=int, default=[1, 2, 4, 8])
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    for task_name in args.tasks:
        base = None
        for runs in args.runs:
            ms, drawing = seed_step_ms(task_name, runs, args.steps)
            base = base or ms
            print(
                f"{task_name:10s} R={runs:3d}: {ms:6.1f} ms per seed-step, {ms / base:.2f}× R = 1, "
                f"demonstrations {100 * drawing:.0f} %"
            )
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
