"""Clip lab: PPO's clipped surrogate and its six cases, the dual clip, and GSPO's sequence ratio.

Every number comes from the rl_core loss that training calls, every gradient from autograd through it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch

from rl_core.formulas.aggregation import aggregate_loss
from rl_core.formulas.losses import clipped_surrogate_loss, gspo_loss, gspo_sequence_ratio
from rl_core.numbers import number
from ui.labs.figures import (
    MUTED,
    NEGATIVE,
    NEUTRAL,
    POSITIVE,
    ZERO,
    axis_key,
    grid_layout,
    horizontal,
    is_zero,
    subplot_axes,
    vertical,
)
from ui.present import chart_layout

ADVANTAGE_SIGNS = {"A > 0": 1.0, "A < 0": -1.0}


def surrogate_and_gradient(
    ratios: torch.Tensor,
    advantage: float,
    epsilon_low: float,
    epsilon_high: float,
    dual_clip: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-token objective `−L_t` and its derivative `∂(−L_t)/∂ρ` at each ratio, for one advantage value.

    The ratio is the autograd leaf and `log ρ` goes into `clipped_surrogate_loss` as `ℓ_t` (with `log π_old = 0`),
    so the derivative is exactly what a training step would see, flat pieces included.
    """
    ratio = ratios.detach().clone().requires_grad_(True)
    logp = ratio.log()[None]
    loss = clipped_surrogate_loss(
        logp, torch.zeros_like(logp), torch.full_like(logp, advantage), epsilon_low, epsilon_high, dual_clip
    )
    (grad,) = torch.autograd.grad(loss.sum(), ratio)
    return -loss.detach()[0], -grad


