"""Phenomena: every registered experiment over its seeds, as `python -m rl_core experiment NAME` runs it, with the
effect per seed, mean ± std, verdict, wall time and CPU seconds, written as JSON and as a Markdown table.

The wall time of an experiment is its whole run: warm starts (SFT checkpoints, reward models), every arm × seed
in parallel worker processes, the JSON lines and summary.json. By default every experiment starts from an empty
model cache, as on a fresh install, so its warm starts are counted; `--cache-dir` reuses one. The target is
3 minutes per experiment on a small CPU and 30 s on a GPU. The load average is read before and after each
experiment: other work on the machine shares its cores and stretches the wall time.

Run from the repository root:
    python bench/phenomena.py bench/results/phenomena.json [--experiments a,b] [--seeds 0 1 2] [--workers N]
                              [--device cuda] [--model small] [--cache-dir DIR]
The Markdown table goes next to the JSON (same name, .md).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The engine is imported from the repository root, which a script in bench/ does not have on its path.
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench.process_cpu import TreeCPU  # noqa: E402
from rl_core.engine.models import select_device  # noqa: E402
from rl_core.experiments import EXPERIMENTS, get_experiment  # noqa: E402
from rl_core.experiments.runner import ExperimentRun  # noqa: E402
from rl_core.runs.records import json_safe  # noqa: E402
from rl_core.runs.store import RunStore  # noqa: E402
from rl_core.runs.sweep import SweepProgress, default_workers  # noqa: E402

TARGET_SECONDS = {"cpu": 180.0, "cuda": 30.0}


def run_one(name: str, args, scratch: Path) -> dict:
    experiment = get_experiment(name)
    cache = args.cache_dir or scratch / f"cache-{name}"
    run = ExperimentRun(
        experiment,
        scratch / name,
        RunStore(scratch / "runs.sqlite"),
        seeds=args.seeds,
        workers=args.workers,
        cache_dir=cache,
        model=args.model,
        device=args.device,
    )
    load_before = os.getloadavg()
    progress = SweepProgress([a.planned for a in run.arm_runs], description=name)
    try:
        with TreeCPU() as cpu:
            summary = run.run(progress)
    finally:
        progress.close()
    device = torch.device(summary["device"]).type  # what "auto" chose for the experiment's model
    target = TARGET_SECONDS.get(device)
    print(f"{name}: {summary['sentence']} ({summary['wall_time']:.0f} s)", file=sys.stderr)
    return {
        "experiment": name,
        "title": experiment.title,
        "task": experiment.task,
        "model": summary["model"],
        "device": summary["device"],
        "steps": summary["steps"],
        "effects": summary["effects"],
        "effect_mean": summary["effect_mean"],
        "effect_std": summary["effect_std"],
        "effect_interval": summary["effect_interval"],
        "seeds_with_expected_sign": summary["seeds_with_expected_sign"],
        "verdict": summary["verdict"],
        "sentence": summary["sentence"],
        "wall_time": summary["wall_time"],
        "cpu_seconds": cpu.seconds,
        "target_seconds": target,
        "within_target": None if target is None else summary["wall_time"] <= target,
        "runs_not_finished": [
            f"{r['arm']} seed {r['seed']}: {r['status']}" for r in summary["runs"] if r["status"] != "finished"
        ],
        "load_average_before": load_before[0],
        "load_average_after": os.getloadavg()[0],
    }


def markdown(report: dict) -> str:
    seeds = report["seeds"] or sorted({int(s) for row in report["experiments"] for s in row["effects"]})
    lines = [
        f"Experiments on {report['device']} ({report['workers']} workers), {report['date']}",
        "",
        "| experiment | model | steps | "
        + " | ".join(f"seed {s}" for s in seeds)
        + " | mean ± std | 95 % interval | expected sign | verdict | wall s | CPU s | load avg before → after |",
        "| --- | --- | --- | " + " | ".join("---" for _ in seeds) + " | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in report["experiments"]:
        effects = [row["effects"].get(str(s), math.nan) for s in seeds]
        cells = ["—" if math.isnan(e) else f"{e:+.3g}" for e in effects]
        mean = "—" if math.isnan(row["effect_mean"]) else f"{row['effect_mean']:+.3g} ± {row['effect_std']:.2g}"
        low, high = row["effect_interval"]
        interval = "—" if math.isinf(low) else f"[{low:+.3g}, {high:+.3g}]"
        signs = f"{row['seeds_with_expected_sign']} of {len(row['effects'])}"
        wall = f"{row['wall_time']:.0f}" + ("" if row["within_target"] in (None, True) else " (over target)")
        lines.append(
            f"| {row['experiment']} | {row['model']} | {row['steps']} | {' | '.join(cells)} | {mean} | "
            f"{interval} | {signs} | {row['verdict']} | {wall} | {row['cpu_seconds']:.0f} | "
            f"{row['load_average_before']:.1f} → {row['load_average_after']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the JSON report (the Markdown table goes next to it, .md)")
    parser.add_argument("--experiments", default=",".join(EXPERIMENTS), help="comma-separated names (default: all)")
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=None,
        help="default: each experiment's own seeds (0–7); held-out checks name others",
    )
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--device", default="auto")
    parser.add_argument("--model", default=None, help="replace every experiment's model preset, e.g. small on a GPU")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="reuse this model cache (default: a fresh one per experiment, warm starts counted)",
    )
    args = parser.parse_args()
    names = [n.strip() for n in args.experiments.split(",") if n.strip()]
    for name in names:
        get_experiment(name)  # refuse a bad name before anything trains
    with tempfile.TemporaryDirectory(prefix="phenomena-") as scratch:
        rows = [run_one(name, args, Path(scratch)) for name in names]
    # The device the runs trained on: "auto" keeps the tiny and small models on the CPU even where a GPU is.
    device = torch.device(rows[0]["device"]) if rows else select_device(args.device)
    report = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": platform.platform(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({default_workers()} cores)",
        "workers": args.workers,
        "seeds": args.seeds,
        "fresh_cache": args.cache_dir is None,
        "experiments": rows,
    }
    write_report(args.out, report, markdown(report))


def write_report(out: Path, report: dict, table: str) -> None:
    """The JSON report at `out`, its Markdown table next to it (.md), and the table printed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(json_safe(report), indent=2, ensure_ascii=False))
    out.with_suffix(".md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
