"""Does a run's dashboard say "Finished" as soon as the run has finished, when the machine is busy?

Starts `streamlit run app.py`, opens the GRPO page in two browser sessions (two Chromium contexts), starts a
CPU hog (`--hogs` busy processes), and `--rounds` times presses Train in both sessions and waits for each
dashboard to show "Finished N steps in T s". For every run it prints the lag: seconds from the click until the
text appeared, less T (the run's own time from its start to its end, as the page reports it). A dashboard that
froze shows a lag of minutes. The server log's "does not exist anymore" lines are counted too.

Run from the repository root:  python bench/finish_under_load.py [--rounds 5 --steps 20 --hogs 1]
                               [--root OTHER_CHECKOUT] [--json bench/results/finish.json]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from app_driver import CHROMIUM, LAUNCH_FLAGS, PAGES, ROOT, open_page, serve_app, set_slider  # noqa: E402

FINISHED = re.compile(r"Finished (\d+) steps in (\d+) s")
LIMIT_S = 600.0


def finished_seconds(page) -> float | None:
    """T of the "Finished N steps in T s" message, or None while it is not on the page."""
    found = page.get_by_text(FINISHED)
    if not found.count():
        return None
    try:
        return float(FINISHED.search(found.first.inner_text(timeout=1000)).group(2))
    except Exception:  # noqa: BLE001 - redrawn between the count and the read
        return None


def measure(args) -> dict:
    from playwright.sync_api import sync_playwright

    cache = Path(tempfile.mkdtemp(prefix="rlhf-lab-finish-"))
    env = {"RLHF_LAB_CACHE": str(cache), "RLHF_LAB_DB": str(cache / "runs.sqlite"), "RLHF_LAB_WARM_START": "0"}
    log_path = cache / "streamlit.log"
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
    lags: list[float] = []
    try:
        with serve_app(log_path, env, root=args.root) as (url, _), sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_FLAGS)
            pages = [browser.new_context(viewport={"width": 1366, "height": 768}).new_page() for _ in range(2)]
            for page in pages:
                # The run's length from the URL; a checkout without URL settings shows the slider on the page.
                open_page(page, f"{url}/grpo?algo=grpo&seed=0&steps={args.steps}", PAGES["grpo"])
                if page.get_by_test_id("stSlider").filter(has_text="training steps").is_visible():
                    set_slider(page, "training steps", "Home " + "ArrowRight " * args.steps_index, str(args.steps))
            for round_ in range(args.rounds):
                clicked = {}
                for index, page in enumerate(pages):
                    page.get_by_role("button", name="Train", exact=True).click()
                    clicked[index] = time.monotonic()
                waiting = dict(clicked)
                while waiting:
                    for index in list(waiting):
                        seconds = finished_seconds(pages[index])
                        # The previous round's message stays until the click's rerun replaces it: skip 2 s.
                        if seconds is not None and time.monotonic() - waiting[index] > 2:
                            lag = time.monotonic() - waiting.pop(index) - seconds
                            lags.append(lag)
                            print(
                                f"round {round_ + 1} session {index + 1}: training {seconds:.0f} s, "
                                f"'Finished' shown {lag:+.1f} s after it",
                                flush=True,
                            )
                        elif time.monotonic() - waiting[index] > LIMIT_S:
                            lags.append(LIMIT_S)
                            print(f"round {round_ + 1} session {index + 1}: no 'Finished' in {LIMIT_S:.0f} s")
                            waiting.pop(index)
                    time.sleep(0.2)
            browser.close()
    finally:
        for hog in hogs:
            hog.kill()
    log = log_path.read_text()
    return {
        "root": str(args.root),
        "lags_s": lags,
        "max_lag_s": max(lags),
        "missing_fragment_messages": log.count("does not exist anymore"),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20, help="training steps per run (a value of the slider)")
    parser.add_argument("--hogs", type=int, default=1, help="busy processes competing for the CPU")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose app.py to serve")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    grid = (2, 5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500)
    args.steps_index = grid.index(args.steps)
    result = measure(args)
    print(
        f"largest lag {result['max_lag_s']:.1f} s over {len(result['lags_s'])} runs; server log: "
        f"{result['missing_fragment_messages']} × 'fragment … does not exist anymore'"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
