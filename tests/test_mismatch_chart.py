"""The sampler–trainer mismatch chart gives k1 and k3 each a readable scale: a bfloat16 sampler's k1 swings by
±6e-4 around 0 while k3 stays near 1e-5, so on one linear axis k3 is a flat line at 0. Drawn as |value| on a log
axis, both fill the plot; the hover keeps k1's sign."""

import math

import plotly.graph_objects as go
import pytest

from rl_core.algorithms import get_preset
from ui.charts import CHARTS, ChartRun, caption, figure

MISMATCH = next(chart for chart in CHARTS if chart.title == "Sampler–trainer mismatch")
K1 = [6e-4, -5e-4, 4e-4, -6e-4, 0.0]  # a batch where k1 is exactly 0 has no place on a log axis
K3 = [1.0e-5, 1.2e-5, 0.9e-5, 1.1e-5, 1.0e-5]
RECORDS = [
    {"step": step, "rollout_corr/kl": k1, "rollout_corr/k3_kl": k3}
    for step, (k1, k3) in enumerate(zip(K1, K3), start=1)
]


def test_k1_and_k3_are_drawn_as_magnitudes_on_a_log_axis_with_k1_s_sign_on_hover():
    chart = figure(MISMATCH, [ChartRun("#1 · GRPO", RECORDS, get_preset("grpo"))])
    go.Figure(chart.to_dict())  # plotly's own validation accepts the layout
    k1, k3 = (
        {trace.name: trace for trace in chart.data}[name]
        for name in ("k1 · rollout_corr/kl", "k3 · rollout_corr/k3_kl")
    )
    assert list(k1.y) == [6e-4, 5e-4, 4e-4, 6e-4, None] and list(k1.customdata) == K1
    assert list(k3.y) == K3
    axis = chart.layout.yaxis
    assert axis.type == "log" and axis.title.text.startswith("|KL|")
    # The ticks run from the decade under k3 to the one above k1: a tick at 1e-5, 2e-5 and 5e-5 under k3's values,
    # where a linear axis up to 6e-4 would put its first tick (1e-4) above all of them.
    assert min(axis.tickvals) <= 1e-5 and max(axis.tickvals) >= 6e-4
    assert [t for t in axis.tickvals if 1e-5 <= t <= 1e-4] == [1e-5, 2e-5, 5e-5, 1e-4]
    assert "|value| on a log axis" in caption(MISMATCH, [ChartRun("#1 · GRPO", RECORDS, get_preset("grpo"))])


def test_the_log_axis_reaches_a_factor_of_two_past_the_largest_and_smallest_magnitudes():
    """From 0.9e-5 / 2 (k3's smallest) to 6e-4 × 2 (k1's largest): no point sits on the top or bottom edge."""
    axis = figure(MISMATCH, [ChartRun("#1 · GRPO", RECORDS, get_preset("grpo"))]).layout.yaxis
    assert axis.range == pytest.approx((math.log10(0.45e-5), math.log10(1.2e-3)))
