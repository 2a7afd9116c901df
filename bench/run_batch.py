"""CPU (or GPU) time per run-step of a group of R runs trained as one program, and where it goes.

For each R (default 1, 2, 4, 8, 16, 32), R runs of one preset (default `grpo` on its default task, the tiny model,
one CPU thread; `--model` and `--device` name others) — warm starts of seeds 0–3 in turn, each run its own clip
range ε = 0.2 + 0.001·r, so that no two runs are the same computation and all share one vmapped loss — are
prepared, stepped once untimed, then `--steps` steps are timed as one group (`run_batch.step_together`); every R
in turn, `--repeats` rounds (default 3) over the same groups, each round's ratios to its own R = 1: on a shared
machine a round's R = 1 alone moved by 40 % between rounds, so a ratio is only as good as its round's base.

Printed per round and R: process-CPU milliseconds per run-step, its ratio to R = 1 measured in the same process, and the
per-run-step milliseconds of each phase of the group's step (sampling; the teacher-forced passes; the packing of
prefix trees; the vmapped formulas; the backward passes; the optimiser; the transfer of the records to the host),
with the load average before and after. The phases are timed by wrapping the group's methods here, with
process-CPU clocks: the engine itself reads no clock for them. On a GPU the kernels run after the host has queued
them, so there the clock is the wall's, each timed phase and step waits for the device (`torch.cuda.synchronize`)
before it is read, and the table adds the host's CPU per run-step and the peak device memory. Warm starts are
trained first if missing and are not timed.

Run from the repository root:
    python bench/run_batch.py [--runs 1 8 32] [--algo grpo] [--steps 5] [--repeats 3] [--model tiny] [--device cpu]
        [--out R.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
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
# The clock the phases and steps are read with: process CPU on the CPU, the wall after the device's queue on a GPU.
CLOCK = [time.process_time]


def device_clock() -> float:
    torch.cuda.synchronize()
    return time.perf_counter()


def timed(owner, name: str, phase: str) -> None:
    """Replace `owner.name` by itself timed, its process-CPU seconds added to SPENT[phase] (outermost call only)."""
    original = getattr(owner, name)
    running = []

    def wrapper(*args, **kwargs):
        if running:
            return original(*args, **kwargs)
        running.append(True)
        started = CLOCK[0]()
        try:
            return original(*args, **kwargs)
        finally:
            SPENT[phase] += CLOCK[0]() - started
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


def prepared(algo: str, runs: int, model: str, device: str) -> list[Trainer]:
    trainers = [
        Trainer(
            RunConfig(
                algo=get_preset(algo, epsilon=0.2 + 0.001 * r),
                task=DEFAULT_TASK,
                steps=10**6,
                seed=r % 4,
                model=model,
                device=device,
            )
        )
        for r in range(runs)
    ]
    for trainer in trainers:
        trainer.prepare()
    return trainers


def timed_steps(trainers: list[Trainer], steps: int, on_gpu: bool) -> dict:
    """`steps` timed steps of the group: ms per run-step, the phases' ms per run-step, and on a GPU the host's CPU ms
    per run-step and the peak device memory."""
    runs = len(trainers)
    SPENT.clear()
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    host_started = time.process_time()
    started = CLOCK[0]()
    for _ in range(steps):
        step_together(trainers)
    row = {
        "runs": runs,
        "ms_per_run_step": 1000 * (CLOCK[0]() - started) / (runs * steps),
        "phases_ms": {phase: 1000 * seconds / (runs * steps) for phase, seconds in SPENT.items()},
    }
    if on_gpu:
        row["host_cpu_ms_per_run_step"] = 1000 * (time.process_time() - host_started) / (runs * steps)
        row["peak_device_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--algo", default="grpo")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="rounds over every R; the summary takes medians")
    parser.add_argument("--model", default="tiny", help="model preset: tiny (default), small, gpt2")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N")
    parser.add_argument("--out", type=Path, help="write the table as JSON here")
    args = parser.parse_args()
    if 1 not in args.runs:
        parser.error(f"--runs {args.runs} has no 1; allowed: a list of group sizes that includes 1 (the ratios' base)")
    torch.set_num_threads(1)
    on_gpu = args.device.startswith("cuda")
    if on_gpu:
        CLOCK[0] = device_clock
    instrument()
    where = torch.cuda.get_device_name(torch.device(args.device)) if on_gpu else "1 thread"
    print(
        f"{args.algo} on {DEFAULT_TASK}, {args.model} model, {args.device} ({where}), {args.steps} steps, "
        f"{args.repeats} rounds; torch {torch.__version__}; load average {os.getloadavg()[0]:.1f} before; ms per "
        + ("run-step are wall (device synchronised)" if on_gpu else "run-step are process CPU"),
        flush=True,
    )
    groups = {}
    for runs in args.runs:  # prepared once and kept: each round steps the same groups on
        groups[runs] = prepared(args.algo, runs, args.model, args.device)
        step_together(groups[runs])  # untimed: the group forms, the first step's one-off costs
    rows = []
    for round_number in range(1, args.repeats + 1):
        timed = {runs: timed_steps(groups[runs], args.steps, on_gpu) for runs in args.runs}
        for runs, row in timed.items():
            row |= {"round": round_number, "ratio_to_one": row["ms_per_run_step"] / timed[1]["ms_per_run_step"]}
            rows.append(row)
            device_note = ""
            if on_gpu:
                device_note = (
                    f" (host CPU {row['host_cpu_ms_per_run_step']:.1f} ms, peak {row['peak_device_gib']:.1f} GiB)"
                )
            print(
                f"round {round_number}, R = {runs}: {row['ms_per_run_step']:.2f} ms per run-step "
                f"({row['ratio_to_one']:.2f}× R = 1){device_note}; "
                + ", ".join(
                    f"{phase} {ms:.1f}" for phase, ms in sorted(row["phases_ms"].items(), key=lambda kv: -kv[1])
                ),
                flush=True,
            )
    print(f"load average {os.getloadavg()[0]:.1f} after")
    print("median over the rounds (each round's ratio is to its own R = 1):")
    summary = []
    for runs in args.runs:
        mine = [row for row in rows if row["runs"] == runs]
        ms, ratios = (statistics.median(row[key] for row in mine) for key in ("ms_per_run_step", "ratio_to_one"))
        summary.append({"runs": runs, "ms_per_run_step": ms, "ratio_to_one": ratios})
        spread = ", ".join(f"{row['ratio_to_one']:.2f}" for row in mine)
        print(f"R = {runs}: {ms:.2f} ms per run-step, {ratios:.2f}× R = 1 (rounds: {spread})")
    if args.out:
        report = {
            "algo": args.algo,
            "model": args.model,
            "device": args.device,
            "steps": args.steps,
            "rows": rows,
            "median": summary,
        }
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
