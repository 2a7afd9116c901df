"""A turn of N learners' runs four ways: one group on one thread or on two intra-op threads, two parts on two
threads, two parts in two processes.

The live loop (`RunLoop`) steps a turn's runs as one group on torch's intra-op threads (`step_on_threads`); it
used to step them as parts on threads of one process. A tiny run's step is thousands of small ops, each taking the
interpreter lock back, so two threads of one process overlap less than two processes would. This measures how
much: N runs (default 10) of the page's default (`grpo` on its default task,
the tiny model, one CPU thread each; warm starts of seeds 0–3 in turn, each run its own clip range, as
`bench/run_batch.py`), stepped `--steps` times after one untimed step,

- alone: one run, its wall seconds per step;
- one group: all N as one group (`run_batch.step_together`) on one thread;
- one group, two intra-op threads: the same with torch's intra-op threads at 2 (`torch.set_num_threads`), so that
  each op's own work (a batched matmul over the N runs, attention over their sequences) splits over the two cores
  outside the interpreter lock, while the Python between the ops stays on one;
- two threads: two groups of N/2, each on a thread of this process, started together;
- two processes: two groups of N/2, each in a process forked from this one, started together once both are ready.

Printed per repeat: the wall milliseconds of a turn each way (every run stepped once) and the pace the live loop's
learners are judged by, a run's step alone over the turn (ten learners should reach a third), with the load average.
Warm starts are trained first if missing and are not timed.

Run from the repository root:
    python bench/turn_parts.py [--runs 10] [--steps 6] [--repeats 2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from run_batch import prepared  # noqa: E402

from rl_core.engine.run_batch import step_together  # noqa: E402


def per_step(trainers: list, steps: int) -> float:
    """Wall seconds per step of `trainers` as one group, after an untimed one."""
    step_together(trainers)
    began = time.perf_counter()
    for _ in range(steps):
        step_together(trainers)
    return (time.perf_counter() - began) / steps


def intra_op(runs: int, steps: int, threads: int = 2) -> float:
    """`per_step` of one group of `runs` with torch's intra-op threads at `threads` (set once the runs are prepared:
    a trainer sets its model preset's count, the tiny model's 1), set back to 1 after."""
    trainers = prepared("grpo", runs, "tiny", "cpu")
    torch.set_num_threads(threads)
    try:
        return per_step(trainers, steps)
    finally:
        torch.set_num_threads(1)


def two_threads(runs: int, steps: int) -> float:
    halves = [prepared("grpo", runs // 2, "tiny", "cpu"), prepared("grpo", runs - runs // 2, "tiny", "cpu")]
    for half in halves:
        step_together(half)

    def stepped(half):
        for _ in range(steps):
            step_together(half)

    threads = [threading.Thread(target=stepped, args=(half,)) for half in halves]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return (time.perf_counter() - began) / steps


def a_process(runs: int, steps: int, results, start) -> None:
    torch.set_num_threads(1)
    half = prepared("grpo", runs, "tiny", "cpu")
    step_together(half)
    results.put("ready")
    start.wait()
    began = time.perf_counter()
    for _ in range(steps):
        step_together(half)
    results.put(time.perf_counter() - began)


def two_processes(runs: int, steps: int) -> float:
    """The slower process's wall seconds per step: the turn ends when both parts have stepped."""
    context = multiprocessing.get_context("fork")  # the parent's imports and cached warm starts, as a fork server's
    results, start = context.Queue(), context.Event()
    processes = [
        context.Process(target=a_process, args=(size, steps, results, start)) for size in (runs // 2, runs - runs // 2)
    ]
    for process in processes:
        process.start()
    if [results.get(), results.get()] != ["ready", "ready"]:
        raise RuntimeError("a part's process did not get ready")
    start.set()
    seconds = max(results.get(), results.get())
    for process in processes:
        process.join()
    return seconds / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{args.runs} runs, {args.steps} steps, load average {os.getloadavg()[0]:.1f} before", flush=True)
    for repeat in range(args.repeats):
        alone = per_step(prepared("grpo", 1, "tiny", "cpu"), args.steps)
        turns = {
            "one group, one thread": per_step(prepared("grpo", args.runs, "tiny", "cpu"), args.steps),
            "one group, two intra-op threads": intra_op(args.runs, args.steps),
            "two threads": two_threads(args.runs, args.steps),
            "two processes": two_processes(args.runs, args.steps),
        }
        print(
            f"repeat {repeat + 1}: alone {1000 * alone:.0f} ms a step; a turn of {args.runs}: "
            + "; ".join(f"{way} {1000 * wall:.0f} ms (pace {alone / wall:.2f} of alone)" for way, wall in turns.items())
            + f"; load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
