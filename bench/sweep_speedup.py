"""Sweep speed-up: the same runs trained by one worker process per core, and by a single worker one after another.

The sweep (by default 3 presets × 3 seeds of the default task, 40 steps each) is run twice with
`python -m rl_core sweep`, first with `--workers 1`, then with `--workers N` (default: every core), and each
invocation is timed end to end: interpreter start, worker spawn, training, evaluation, CSVs. Both use one fresh
model cache whose SFT checkpoints are trained beforehand, so neither pays for them and the two differ only in how
the runs are spread over processes. With `--repeats R` the two alternate R times and the fastest of each counts.

Two more timings of the same runs: the literal "one after another", each run its own `python -m rl_core train`
command (interpreter start and imports paid nine times), and the Compare page (an AppTest of the page, its
workers field at 1 and at N, timed from the Run click until the run store holds every run finished).

The load average is read before and after each timing. Other work on the machine shares the cores and skews the
ratio, the more so on Linux with autogroup scheduling (`/proc/sys/kernel/sched_autogroup_enabled`): the CPU is
shared equally between sessions first, and a sweep's workers live in one session, so while another session keeps
one of two cores busy, two workers get about one core between them.

Run from the repository root:
    python bench/sweep_speedup.py bench/results/sweep_speedup.json [--algos grpo,rloo,reinforce_pp] [--seeds 3]
                                  [--steps 40] [--workers N] [--repeats R]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The engine is imported from the repository root, which a script in bench/ does not have on its path.
sys.path.insert(0, str(ROOT))

from rl_core.runs.sweep import default_workers  # noqa: E402

TARGET_RATIO = 0.6


def sweep(arguments: list[str], scratch: Path, workers: int, tag: str) -> dict:
    """One timed `sweep` invocation: its wall time, and the sweep's own (from the command's "N runs in S s" line:
    without the interpreter start and imports of the parent process, which are the same for any worker count).
    Its summary table is echoed."""
    command = [
        sys.executable,
        "-m",
        "rl_core",
        "sweep",
        *arguments,
        "--workers",
        str(workers),
        "--db",
        str(scratch / "runs.sqlite"),
        "--out",
        str(scratch / tag),
    ]
    load_before = os.getloadavg()
    start = time.perf_counter()
    result = subprocess.run(
        command, cwd=ROOT, env={**os.environ, "RLHF_LAB_CACHE": str(scratch / "cache")}, capture_output=True, text=True
    )
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    print(result.stdout)
    sweep_seconds = float(re.search(r"\d+ runs in ([\d.]+) s", result.stderr).group(1))
    return {
        "workers": workers,
        "seconds": seconds,
        "sweep_seconds": sweep_seconds,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "command": command,
    }


def train_commands(algos: list[str], seeds: int, steps: int, scratch: Path) -> dict:
    """Every run as its own `python -m rl_core train` command, one after another, timed end to end."""
    start = time.perf_counter()
    for algo in algos:
        for seed in range(seeds):
            command = [
                sys.executable,
                "-m",
                "rl_core",
                "train",
                "--algo",
                algo,
                "--seed",
                str(seed),
                "--steps",
                str(steps),
            ]
            done = subprocess.run(
                command,
                cwd=ROOT,
                env={**os.environ, "RLHF_LAB_CACHE": str(scratch / "cache")},
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return {"seconds": time.perf_counter() - start}


def page_sweep(algos: list[str], seeds: int, steps: int, workers: int, scratch: Path, tag: str) -> dict:
    """The Compare page (AppTest) runs the sweep: seconds from the Run click until every run is finished."""
    from streamlit.testing.v1 import AppTest

    from rl_core.runs.store import RunStore

    os.environ["RLHF_LAB_CACHE"] = str(scratch / "cache")
    os.environ["RLHF_LAB_DB"] = str(scratch / f"{tag}.sqlite")
    at = AppTest.from_file(str(ROOT / "app_pages" / "compare.py"), default_timeout=120).run()
    at.multiselect(key="compare:presets").set_value(algos).run()
    at.number_input(key="compare:seeds").set_value(seeds).run()
    at.number_input(key="compare:steps").set_value(steps).run()
    at.number_input(key="compare:workers").set_value(workers).run()
    start = time.perf_counter()
    at.button(key="compare:run").click().run()
    store = RunStore()
    while any(run.active for run in store.runs()):
        time.sleep(0.2)
    seconds = time.perf_counter() - start
    runs = store.runs()
    statuses = {run.status for run in runs}
    if statuses != {"finished"} or len(runs) != len(algos) * seeds:
        raise SystemExit(f"the page's sweep ended with {statuses}")
    return {"workers": workers, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", type=Path, help="where to write the JSON report")
    parser.add_argument("--algos", default="grpo,rloo,reinforce_pp")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--workers", type=int, default=default_workers(), help="workers of the parallel sweep")
    parser.add_argument("--repeats", type=int, default=1, help="alternate the two sweeps this many times")
    args = parser.parse_args()
    arguments = ["--algos", args.algos, "--seeds", str(args.seeds), "--steps", str(args.steps)]
    with tempfile.TemporaryDirectory(prefix="sweep-speedup-") as folder:
        scratch = Path(folder)
        print("training the SFT checkpoints both sweeps start from …", flush=True)
        sweep(
            ["--algos", args.algos.split(",")[0], "--seeds", str(args.seeds), "--steps", "1"],
            scratch,
            args.workers,
            "warm-up",
        )
        timings: dict[str, list[dict]] = {"serial": [], "parallel": []}
        algos = args.algos.split(",")
        page: dict[str, list[dict]] = {"serial": [], "parallel": []}
        separate = []
        for repeat in range(args.repeats):
            timings["serial"].append(sweep(arguments, scratch, 1, f"serial-{repeat}"))
            timings["parallel"].append(sweep(arguments, scratch, args.workers, f"parallel-{repeat}"))
            page["serial"].append(page_sweep(algos, args.seeds, args.steps, 1, scratch, f"page-serial-{repeat}"))
            page["parallel"].append(
                page_sweep(algos, args.seeds, args.steps, args.workers, scratch, f"page-parallel-{repeat}")
            )
            separate.append(train_commands(algos, args.seeds, args.steps, scratch))
    serial, parallel = (min(timings[mode], key=lambda t: t["seconds"]) for mode in ("serial", "parallel"))
    ratio = parallel["seconds"] / serial["seconds"]
    sweep_ratio = parallel["sweep_seconds"] / serial["sweep_seconds"]
    page_serial, page_parallel = (min(t["seconds"] for t in page[mode]) for mode in ("serial", "parallel"))
    separate_seconds = min(t["seconds"] for t in separate)
    report = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cores": os.cpu_count(),
            "usable_cores": default_workers(),
        },
        "sweep": {"algos": args.algos.split(","), "seeds": args.seeds, "steps": args.steps},
        "autogroup_scheduling": _autogroup(),
        "timings": timings,
        "best": {"serial": serial, "parallel": parallel},
        "ratio": ratio,
        "sweep_ratio": sweep_ratio,
        "page": {"timings": page, "ratio": page_parallel / page_serial},
        "separate_train_commands": {"timings": separate, "ratio": parallel["seconds"] / separate_seconds},
        "target_ratio": TARGET_RATIO,
    }
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(report, indent=2) + "\n")
    runs = len(args.algos.split(",")) * args.seeds
    for name, mode in (("one after another", "serial"), ("in parallel", "parallel")):
        for timing in timings[mode]:
            load = ", ".join(f"{value:.2f}" for value in timing["load_before"])
            print(
                f"{runs} runs × {args.steps} steps, {timing['workers']} worker(s), {name}: "
                f"{timing['seconds']:.1f} s, of which the sweep {timing['sweep_seconds']:.1f} s "
                f"(load average before: {load})"
            )
    verdict = "meets" if ratio <= TARGET_RATIO else "misses"
    print(
        f"parallel / serial = {ratio:.2f} end to end ({verdict} the ≤ {TARGET_RATIO} target), "
        f"{sweep_ratio:.2f} for the sweep alone"
    )
    print(
        f"the Compare page: {page_serial:.1f} s with 1 worker, {page_parallel:.1f} s with {args.workers}: "
        f"{page_parallel / page_serial:.2f}"
    )
    print(
        f"{runs} separate `python -m rl_core train` commands one after another: {separate_seconds:.1f} s; the "
        f"parallel sweep command takes {parallel['seconds'] / separate_seconds:.2f} of that; report: {args.report}"
    )


def _autogroup() -> bool | None:
    """Whether the kernel shares the CPU between sessions first (None where it cannot be read)."""
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return None


if __name__ == "__main__":
    main()
