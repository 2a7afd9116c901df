"""Driving the real app: `streamlit run app.py` on 127.0.0.1 and Debian's Chromium through Playwright.

Shared by the browser test and `bench/app_latency.py`. Never `playwright install`: the browser is
/usr/bin/chromium (`apt-get install chromium`), or the file RLHF_LAB_CHROMIUM names."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path(os.environ.get("RLHF_LAB_CHROMIUM") or "/usr/bin/chromium")
NO_CHROMIUM = f"Chromium not found at {CHROMIUM}: apt-get install chromium (or set RLHF_LAB_CHROMIUM)"
LAUNCH_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
RENDER_TIMEOUT_MS = 60_000  # the first page also imports torch and transformers
TRAINING_TIMEOUT_MS = 300_000
# The charts drawn against the training step (x axis "step"), not the chat's charts of tokens after a run.
TRAINING_CHARTS = """Array.from(document.querySelectorAll('.js-plotly-plot'))
    .filter(gd => (((gd.layout || {}).xaxis || {}).title || {}).text === 'step')"""
HAS_CHART_POINTS = f"""() => {TRAINING_CHARTS}
    .some(gd => (gd.data || []).some(trace => (trace.x || []).length > 0))"""
# What the training charts show, as one string: each trace's name and its x values.
CHART_CONTENTS = f"""() => JSON.stringify({TRAINING_CHARTS}
    .map(gd => (gd.data || []).map(trace => [trace.name, Array.from(trace.x || [])])))"""
# Streamlit's app element says whether the script is running; "notRunning" once a run has ended. Together with no
# loading placeholder left, every element the run wrote is on the page.
SCRIPT_RAN = """() => document.querySelector('[data-testid="stApp"]')?.dataset.testScriptState === 'notRunning'
    && !document.querySelector('[data-testid="stSkeleton"]')"""
PAGES = {  # URL path → a heading the page shows once it has rendered
    "": "RLHF policy optimisation, one algorithm at a time",
    "policy_gradient": "Policy Gradient (REINFORCE)",
    "ppo": "PPO: Proximal Policy Optimization",
    "grpo": "GRPO, with DAPO and Dr. GRPO",
    "gspo": "GSPO: Group Sequence Policy Optimization",
    "rloo": "RLOO: REINFORCE Leave-One-Out",
    "reinforce_pp": "REINFORCE++",
    "vapo": "VAPO and VC-PPO: repairing the critic",
    "beyond_grpo": "Beyond GRPO (2025–26)",
    "distillation": "On-policy distillation: a teacher scores every token",
    "reward_model": "The reward model: Bradley-Terry on preference pairs",
    "dpo": "DPO and IPO: the policy learns from the pairs themselves",
    "labs_clip": "Clip lab: where the clipped surrogate stops pushing",
    "labs_gae": "GAE lab: how a reward at the end reaches the first token",
    "labs_kl": "KL lab: three estimators of one KL",
    "labs_advantages": "Advantage lab: one group of rewards, four baselines",
    "labs_aggregation": "Aggregation lab: how much one token weighs",
    "compare": "Compare and ablate",
}
COUNT_PROGRESS_CHANGES = """(ms) => new Promise(resolve => {
    const read = () => document.querySelector('[data-testid="stProgress"]')?.innerText ?? null;
    let last = read(), changes = 0;
    const timer = setInterval(() => {
        const text = read();
        if (text !== null && text !== last) { changes++; last = text; }
    }, 50);
    setTimeout(() => { clearInterval(timer); resolve(changes); }, ms);
})"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_app(log_path: Path, env: dict | None = None, root: Path = ROOT) -> Iterator[tuple[str, subprocess.Popen]]:
    """`(url, server process)` of the app in `root` on a free loopback port; its output goes to `log_path`."""
    port = free_port()
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamlit",
                "run",
                "app.py",
                "--server.headless=true",
                "--server.address=127.0.0.1",
                f"--server.port={port}",
                "--browser.gatherUsageStats=false",
                "--server.fileWatcherType=none",
            ],
            cwd=root,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=None if env is None else os.environ | env,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the app did not start:\n{log_path.read_text()[-4000:]}") from None
                time.sleep(0.5)
        yield url, server
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:  # a busy machine: training threads finishing their step
            server.kill()
            server.wait(10)


