"""The real thing: `streamlit run app.py` driven by Chromium through Playwright.

Visits every page and screenshots it (folder: env RLHF_LAB_SCREENSHOTS, else a temporary one), trains on the
GRPO page until its chart has points, stops it, and prints how long the first chart point took after the
click, with a cold and with a warm SFT cache, and how often the dashboard redrew while training.
"""

import os
from pathlib import Path

import pytest

from app_driver import (
    CHROMIUM,
    PAGES,
    browser_page,
    first_point_latency,
    open_page,
    progress_redraws,
    screenshot,
    serve_app,
    set_slider,
    stop_run,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]



@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    if not CHROMIUM.exists():
        pytest.skip("Chromium not installed at /usr/bin/chromium: apt-get install chromium")
    log_path = tmp_path_factory.mktemp("server") / "streamlit.log"
    try:
        with serve_app(log_path) as (url, _):
            yield url
    finally:
        print("---- streamlit log (tail) ----\n" + log_path.read_text()[-4000:])  # pytest shows it on failure


@pytest.fixture
def page():
    with browser_page() as page:
        yield page


def screenshots() -> Path:
    folder = Path(os.environ.get("RLHF_LAB_SCREENSHOTS") or Path(os.environ.get("TMPDIR", "/tmp")) / "rlhf-lab-shots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_every_page_renders_and_grpo_trains_live(app_url, page):
    # The server's very first visit goes straight to a page, not to "/": it must still pass through app.py's
    # router (its sidebar sections exist nowhere else).
    open_page(page, f"{app_url}/labs_clip", PAGES["labs_clip"])
    page.get_by_test_id("stSidebarNav").get_by_text("Walk-through", exact=True).wait_for(timeout=10_000)
    folder = screenshots()
    for path, heading in PAGES.items():
        open_page(page, f"{app_url}/{path}", heading)
        page.wait_for_timeout(1000)  # formulas and charts finish drawing
        screenshot(page, folder / f"{path or 'overview'}.png")

    open_page(page, f"{app_url}/grpo", PAGES["grpo"])
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
