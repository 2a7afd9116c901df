"""Overlays of the 2025–26 successors on the Clip and KL labs: exact, model-free pictures of their formulas.

Every number comes from the rl_core function training calls and every gradient from autograd through it, as in
`ui.labs`: CISPO's clipped weight and SAPO's soft gate against PPO's hard clip, DPPO's probability band against
PPO's ratio band on the p_old × p_new plane, and the expected gradient of each KL term against the true gradient
of KL(π_θ‖π_ref). Builders take plain values and return DataFrames, strings or plotly figures (no Streamlit).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch

from rl_core.formulas.kl import kl_exact, kl_k3, kl_k3_is_corrected, kl_k3_with_k2_grad
from rl_core.formulas.losses import cispo_loss, clipped_surrogate_loss, dppo_tv_mask, sapo_gate, sapo_loss
from ui.labs.clip import ADVANTAGE_SIGNS
from ui.labs.figures import MUTED, NEGATIVE, NEUTRAL, POSITIVE
from ui.labs.kl import VOCABULARY
from ui.present import chart_layout

ZERO = 1e-12  # autograd gives exact zeros where a clip cuts the graph; this only absorbs float noise


def _weight(loss_fn, ratios: torch.Tensor, advantage: float) -> torch.Tensor:
    """The weight w in `∂L/∂log π = −w·A`: how strongly a step moves log π of a token at each ratio (by
    autograd through `loss_fn(logp, old_logp, advantages)`, with log π_old = 0)."""
    logp = ratios.log().clone().requires_grad_(True)
    loss = loss_fn(logp[None], torch.zeros_like(logp)[None], torch.full_like(logp, advantage)[None])
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    return -grad / advantage


def _columns(titles: list[str], height: int, y_title: str) -> dict:
    """A layout of side-by-side panels with shared styling (x axes named in the panels' order)."""
    n, gap = len(titles), 0.08
    width = (1 - gap * (n - 1)) / n
    # The legend a quarter of the plot's height under it: at −0.2 it touched the x axis titles in presenter mode.
    layout = {"height": height, "margin": dict(t=50, b=40), "legend": dict(orientation="h", y=-0.25), "annotations": []}
    for i, title in enumerate(titles):
        suffix = "" if i == 0 else str(i + 1)
        start = i * (width + gap)
        layout[f"xaxis{suffix}"] = {"domain": [start, start + width], "anchor": f"y{suffix}"}
        layout[f"yaxis{suffix}"] = {"anchor": f"x{suffix}", "title": {"text": y_title if i == 0 else ""}}
        layout["annotations"].append(
            dict(text=title, x=start + width / 2, y=1.08, xref="paper", yref="paper", showarrow=False)
        )
    return layout


def _ratio_grid(points: int = 401, ratio_max: float = 3.0) -> torch.Tensor:
    return torch.linspace(0.05, ratio_max, points, dtype=torch.float64)


# ---------------------------------------------------------------------------------------------- CISPO
def cispo_weights(
    epsilon_low: float, epsilon_high: float, cispo_cap: float, two_sided: bool = False, dual_clip: float | None = None
) -> pd.DataFrame:
    """Per sign of A and ratio: the weight PPO's clipped surrogate (with the lab's dual clip, if on) and CISPO put
    on A·∇log π.

    CISPO's cap is `cispo_cap` (ε_max, one-sided as TRL / MiniMax) or, `two_sided`, the clamp
    [1 − ε_low, 1 + ε_high] (verl)."""
    ratios = _ratio_grid(ratio_max=max(3.0, cispo_cap + 0.5) if not two_sided else 3.0)
    if two_sided:

        def cispo(lp, old, adv):
            return cispo_loss(lp, old, adv, epsilon_high, epsilon_low)
    else:

        def cispo(lp, old, adv):
            return cispo_loss(lp, old, adv, cispo_cap)

    def ppo(lp, old, adv):
        return clipped_surrogate_loss(lp, old, adv, epsilon_low, epsilon_high, dual_clip)

    frames = [
        pd.DataFrame(
            {
                "sign": sign,
                "ratio": ratios.numpy(),
                "PPO": _weight(ppo, ratios, a).numpy(),
                "CISPO": _weight(cispo, ratios, a).numpy(),
            }
        )
        for sign, a in ADVANTAGE_SIGNS.items()
    ]
    return pd.concat(frames, ignore_index=True)


def _silenced(rows: pd.DataFrame) -> pd.Series:
    """Where PPO's weight is zero and CISPO's is not."""
    return (rows["PPO"].abs() <= ZERO) & (rows["CISPO"].abs() > ZERO)


def silenced_spans(rows: pd.DataFrame) -> list[tuple[float, float]]:
    """The ratio intervals (first and last grid point of each run) where PPO's weight is zero and CISPO's is not:
    one past the clip on one side, or two where the dual clip also silences an exploded ratio."""
    silenced = _silenced(rows).to_numpy()
    ratios = rows["ratio"].to_numpy()
    starts = np.flatnonzero(silenced & ~np.r_[False, silenced[:-1]])
    ends = np.flatnonzero(silenced & ~np.r_[silenced[1:], False])
    return [(ratios[start], ratios[end]) for start, end in zip(starts, ends)]


def cispo_summary(table: pd.DataFrame) -> str:
    """Where PPO's gradient is zero and what CISPO's weight is there, per sign of A, read off the table."""
    parts = []
    for sign, rows in table.groupby("sign", sort=False):
        spans = silenced_spans(rows)
        if not spans:
            continue
        silenced = rows[_silenced(rows)]
        where = " and ".join(f"[{low:.2f}, {high:.2f}]" for low, high in spans)
        parts.append(
            f"for {sign}, PPO gives no gradient on ρ ∈ {where} where CISPO still weighs the token by "
            f"{silenced['CISPO'].min():.2f} to {silenced['CISPO'].max():.2f}"
        )
    smallest = table["CISPO"].min()
    return (
        "CISPO's weight is never zero (smallest on this grid: "
        f"{smallest:.3f}); " + ("; ".join(parts) if parts else "PPO's clip is silent nowhere on this grid") + "."
    )


def cispo_figure(table: pd.DataFrame) -> go.Figure:
    layout = _columns([f"{sign}" for sign in ADVANTAGE_SIGNS], 340, "weight on A·∇log π")
    traces, shapes = [], []
    for col, (_sign, rows) in enumerate(table.groupby("sign", sort=False), start=1):
        axis = "" if col == 1 else str(col)
        for low, high in silenced_spans(rows):
            shapes.append(
                dict(
                    type="rect",
                    x0=low,
                    x1=high,
                    y0=0,
                    y1=1,
                    xref=f"x{axis}",
                    yref="paper",
                    fillcolor=MUTED,
                    opacity=0.3,
                    line_width=0,
                    layer="below",
                )
            )
        traces += [
            go.Scatter(
                x=rows["ratio"],
                y=rows["PPO"],
                name="PPO clip",
                line=dict(color=NEUTRAL, width=2),
                showlegend=col == 1,
                xaxis=f"x{axis}",
                yaxis=f"y{axis}",
            ),
            go.Scatter(
                x=rows["ratio"],
                y=rows["CISPO"],
                name="CISPO sg[min(ρ, ε_max)]",
                line=dict(color=POSITIVE if col == 1 else NEGATIVE, width=3, dash="dash"),
                showlegend=col == 1,
                xaxis=f"x{axis}",
                yaxis=f"y{axis}",
            ),
        ]
        layout[f"xaxis{axis}"]["title"] = {"text": "ratio ρ = π_θ / π_old"}
    layout["shapes"] = shapes
    return go.Figure(data=traces, layout=chart_layout(layout))


# ----------------------------------------------------------------------------------------------- SAPO
SUMMARY_RATIOS = (0.5, 1.0, 1.5, 2.5)  # where the SAPO caption reads both weights
EDGE = 1e-9  # how far either side of a summary ratio PPO's weight is read, to find a clip edge there


def sapo_curves(
    epsilon_low: float, epsilon_high: float, tau_pos: float, tau_neg: float, dual_clip: float | None = None
) -> pd.DataFrame:
    """Per sign of A and ratio: SAPO's gate g_τ (τ_pos for A > 0, τ_neg for A < 0), its objective −L = A·g_τ,
    and the weights SAPO and PPO (with the lab's dual clip, if on) put on A·∇log π (autograd through `sapo_loss`
    and the clipped surrogate). Besides the grid, each of SUMMARY_RATIOS and the points EDGE either side of it,
    so that the caption reads the weights there rather than between grid points."""
    grid = _ratio_grid()
    exact = torch.tensor([r * f for r in SUMMARY_RATIOS for f in (1 - EDGE, 1.0, 1 + EDGE)], dtype=grid.dtype)
    ratios = torch.cat([grid, exact]).unique()  # sorted
    frames = []
    for sign, a in ADVANTAGE_SIGNS.items():
        tau = tau_pos if a > 0 else tau_neg

        def sapo(lp, old, adv):
            return sapo_loss(lp, old, adv, tau_pos, tau_neg)

        def ppo(lp, old, adv):
            return clipped_surrogate_loss(lp, old, adv, epsilon_low, epsilon_high, dual_clip)

        frames.append(
            pd.DataFrame(
                {
                    "sign": sign,
                    "tau": tau,
                    "ratio": ratios.numpy(),
                    "gate": sapo_gate(ratios, tau).numpy(),
                    "SAPO": _weight(sapo, ratios, a).numpy(),
                    "PPO": _weight(ppo, ratios, a).numpy(),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def sapo_summary(table: pd.DataFrame) -> str:
    """SAPO's and PPO's weights at SUMMARY_RATIOS, as computed there. Where one of them is an edge of PPO's clip
    (its weight jumps), PPO's weight just below and just above it."""
    parts = []
    for sign, rows in table.groupby("sign", sort=False):
        weights = rows.set_index("ratio")
        readings = []
        for r in SUMMARY_RATIOS:
            below, above = weights["PPO"][r * (1 - EDGE)], weights["PPO"][r * (1 + EDGE)]
            below, above = (0.0 if abs(w) <= ZERO else w for w in (below, above))  # no "−0.00"
            ppo = (
                f"{below:.2f}"
                if abs(above - below) < 1e-6
                else f"{below:.2f} below, {above:.2f} above (an edge of the clip)"
            )
            readings.append(f"ρ = {r:g} → SAPO {weights['SAPO'][r]:.2f} / PPO {ppo}")
        parts.append(f"{sign} (τ = {rows['tau'].iloc[0]:g}): " + ", ".join(readings))
    return (
        "SAPO's weight is exactly 1 on-policy and changes smoothly, never cut to 0; "
        + "; ".join(parts)
        + ". A larger τ makes it fall off sooner."
    )


def sapo_figure(table: pd.DataFrame) -> go.Figure:
    titles = [f"{sign}, τ = {rows['tau'].iloc[0]:g}" for sign, rows in table.groupby("sign", sort=False)]
    layout = _columns(titles, 340, "weight on A·∇log π")
    traces = []
    for col, (_sign, rows) in enumerate(table.groupby("sign", sort=False), start=1):
        axis = "" if col == 1 else str(col)
        traces += [
            go.Scatter(
                x=rows["ratio"],
                y=rows["PPO"],
                name="PPO clip",
                line=dict(color=NEUTRAL, width=2),
                showlegend=col == 1,
                xaxis=f"x{axis}",
                yaxis=f"y{axis}",
            ),
            go.Scatter(
                x=rows["ratio"],
                y=rows["SAPO"],
                name="SAPO ρ·g′_τ(ρ)",
                showlegend=col == 1,
                line=dict(color=POSITIVE if col == 1 else NEGATIVE, width=3),
                xaxis=f"x{axis}",
                yaxis=f"y{axis}",
            ),
            go.Scatter(
                x=rows["ratio"],
                y=rows["gate"],
                name="gate g_τ(ρ)",
                showlegend=col == 1,
                line=dict(color=MUTED, dash="dot"),
                xaxis=f"x{axis}",
                yaxis=f"y{axis}",
            ),
        ]
        layout[f"xaxis{axis}"]["title"] = {"text": "ratio ρ = π_θ / π_old"}
    return go.Figure(data=traces, layout=chart_layout(layout))


# ----------------------------------------------------------------------------------------------- DPPO
REGIONS = ("both keep", "PPO clips, DPPO keeps", "DPPO masks, PPO keeps", "both silence")


def trust_regions(
    epsilon_low: float, epsilon_high: float, delta_low: float, delta_high: float, points: int = 121
) -> pd.DataFrame:
    """Over a p_old × p_new grid and each sign of A: whether PPO's clip leaves a gradient (autograd through
    the clipped surrogate) and whether DPPO's `dppo_tv_mask` keeps the token."""
    p = torch.linspace(0.005, 0.995, points, dtype=torch.float64)
    p_old, p_new = torch.meshgrid(p, p, indexing="ij")
    frames = []
    for sign, a in ADVANTAGE_SIGNS.items():
        logp = p_new.log().clone().requires_grad_(True)
        advantages = torch.full_like(logp, a)
        loss = clipped_surrogate_loss(logp, p_old.log(), advantages, epsilon_low, epsilon_high)
        (grad,) = torch.autograd.grad(loss.sum(), logp)
        ppo_keeps = grad.abs() > ZERO
        dppo_keeps = dppo_tv_mask(p_new, p_old, advantages, delta_low, delta_high)
        frames.append(
            pd.DataFrame(
                {
                    "sign": sign,
                    "p_old": p_old.flatten().numpy(),
                    "p_new": p_new.flatten().numpy(),
                    "PPO keeps": ppo_keeps.flatten().numpy(),
                    "DPPO keeps": dppo_keeps.flatten().numpy(),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def _region(rows: pd.DataFrame) -> np.ndarray:
    ppo, dppo = rows["PPO keeps"].to_numpy(), rows["DPPO keeps"].to_numpy()
    return np.select([ppo & dppo, ~ppo & dppo, ppo & ~dppo], [0, 1, 2], 3)


def trust_region_summary(table: pd.DataFrame, epsilon_high: float, delta_high: float) -> str:
    """A rare token under each region, and the share of the rare-token strip (p_old < 0.1) each one silences."""
    rare = table[(table["sign"] == "A > 0") & (table["p_old"] < 0.1)]
    ppo_share = 1 - rare["PPO keeps"].mean()
    dppo_share = 1 - rare["DPPO keeps"].mean()
    p_old = 0.02
    return (
        f"A rare good token at p_old = {p_old}: PPO's gradient stops once p passes {p_old * (1 + epsilon_high):.4f} "
        f"(ρ = 1 + ε_high), DPPO's only past {p_old + delta_high:.2f} (p − p_old = δ_high). Of the rare-token "
        f"strip p_old < 0.1 with A > 0, PPO silences {ppo_share:.0%} of the plane, DPPO {dppo_share:.0%}."
    )


def trust_region_figure(
    table: pd.DataFrame, epsilon_low: float, epsilon_high: float, delta_low: float, delta_high: float
) -> go.Figure:
    """The four regions per sign of A, with PPO's ratio band (p = (1 ± ε)·p_old) and DPPO's probability band
    (p = p_old ± δ) drawn as lines."""
    layout = _columns(list(ADVANTAGE_SIGNS), 420, "p_new = π_θ(a)")
    colours = [POSITIVE, "#f4a261", NEGATIVE, MUTED]
    scale = [[i / 3, c] for i, c in enumerate(colours)]
    traces = []
    line = np.linspace(0, 1, 101)
    for col, (sign, rows) in enumerate(table.groupby("sign", sort=False), start=1):
        axis = "" if col == 1 else str(col)
        n = int(round(len(rows) ** 0.5))
        z = _region(rows).reshape(n, n).T  # rows of z follow p_new, columns p_old
        axis_values = rows["p_old"].to_numpy().reshape(n, n)[:, 0]
        traces.append(
            go.Heatmap(
                x=axis_values,
                y=axis_values,
                z=z,
                zmin=0,
                zmax=3,
                colorscale=scale,
                showscale=False,
                xaxis=f"x{axis}",
                yaxis=f"y{axis}",
                customdata=np.array(REGIONS)[z],
                hovertemplate="p_old %{x:.3f}, p_new %{y:.3f}: %{customdata}<extra></extra>",
            )
        )
        ratio_bound = line * (1 + epsilon_high) if sign == "A > 0" else line * (1 - epsilon_low)
        prob_bound = line + delta_high if sign == "A > 0" else line - delta_low
        traces += [
            go.Scatter(
                x=line,
                y=ratio_bound,
                name="PPO: ρ = 1 ± ε",
                line=dict(color=NEUTRAL, dash="dash"),
                showlegend=col == 1,
                xaxis=f"x{axis}",
                yaxis=f"y{axis}",
            ),
            go.Scatter(
                x=line,
                y=prob_bound,
                name="DPPO: p − p_old = ±δ",
                line=dict(color=NEUTRAL, dash="dot"),
                showlegend=col == 1,
                xaxis=f"x{axis}",
                yaxis=f"y{axis}",
            ),
        ]
        layout[f"xaxis{axis}"].update(title={"text": "p_old = π_old(a)"}, range=[0, 1])
        layout[f"yaxis{axis}"]["range"] = [0, 1]
    # One legend entry per region colour.
    traces += [
        go.Scatter(x=[None], y=[None], mode="markers", marker=dict(color=c, size=10, symbol="square"), name=name)
        for name, c in zip(REGIONS, colours)
    ]
    return go.Figure(data=traces, layout=chart_layout(layout))


# ------------------------------------------------------------------------------------ KL gradient view
KL_TERMS = {
    "k3 (plain)": lambda logp, old, ref: kl_k3(logp, ref),
    "ρ·k3 (importance-corrected)": kl_k3_is_corrected,
    "k3 value, k2 gradient (k3+)": lambda logp, old, ref: kl_k3_with_k2_grad(logp, ref),
}


def kl_gradients(logits: torch.Tensor, ref_logits: torch.Tensor, old_logits: torch.Tensor) -> pd.DataFrame:
    """Each KL term's expected value and expected gradient w.r.t. π_θ's logits when the tokens come from the
    sampler π_old, computed exactly over the vocabulary (`Σ_a π_old(a)·term(a)`, autograd through it), next to
    the true KL(π_θ‖π_ref) and its gradient (autograd through `kl_exact`)."""
    theta = logits.detach().clone().requires_grad_(True)
    truth = kl_exact(theta[None, None], ref_logits[None, None])[0, 0]
    (true_grad,) = torch.autograd.grad(truth, theta)
    old_probs = torch.softmax(old_logits, -1)
    rows = [
        {
            "term": "true KL(π_θ‖π_ref)",
            "expected value": truth.item(),
            **{f"∂/∂logit[{v}]": g for v, g in zip(VOCABULARY, true_grad.tolist())},
            "gradient error": 0.0,
        }
    ]
    ref_logp, old_logp = torch.log_softmax(ref_logits, -1)[None], torch.log_softmax(old_logits, -1)[None]
    for name, term in KL_TERMS.items():
        theta = logits.detach().clone().requires_grad_(True)
        logp = torch.log_softmax(theta, -1)[None]
        expected = (old_probs * term(logp, old_logp, ref_logp)[0]).sum()
        (grad,) = torch.autograd.grad(expected, theta)
        rows.append(
            {
                "term": name,
                "expected value": expected.item(),
                **{f"∂/∂logit[{v}]": g for v, g in zip(VOCABULARY, grad.tolist())},
                "gradient error": (grad - true_grad).norm().item(),
            }
        )
    return pd.DataFrame(rows)


def kl_gradient_summary(table: pd.DataFrame) -> str:
    truth = table.iloc[0]
    parts = [
        f"{row['term']}: value {row['expected value']:.4f} (true {truth['expected value']:.4f}), gradient error "
        f"{row['gradient error']:.4f}"
        for _, row in table.iloc[1:].iterrows()
    ]
    exact = table.iloc[1:][table.iloc[1:]["gradient error"] < 1e-9]["term"].tolist()
    verdict = (
        f"Exactly the true gradient: {', '.join(exact)}." if exact else "None of the terms has the true gradient here."
    )
    return "; ".join(parts) + ". " + verdict


def kl_gradient_figure(table: pd.DataFrame) -> go.Figure:
    columns = [c for c in table.columns if c.startswith("∂/∂logit")]
    colours = [NEUTRAL, MUTED, POSITIVE, NEGATIVE]
    return go.Figure(
        data=[
            go.Bar(
                x=[c.removeprefix("∂/∂logit[").removesuffix("]") for c in columns],
                y=[row[c] for c in columns],
                name=row["term"],
                marker_color=colour,
            )
            for (_, row), colour in zip(table.iterrows(), colours)
        ],
        layout=dict(
            barmode="group",
            height=340,
            margin=dict(t=30, b=40),
            legend=dict(orientation="h", y=-0.2),
            yaxis=dict(title="expected gradient w.r.t. the logit"),
            xaxis=dict(title="token"),
        ),
    )
