"""Rerun latency of the Labs pages: from a slider change to the fully re-rendered page.

Each page is rendered once (imports warmed up), then one slider is moved to a new value before every rerun,
never repeating a value, so no cached result helps; each rerun is timed. The table gives the median and
worst rerun per page; `--json PATH` also writes the numbers.

Run from the repository root:  python bench/labs_latency.py [--reruns 9] [--json report.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
# The pages import `ui` from the repository root, which a script in bench/ does not have on its path.
sys.path.insert(0, str(ROOT))

# page → (slider key, the value to set before rerun i)
SLIDERS = {
    "labs_clip": ("clip_eps_high", lambda i: round(0.30 + 0.01 * i, 2)),
    "labs_gae": ("gae_lam_actor", lambda i: round(0.50 + 0.02 * i, 2)),
    "labs_kl": ("kl_boost", lambda i: round(0.2 + 0.1 * i, 1)),
    "labs_advantages": ("adv_groups", lambda i: 2 + i % 3 if i % 2 == 0 else 1),
    "labs_aggregation": ("agg_length_2", lambda i: 100 + 37 * i),
}


def measure(page: str, reruns: int) -> dict:
    slider, value_at = SLIDERS[page]
    at = AppTest.from_file(str(ROOT / "app_pages" / f"{page}.py"), default_timeout=120)
    start = time.perf_counter()
    at.run()
    first = time.perf_counter() - start
    times = []
    for i in range(reruns):
        at.slider(key=slider).set_value(value_at(i))
        start = time.perf_counter()
        at.run()
        times.append(time.perf_counter() - start)
        if at.exception:
            raise RuntimeError(f"{page} failed after {slider} = {value_at(i)}: {at.exception[0].value}")
    return {
        "page": page,
        "slider": slider,
        "first_run_s": first,
        "median_rerun_s": statistics.median(times),
        "max_rerun_s": max(times),
        "reruns": reruns,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reruns", type=int, default=9, help="timed reruns per page (default 9)")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args()

    results = [measure(page, args.reruns) for page in SLIDERS]
    print(f"{'page':<18} {'slider moved':<15} {'first run':>10} {'median rerun':>13} {'worst rerun':>12}")
    for r in results:
        print(
            f"{r['page']:<18} {r['slider']:<15} {r['first_run_s'] * 1000:>8.0f}ms "
            f"{r['median_rerun_s'] * 1000:>11.0f}ms {r['max_rerun_s'] * 1000:>10.0f}ms"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
