"""CPU per run-step of a group of R runs trained as one program, and where it goes.

For each R (default 1, 2, 4, 8, 16, 32), R runs of one preset (default `grpo` on its default task, the tiny model,
one CPU thread) — warm starts of seeds 0–3 in turn, each run its own clip range ε = 0.2 + 0.001·r, so that no two
runs are the same computation and all share one vmapped loss — are prepared, stepped once untimed, then `--steps`
steps are timed as one group (`run_batch.step_together`). Printed per R: process-CPU milliseconds per run-step,
its ratio to R = 1 measured in the same process, and the per-run-step milliseconds of each phase of the group's
step (sampling; the teacher-forced passes; the packing of prefix trees; the vmapped formulas; the backward
passes; the optimiser; the transfer of the records to the host), with the load average before and after. The
phases are timed by wrapping the group's methods here, with process-CPU clocks: the engine itself reads no clock
for them. Warm starts are trained first if missing and are not timed.

Run from the repository root:
    python bench/run_batch.py [--runs 1 8 32] [--algo grpo] [--steps 5] [--out report.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import rl_core.engine.run_group as run_group  # noqa: E402
from rl_core.algorithms import get_preset  # noqa: E402
from rl_core.config import RunConfig  # noqa: E402
from rl_core.engine import stacked_adamw  # noqa: E402
from rl_core.engine.run_batch import step_together  # noqa: E402
from rl_core.engine.trainer import Trainer  # noqa: E402
from toy_tasks import DEFAULT_TASK  # noqa: E402

SPENT: collections.Counter = collections.Counter()


def timed(owner, name: str, phase: str) -> None:
    """Replace `owner.name` by itself timed, its process-CPU seconds added to SPENT[phase] (outermost call only)."""
    original = getattr(owner, name)
    running = []

    def wrapper(*args, **kwargs):
        if running:
            return original(*args, **kwargs)
        running.append(True)
        started = time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            SPENT[phase] += time.process_time() - started
            running.pop()

    setattr(owner, name, wrapper)


def instrument() -> None:
    timed(run_group.RunGroup, "_collect", "sampling and rewards")
    timed(run_group, "teacher_forced", "teacher-forced passes")  # the critics'
    timed(run_group, "teacher_forced_logits", "teacher-forced passes")  # the language models'
    timed(run_group.Part, "tree", "prefix trees")
    timed(run_group, "per_run", "formulas (vmapped)")
    timed(torch.Tensor, "backward", "backward")
    timed(run_group.torch.autograd, "grad", "backward")
    timed(stacked_adamw.StackedAdamW, "step", "optimiser")
    timed(run_group.Records, "values", "records to the host")


def prepared(algo: str, runs: int) -> list[Trainer]:
    trainers = [
        Trainer(RunConfig(algo=get_preset(algo, epsilon=0.2 + 0.001 * r), task=DEFAULT_TASK, steps=10**6, seed=r % 4))
        for r in range(runs)
    ]
    for trainer in trainers:
        trainer.prepare()
    return trainers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--algo", default="grpo")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", type=Path, help="write the table as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    instrument()
    print(
        f"{args.algo} on {DEFAULT_TASK}, tiny model, 1 thread, {args.steps} steps; load average "
        f"{os.getloadavg()[0]:.1f} before",
        flush=True,
    )
    rows, alone = [], None
    for runs in args.runs:
        trainers = prepared(args.algo, runs)
        step_together(trainers)  # untimed: the group forms, the first step's one-off costs
        SPENT.clear()
        started = time.process_time()
        for _ in range(args.steps):
            step_together(trainers)
        per_step = 1000 * (time.process_time() - started) / (runs * args.steps)
        alone = per_step if alone is None and runs == 1 else alone
        phases = {phase: 1000 * seconds / (runs * args.steps) for phase, seconds in SPENT.items()}
        rows.append(
            {
                "runs": runs,
                "cpu_ms_per_run_step": per_step,
                "phases_ms": phases,
                "ratio_to_one": None if alone is None else per_step / alone,
            }
        )
        ratio = "" if alone is None else f" ({per_step / alone:.2f}× R = 1)"
        print(
            f"R = {runs}: {per_step:.1f} ms per run-step{ratio}; "
            + ", ".join(f"{phase} {ms:.1f}" for phase, ms in sorted(phases.items(), key=lambda kv: -kv[1])),
            flush=True,
        )
    print(f"load average {os.getloadavg()[0]:.1f} after")
    if args.out:
        args.out.write_text(json.dumps({"algo": args.algo, "steps": args.steps, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
