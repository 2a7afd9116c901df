"""Plotly figures of a run's step records, one table entry per chart; several runs can share a chart.

Figures are built from plain records, so they can be drawn for a live run, a finished one, or both overlaid.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import plotly.graph_objects as go

from rl_core.config import AlgoConfig
from rl_core.loss_terms import LOSS_TERMS

MAX_POINTS = 400  # per trace: enough to see the shape, small enough to redraw every second
RUN_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
DASHES = ("solid", "dash", "dot", "dashdot", "longdash")


@dataclass(frozen=True)
class Series:
    key: str  # the record field
    name: str


@dataclass(frozen=True)
class Chart:
    title: str
    series: tuple[Series, ...]
    caption: str
    band: tuple[str, str] | None = None  # (mean, std) fields drawn as a shaded mean ± std band
    emphasise: Callable[[AlgoConfig], str] | None = None  # the field drawn thicker, e.g. the KL estimator in use


@dataclass(frozen=True)
class ChartRun:
    """One run as the charts see it."""

    label: str
    records: list[dict]
    algo: AlgoConfig


CHARTS: tuple[Chart, ...] = (
    Chart(
        "Reward and success rate",
        (Series("reward_mean", "reward"), Series("success_rate", "success rate")),
        "Mean reward of each step's fresh samples and the share that truly solve the prompt. With a learned "
        "reward model the two can part ways: that gap is reward hacking.",
    ),
    Chart(
        "Token entropy",
        (Series("entropy", "entropy"),),
        "Mean entropy of the next-token distribution on the policy's own samples. A slide towards 0 is entropy "
        "collapse: every response in a group becomes the same and the group stops teaching anything.",
    ),
    Chart(
        "KL to the reference",
        (Series("kl_exact", "exact"), Series("kl_k1", "k1"), Series("kl_k2", "k2"), Series("kl_k3", "k3")),
        "Per-token KL(π_θ ‖ π_ref): the exact value over the whole vocabulary against the three sample "
        "estimators. The estimator the run uses is drawn thick.",
        emphasise=lambda algo: f"kl_{algo.kl_estimator}",
    ),
    Chart(
        "Clip fraction",
        (
            Series("clip_frac_low", "low side"),
            Series("clip_frac_high", "high side"),
            Series("dual_clip_frac", "dual clip"),
        ),
        "Share of tokens (for GSPO: of responses, since it clips whole responses) on which a clip is active given "
        "the sign of A: low side "
        "ρ < 1−ε_low with A < 0, high side ρ > 1+ε_high with A > 0, dual clip A < 0 with ρ > c. It stays at "
        "exactly 0 with a single update per batch: the ratio is then 1.",
    ),
    Chart(
        "Advantages",
        (
            Series("advantage_mean", "mean"),
            Series("advantage_min", "min"),
            Series("advantage_max", "max"),
        ),
        "Mean ± standard deviation (band) and extremes of the token advantages. Group-normalised advantages "
        "have mean ≈ 0 by construction.",
        band=("advantage_mean", "advantage_std"),
    ),
    Chart(
        "Response length",
        (
            Series("response_length", "all"),
            Series("response_length_correct", "correct"),
            Series("response_length_incorrect", "incorrect"),
        ),
        "Mean tokens per response (EOS included). Lengths that collapse or run to the limit point at a length "
        "bias in the loss aggregation or the critic.",
    ),
    Chart(
        "Loss parts",
        tuple(Series(term.name, term.label) for term in LOSS_TERMS),  # the engine's list of loss terms
        "The terms of the minimised loss, not their total: with group-normalised advantages the policy term is "
        "≈ 0 at every step by construction, so a falling total says nothing about learning. Watch the reward.",
    ),
    Chart(
        "Batch composition",
        (
            Series("zero_adv_group_frac", "groups with identical rewards"),
            Series("dynamic_sampling_dropped_frac", "groups dropped by dynamic sampling"),
            Series("truncated_frac", "responses cut at the length limit"),
        ),
        "Groups whose members all got the same reward have zero advantage and give no gradient; as a policy "
        "gets good (or stuck) this share grows.",
    ),
    Chart(
        "Policy change per step",
        (Series("approx_kl", "approx KL(π_old ‖ π_θ)"),),
        "How far each step's updates moved the policy from the one that sampled the batch (k2 on the sampled "
        "tokens). It is what the clip range is meant to bound.",
    ),
    Chart(
        "Critic loss",
        (Series("critic_loss", "critic loss"),),
        "Clipped squared error between the critic's values and its targets (the returns).",
    ),
    Chart(
        "Explained variance",
        (Series("explained_variance", "explained variance"),),
        "1 − Var(R − V)/Var(R): 1 means the critic predicts the returns, 0 means no better than their mean, "
        "below 0 means its predictions are worse than useless for the advantages.",
    ),
)


def _value(record: dict, key: str) -> float | None:
    value = record.get(key)
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def thin(records: list[dict], limit: int = MAX_POINTS) -> list[dict]:
    """At most about `limit` evenly spaced records, always keeping the latest."""
    stride = math.ceil(len(records) / limit) if records else 1
    kept = records[::stride]
    return kept if kept[-1:] == records[-1:] else kept + records[-1:]


def has_data(chart: Chart, runs: list[ChartRun]) -> bool:
    return any(_value(r, s.key) is not None for run in runs for r in run.records for s in chart.series)


def figure(chart: Chart, runs: list[ChartRun]) -> go.Figure:
    traces = []
    overlay = len(runs) > 1
    # One run: a colour per series. Several runs: a colour per run and a dash per series.
    def style(run_index: int, series_index: int) -> tuple[str, str]:
        if overlay:
            return RUN_COLOURS[run_index % len(RUN_COLOURS)], DASHES[series_index % len(DASHES)]
        return RUN_COLOURS[series_index % len(RUN_COLOURS)], "solid"

    for index, run in enumerate(runs):
        records = thin(run.records)
        steps = [r["step"] for r in records]
        prefix = f"{run.label} · " if overlay else ""
        if chart.band:
            mean, std = chart.band
            colour, _ = style(index, [s.key for s in chart.series].index(mean))
            upper = [None if _value(r, mean) is None else r[mean] + (_value(r, std) or 0) for r in records]
            lower = [None if _value(r, mean) is None else r[mean] - (_value(r, std) or 0) for r in records]
            traces.append(dict(type="scatter", x=steps, y=upper, mode="lines", line=dict(width=0),
                               showlegend=False, hoverinfo="skip"))
            traces.append(dict(type="scatter", x=steps, y=lower, mode="lines", line=dict(width=0), fill="tonexty",
                               fillcolor=_translucent(colour), name=f"{prefix}mean ± std"))
        emphasised = chart.emphasise(run.algo) if chart.emphasise else None
        for series_index, series in enumerate(chart.series):
            values = [_value(r, series.key) for r in records]
            if all(v is None for v in values):
                continue
            colour, dash = style(index, series_index)
            traces.append(dict(
                type="scatter",
                x=steps,
                y=values,
                # Markers for short runs, and where NaN gaps would leave isolated values without a line to draw.
                mode="lines+markers" if len(steps) < 30 or None in values else "lines",
                name=prefix + series.name + (" (in use)" if series.key == emphasised else ""),
                line=dict(
                    color=colour,
                    dash=dash,
                    width=3.5 if series.key == emphasised else 1.8,
                ),
                marker=dict(size=5),
            ))
    layout = dict(
        title=dict(text=chart.title, font=dict(size=15)),
        height=320,
        margin=dict(l=10, r=10, t=75, b=10),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0, font=dict(size=11)),
        xaxis=dict(title=dict(text="step")),
        uirevision=chart.title,  # keep the learner's zoom and hidden traces across refreshes
    )
    # Plotly's per-property validation costs ~8x the rest of a redraw (≈0.25 s of CPU for the whole dashboard,
    # every second, while training competes for the same cores); these dicts use fixed, known-good keys, and a
    # test builds every chart with validation on.
    return go.Figure(data=traces, layout=layout, _validate=False)


def _translucent(hex_colour: str, alpha: float = 0.18) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"
