"""The Compare page and the experiment panels on a small laptop screen and a common one (1024 and 1366 px wide),
measured in the real app (`streamlit run app.py`, Chromium through Playwright): the runs tables fit the page
without a horizontal scroll bar, and each Run button has its Stop beside it, a normal gap apart."""

import sqlite3

import pytest

from app_driver import CHROMIUM, NO_CHROMIUM, PAGES, browser_page, open_page, serve_app
from rl_core.algorithms import get_preset
from rl_core.config import RunConfig
from rl_core.runs.store import RunStore

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not CHROMIUM.exists(), reason=NO_CHROMIUM),
]

LEARNER = "fit-test-learner-0001"  # ?me= opens the page as the learner who owns the stored sweep
WIDTHS = (1024, 1366)
# Each dataframe's scrolling area: its content width against the width it shows.
DATAFRAME_WIDTHS = """() => Array.from(document.querySelectorAll('[data-testid="stDataFrame"]')).map(frame => {
    const scroller = frame.querySelector('.dvn-scroller');
    return {shown: scroller.clientWidth, content: scroller.scrollWidth};
})"""
# The rectangles of the main area's buttons with these labels, in page order.
BUTTONS = """(names) => Array.from(document.querySelectorAll('[data-testid="stMain"] button'))
    .filter(b => names.includes(b.innerText.trim()))
    .map(b => { const r = b.getBoundingClientRect();
                return {name: b.innerText.trim(), left: r.left, right: r.right, top: r.top}; })"""
NORMAL_GAP_PX = 16  # Streamlit's "small" gap between elements of a row (1 rem)


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    """The app on a run store that holds one finished sweep of LEARNER: three groups, two seeds each, one run
    failed with an error, labels as long as a knob grid writes them, and wall times of about a minute."""
    folder = tmp_path_factory.mktemp("app")
    store = RunStore(folder / "runs.sqlite")
    sweep = store.create_sweep({}, session=LEARNER)
    for label, knobs in (
        ("grpo · epsilon_high=0.28 · beta=0.01", {"epsilon_high": 0.28, "beta": 0.01}),
        ("grpo · epsilon_high=0.2 · beta=0.04", {}),
        ("dapo · epsilon_high=0.28 · beta=0", {}),
    ):
        algo = "dapo" if label.startswith("dapo") else "grpo"
        for seed in (0, 1):
            run_id = store.add_run(
                RunConfig(algo=get_preset(algo, **knobs), task="reverse", steps=3, seed=seed),
                label,
                sweep_id=sweep,
                session=LEARNER,
            )
            store.start_run(run_id)
            for step in (1, 2, 3):
                store.add_step(
                    run_id,
                    {
                        "step": step,
                        "success_rate": 0.3 * step,
                        "reward_mean": 0.3 * step,
                        "entropy": 1.0 / step,
                        "kl_exact": 0.01 * step,
                        "response_length": 5.0,
                    },
                )
            failed = algo == "dapo" and seed == 1
            store.finish_run(
                run_id,
                "failed" if failed else "finished",
                final={"success_rate": 0.9},
                error="ValueError: the critic diverged at step 3" if failed else None,
            )
    with sqlite3.connect(folder / "runs.sqlite") as db:  # wall times as long as a real run's, not a test's instant
        db.execute("UPDATE runs SET started_at = finished_at - 40.5 - 3.7 * id")
    with serve_app(folder / "streamlit.log", env={"RLHF_LAB_DB": str(folder / "runs.sqlite")}) as (url, _):
        yield url


@pytest.mark.parametrize("width", WIDTHS)
def test_the_compare_pages_tables_fit_without_scrolling_sideways(app_url, width):
    with browser_page({"width": width, "height": 768}) as page:
        open_page(page, f"{app_url}/compare?me={LEARNER}", PAGES["compare"])
        page.wait_for_function(
            "() => document.querySelectorAll('[data-testid=\"stDataFrame\"] .dvn-scroller').length >= 3", timeout=60_000
        )  # progress, summary and stored runs
        frames = page.evaluate(DATAFRAME_WIDTHS)
        assert len(frames) >= 3 and all(f["content"] <= f["shown"] + 1 for f in frames), frames
        # The failed run's error, no longer a column: in full under the table (which can draw before it).
        page.get_by_text(
            "#6 dapo · epsilon_high=0.28 · beta=0 · seed 1, failed: ValueError: the critic diverged at step 3",
            exact=True,
        ).wait_for(state="visible", timeout=60_000)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(
    ("path", "pair"),
    [("compare", ("Run", "Stop")), ("compare", ("Show on the charts", "Delete")), ("grpo", ("Run", "Stop"))],
)
def test_run_and_stop_sit_side_by_side_a_normal_gap_apart(app_url, width, path, pair):
    with browser_page({"width": width, "height": 768}) as page:
        open_page(page, f"{app_url}/{path}?me={LEARNER}", PAGES[path])
        # Both drawn: on a busy machine the page's other buttons can come a moment after the first of the pair.
        page.wait_for_function(
            f"names => new Set(({BUTTONS})(names).map(b => b.name)).size === 2", arg=list(pair), timeout=60_000
        )
        buttons = page.evaluate(BUTTONS, list(pair))
        first = next(b for b in buttons if b["name"] == pair[0])  # the first pair: the experiment panel's first
        second = next(b for b in buttons if b["name"] == pair[1] and abs(b["top"] - first["top"]) < 1)
        assert 0 < second["left"] - first["right"] <= NORMAL_GAP_PX, (first, second)
