"""How long each experiment takes at its seeds, and what running its runs together saves over one run per process.

Per experiment: runs × steps, the wall and CPU seconds of the whole experiment as `python -m rl_core experiment
NAME --fresh` runs it (its runs in the sweep's worker processes, warm starts already cached), and the same work
as one run per process: `--alone K` of its runs (default 2), each in a fresh spawned interpreter that imports the
engine, prepares the run and trains it, one after another; their mean wall time × the number of runs is the
one-run-per-process estimate, and the speed-up is that estimate over the experiment's wall time. The load average
is read before and after each measurement: other work on the machine's cores stretches wall time, so compare
rows measured at similar load and prefer the CPU seconds.

Run from the repository root:
    python bench/experiments_speed.py bench/results/speed.json [--experiments a,b] [--seeds 0 1 …] [--alone 2]
                                      [--workers N] [--device cuda]
The Markdown table goes next to the JSON (same name, .md). Warm starts (SFT checkpoints, reward models) are
trained once per seed before the timing and cached under `--cache-dir` (default: the lab's model cache), since
a class's server has them already (`python -m rl_core experiment --all`).
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
# The engine is imported from the repository root, which a script in bench/ does not have on its path.
sys.path.insert(0, str(ROOT))

from bench.phenomena import write_report  # noqa: E402
from bench.process_cpu import TreeCPU  # noqa: E402
from rl_core.config import RunConfig  # noqa: E402
from rl_core.engine.sft import default_cache_dir  # noqa: E402
from rl_core.experiments import EXPERIMENTS, get_experiment  # noqa: E402
from rl_core.experiments.runner import ExperimentRun, plan_experiment  # noqa: E402
from rl_core.runs.run_stream import trainer_for  # noqa: E402
from rl_core.runs.store import RunStore  # noqa: E402
from rl_core.runs.sweep import SweepProgress, default_workers  # noqa: E402


def train_alone(run: RunConfig, cache_dir: Path) -> None:
    """One run in its own interpreter: what a training costs when nothing is shared with another."""
    trainer = trainer_for(run, cache_dir)  # an RL run's Trainer, or a DPO run's DPOTrainer
    trainer.prepare()
    for _ in trainer.steps():
        pass


def measure(name: str, args, scratch: Path) -> dict:
    experiment = get_experiment(name)
    planned = [arm_run.planned.run for arm_run in plan_experiment(experiment, args.seeds, device=args.device)]
    # Warm starts first, untimed: one short run per seed trains and caches its SFT checkpoint and reward model.
    warm = ExperimentRun(
        experiment,
        scratch / f"{name}-warm",
        RunStore(scratch / "warm.sqlite"),
        seeds=args.seeds,
        workers=args.workers,
        cache_dir=args.cache_dir,
        device=args.device,
        steps=1,
    )
    warm.run()

    load_before, start = os.getloadavg()[0], time.perf_counter()
    run = ExperimentRun(
        experiment,
        scratch / name,
        RunStore(scratch / f"{name}.sqlite"),
        seeds=args.seeds,
        workers=args.workers,
        cache_dir=args.cache_dir,
        device=args.device,
        fresh=True,
    )
    progress = SweepProgress([a.planned for a in run.arm_runs], description=name)
    try:
        with TreeCPU() as cpu:
            summary = run.run(progress)
    finally:
        progress.close()
    together_wall, together_cpu = time.perf_counter() - start, cpu.seconds
    load_after = os.getloadavg()[0]

    alone_walls = []
    context = multiprocessing.get_context("spawn")  # a fresh interpreter per run, as a separate training is
    for config in planned[: args.alone]:
        started = time.perf_counter()
        process = context.Process(target=train_alone, args=(config, args.cache_dir))
        process.start()
        process.join()
        if process.exitcode != 0:
            raise RuntimeError(f"{name}: a run alone ended with exit code {process.exitcode}")
        alone_walls.append(time.perf_counter() - started)
    alone_estimate = sum(alone_walls) / len(alone_walls) * len(planned) if alone_walls else None
    row = {
        "experiment": name,
        "runs": len(planned),
        "steps": experiment.steps,
        "seeds": len(run.seeds),
        "wall_seconds": together_wall,
        "cpu_seconds": together_cpu,
        "alone_seconds_per_run": alone_walls,
        "alone_estimate_seconds": alone_estimate,
        "speedup": None if alone_estimate is None else alone_estimate / together_wall,
        "within_30_s": together_wall <= 30.0,
        "verdict": summary["verdict"],
        "load_average_before": load_before,
        "load_average_after": load_after,
    }
    print(
        f"{name}: {len(planned)} runs × {experiment.steps} steps in {together_wall:.1f} s wall, "
        f"{together_cpu:.1f} CPU s",
        file=sys.stderr,
    )
    return row


def markdown(report: dict) -> str:
    lines = [
        f"Experiments on {report['device']} ({report['workers']} workers), {report['date']}",
        "",
        "| experiment | runs × steps | wall s | CPU s | ≤ 30 s | alone s/run (measured runs) | one run per process, "
        "estimated s | speed-up | load avg before → after |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in report["experiments"]:
        alone = row["alone_seconds_per_run"]
        per_run = f"{sum(alone) / len(alone):.1f} ({len(alone)})" if alone else "—"
        estimate = "—" if row["alone_estimate_seconds"] is None else f"{row['alone_estimate_seconds']:.0f}"
        speedup = "—" if row["speedup"] is None else f"{row['speedup']:.2f}×"
        lines.append(
            f"| {row['experiment']} | {row['runs']} × {row['steps']} | {row['wall_seconds']:.1f} | "
            f"{row['cpu_seconds']:.1f} | {'yes' if row['within_30_s'] else 'no'} | {per_run} | {estimate} | "
            f"{speedup} | {row['load_average_before']:.1f} → {row['load_average_after']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the JSON report (the Markdown table goes next to it, .md)")
    parser.add_argument("--experiments", default=",".join(EXPERIMENTS), help="comma-separated names (default: all)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default: each experiment's own (0–7)")
    parser.add_argument(
        "--alone", type=int, default=2, help="how many of each experiment's runs to also time one per process (0: none)"
    )
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--device", default="auto")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=default_cache_dir(),
        help="the model cache the warm starts come from (default: the lab's)",
    )
    args = parser.parse_args()
    if args.alone < 0:
        parser.error(f"--alone must be 0 or more, got {args.alone}")
    names = [n.strip() for n in args.experiments.split(",") if n.strip()]
    for name in names:
        get_experiment(name)  # refuse a bad name before anything trains
    device = args.device if args.device != "auto" else f"auto ({os.cpu_count()} CPUs here)"
    if args.device.startswith("cuda") and torch.cuda.is_available():
        device = f"{args.device} ({torch.cuda.get_device_name(torch.device(args.device))}, {os.cpu_count()} CPUs)"
    report = {"machine": platform.platform(), "device": device, "workers": args.workers, "experiments": []}
    with tempfile.TemporaryDirectory(prefix="experiments-speed-") as scratch:
        for name in names:
            report["experiments"].append(measure(name, args, Path(scratch)))
            # Written after every experiment: a long bench that is stopped keeps what it measured.
            report["date"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
            write_report(args.out, report, markdown(report))


if __name__ == "__main__":
    main()
