"""Reuse: how long an identical request takes to answer from the run store, against training it.

An experiment is trained once into a scratch store (its own seeds and steps unless `--seeds` / `--steps`), then
asked for again `--repeats` times as the "See it happen" panel asks: an `ExperimentJob` from its creation (the
store's look for the runs) to its end (the runs' rows, the JSON lines and summary.json written). Each answer is
checked to have trained nothing.

Run from the repository root:
    python bench/reuse_latency.py bench/results/reuse.json [--experiment gspo_clipping] [--seeds 0 1 2]
                                  [--steps N] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The engine is imported from the repository root, which a script in bench/ does not have on its path.
sys.path.insert(0, str(ROOT))

from rl_core.experiments import get_experiment  # noqa: E402
from rl_core.runs.store import RunStore  # noqa: E402
from ui.experiment_jobs import ExperimentJob  # noqa: E402
from ui.jobs import TrainingSlots  # noqa: E402


def request(experiment, options: dict) -> tuple[float, ExperimentJob]:
    """One request as the panel makes it; its wall seconds from the click to the written answer."""
    start = time.perf_counter()
    job = ExperimentJob(experiment, TrainingSlots(2), workers=2, **options).start()
    if not job.join(3600) or job.snapshot().status != "finished":
        raise RuntimeError(f"the request did not finish: {job.snapshot().status} {job.snapshot().error}")
    return time.perf_counter() - start, job


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the JSON report")
    parser.add_argument("--experiment", default="gspo_clipping")
    parser.add_argument("--seeds", type=int, nargs="+")
    parser.add_argument("--steps", type=int)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    experiment = get_experiment(args.experiment)
    options = {k: v for k, v in {"seeds": args.seeds, "steps": args.steps}.items() if v is not None}
    with tempfile.TemporaryDirectory(prefix="reuse-bench-") as scratch:
        os.environ["RLHF_LAB_DB"] = str(Path(scratch) / "runs.sqlite")
        os.environ.setdefault("RLHF_LAB_CACHE", str(Path(scratch) / "cache"))
        load_before = os.getloadavg()
        trained, job = request(experiment, options)
        runs = len(job.snapshot().arms)
        steps = sum(run.steps_done for run in RunStore().runs(list(job.snapshot().arms)))
        answers = []
        for _ in range(args.repeats):
            seconds, job = request(experiment, options)
            stored = RunStore().runs(list(job.snapshot().arms))
            if not job.from_store or not all(run.reused for run in stored):
                raise RuntimeError("a repeated request trained instead of reusing")
            answers.append(seconds)
        load_after = os.getloadavg()
    report = {
        "experiment": experiment.name,
        "runs": runs,
        "steps": steps,
        "trained_seconds": trained,
        "reused_seconds": answers,
        "reused_median": statistics.median(answers),
        "reused_max": max(answers),
        "load_average_before": load_before,
        "load_average_after": load_after,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(
        f"{experiment.name}: {runs} runs, {steps} steps; trained in {trained:.1f} s; the identical request "
        f"answered from the store in {report['reused_median']:.3f} s (median of {len(answers)}, max "
        f"{report['reused_max']:.3f} s); load average {load_before[0]:.1f} → {load_after[0]:.1f}"
    )


if __name__ == "__main__":
    main()
