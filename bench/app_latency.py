"""What a learner waits for in the app: the first chart point after Train, the time to 90 % success, how often
the dashboard redraws while a run trains, and the CPU the UI itself spends meanwhile.

Starts `streamlit run app.py` on 127.0.0.1 with an empty model cache (as on a fresh install), opens the GRPO
page in Debian's Chromium through Playwright and, with the page's default knobs:

1. presses Train as soon as the page has rendered (`--read-seconds` waits first, as a learner reading the page
   would, which gives the app's background warm start time to finish) and times the first chart point and the
   first time the page's success-rate curve reads ≥ 0.9;
2. presses Train again (the SFT policy is cached now) and times the first chart point;
3. starts a 500-step run and, for `--window` seconds while it trains, counts the dashboard's redraws in the
   browser and reads every server thread's CPU time from /proc: the busiest thread is the training, the rest is
   what the UI costs.

Run from the repository root:  python bench/app_latency.py [--read-seconds 0] [--json bench/results/app.json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from app_driver import (  # noqa: E402
    TRAINING_TIMEOUT_MS,
    browser_page,
    chart_value,
    first_point_latency,
    open_page,
    press_train,
    progress_redraws,
    serve_app,
    stop_run,
    wait_for_chart_points,
)
from bench.process_cpu import process_cpu_seconds, stat_cpu_seconds  # noqa: E402

HEADING = "GRPO, with DAPO and Dr. GRPO"
TARGET = 0.9
SUCCESS_BUDGET_S = 60.0
FINISHED = re.compile(r"^Finished \d+ steps")


def cpu_snapshot(pid: int) -> tuple[float, dict[int, float]]:
    """The process's CPU seconds and those of each thread alive now. Streamlit runs every script rerun in a
    thread of its own, so the UI's share is the process's total less the training thread's."""
    threads = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            threads[int(task.name)] = stat_cpu_seconds(task / "stat")
        except (FileNotFoundError, ProcessLookupError):  # the thread ended while we looked
            continue
    return process_cpu_seconds(pid), threads


def seconds_to_success(page, clicked: float) -> float | None:
    """Seconds from the click until the success-rate curve first reads ≥ TARGET (None within the budget)."""
    while time.monotonic() - clicked < SUCCESS_BUDGET_S:
        value = chart_value(page, "Reward and success rate", "success rate")
        if value is not None and value >= TARGET:
            return time.monotonic() - clicked
        if page.get_by_text(FINISHED).count() and (value or 0) < TARGET:
            return None  # the run ended below the target
        time.sleep(0.1)
    return None


def measure(args) -> dict:
    cache = Path(args.cache_dir or tempfile.mkdtemp(prefix="rlhf-lab-app-bench-"))
    env = {"RLHF_LAB_CACHE": str(cache), "RLHF_LAB_DB": str(cache / "runs.sqlite"), "RLHF_LAB_WARM_START": "1"}
    result: dict = {"cache": str(cache), "read_seconds": args.read_seconds}
    started = time.monotonic()
    with serve_app(cache / "streamlit.log", env) as (url, server), browser_page() as page:
        open_page(page, f"{url}/grpo", HEADING)
        result["page_ready_s"] = time.monotonic() - started
        time.sleep(args.read_seconds)

        clicked = press_train(page)
        wait_for_chart_points(page)
        result["first_point_cold_s"] = time.monotonic() - clicked
        result["success_90_s"] = seconds_to_success(page, clicked)
        page.get_by_text(FINISHED).wait_for(timeout=TRAINING_TIMEOUT_MS)

        result["first_point_warm_s"] = first_point_latency(page)
        page.get_by_text(FINISHED).wait_for(timeout=TRAINING_TIMEOUT_MS)

        # The run knobs sit under "All knobs"; the page's URL sets them as well (a new session, same server).
        open_page(page, f"{url}/grpo?algo=grpo&seed=0&steps=500", HEADING)
        first_point_latency(page)
        (total_before, before), wall = cpu_snapshot(server.pid), time.monotonic()
        result["redraws_per_s"] = progress_redraws(page, args.window)
        (total_after, after), wall = cpu_snapshot(server.pid), time.monotonic() - wall
        stop_run(page)
    # The training thread is the one that ran through the whole window and spent the most.
    training = max(after[tid] - before[tid] for tid in after if tid in before)
    total = total_after - total_before
    result |= {
        "window_s": wall,
        "server_cpu_s_per_s": total / wall,
        "training_thread_cpu_s_per_s": training / wall,
        "ui_cpu_s_per_s": (total - training) / wall,
        "ui_cpu_s_per_redraw": (total - training) / max(result["redraws_per_s"] * wall, 1e-9),
    }
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--read-seconds",
        type=float,
        default=0.0,
        help="wait this long on the page before the first Train (default 0: at once)",
    )
    parser.add_argument("--window", type=float, default=10.0, help="seconds of the redraw and CPU window")
    parser.add_argument("--cache-dir", type=Path, help="model cache and run store (default: a new empty folder)")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    result = measure(args)
    rows = [
        ("page ready after server start", result["page_ready_s"], "s"),
        (f"first chart point, first Train ({args.read_seconds:g} s after the page)", result["first_point_cold_s"], "s"),
        (f"success rate ≥ {TARGET:.0%} after that click", result["success_90_s"], "s"),
        ("first chart point, second Train (SFT cached)", result["first_point_warm_s"], "s"),
        ("dashboard redraws while training", result["redraws_per_s"], "/s"),
        ("server CPU while training", result["server_cpu_s_per_s"], "s/s"),
        ("  of which the training thread", result["training_thread_cpu_s_per_s"], "s/s"),
        ("  of which the UI (all other threads)", result["ui_cpu_s_per_s"], "s/s"),
        ("UI CPU per redraw", result["ui_cpu_s_per_redraw"], "s"),
    ]
    for name, value, unit in rows:
        print(f"{name:<58}{'not reached' if value is None else f'{value:8.2f} {unit}'}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
        print(f"report written to {args.json}")


if __name__ == "__main__":
    main()
