"""Nothing cut and nothing overlapping on a small laptop screen, measured in the real app (`streamlit run app.py`,
Chromium through Playwright) at 1024 × 768: the toggles' labels, the Compare page's experiment table, the Clip
lab's table of cases and, in presenter mode, its charts' legends against their axis titles; and the token grid's
tiles in one column whatever the row number's digits."""

import pytest

from app_driver import (
    CHROMIUM,
    NO_CHROMIUM,
    PAGES,
    RENDER_TIMEOUT_MS,
    browser_page,
    open_page,
    overlap,
    serve_app,
)
from rl_core.experiments import EXPERIMENTS
from ui.tokens import token_html

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not CHROMIUM.exists(), reason=NO_CHROMIUM),
]

SMALL = {"width": 1024, "height": 768}
# Elements whose text is wider than their box: cut, with or without an ellipsis (one pixel of rounding allowed).
CUT = """(selector) => Array.from(document.querySelectorAll(selector))
    .filter(el => el.scrollWidth > el.clientWidth + 1).map(el => el.innerText)"""
# Each chart's legend against its x axis titles, as rectangles on the screen.
LEGENDS_AND_AXIS_TITLES = """() => Array.from(document.querySelectorAll('[data-testid="stMain"] .js-plotly-plot'))
    .filter(gd => gd.querySelector('.legend')
                  && gd.querySelector('.g-xtitle text, [class^="g-x"][class$="title"] text'))
    .map(gd => {
        const box = el => { const r = el.getBoundingClientRect();
                            return {top: r.top, bottom: r.bottom, left: r.left, right: r.right}; };
        return {legend: box(gd.querySelector('.legend')),
                titles: Array.from(gd.querySelectorAll('[class^="g-x"][class$="title"] text'))
                    .filter(t => t.textContent).map(t => ({text: t.textContent, ...box(t)}))};
    })"""


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    with serve_app(tmp_path_factory.mktemp("app") / "streamlit.log") as (url, _):
        yield url


def test_toggle_labels_wrap_instead_of_being_cut(app_url):
    with browser_page(SMALL) as page:
        open_page(page, f"{app_url}/distillation", PAGES["distillation"])
        labels = page.get_by_test_id("stCheckbox").all_inner_texts()
        assert any("use_policy_gradient" in label for label in labels), labels
        assert any("use_task_rewards" in label for label in labels), labels
        assert page.evaluate(CUT, '[data-testid="stCheckbox"] [data-testid="stMarkdownContainer"]') == []


def test_the_experiment_table_shows_every_plain_claim_and_arms_in_full(app_url):
    with browser_page(SMALL) as page:
        open_page(page, f"{app_url}/compare", PAGES["compare"])
        for experiment in EXPERIMENTS.values():
            claim = page.get_by_text(experiment.plain, exact=True)  # the plain claim; the rest behind its expander
            claim.scroll_into_view_if_needed()
            assert claim.is_visible(), experiment.name
            arms = " · ".join(arm.label for arm in experiment.arms)
            assert page.get_by_text(arms, exact=True).first.is_visible(), arms
        assert page.evaluate(CUT, '[data-testid="stTable"] td, [data-testid="stTable"] th') == []


def test_the_clip_lab_table_shows_each_case_meaning_in_full(app_url):
    with browser_page(SMALL) as page:
        open_page(page, f"{app_url}/labs_clip", PAGES["labs_clip"])
        meaning = "the min keeps the unclipped term, so a good token that lost probability is still raised"
        # The heading can draw before the table below it on a busy machine: wait for the row, then measure.
        page.get_by_text(meaning, exact=True).wait_for(state="visible", timeout=RENDER_TIMEOUT_MS)
        assert page.evaluate(CUT, '[data-testid="stTable"] td, [data-testid="stTable"] th') == []


@pytest.mark.parametrize("width", [1024, 1366])
def test_the_clip_lab_legends_clear_their_axis_titles_in_presenter_mode(app_url, width):
    with browser_page({"width": width, "height": 768}) as page:
        open_page(page, f"{app_url}/labs_clip?present=1", PAGES["labs_clip"])
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot .legend').length >= 4")
        charts = page.evaluate(LEGENDS_AND_AXIS_TITLES)
        assert len(charts) >= 4, charts  # the clipped surrogate, CISPO, SAPO and DPPO
        crossing = [
            (title["text"], chart["legend"])
            for chart in charts
            for title in chart["titles"]
            if overlap(chart["legend"], title)
        ]
        assert crossing == []


def test_token_grid_rows_start_their_tiles_in_one_column():
    sample = {
        "prompt": "abc",
        "tokens": ["b", "c", "d"],
        "advantages": [0.5, 0.5, 0.5],
        "ratios": [1.0] * 3,
        "entropies": [0.1] * 3,
        "clipped": [False] * 3,
        "success": True,
        "truncated": False,
        "reward": 1.0,
    }
    # Rows 1 to 12: "9." and "10." differ by one character in a monospace font.
    grid = token_html([sample] * 12, "advantage")
    with browser_page(SMALL) as page:
        page.set_content(f"<body>{grid}</body>")
        lefts = page.evaluate("""() => Array.from(document.querySelectorAll('body > div'))
            .map(row => row.querySelector('span[title]').getBoundingClientRect().left)""")
    assert len(lefts) == 12 and max(lefts) - min(lefts) < 0.5, lefts
