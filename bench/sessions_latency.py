"""Many learners pressing Train at once: the time from each click to that session's first chart point, and
whether a queued learner is told their place and an estimate of the wait.

Starts `streamlit run app.py` on 127.0.0.1 (default caps: the live runs share one loop of at most 12), trains the
default GRPO run once so its SFT warm start is cached (as it is after the first run of a class), then for each N
in `--sessions` opens N browser sessions (separate Chromium contexts) on the GRPO page, presses Train in all of
them within a fraction of a second, and waits until every one shows a chart point. A session that is queued is read every
poll for "you are number … in the queue" and "… s to wait". Each round ends by pressing Stop in every session
(a closed tab's training goes on), so the next round starts on an idle server.

Run from the repository root:  python bench/sessions_latency.py [--sessions 1 3 6 10] [--json out.json]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from app_driver import (  # noqa: E402
    CHROMIUM,
    HAS_CHART_POINTS,
    LAUNCH_FLAGS,
    TRAINING_TIMEOUT_MS,
    open_page,
    press_train,
    serve_app,
    wait_for_chart_points,
)
from playwright.sync_api import TimeoutError as PlaywrightTimeout  # noqa: E402

HEADING = "GRPO, with DAPO and Dr. GRPO"
QUEUE_PLACE = "in the queue"
WAIT_ESTIMATE = "s to wait"


def round_of(browser, url: str, sessions: int) -> dict:
    """N sessions press Train together; seconds from each click to its first chart point."""
    contexts = [browser.new_context(viewport={"width": 1400, "height": 1000}) for _ in range(sessions)]
    try:
        pages = [context.new_page() for context in contexts]
        for page in pages:
            open_page(page, f"{url}/grpo", HEADING)
        train = [page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Train", exact=True)
                 for page in pages]
        clicked = []
        for button in train:  # as close together as one driver can click
            button.click()
            clicked.append(time.monotonic())
        latency: dict[int, float] = {}
        queued, told_place, told_estimate = set(), set(), set()
        seen: dict[int, str] = {}  # each session's latest alert text while it waited
        deadline = time.monotonic() + TRAINING_TIMEOUT_MS / 1000
        while len(latency) < sessions:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{sessions - len(latency)} sessions got no chart point")
            for index, page in enumerate(pages):
                if index in latency:
                    continue
                if page.evaluate(HAS_CHART_POINTS):
                    latency[index] = time.monotonic() - clicked[index]
                else:
                    alerts = page.locator('[data-testid="stAlert"]')
                    text = " ".join(alerts.nth(i).inner_text() for i in range(alerts.count()))
                    seen[index] = text or seen.get(index, "")
                    if "queued:" in text:
                        queued.add(index)
                        told_place |= {index} if QUEUE_PLACE in text else set()
                        told_estimate |= {index} if WAIT_ESTIMATE in text else set()
            time.sleep(0.05)
        times = [latency[i] for i in range(sessions)]
        return {
            "sessions": sessions,
            "first_point_s": times,
            "median_s": statistics.median(times),
            "worst_s": max(times),
            "click_spread_s": clicked[-1] - clicked[0],
            "queued_sessions": len(queued),
            "told_their_place": len(told_place),
            "told_an_estimate": len(told_estimate),
            "last_alert_while_waiting": [seen.get(i, "") for i in range(sessions)],
        }
    finally:
        # A closed tab's training goes on (a reload must find it running), so each round stops its own runs: the
        # next round starts on an idle server.
        stop_trainings(pages)
        for context in contexts:
            context.close()


def stop_trainings(pages) -> None:
    """Press the lab's Stop (the first of the page's Stop buttons; the experiment panels have their own) where it is
    live, and wait until each stopped run says so."""
    stopped = []
    for page in pages:
        stop = page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Stop", exact=True).first
        try:
            stop.click(timeout=5_000)
            stopped.append(page)
        except PlaywrightTimeout:
            pass  # Stop is not live: this run had trained all its steps
    for page in stopped:
        try:
            page.get_by_text("Stopped after").first.wait_for(timeout=30_000)
        except PlaywrightTimeout:
            pass  # it ended on its own between the click and the Stop


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "n/a"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 3, 6, 10])
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    cache = Path(tempfile.mkdtemp(prefix="rlhf-lab-sessions-bench-"))
    env = {"RLHF_LAB_CACHE": str(cache), "RLHF_LAB_DB": str(cache / "runs.sqlite"), "RLHF_LAB_WARM_START": "0"}
    results = {"cpus": os.cpu_count(), "load_average_before": load_average(), "rounds": []}
    with serve_app(cache / "streamlit.log", env) as (url, _), sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_FLAGS)
        try:
            warm = browser.new_page()
            open_page(warm, f"{url}/grpo", HEADING)
            press_train(warm)
            wait_for_chart_points(warm)  # the SFT checkpoint is cached from here on
            stop_trainings([warm])
            warm.close()
            for n in args.sessions:
                outcome = round_of(browser, url, n)
                results["rounds"].append(outcome)
                print(f"{n:>2} sessions: first chart point median {outcome['median_s']:.1f} s, worst "
                      f"{outcome['worst_s']:.1f} s; {outcome['queued_sessions']} queued, "
                      f"{outcome['told_their_place']} told their place, {outcome['told_an_estimate']} an estimate "
                      f"(clicks spread over {outcome['click_spread_s']:.1f} s)", flush=True)
        finally:
            browser.close()
    results["load_average_after"] = load_average()
    print(f"load average before {results['load_average_before']}, after {results['load_average_after']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
