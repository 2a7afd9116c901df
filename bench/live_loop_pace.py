"""The live loop's pace: how fast each learner's run steps when N learners train at once.

For each N (default 1, 5, 10), N learners each hand one run to one `RunLoop` (the loop the app's pages share), at
the same moment, from a thread of their own, as N learners pressing Train do. The runs are the page's default
(`grpo` on its default task, the tiny model, one CPU thread); learner k's run has seed k mod 4 (warm starts of
seeds 0–3, trained first if missing and not timed) and its own clip range ε = 0.2 + 0.001·k, so that no two runs
are the same computation. Each run trains `--steps` steps, after an untimed round of one run of 2 steps that pays
the process's one-time costs. Printed per N: the wall seconds from the joint start to
the last run's end, the steps per second of each run (median and slowest over the N), and the median's ratio to
N = 1 measured in this process: the pace of a learner's run among N against alone. The ratio is also given in
process-CPU seconds (alone's CPU seconds over N's): with one loop thread (`--threads 1`) the loop's wall time on a
quiet machine is its CPU time, and other work on the cores stretches the wall, so the CPU ratio is what the pace
would be with a core to itself; with more threads the wall can be less than the CPU seconds, and the CPU ratio
says what the second intra-op thread costs. `--threads` is the loop's `threads` (default: the app's,
`loop_threads`). The load average is printed before and after.

`--heavy EPOCHS` adds to every round one more learner whose run samples 64 prompts × 4 responses a step and steps
EPOCHS PPO epochs of 4 minibatches on them (a step many turns long, which the loop steps in a lane of its own),
stopped when the round's runs end; the pace alone is then a round of one learner without it, the fair pace of each
run 1 / (N + 1) of that, and the heavy learner's part is its lane thread's CPU seconds over the round's wall (1 /
(N + 1) is its share).

Run from the repository root:
    python bench/live_loop_pace.py [--learners 1 5 10] [--steps 30] [--threads T] [--heavy EPOCHS] [--out report.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from rl_core.algorithms import get_preset  # noqa: E402
from rl_core.config import RunConfig  # noqa: E402
from rl_core.engine.trainer import Trainer  # noqa: E402
from rl_core.runs.run_loop import RunLoop, loop_threads  # noqa: E402
from toy_tasks import DEFAULT_TASK  # noqa: E402

WARM_START_SEEDS = 4


def heavy_trainer(epochs: int, cache_dir: Path | None) -> Trainer:
    """A learner's heavy run beside the class: the default run with 64 prompts × 4 responses a step and `epochs` PPO
    epochs of 4 minibatches each (a step many turns long, so the loop steps it in a lane), with more steps than the
    round lasts."""
    algo = get_preset("grpo", prompts_per_step=64, num_generations=4, ppo_epochs=epochs, num_minibatches=4)
    trainer = Trainer(RunConfig(algo=algo, task=DEFAULT_TASK, steps=1000, seed=0), cache_dir=cache_dir)
    trainer.prepare()
    return trainer


def round_of(learners: int, steps: int, cache_dir: Path | None, heavy_epochs: int = 0, threads: int = 1) -> dict:
    """N learners' runs trained at once in one fresh loop on `threads` threads: wall seconds and each run's steps
    per second; with `heavy_epochs`, beside one more learner's heavy run (stopped when the N end), and the heavy
    learner's part of the round's wall time: the CPU seconds of its lane's thread until then over the round's
    wall."""
    trainers = []
    for k in range(learners):
        run = RunConfig(
            algo=get_preset("grpo", epsilon=0.2 + 0.001 * k), task=DEFAULT_TASK, steps=steps, seed=k % WARM_START_SEEDS
        )
        trainer = Trainer(run, cache_dir=cache_dir)
        trainer.prepare()
        trainers.append(trainer)
    loop = RunLoop(threads=threads)
    finished: dict[int, float] = {}
    start = threading.Barrier(learners + 1)

    def learner(k: int) -> None:
        start.wait()
        loop.train(trainers[k], lambda record: None, learner=f"learner-{k}")
        finished[k] = time.perf_counter()

    threads = [threading.Thread(target=learner, args=(k,)) for k in range(learners)]
    if heavy_epochs:
        heavy = heavy_trainer(heavy_epochs, cache_dir)
        estimate = 10 * loop.turn_seconds  # above a turn: a lane of its own from its first step, as the app sends it
        threads.append(threading.Thread(target=lambda: loop.train(heavy, lambda record: None, "heavy", estimate)))
    for thread in threads:
        thread.start()
    cpu = time.process_time()
    start.wait()
    began = time.perf_counter()
    for thread in threads[:learners]:
        thread.join()
    wall = max(finished.values()) - began
    heavy_cpu = None
    if heavy_epochs:
        # The CPU seconds of the thread the heavy run stepped in (the loop's lane for it) until the round ended.
        lanes = [t for t in threading.enumerate() if t.name.endswith("-lane")]
        heavy_cpu = sum(time.clock_gettime(time.pthread_getcpuclockid(t.ident)) for t in lanes)
        heavy.stop_event.set()
        threads[-1].join()
    paces = [steps / (finished[k] - began) for k in range(learners)]
    return {
        "learners": learners,
        "wall_s": wall,
        "cpu_s": time.process_time() - cpu,
        "steps_per_s_median": statistics.median(paces),
        "steps_per_s_slowest": min(paces),
        "heavy_part": heavy_cpu / wall if heavy_epochs else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--learners", type=int, nargs="+", default=[1, 5, 10])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--cache-dir", type=Path, default=None, help="the model cache (default: the lab's)")
    parser.add_argument("--out", type=Path, default=None, help="a JSON report")
    parser.add_argument(
        "--threads", type=int, default=None, help="the loop's threads (default: the app's, RLHF_LAB_LOOP_THREADS)"
    )
    parser.add_argument(
        "--heavy", type=int, default=0, metavar="EPOCHS", help="beside each round, a heavy run with EPOCHS PPO epochs"
    )
    args = parser.parse_args()
    threads = loop_threads() if args.threads is None else args.threads
    torch.set_num_threads(1)
    round_of(1, 2, args.cache_dir)  # untimed: the process's first steps pay one-time costs (allocations, lazy imports)
    load_before = os.getloadavg()
    rounds = [round_of(n, args.steps, args.cache_dir, args.heavy, threads) for n in args.learners]
    # The pace alone: the round of one learner, or with a heavy run beside every round, one without it.
    reference = round_of(1, args.steps, args.cache_dir, threads=threads) if args.heavy else None
    alone_round = reference or next((r for r in rounds if r["learners"] == 1), None)
    alone = alone_round and alone_round["steps_per_s_median"]
    alone_cpu = alone_round and alone_round["cpu_s"]
    print(f"the loop on {threads} thread{'s' * (threads > 1)}")
    print(
        f"{'learners':>8} {'wall s':>7} {'CPU s':>6} {'steps/s per run':>16} {'slowest':>8}"
        f" {'pace (wall)':>12} {'(CPU)':>6}" + ("  heavy learner's part" if args.heavy else "")
    )
    for r in rounds:
        r["pace_vs_alone"] = r["steps_per_s_median"] / alone if alone else None
        r["pace_vs_alone_cpu"] = alone_cpu / r["cpu_s"] if alone_cpu else None
        ratios = f"{r['pace_vs_alone']:>12.2f} {r['pace_vs_alone_cpu']:>6.2f}" if alone else f"{'–':>12} {'–':>6}"
        print(
            f"{r['learners']:>8} {r['wall_s']:>7.1f} {r['cpu_s']:>6.1f} {r['steps_per_s_median']:>16.2f}"
            f" {r['steps_per_s_slowest']:>8.2f} {ratios}" + (f"  {r['heavy_part']:.2f}" if args.heavy else "")
        )
    load_after = os.getloadavg()
    print(f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f}")
    if args.out:
        report = {
            "steps": args.steps,
            "threads": threads,
            "rounds": rounds,
            "load_before": load_before,
            "load_after": load_after,
        }
        args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
