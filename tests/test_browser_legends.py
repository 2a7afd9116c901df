"""Legends clear the titles beside them, measured in Chromium on the figures the pages draw, at the widths a
chart gets on a 1024- and a 1366-pixel screen: the Compare page's band charts (two to a row) under many long
group labels; and in the real app (`streamlit run app.py`) at 1024 and 1366 pixels, the Aggregation lab's legend
against its two panels' titles."""

import pytest

from app_driver import CHROMIUM, NO_CHROMIUM, PAGES, browser_page, open_page, overlap, serve_app
from ui.compare import band_figure

pytestmark = [pytest.mark.browser, pytest.mark.skipif(not CHROMIUM.exists(), reason=NO_CHROMIUM)]

# Every text of the figure that is not the legend's, and the legend, as rectangles on the screen.
BOXES = """() => {
    const box = el => { const r = el.getBoundingClientRect();
                        return {top: r.top, bottom: r.bottom, left: r.left, right: r.right}; };
    const gd = document.querySelector('.js-plotly-plot');
    const texts = Array.from(gd.querySelectorAll(
        '.g-gtitle text, [class^="g-x"][class$="title"] text, .annotation-text'))
        .filter(t => t.textContent).map(t => ({text: t.textContent, ...box(t)}));
    return {legend: box(gd.querySelector('.legend')), texts};
}"""


def texts_under_the_legend(figure, width: int) -> list[str]:
    with browser_page({"width": width + 40, "height": 900}) as page:
        page.set_content(figure.to_html(include_plotlyjs=True, full_html=True, default_width=f"{width}px"))
        page.wait_for_selector(".js-plotly-plot .legend")
        boxes = page.evaluate(BOXES)
    assert boxes["texts"], "the figure draws its titles"
    return under_the_legend(boxes)


def under_the_legend(boxes: dict) -> list[str]:
    """The figure's texts that the legend covers, from BOXES' measure."""
    return [text["text"] for text in boxes["texts"] if overlap(boxes["legend"], text)]


@pytest.mark.parametrize("width", [430, 600])  # half the main column at 1024 and at 1366 px
def test_a_band_charts_legend_of_long_group_labels_clears_the_step_axis_title(width):
    seeds = [[{"step": step, "success_rate": 0.1 * step + 0.01 * seed} for step in range(1, 11)] for seed in range(3)]
    labels = (
        "clip_higher: symmetric clip ε 0.2",
        "clip_higher: Clip-Higher ε_high 0.28",
        "clip_higher: Clip-Higher with dynamic sampling",
        "clip_higher: Clip-Higher, token-mean loss",
    )
    figure = band_figure("success_rate", dict.fromkeys(labels, seeds))
    assert figure.layout.xaxis.title.text == "step"
    assert texts_under_the_legend(figure, width) == []


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    with serve_app(tmp_path_factory.mktemp("app") / "streamlit.log") as (url, _):
        yield url


@pytest.mark.slow
@pytest.mark.parametrize("width", [1024, 1366])
def test_the_aggregation_labs_legend_clears_its_panels_titles_in_the_app(app_url, width):
    # In the app: Streamlit's chart theme lets the slanted mode names take room from the plot (automargin).
    with browser_page({"width": width, "height": 768}) as page:
        open_page(page, f"{app_url}/labs_aggregation", PAGES["labs_aggregation"])
        page.wait_for_selector(".js-plotly-plot .legend")
        boxes = page.evaluate(BOXES)
    titles = [text["text"] for text in boxes["texts"]]
    assert "weight of one token" in titles and "|total push on log π|" in titles
    assert under_the_legend(boxes) == []
