"""A warm-start group trained in a thread of this interpreter against one trained in a worker process
(`rl_core/runs/warm_start_worker.py`), while `--busy` threads here run Python, as the live lab's server runs its
loop and its pages' reruns beside the builder: the group's seconds per SFT step (its second step to its last).

Run from the repository root:
    python bench/warm_start_worker.py [--seeds 18] [--steps 10] [--busy 3] [--rounds 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import torch  # noqa: E402
from sessions_latency import load_average  # noqa: E402

from rl_core.algorithms import get_preset  # noqa: E402
from rl_core.config import RunConfig  # noqa: E402
from rl_core.runs.sweep import warm_starts  # noqa: E402
from rl_core.runs.warm_start_worker import build_in_worker  # noqa: E402
from rl_core.runs.workers import start_worker_server  # noqa: E402


def group(seeds: int, steps: int) -> list[RunConfig]:
    return [RunConfig(algo=get_preset("grpo"), task="caesar", steps=2, seed=s, sft_steps=steps) for s in range(seeds)]


def in_thread(runs, cache: Path, on_step) -> None:
    builder = threading.Thread(target=warm_starts, args=(runs, cache), kwargs={"on_step": on_step})
    builder.start()
    builder.join()


def in_worker(runs, cache: Path, on_step) -> None:
    build_in_worker(runs, cache, lambda: False, on_step)


def seconds_a_step(build, runs, busy: int) -> float:
    """The group's seconds a step built by `build` in a fresh cache, while `busy` threads spin in Python."""
    done = threading.Event()

    def spin() -> None:
        while not done.is_set():
            sum(i * i for i in range(1000))

    spinners = [threading.Thread(target=spin, daemon=True) for _ in range(busy)]
    for spinner in spinners:
        spinner.start()
    stamps: list[float] = []
    try:
        build(
            runs,
            Path(tempfile.mkdtemp(prefix="warm-start-worker-bench-")),
            lambda done: stamps.append(time.monotonic()),
        )
    finally:
        done.set()
        for spinner in spinners:
            spinner.join()
    return (stamps[-1] - stamps[0]) / (len(stamps) - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=18)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--busy", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the worker: one core each
    start_worker_server()
    in_worker(group(1, 1), Path(tempfile.mkdtemp()), lambda done: None)  # the fork server's engine import, not timed
    print(f"load average before: {load_average()}")
    for _ in range(args.rounds):
        for name, build in (("thread", in_thread), ("worker", in_worker)):
            step = seconds_a_step(build, group(args.seeds, args.steps), args.busy)
            print(f"{name}: {step:.3f} s a step ({args.seeds} seeds, {args.busy} busy threads)", flush=True)
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
