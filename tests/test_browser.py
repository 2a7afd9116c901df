"""The real thing: `streamlit run app.py` driven by Chromium through Playwright.

Visits every page and screenshots it (folder: env RLHF_LAB_SCREENSHOTS, else a temporary one), trains on the
GRPO page until its chart has points, stops it, and prints how long the first chart point took after the
click, with a cold and with a warm SFT cache, and how often the dashboard redrew while training.
"""

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
PAGES = {  # URL path → a heading the page shows once it has rendered
    "": "RLHF policy optimisation, one algorithm at a time",
    "policy_gradient": "Policy Gradient (REINFORCE)",
    "ppo": "PPO: Proximal Policy Optimization",
    "grpo": "GRPO, with DAPO and Dr. GRPO",
    "gspo": "GSPO: Group Sequence Policy Optimization",
    "rloo": "RLOO: REINFORCE Leave-One-Out",
    "reinforce_pp": "REINFORCE++",
    "vapo": "VAPO and VC-PPO: repairing the critic",
    "labs_clip": "Clip lab: where the clipped surrogate stops pushing",
    "labs_gae": "GAE lab: how a reward at the end reaches the first token",
    "labs_kl": "KL lab: three estimators of one KL",
    "labs_advantages": "Advantage lab: one group of rewards, four baselines",
    "labs_aggregation": "Aggregation lab: how much one token weighs",
    "compare": "Compare and ablate",
}
RENDER_TIMEOUT_MS = 60_000  # the first page also imports torch and transformers
TRAINING_TIMEOUT_MS = 300_000
HAS_CHART_POINTS = """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
    .some(gd => (gd.data || []).some(trace => (trace.x || []).length > 0))"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    if not CHROMIUM.exists():
        pytest.skip("Chromium not installed at /usr/bin/chromium: apt-get install chromium")
    port = free_port()
    log_path = tmp_path_factory.mktemp("server") / "streamlit.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless=true",
             "--server.address=127.0.0.1", f"--server.port={port}", "--browser.gatherUsageStats=false",
             "--server.fileWatcherType=none"],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        server.wait(10)
        print("---- streamlit log (tail) ----\n" + log_path.read_text()[-4000:])  # pytest shows it on failure


@pytest.fixture
def page():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_FLAGS)
        yield browser.new_page(viewport={"width": 1400, "height": 1000})
        browser.close()


def screenshots() -> Path:
    folder = Path(os.environ.get("RLHF_LAB_SCREENSHOTS") or Path(os.environ.get("TMPDIR", "/tmp")) / "rlhf-lab-shots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def first_point_latency(page) -> float:
    """Click Train and return the seconds until the new run's chart shows a point."""
    page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Train", exact=True).click()
    clicked = time.monotonic()
    # A previous run's charts stay up until the rerun after the click replaces them.
    page.wait_for_function(f"() => !({HAS_CHART_POINTS})()", timeout=30_000, polling=50)
    page.wait_for_function(HAS_CHART_POINTS, timeout=TRAINING_TIMEOUT_MS, polling=50)
    return time.monotonic() - clicked


COUNT_PROGRESS_CHANGES = """(ms) => new Promise(resolve => {
    const read = () => document.querySelector('[data-testid="stProgress"]')?.innerText ?? null;
    let last = read(), changes = 0;
    const timer = setInterval(() => {
        const text = read();
        if (text !== null && text !== last) { changes++; last = text; }
    }, 50);
    setTimeout(() => { clearInterval(timer); resolve(changes); }, ms);
})"""


def progress_redraws(page, seconds: float = 10.0) -> float:
    """Redraws per second of the dashboard, counted in the browser as changes of the progress bar's text
    (step count and elapsed seconds, so every redraw while training changes it)."""
    return page.evaluate(COUNT_PROGRESS_CHANGES, int(seconds * 1000)) / seconds


def screenshot(page, path: Path) -> None:
    """The whole page: Streamlit scrolls an inner container, so grow the viewport to its height first."""
    height = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
    page.set_viewport_size({"width": 1400, "height": min(max(height, 1000), 16000)})
    page.screenshot(path=path)
    page.set_viewport_size({"width": 1400, "height": 1000})


def set_slider(page, label: str, keys: str, shown: str) -> None:
    """Move a slider with the keyboard and wait until the server has the new value."""
    slider = page.get_by_test_id("stSlider").filter(has_text=label)
    for key in keys.split():
        slider.get_by_role("slider").press(key)
    slider.get_by_test_id("stSliderThumbValue").get_by_text(shown, exact=True).wait_for()
    time.sleep(1)  # the value reaches the server a moment after the thumb moves


def stop_run(page) -> None:
    page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Stop", exact=True).click()
    page.get_by_text("Stopped after").wait_for(timeout=30_000)


def test_every_page_renders_and_grpo_trains_live(app_url, page):
    folder = screenshots()
    for path, heading in PAGES.items():
        page.goto(f"{app_url}/{path}")
        page.get_by_text(heading, exact=True).first.wait_for(timeout=RENDER_TIMEOUT_MS)
        page.wait_for_timeout(1000)  # formulas and charts finish drawing
        screenshot(page, folder / f"{path or 'overview'}.png")

    page.goto(f"{app_url}/grpo")
    page.get_by_text(PAGES["grpo"], exact=True).first.wait_for(timeout=RENDER_TIMEOUT_MS)
    # The longest run, so that it is still training when Stop is pressed, after a short (50-step) SFT warm start.
    set_slider(page, "training steps", "End", "500")
    page.get_by_text("SFT warm start").click()
    set_slider(page, "SFT steps", "Home ArrowRight", "50")

    cold = first_point_latency(page)
    redraws = progress_redraws(page)
    stop_run(page)
    warm = first_point_latency(page)
    page.wait_for_timeout(2000)
    stop_run(page)
    screenshot(page, folder / "grpo-trained.png")
    print(f"first chart point after Train: {cold:.2f} s with a cold SFT cache (50 SFT steps), "
          f"{warm:.2f} s with a warm one; dashboard redraws while training: {redraws:.2f}/s; "
          f"screenshots in {folder}")
    assert page.locator(".js-plotly-plot").count() >= 6