def surrogate_curves(
    epsilon_low: float, epsilon_high: float, dual_clip: float | None = None, points: int = 801
) -> pd.DataFrame:
    """Long table over a ratio grid for A = +1 and A = −1: objective, its ρ-derivative, and the unclipped `ρA`.

    The unclipped reference is the same loss with infinite clip ranges, so it too comes from rl_core.
    """
    ratio_max = 2.0 if dual_clip is None else max(2.0, dual_clip + 0.75)
    ratios = torch.linspace(0.02, ratio_max, points, dtype=torch.float64)
    frames = []
    for sign, advantage in ADVANTAGE_SIGNS.items():
        objective, gradient = surrogate_and_gradient(ratios, advantage, epsilon_low, epsilon_high, dual_clip)
        unclipped, _ = surrogate_and_gradient(ratios, advantage, float("inf"), float("inf"))
        frames.append(
            pd.DataFrame(
                {
                    "sign": sign,
                    "ratio": ratios.numpy(),
                    "objective": objective.numpy(),
                    "gradient": gradient.numpy(),
                    "unclipped": unclipped.numpy(),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def zero_gradient_intervals(curves: pd.DataFrame) -> pd.DataFrame:
    """Maximal runs of grid points where `∂(−L)/∂ρ = 0`, per sign of A: columns sign, start, end."""
    rows = []
    for sign, curve in curves.groupby("sign", sort=False):
        flat = (curve["gradient"].abs() <= ZERO).to_numpy().astype(int)
        ratio = curve["ratio"].to_numpy()
        # Padding with zeros makes every run start at a +1 step and end just before a −1 step.
        edges = np.flatnonzero(np.diff(np.concatenate([[0], flat, [0]])))
        rows += [{"sign": sign, "start": ratio[a], "end": ratio[b - 1]} for a, b in zip(edges[::2], edges[1::2])]
    return pd.DataFrame(rows, columns=["sign", "start", "end"])


def zero_gradient_summary(intervals: pd.DataFrame) -> str:
    """Where autograd found no gradient, per sign of A, in words."""
    parts = [
        f"for {run.sign} on ρ ∈ [{number(run.start, '.2f')}, {number(run.end, '.2f')}]"
        for run in intervals.itertuples()
    ]
    return "Autograd through the loss gives exactly zero gradient " + "; ".join(parts) + " (shaded)."


_CASE_MEANINGS = {
    ("A > 0", "below"): "the min keeps the unclipped term, so a good token that lost probability is still raised",
    ("A > 0", "inside"): "plain policy gradient: raise the good token",
    ("A > 0", "above"): "already raised past 1 + ε_high: no further push this batch",
    ("A < 0", "below"): "already lowered past 1 − ε_low: no further push this batch",
    ("A < 0", "inside"): "plain policy gradient: lower the bad token",
    ("A < 0", "above"): "the min keeps the unclipped term, so a bad token that gained probability is pushed down",
    ("A < 0", "dual"): "dual clip caps the loss at −c·A: the exploded ratio gets no gradient",
}


def clip_cases(epsilon_low: float, epsilon_high: float, dual_clip: float | None = None) -> pd.DataFrame:
    """The six cases (sign of A × ratio below / inside / above the clip range), a seventh for the dual clip,
    each evaluated through rl_core at one ratio inside its region."""
    low, high = 1 - epsilon_low, 1 + epsilon_high
    shared = [
        ("below", f"ρ < {number(low, '.2f')}", low / 2),
        ("inside", f"{number(low, '.2f')} ≤ ρ ≤ {number(high, '.2f')}", 1.0),
    ]
    above = ("above", f"ρ > {number(high, '.2f')}", high + 0.25)
    regions = {"A > 0": [*shared, above], "A < 0": [*shared, above]}
    if dual_clip is not None:
        # The dual clip splits the last region of A < 0: up to c the min still pushes down, beyond c nothing does.
        regions["A < 0"][-1:] = [
            ("above", f"{number(high, '.2f')} < ρ ≤ {number(dual_clip, '.2f')}", (high + dual_clip) / 2),
            ("dual", f"ρ > {number(dual_clip, '.2f')}", dual_clip + 0.5),
        ]
    rows = []
    for sign, sign_regions in regions.items():
        for region, label, ratio in sign_regions:
            objective, gradient = surrogate_and_gradient(
                torch.tensor([ratio], dtype=torch.float64), ADVANTAGE_SIGNS[sign], epsilon_low, epsilon_high, dual_clip
            )
            rows.append(
                {
                    "case": len(rows) + 1,
                    "sign": sign,
                    "ratio region": label,
                    "ρ tried": ratio,
                    "objective −L": objective.item(),
                    "∂(−L)/∂ρ": gradient.item(),
                    "gradient": "zero (clipped)" if is_zero(gradient).item() else "flows",
                    "meaning": _CASE_MEANINGS[sign, region],
                }
            )
    return pd.DataFrame(rows)


def surrogate_figure(
    curves: pd.DataFrame, cases: pd.DataFrame, epsilon_low: float, epsilon_high: float, dual_clip: float | None
) -> go.Figure:
    """Objective (top) and its ρ-derivative (bottom) for A > 0 (left) and A < 0 (right); zero-gradient runs
    shaded, clip bounds dashed, case numbers written at the ratio each case was evaluated at."""
    layout = grid_layout(
        2,
        2,
        column_titles=[f"{sign} (A = {number(value, '+.0f')})" for sign, value in ADVANTAGE_SIGNS.items()],
        row_titles=["objective −L", "∂(−L)/∂ρ"],
    )
    intervals = zero_gradient_intervals(curves)
    traces, shapes = [], []
    for col, (sign, curve) in enumerate(curves.groupby("sign", sort=False), start=1):
        top, bottom = subplot_axes(1, col, 2), subplot_axes(2, col, 2)
        color = POSITIVE if ADVANTAGE_SIGNS[sign] > 0 else NEGATIVE
        # The dual clip acts on negative advantages only, so c is marked on that side alone.
        bounds = [1 - epsilon_low, 1 + epsilon_high] + ([dual_clip] if dual_clip and ADVANTAGE_SIGNS[sign] < 0 else [])
        traces += [
            go.Scatter(
                x=curve["ratio"],
                y=curve["unclipped"],
                name="unclipped ρA",
                showlegend=col == 1,
                line=dict(color=MUTED, dash="dot"),
                xaxis=top[0],
                yaxis=top[1],
            ),
            go.Scatter(
                x=curve["ratio"],
                y=curve["objective"],
                name="clipped objective",
                showlegend=col == 1,
                line=dict(color=color, width=3),
                xaxis=top[0],
                yaxis=top[1],
            ),
            go.Scatter(
                x=curve["ratio"],
                y=curve["gradient"],
                name="∂(−L)/∂ρ (autograd)",
                showlegend=col == 1,
                line=dict(color=NEUTRAL, width=2),
                xaxis=bottom[0],
                yaxis=bottom[1],
            ),
        ]
        shapes += [
            vertical("rect", run.start, run.end, top[0], fillcolor=MUTED, opacity=0.3, line_width=0, layer="below")
            for run in intervals[intervals["sign"] == sign].itertuples()
        ]
        shapes += [vertical("line", x, x, top[0], line=dict(color=NEUTRAL, dash="dash", width=1)) for x in bounds]
        layout["annotations"] += [
            dict(
                x=case["ρ tried"],
                y=case["objective −L"],
                xref=top[0],
                yref=top[1],
                text=f"<b>{case['case']}</b>",
                showarrow=True,
                arrowhead=0,
                ax=0,
                ay=-28,
            )
            for case in cases[cases["sign"] == sign].to_dict("records")
        ]
        layout[axis_key(bottom[0])]["title"] = {"text": "ratio ρ = π_θ / π_old"}
    layout.update(shapes=shapes, height=560, margin=dict(t=50, b=40), legend=dict(orientation="h", y=-0.12))
    return go.Figure(data=traces, layout=chart_layout(layout))


# A response after a few updates: most tokens moved a little, one moved a lot in each direction.
EXAMPLE_LOG_RATIOS = (0.02, -0.05, 0.41, 0.01, -0.03, -0.32, 0.06, 0.0)


def random_log_ratios(length: int, spread: float, seed: int) -> list[float]:
    """A seeded draw of per-token log-ratios `ℓ_t ~ N(0, spread²)`: a response after a few updates."""
    generator = torch.Generator().manual_seed(seed)
    return (spread * torch.randn(length, generator=generator, dtype=torch.float64)).tolist()


def _token_gradients(loss: torch.Tensor, logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`∂(aggregated loss)/∂ℓ_t` under `seq-mean-token-mean`, the aggregation GRPO and GSPO use."""
    (grad,) = torch.autograd.grad(aggregate_loss(loss, mask, "seq-mean-token-mean"), logp)
    return grad[0]


def gspo_token_table(
    log_ratios: Sequence[float],
    advantage: float,
    epsilon_low: float,
    epsilon_high: float,
    seq_epsilon_low: float,
    seq_epsilon_high: float,
) -> tuple[pd.DataFrame, float]:
    """One sampled response under the token clip (PPO/GRPO) and under GSPO's sequence clip.

    Returns the per-token table and `s` = `gspo_sequence_ratio`. A token counts as clipped when autograd gives
    its log-ratio a zero gradient, so "clipped" already accounts for the sign of A.
    """
    logp = torch.tensor([list(log_ratios)], dtype=torch.float64, requires_grad=True)
    old_logp, mask = torch.zeros_like(logp), torch.ones_like(logp)
    advantages = torch.full_like(logp, advantage)
    token_grad = _token_gradients(
        clipped_surrogate_loss(logp, old_logp, advantages, epsilon_low, epsilon_high), logp, mask
    )
    sequence_grad = _token_gradients(
        gspo_loss(logp, old_logp, advantages[:, 0], mask, seq_epsilon_low, seq_epsilon_high), logp, mask
    )
    s = gspo_sequence_ratio(logp.detach(), old_logp, mask).item()
    table = pd.DataFrame(
        {
            "token": range(1, logp.shape[1] + 1),
            "log-ratio ℓ_t": logp.detach()[0].numpy(),
            "ratio ρ_t": logp.detach()[0].exp().numpy(),
            "token clip: ∂L/∂ℓ_t": token_grad.numpy(),
            "token clip: clipped": is_zero(token_grad).numpy(),
            "sequence clip: ∂L/∂ℓ_t": sequence_grad.numpy(),
            "sequence clip: clipped": is_zero(sequence_grad).numpy(),
        }
    )
    return table, s


def gspo_summary(table: pd.DataFrame, s: float, seq_epsilon_low: float, seq_epsilon_high: float) -> str:
    """What each clip does to this response, read off the gradients in `table`."""
    n = len(table)
    token_clipped = int(table["token clip: clipped"].sum())
    low, high = 1 - seq_epsilon_low, 1 + seq_epsilon_high
    where = "inside" if low <= s <= high else "outside"
    fate = (
        f"so the sequence clip silences all {n} tokens at once"
        if table["sequence clip: clipped"].all()
        else "so every token keeps a gradient under the sequence clip"
    )
    return (
        f"Token clip: {token_clipped} of {n} tokens get no gradient. "
        f"Sequence ratio s = {number(s, '.5f')} (the geometric mean of the ρ_t) lies {where} "
        f"[{number(low, '.5f')}, {number(high, '.5f')}], {fate}."
    )


def gspo_figure(table: pd.DataFrame, s: float, epsilon_low: float, epsilon_high: float) -> go.Figure:
    """Token ratios (clipped ones greyed) against the token clip band, with the sequence ratio `s` as a line."""
    colors = [MUTED if clipped else NEUTRAL for clipped in table["token clip: clipped"]]
    return go.Figure(
        data=[go.Bar(x=table["token"], y=table["ratio ρ_t"], marker_color=colors, name="token ratio ρ_t")],
        layout=dict(
            shapes=[
                horizontal(
                    "rect",
                    1 - epsilon_low,
                    1 + epsilon_high,
                    fillcolor=POSITIVE,
                    opacity=0.15,
                    line_width=0,
                    layer="below",
                ),
                horizontal("line", s, s, line=dict(color=NEGATIVE, width=3)),
            ],
            annotations=[
                dict(
                    x=1,
                    xref="x domain",
                    y=s,
                    yref="y",
                    text=f"sequence ratio s = {number(s, '.4f')}",
                    showarrow=False,
                    xanchor="right",
                    yanchor="bottom",
                )
            ],
            height=340,
            margin=dict(t=30, b=40),
            xaxis=dict(title="token t (band: token clip range)", dtick=1),
            yaxis=dict(title="ratio"),
        ),
    )
