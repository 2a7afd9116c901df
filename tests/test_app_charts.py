"""The dashboard's pure parts: chart figures (built without plotly's validation, so checked here with it) and
the token view."""

import math

import plotly.graph_objects as go

from rl_core.algorithms import get_preset
from ui.charts import CHARTS, ChartRun, figure, has_data, thin
from ui.tokens import COLOURINGS, token_html


def record(step: int) -> dict:
    """A step record with every charted field, plus a NaN where a metric has no value."""
    fields = {series.key for chart in CHARTS for series in chart.series} | {"advantage_std"}
    return {"step": step, **{key: 0.1 * step for key in fields}, "response_length_correct": math.nan}


def test_every_chart_is_a_valid_plotly_figure_for_one_run_and_for_an_overlay():
    runs = [ChartRun("#1 · beta=0.04", [record(s) for s in range(1, 40)], get_preset("grpo")),
            ChartRun("#2 · beta=0.1", [record(s) for s in range(1, 10)], get_preset("ppo"))]
    for chart in CHARTS:
        for shown in (runs[:1], runs):
            assert has_data(chart, shown)
            go.Figure(figure(chart, shown).to_dict())  # raises on any invalid property


def test_the_estimator_in_use_is_marked_and_nan_becomes_a_gap():
    run = ChartRun("#1", [record(s) for s in range(1, 5)], get_preset("reinforce_pp_baseline"))
    kl = figure(next(c for c in CHARTS if c.title == "KL to the reference"), [run])
    assert [t.name for t in kl.data if t.line.width > 2] == ["k2 (in use)"]
    length = figure(next(c for c in CHARTS if c.title == "Response length"), [run])
    assert [t.name for t in length.data] == ["all", "incorrect"]  # 'correct' was NaN throughout


def test_thinning_keeps_the_shape_bounded_and_the_latest_point():
    records = [{"step": s} for s in range(1, 1001)]
    kept = thin(records, limit=100)
    assert len(kept) <= 101 and kept[0]["step"] == 1 and kept[-1]["step"] == 1000


def test_token_view_escapes_text_and_colours_by_each_quantity():
    sample = {
        "prompt": "<b>", "response": "ab", "tokens": ["a", "<", "<eos>"], "reward": 1.0, "success": True,
        "truncated": False, "advantages": [0.5, -0.5, 0.0], "ratios": [1.2, 0.8, 1.0],
        "clipped": [True, False, False], "entropies": [0.3, 0.1, 0.0],
    }
    for colour_by in COLOURINGS:
        html = token_html([sample], colour_by)
        assert "&lt;b&gt;" in html and "<b>" not in html
        assert "⏎" in html and "solved" in html
    assert "rgba(255,179,0" in token_html([sample], "clipped")
