"""The real thing: `streamlit run app.py` driven by Chromium through Playwright, at a laptop's 1366 × 768.

Screenshots every page (folder: env RLHF_LAB_SCREENSHOTS, else a temporary one); on the GRPO page checks that
Train and a live chart's first point share the first screen, that a chart point opens its step in the token
view and a token its term of the loss, and that every chart marks the step chosen there; that six overlaid runs
keep their legends outside the plot area; that seed-band legends keep the groups' order; that a link carries the
settings; that under load a dashboard says "Finished" soon after its run has finished; and that fast arrow keys
under load leave the Share link naming the value the slider shows.
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app_driver import (
    CHROMIUM,
    LAUNCH_FLAGS,
    NO_CHROMIUM,
    PAGES,
    SCRIPT_RAN,
    TRAINING_CHARTS,
    browser_page,
    first_point_latency,
    open_page,
    press_train,
    screenshot,
    serve_app,
    set_slider,
    wait_for_chart_points,
)
from ui.compare import band_figure

# Every test here needs the browser; without it they are skipped with the reason (a laptop without Chromium).
pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not CHROMIUM.exists(), reason=NO_CHROMIUM),
]

LAPTOP = {"width": 1366, "height": 768}
QUICK = "algo=grpo&seed=0&steps=10&sft_steps=50"  # ten RL steps after a 50-step SFT warm start
# Thirty steps: from this length on a trace's markers are invisible (ui.charts.LONG_TRACE), and must still be clicked.
LONG = QUICK.replace("steps=10", "steps=30")
FINISHED = re.compile(r"Finished (\d+) steps in (\d+) s")
# A dashboard must say "Finished" within this many seconds plus the run's own duration after the run ended
# (under load everything slows, the redraws as much as the training); the frozen one stayed stale for 120 s.
FINISH_LAG_BOUND_S = 30.0
# Where a chart's first point is drawn, in CSS pixels of the viewport, from plotly's own axes.
FIRST_POINT = """() => {
    const gd = Array.from(document.querySelectorAll('[data-testid="stMain"] .js-plotly-plot'))
        .find(gd => (gd.data || []).some(t => (t.x || []).length > 0));
    const trace = gd.data.find(t => (t.x || []).length > 0), layout = gd._fullLayout, box = gd.getBoundingClientRect();
    return {x: box.left + layout._size.l + layout.xaxis.l2p(trace.x[0]),
            y: box.top + layout._size.t + layout.yaxis.l2p(trace.y.find(v => v !== null))};
}"""
POINT_OF_CHART = """([title, index]) => {
    const gd = Array.from(document.querySelectorAll('.js-plotly-plot'))
        .find(gd => gd._fullLayout && gd.layout.title
              && gd.layout.title.text.replace(/<[^>]+>/g, '') === title);
    if (!gd) return null;
    gd.scrollIntoView({block: 'center'});
    const trace = gd.data.find(t => (t.x || []).length > index), layout = gd._fullLayout;
    const box = gd.getBoundingClientRect();
    return {step: trace.x[index], x: box.left + layout._size.l + layout.xaxis.l2p(trace.x[index]),
            y: box.top + layout._size.t + layout.yaxis.l2p(trace.y[index])};
}"""
EVERY_CHART_MARKS = f"""(step) => {{
    const charts = {TRAINING_CHARTS};
    return charts.length > 1 && charts.every(gd => (gd.layout.shapes || []).some(s => s.x0 === step));
}}"""
LEGEND_AND_PLOT = """(title) => {
    const gd = Array.from(document.querySelectorAll('.js-plotly-plot'))
        .find(gd => gd.layout && gd.layout.title && gd.layout.title.text.replace(/<[^>]+>/g, '') === title);
    const box = el => {
        const r = el.getBoundingClientRect();
        return {top: r.top, bottom: r.bottom, left: r.left, right: r.right};
    };
    return {legend: box(gd.querySelector('.legend')), plot: box(gd.querySelector('.nsewdrag')),
            runs: new Set(gd.data.map(t => t.name.split(' ')[0])).size, traces: gd.data.length};
}"""


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    log_path = tmp_path_factory.mktemp("server") / "streamlit.log"
    try:
        with serve_app(log_path) as (url, _):
            yield url
    finally:
        print("---- streamlit log (tail) ----\n" + log_path.read_text()[-4000:])  # pytest shows it on failure


@pytest.fixture
def page():
    with browser_page(LAPTOP) as page:
        yield page


def screenshots() -> Path:
    folder = Path(os.environ.get("RLHF_LAB_SCREENSHOTS") or Path(os.environ.get("TMPDIR", "/tmp")) / "rlhf-lab-shots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def finished(page, timeout_ms: int = 300_000) -> None:
    page.get_by_text(FINISHED).first.wait_for(timeout=timeout_ms)


def test_every_page_renders(app_url, page):
    # The server's very first visit goes straight to a page, not to "/": it must still pass through app.py's
    # router (its navigation sections exist nowhere else).
    open_page(page, f"{app_url}/labs_clip", PAGES["labs_clip"])
    page.get_by_text("Walk-through", exact=True).first.wait_for(timeout=10_000)
    folder = screenshots()
    for path, heading in PAGES.items():
        open_page(page, f"{app_url}/{path}", heading)
        page.wait_for_timeout(1000)  # formulas and charts finish drawing
        screenshot(page, folder / f"{path or 'overview'}.png", LAPTOP)


def test_the_instrument_fits_a_laptop_screen_and_links_charts_tokens_and_formula(app_url, page):
    open_page(page, f"{app_url}/grpo?{LONG}", PAGES["grpo"])
    train = page.get_by_role("button", name="Train", exact=True).bounding_box()
    assert train["y"] + train["height"] <= LAPTOP["height"], "Train is on the first screen"
    seconds = first_point_latency(page)
    point = page.evaluate(FIRST_POINT)
    assert 0 <= point["x"] <= LAPTOP["width"] and 0 <= point["y"] <= LAPTOP["height"], point
    assert page.get_by_role("button", name="Train", exact=True).bounding_box() == pytest.approx(train, abs=2), (
        "the controls stay put while the charts fill in"
    )
    finished(page)
    page.wait_for_timeout(1000)
    screenshot(page, screenshots() / "grpo-trained-first-screen.png", LAPTOP, full=False)

    # A chart point of a long run opens its step in the token view.
    page.wait_for_function(POINT_OF_CHART, arg=["Token entropy", 20], timeout=30_000)
    page.wait_for_timeout(500)  # scrolled into view
    target = page.evaluate(POINT_OF_CHART, ["Token entropy", 20])
    page.mouse.click(target["x"], target["y"])
    step = page.get_by_test_id("stSlider").filter(has_text="step")
    step.get_by_test_id("stSliderThumbValue").get_by_text(str(target["step"]), exact=True).wait_for(timeout=30_000)
    # Scrub one step on, then pick a token: its term of the loss, with its numbers.
    step.get_by_role("slider").press("ArrowRight")
    step.get_by_test_id("stSliderThumbValue").get_by_text(str(target["step"] + 1), exact=True).wait_for(timeout=30_000)
    # The rerun the slider started redraws the step's tokens: a click before it ends can hit the old step's element,
    # which the rerun then replaces, and is lost with it; so can a click during a later redraw of the dashboard. A
    # token not picked after a while is clicked again (a picked one would be unpicked by a click).
    page.wait_for_function(SCRIPT_RAN, timeout=30_000)
    token = page.get_by_test_id("stButtonGroup").filter(has_text="(0)").get_by_role("radio").first
    term = page.get_by_text("Gradient weight on log π")
    for _ in range(3):
        if token.get_attribute("aria-checked") != "true":
            token.click()
        page.wait_for_timeout(500)  # the click's rerun under way
        page.wait_for_function(SCRIPT_RAN, timeout=30_000)
        if term.count():
            break
    term.wait_for(timeout=30_000)
    assert page.locator(".katex").filter(has_text="ℓ").count() >= 1
    screenshot(page, screenshots() / "grpo-token-view.png", LAPTOP)
    # The step the token view shows, chosen there, is marked on every chart of the page.
    page.get_by_role("tab", name="Charts").click()
    page.wait_for_function(EVERY_CHART_MARKS, arg=target["step"] + 1, timeout=30_000)
    print(f"first chart point {seconds:.1f} s after Train; first point at {point}")


def test_six_overlaid_runs_keep_their_legends_outside_the_plot_area(app_url, page):
    open_page(page, f"{app_url}/grpo?{QUICK.replace('steps=10', 'steps=2')}", PAGES["grpo"])
    for run in range(6):
        if run:  # every run a different β, so that each label names it
            set_slider(page, "KL coefficient β", "ArrowLeft", ("0", "0.001", "0.005", "0.01", "0.02", "0.04")[5 - run])
        press_train(page)
        wait_for_chart_points(page)
        finished(page)
    page.get_by_text("#6 · beta=0").wait_for(timeout=30_000)
    page.wait_for_timeout(1500)
    for title in ("KL to the reference", "Reward and success rate"):
        boxes = page.evaluate(LEGEND_AND_PLOT, title)
        assert boxes["runs"] == 6, boxes
        assert boxes["legend"]["top"] >= boxes["plot"]["bottom"], f"{title}: the legend overlaps the plot area {boxes}"
        assert boxes["plot"]["bottom"] - boxes["plot"]["top"] >= 150, f"{title}: the plot keeps its height {boxes}"
    screenshot(page, screenshots() / "grpo-six-runs.png", LAPTOP)


def test_seed_band_legends_list_the_groups_in_their_order(page, tmp_path):
    groups = {
        label: [[{"step": 1, "entropy": level}, {"step": 2, "entropy": level}]] * 2
        for label, level in (("first", 1.0), ("second", 1.2), ("third", 1.4))
    }
    path = tmp_path / "bands.html"
    band_figure("entropy", groups).write_html(path, include_plotlyjs=True)
    page.goto(path.as_uri())
    page.locator(".legendtext").first.wait_for(timeout=30_000)
    assert [text.text_content() for text in page.locator(".legendtext").all()] == ["first", "second", "third"]


def test_a_link_carries_the_settings_and_a_bad_value_is_refused(app_url, page):
    open_page(page, f"{app_url}/grpo?algo=dapo&epsilon_high=0.31&seed=1", PAGES["grpo"])
    page.get_by_test_id("stSlider").filter(has_text="ε_high").get_by_test_id("stSliderThumbValue").get_by_text(
        "0.31", exact=True
    ).wait_for(timeout=30_000)
    set_slider(page, "KL coefficient β", "ArrowRight", "0.001")
    page.wait_for_function("() => location.search.includes('beta=0.001')", timeout=30_000)
    link = page.url
    assert "algo=dapo" in link and "epsilon_high=0.31" in link and "seed=1" in link
    other = page.context.browser.new_context(viewport=LAPTOP).new_page()  # someone else opens the link
    open_page(other, link, PAGES["grpo"])
    for label, shown in (("ε_high", "0.31"), ("KL coefficient β", "0.001")):
        other.get_by_test_id("stSlider").filter(has_text=label).get_by_test_id("stSliderThumbValue").get_by_text(
            shown, exact=True
        ).wait_for(timeout=30_000)
    assert other.get_by_role("radio", name="DAPO").is_checked()
    other.context.close()
    open_page(page, f"{app_url}/grpo?epsilon_high=abc", PAGES["grpo"])
    page.get_by_text("refused").filter(has_text="epsilon_high").wait_for(timeout=30_000)
    page.get_by_test_id("stSlider").filter(has_text="ε_high").get_by_test_id("stSliderThumbValue").get_by_text(
        "0.2", exact=True
    ).wait_for(timeout=30_000)


def test_under_load_the_dashboard_says_finished_soon_after_the_run_ends(app_url):
    """Two sessions train at once while a busy process competes for the CPU: each dashboard must show
    "Finished N steps in T s" at most FINISH_LAG_BOUND_S + T seconds after the run ended, T being its duration."""
    from playwright.sync_api import sync_playwright

    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_FLAGS)
            pages = [browser.new_context(viewport=LAPTOP).new_page() for _ in range(2)]
            for session in pages:
                open_page(session, f"{app_url}/grpo?{QUICK}", PAGES["grpo"])
            for _round in range(2):
                clicked = [press_train(session) for session in pages]
                for session, start in zip(pages, clicked):
                    finished(session)
                    shown = time.monotonic()
                    seconds = float(FINISHED.search(session.get_by_text(FINISHED).first.inner_text()).group(2))
                    lag = shown - start - seconds
                    print(f"training {seconds:.0f} s; 'Finished' on screen {lag:+.1f} s after it")
                    assert lag <= FINISH_LAG_BOUND_S + seconds, f"'Finished' came {lag:.0f} s after the run ended"
            browser.close()
    finally:
        hog.kill()


def _learner_key(page, url: str) -> str:
    """Open the overview and return the learner's key as its *Your runs, in another browser* link shows it, once
    the browser holds it in its cookie."""
    open_page(page, url, PAGES[""])
    page.wait_for_function("() => document.cookie.includes('rlhf_lab_learner=')", timeout=30_000)
    page.get_by_text("Your runs, in another browser").click()
    link = page.get_by_test_id("stCode").filter(has_text="?me=").first.inner_text().strip()
    cookie = next(c["value"] for c in page.context.cookies() if c["name"] == "rlhf_lab_learner")
    assert link.endswith(f"?me={cookie}"), (link, cookie)
    return cookie


def test_a_reload_is_the_same_learner_and_another_browser_is_not(app_url, page):
    first = _learner_key(page, app_url)
    page.reload()
    assert _learner_key(page, app_url) == first, "the cookie keeps the learner across a reload"
    other = page.context.browser.new_context(viewport=LAPTOP)  # another browser profile: no cookies
    try:
        elsewhere = other.new_page()
        assert _learner_key(elsewhere, app_url) != first, "another browser is another learner"
        open_page(elsewhere, f"{app_url}/?me={first}", PAGES[""])  # the link adopts the key, and keeps it
        elsewhere.wait_for_function(f"() => document.cookie.includes('rlhf_lab_learner={first}')", timeout=30_000)
    finally:
        other.close()


SLIDER_VALUE = """(label) => {
    const slider = Array.from(document.querySelectorAll('[data-testid="stSlider"]'))
        .find(s => s.innerText.includes(label));
    return slider.querySelector('[data-testid="stSliderThumbValue"]').innerText;
}"""


def test_fast_arrow_keys_under_load_leave_the_share_link_agreeing_with_the_sliders(app_url, page):
    # The load: another learner's training on the same server, redrawn every second.
    other = page.context.browser.new_context(viewport=LAPTOP).new_page()
    open_page(other, f"{app_url}/grpo?{LONG.replace('steps=30', 'steps=200')}", PAGES["grpo"])
    press_train(other)
    open_page(page, f"{app_url}/grpo?{QUICK}", PAGES["grpo"])
    wait_for_chart_points(other)
    slider = page.get_by_test_id("stSlider").filter(has_text="KL coefficient β").get_by_role("slider")
    disagreements = []
    for attempt, keys in enumerate((["ArrowRight"] * 6, ["ArrowLeft"] * 4, ["ArrowRight"] * 5, ["ArrowLeft"] * 7)):
        slider.focus()
        for key in keys:
            page.keyboard.press(key, delay=0)  # as fast as a held key repeats, faster than a loaded server reruns
        page.wait_for_timeout(4000)  # every rerun the presses asked for has ended
        shown = page.evaluate(SLIDER_VALUE, "KL coefficient β")
        page.get_by_role("button", name="Share", exact=True).click()
        code = page.get_by_test_id("stCode").filter(has_text="?")
        code.wait_for(timeout=30_000)
        link = code.inner_text()
        page.keyboard.press("Escape")
        beta = re.search(r"[?&]beta=([^&\s]+)", link)
        written = beta.group(1) if beta else "0.04"  # the preset's default is left out of the link
        if written != shown or f"beta={shown}" not in page.url and shown != "0.04":
            disagreements.append((attempt, shown, link, page.url))
    other.context.close()
    assert not disagreements, disagreements


def test_a_page_whose_path_ends_another_pages_shares_its_own_address(app_url, page):
    # `grpo` ends `beyond_grpo`: Streamlit's st.context.url gave a session opened on /beyond_grpo the address
    # …/beyond_/beyond_grpo, a blank page.
    open_page(page, f"{app_url}/beyond_grpo", PAGES["beyond_grpo"])
    page.get_by_role("button", name="Share", exact=True).click()
    code = page.get_by_test_id("stCode").filter(has_text="?")
    code.wait_for(timeout=30_000)
    assert code.inner_text().strip().startswith(f"{app_url}/beyond_grpo?algo=")