@contextlib.contextmanager
def browser_page(viewport: dict | None = None):
    """A fresh Chromium page, 1400 × 1000 unless `viewport` says otherwise."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_FLAGS)
        try:
            yield browser.new_page(viewport=viewport or {"width": 1400, "height": 1000})
        finally:
            browser.close()


def overlap(a: dict, b: dict) -> bool:
    """Whether two screen rectangles (`getBoundingClientRect`'s top, bottom, left, right) share any area."""
    return a["left"] < b["right"] and b["left"] < a["right"] and a["top"] < b["bottom"] and b["top"] < a["bottom"]


def open_page(page, url: str, heading: str) -> None:
    """Go to the page and wait until it shows its heading, its script has run to the end and no element is still a
    loading placeholder. The heading alone is not enough: on a busy machine it draws while the script is still
    writing the elements below it, and a test that reads those at once finds none."""
    page.goto(url)
    page.get_by_text(heading, exact=True).first.wait_for(timeout=RENDER_TIMEOUT_MS)
    page.wait_for_function(SCRIPT_RAN, timeout=RENDER_TIMEOUT_MS)


def press_train(page) -> float:
    """Click Train and wait until the previous run's charts are gone or redrawn; returns the monotonic time of the
    click."""
    before = page.evaluate(CHART_CONTENTS)
    page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Train", exact=True).click()
    clicked = time.monotonic()
    # A previous run's charts stay up until the rerun after the click replaces them: for an instant with no points,
    # or, when the new run's first step is done before that rerun draws, with other contents straight away.
    page.wait_for_function(
        f"(before) => !({HAS_CHART_POINTS})() || ({CHART_CONTENTS})() !== before",
        arg=before,
        timeout=30_000,
        polling=50,
    )
    return clicked


def wait_for_chart_points(page) -> None:
    page.wait_for_function(HAS_CHART_POINTS, timeout=TRAINING_TIMEOUT_MS, polling=50)


def first_point_latency(page) -> float:
    """Click Train and return the seconds until the new run's chart shows a point."""
    clicked = press_train(page)
    wait_for_chart_points(page)
    return time.monotonic() - clicked


def progress_redraws(page, seconds: float = 10.0) -> float:
    """Redraws per second of the dashboard, counted in the browser as changes of the progress bar's text
    (step count and elapsed seconds, so every redraw while training changes it)."""
    return page.evaluate(COUNT_PROGRESS_CHANGES, int(seconds * 1000)) / seconds


LATEST_OF_SERIES = """([title, name]) => {
    const gd = Array.from(document.querySelectorAll('.js-plotly-plot'))
        .find(gd => gd.layout && gd.layout.title && gd.layout.title.text.replace(/<[^>]+>/g, '') === title);
    const trace = gd && (gd.data || []).find(t => t.name === name);
    return trace && trace.y.length ? trace.y[trace.y.length - 1] : null;
}"""


def chart_value(page, title: str, series: str) -> float | None:
    """The latest value a chart of the dashboard shows for one series (a single run's chart), or None."""
    return page.evaluate(LATEST_OF_SERIES, [title, series])


def screenshot(page, path: Path, viewport: dict | None = None, full: bool = True) -> None:
    """The whole page (`full`), or what the first screen shows. Streamlit scrolls an inner container, so for
    the whole page the viewport grows to its height first."""
    viewport = viewport or {"width": 1400, "height": 1000}
    if not full:
        page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollTo(0, 0)")
        page.screenshot(path=path)
        return
    height = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
    page.set_viewport_size({"width": viewport["width"], "height": min(max(height, viewport["height"]), 16000)})
    page.screenshot(path=path)
    page.set_viewport_size(viewport)


def set_slider(page, label: str, keys: str, shown: str) -> None:
    """Move a slider with the keyboard and wait until the server has the new value."""
    slider = page.get_by_test_id("stSlider").filter(has_text=label)
    for key in keys.split():
        slider.get_by_role("slider").press(key)
    slider.get_by_test_id("stSliderThumbValue").get_by_text(shown, exact=True).wait_for()
    time.sleep(1)  # the value reaches the server a moment after the thumb moves


def stop_run(page) -> None:
    """Press the lab's Stop: the page's first (an algorithm page's experiment panels have their own)."""
    page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Stop", exact=True).first.click()
    page.get_by_text("Stopped after").first.wait_for(timeout=30_000)


def app_test_on(page: str, timeout: float = 60, learner: str | None = None, **params):
    """The whole app under Streamlit's AppTest (no browser) in a new browser session — of the learner whose token
    is `learner`, else of a new one — opened with these query parameters, switched to `app_pages/<page>.py`
    (unless "overview") and drawn without an exception."""
    from streamlit.testing.v1 import AppTest

    from ui.session import KEY

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=timeout)
    if learner is not None:
        at.session_state[KEY] = learner
    for name, value in params.items():
        at.query_params[name] = value
    at.run()
    if page != "overview":
        at.switch_page(f"app_pages/{page}.py").run()
    assert not at.exception, at.exception
    return at
