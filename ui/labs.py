"""Tables and figures for the Labs pages: exact, model-free pictures of single formulas.

Every number comes from the rl_core function that training calls, and every gradient from autograd through
that function, so a picture can never drift from the engine. Builders take plain Python values and return
DataFrames, strings or plotly figures: the tests check them without Streamlit and the pages stay thin.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from rl_core import advantages as adv
from rl_core.aggregation import LOSS_AGG_MODES, aggregate_loss
from rl_core.kl import KL_ESTIMATORS, kl_exact
from rl_core.losses import clipped_surrogate_loss, gspo_loss, gspo_sequence_ratio, vanilla_pg_loss
from rl_core.metrics import zero_advantage_group_fraction

POSITIVE, NEGATIVE, NEUTRAL, MUTED = "#2a9d8f", "#e76f51", "#264653", "#adb5bd"
ADVANTAGE_SIGNS = {"A > 0": 1.0, "A < 0": -1.0}
# Autograd returns exact zeros where a clamp or a min cuts the graph; the tolerance only absorbs float noise.
ZERO = 1e-12


def _is_zero(x: torch.Tensor) -> torch.Tensor:
    return x.abs() <= ZERO


# ---------------------------------------------------------------------------------------------------------
# Figure building blocks
# ---------------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _cached_grid(rows: int, cols: int, column_titles: tuple[str, ...], row_titles: tuple[str, ...]) -> dict:
    layout = make_subplots(
        rows=rows, cols=cols, shared_xaxes=rows > 1, vertical_spacing=0.08, horizontal_spacing=0.08,
        column_titles=list(column_titles) or None, row_titles=list(row_titles) or None,
    ).layout.to_plotly_json()
    # The template is the default one, which every new figure gets anyway; copying it would cost most of the time.
    del layout["template"]
    return layout


def _grid_layout(rows: int, cols: int, column_titles: Sequence[str] = (), row_titles: Sequence[str] = ()) -> dict:
    """A fresh copy of make_subplots' layout (axis domains and titles). Building it takes tens of milliseconds,
    so each grid is made once; every figure is then built in a single `go.Figure` call, because plotly
    re-validates the whole figure on each `add_*` call and the incremental way was too slow to redraw."""
    return copy.deepcopy(_cached_grid(rows, cols, tuple(column_titles), tuple(row_titles)))


def _axis_key(ref: str) -> str:
    """The layout key of an axis reference: "x3" → "xaxis3", "y" → "yaxis"."""
    return f"{ref[0]}axis{ref[1:]}"


def _axes(row: int, col: int, cols: int) -> tuple[str, str]:
    """The x and y axis names of one subplot; make_subplots numbers them row by row."""
    k = (row - 1) * cols + col
    return ("x", "y") if k == 1 else (f"x{k}", f"y{k}")


def _vertical(kind: str, x0: float, x1: float, xref: str, **style) -> dict:
    """A line or band through a whole column of subplots (one shape for all rows: plotly validates each
    shape separately, and they were the largest part of drawing a figure)."""
    return dict(type=kind, x0=x0, x1=x1, y0=0, y1=1, xref=xref, yref="paper", **style)


def _horizontal(kind: str, y0: float, y1: float, **style) -> dict:
    """A full-width line or band on a single-axis figure, as a layout shape."""
    return dict(type=kind, x0=0, x1=1, y0=y0, y1=y1, xref="x domain", yref="y", **style)


# ---------------------------------------------------------------------------------------------------------
# Clip lab: PPO's clipped surrogate, dual clip, and GSPO's sequence ratio
# ---------------------------------------------------------------------------------------------------------


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
    parts = [f"for {run.sign} on ρ ∈ [{run.start:.2f}, {run.end:.2f}]" for run in intervals.itertuples()]
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
    shared = [("below", f"ρ < {low:.2f}", low / 2), ("inside", f"{low:.2f} ≤ ρ ≤ {high:.2f}", 1.0)]
    above = ("above", f"ρ > {high:.2f}", high + 0.25)
    regions = {"A > 0": [*shared, above], "A < 0": [*shared, above]}
    if dual_clip is not None:
        # The dual clip splits the last region of A < 0: up to c the min still pushes down, beyond c nothing does.
        regions["A < 0"][-1:] = [
            ("above", f"{high:.2f} < ρ ≤ {dual_clip:.2f}", (high + dual_clip) / 2),
            ("dual", f"ρ > {dual_clip:.2f}", dual_clip + 0.5),
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
                    "gradient": "zero (clipped)" if _is_zero(gradient).item() else "flows",
                    "meaning": _CASE_MEANINGS[sign, region],
                }
            )
    return pd.DataFrame(rows)


def surrogate_figure(
    curves: pd.DataFrame, cases: pd.DataFrame, epsilon_low: float, epsilon_high: float, dual_clip: float | None
) -> go.Figure:
    """Objective (top) and its ρ-derivative (bottom) for A > 0 (left) and A < 0 (right); zero-gradient runs
    shaded, clip bounds dashed, case numbers written at the ratio each case was evaluated at."""
    layout = _grid_layout(
        2, 2, column_titles=[f"{sign} (A = {value:+.0f})" for sign, value in ADVANTAGE_SIGNS.items()],
        row_titles=["objective −L", "∂(−L)/∂ρ"],
    )
    intervals = zero_gradient_intervals(curves)
    traces, shapes = [], []
    for col, (sign, curve) in enumerate(curves.groupby("sign", sort=False), start=1):
        top, bottom = _axes(1, col, 2), _axes(2, col, 2)
        color = POSITIVE if ADVANTAGE_SIGNS[sign] > 0 else NEGATIVE
        # The dual clip acts on negative advantages only, so c is marked on that side alone.
        bounds = [1 - epsilon_low, 1 + epsilon_high] + ([dual_clip] if dual_clip and ADVANTAGE_SIGNS[sign] < 0 else [])
        traces += [
            go.Scatter(x=curve["ratio"], y=curve["unclipped"], name="unclipped ρA", showlegend=col == 1,
                       line=dict(color=MUTED, dash="dot"), xaxis=top[0], yaxis=top[1]),
            go.Scatter(x=curve["ratio"], y=curve["objective"], name="clipped objective", showlegend=col == 1,
                       line=dict(color=color, width=3), xaxis=top[0], yaxis=top[1]),
            go.Scatter(x=curve["ratio"], y=curve["gradient"], name="∂(−L)/∂ρ (autograd)", showlegend=col == 1,
                       line=dict(color=NEUTRAL, width=2), xaxis=bottom[0], yaxis=bottom[1]),
        ]
        shapes += [
            _vertical("rect", run.start, run.end, top[0], fillcolor=MUTED, opacity=0.3, line_width=0, layer="below")
            for run in intervals[intervals["sign"] == sign].itertuples()
        ]
        shapes += [_vertical("line", x, x, top[0], line=dict(color=NEUTRAL, dash="dash", width=1)) for x in bounds]
        layout["annotations"] += [
            dict(x=case["ρ tried"], y=case["objective −L"], xref=top[0], yref=top[1], text=f"<b>{case['case']}</b>",
                 showarrow=True, arrowhead=0, ax=0, ay=-28)
            for case in cases[cases["sign"] == sign].to_dict("records")
        ]
        layout[_axis_key(bottom[0])]["title"] = {"text": "ratio ρ = π_θ / π_old"}
    layout.update(shapes=shapes, height=560, margin=dict(t=50, b=40), legend=dict(orientation="h", y=-0.12))
    return go.Figure(data=traces, layout=layout)


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
            "token clip: clipped": _is_zero(token_grad).numpy(),
            "sequence clip: ∂L/∂ℓ_t": sequence_grad.numpy(),
            "sequence clip: clipped": _is_zero(sequence_grad).numpy(),
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
        f"Sequence ratio s = {s:.5f} (the geometric mean of the ρ_t) lies {where} "
        f"[{low:.5f}, {high:.5f}], {fate}."
    )


def gspo_figure(table: pd.DataFrame, s: float, epsilon_low: float, epsilon_high: float) -> go.Figure:
    """Token ratios (clipped ones greyed) against the token clip band, with the sequence ratio `s` as a line."""
    colors = [MUTED if clipped else NEUTRAL for clipped in table["token clip: clipped"]]
    return go.Figure(
        data=[go.Bar(x=table["token"], y=table["ratio ρ_t"], marker_color=colors, name="token ratio ρ_t")],
        layout=dict(
            shapes=[
                _horizontal("rect", 1 - epsilon_low, 1 + epsilon_high, fillcolor=POSITIVE, opacity=0.15,
                            line_width=0, layer="below"),
                _horizontal("line", s, s, line=dict(color=NEGATIVE, width=3)),
            ],
            annotations=[dict(x=1, xref="x domain", y=s, yref="y", text=f"sequence ratio s = {s:.4f}",
                              showarrow=False, xanchor="right", yanchor="bottom")],
            height=340, margin=dict(t=30, b=40), xaxis=dict(title="token t (band: token clip range)", dtick=1),
            yaxis=dict(title="ratio"),
        ),
    )


# ---------------------------------------------------------------------------------------------------------
# GAE lab: TD errors, advantages, critic targets, the reward-signal decay, VAPO's length-adaptive λ
# ---------------------------------------------------------------------------------------------------------

CRITICS = ("zero", "perfect (values = true returns)", "initialised from the reward model")


def critic_values(rewards: torch.Tensor, critic: str, gamma: float) -> torch.Tensor:
    """`V(s_t)` `[1, T]` for the chosen critic.

    The reward-model critic is a toy of VC-PPO's observation: a reward model scores an unfinished response
    low and a nearly finished one close to its final score, so its values rise steadily along the response.
    """
    mask = torch.ones_like(rewards)
    if critic == CRITICS[0]:
        return torch.zeros_like(rewards)
    if critic == CRITICS[1]:
        return adv.reward_to_go(rewards, mask, gamma)
    if critic == CRITICS[2]:
        length = rewards.shape[1]
        completeness = torch.arange(1, length + 1, dtype=rewards.dtype) / length
        return completeness[None] * rewards.sum()
    raise ValueError(f"unknown critic {critic!r}; allowed: {', '.join(CRITICS)}")


def gae_table(
    rewards: Sequence[float], critic: str, gamma: float, lam_actor: float, lam_critic: float
) -> pd.DataFrame:
    """Per token: reward, value, TD error, actor advantage, critic target, and how much of the last token's
    reward reaches the token under each λ.

    δ_t is GAE with λ = 0; the decay column is GAE's advantage for a lone reward of 1 on the last token with a
    zero critic, i.e. `(γλ)^(T−t)` as computed by the engine.
    """
    r = torch.tensor([list(rewards)], dtype=torch.float64)
    mask = torch.ones_like(r)
    values = critic_values(r, critic, gamma)
    delta, _ = adv.gae(r, values, mask, gamma, 0.0)
    advantages, _ = adv.gae(r, values, mask, gamma, lam_actor)
    _, targets = adv.gae(r, values, mask, gamma, lam_critic)
    last_reward = torch.zeros_like(r)
    last_reward[0, -1] = 1.0
    decay_actor, _ = adv.gae(last_reward, torch.zeros_like(r), mask, gamma, lam_actor)
    decay_critic, _ = adv.gae(last_reward, torch.zeros_like(r), mask, gamma, lam_critic)
    return pd.DataFrame(
        {
            "token": range(1, r.shape[1] + 1),
            "reward r_t": r[0].numpy(),
            "value V(s_t)": values[0].numpy(),
            "TD error δ_t": delta[0].numpy(),
            "advantage A_t (λ_actor)": advantages[0].numpy(),
            "critic target (λ_critic)": targets[0].numpy(),
            "weight of r_T (λ_actor)": decay_actor[0].numpy(),
            "weight of r_T (λ_critic)": decay_critic[0].numpy(),
        }
    )


def gae_summary(table: pd.DataFrame) -> str:
    """Which token the advantages favour, and whether every TD error before the end is positive."""
    advantages = table["advantage A_t (λ_actor)"]
    if advantages.abs().max() <= ZERO:
        return "Every advantage is 0: the critic already predicts every return, so no token is singled out."
    best = int(table.loc[advantages.idxmax(), "token"])
    text = (
        f"Token {best} gets the largest advantage (A = {advantages.max():.3f}); "
        f"the last token gets {advantages.iloc[-1]:.3f}."
    )
    early = table["TD error δ_t"].iloc[:-1]
    if len(early) and (early > ZERO).all():
        text += (
            " Every δ_t before the last token is positive, so each earlier token sums more of them: the "
            "advantage grows towards the start, the bias VC-PPO blames for responses collapsing in length."
        )
    return text


def decay_summary(table: pd.DataFrame, lam_actor: float, lam_critic: float) -> str:
    """How much of the final reward the first token receives under each λ."""
    first = table.iloc[0]
    return (
        f"With λ_actor = {lam_actor:g} the first token receives {first['weight of r_T (λ_actor)']:.3g} of the "
        f"final reward; with λ_critic = {lam_critic:g} it receives {first['weight of r_T (λ_critic)']:.3g}."
    )


def gae_figure(table: pd.DataFrame) -> go.Figure:
    """Bars of δ_t, A_t and the critic target per token, with the critic's values as a line."""
    bars = [
        go.Bar(x=table["token"], y=table[column], name=column, marker_color=color)
        for column, color in (
            ("TD error δ_t", MUTED), ("advantage A_t (λ_actor)", POSITIVE), ("critic target (λ_critic)", NEUTRAL)
        )
    ]
    values = go.Scatter(x=table["token"], y=table["value V(s_t)"], name="value V(s_t)", mode="lines+markers",
                        line=dict(color=NEGATIVE, width=2))
    return go.Figure(
        data=[*bars, values],
        layout=dict(barmode="group", height=380, margin=dict(t=30, b=40), xaxis=dict(title="token t"),
                    legend=dict(orientation="h", y=-0.2)),
    )


def decay_figure(table: pd.DataFrame) -> go.Figure:
    """How much of the final reward reaches each token under the actor's and the critic's λ."""
    return go.Figure(
        data=[
            go.Scatter(x=table["token"], y=table[column], name=column, mode="lines+markers", line=dict(color=color))
            for column, color in (("weight of r_T (λ_actor)", POSITIVE), ("weight of r_T (λ_critic)", NEUTRAL))
        ],
        layout=dict(height=300, margin=dict(t=30, b=40), xaxis=dict(title="token t"),
                    yaxis=dict(title="(γλ)^(T−t)", range=[0, 1.05]), legend=dict(orientation="h", y=-0.3)),
    )


def length_adaptive_table(
    alpha: float, lengths: Sequence[int] = (8, 32, 128, 512, 1024), fixed_lam: float = 0.95
) -> pd.DataFrame:
    """VAPO's `λ = 1 − 1/(α|y|)` per response length, and the weight a final reward of 1 reaches the first token
    with that λ and with a fixed λ (γ = 1), from one batched GAE call with a `[B]` λ."""
    lengths_t = torch.tensor(list(lengths), dtype=torch.float64)
    lam = adv.length_adaptive_lambda(lengths_t, alpha)
    n, width = len(lengths), int(max(lengths))
    positions = torch.arange(width)
    mask = (positions[None] < lengths_t[:, None]).to(torch.float64)
    last_reward = (positions[None] == lengths_t[:, None] - 1).to(torch.float64)
    both_mask, both_rewards = mask.repeat(2, 1), last_reward.repeat(2, 1)
    both_lam = torch.cat([lam, torch.full((n,), fixed_lam, dtype=torch.float64)])
    first_token_weight, _ = adv.gae(both_rewards, torch.zeros_like(both_mask), both_mask, 1.0, both_lam)
    return pd.DataFrame(
        {
            "length |y|": list(lengths),
            "λ_actor = 1 − 1/(α|y|)": lam.numpy(),
            "α·|y| = 1/(1 − λ)": (alpha * lengths_t).numpy(),
            "weight of r_T at token 1 (adaptive λ)": first_token_weight[:n, 0].numpy(),
            f"weight of r_T at token 1 (λ = {fixed_lam})": first_token_weight[n:, 0].numpy(),
        }
    )


def length_adaptive_summary(table: pd.DataFrame, fixed_lam: float = 0.95) -> str:
    """How much of the final reward reaches the first token, adaptive against fixed λ, shortest and longest."""
    short, long = table.iloc[0], table.iloc[-1]
    adaptive, fixed = "weight of r_T at token 1 (adaptive λ)", f"weight of r_T at token 1 (λ = {fixed_lam})"
    return (
        f"The first token keeps {short[adaptive]:.3g} of the final reward at {int(short['length |y|'])} tokens and "
        f"{long[adaptive]:.3g} at {int(long['length |y|'])} tokens with the adaptive λ; with λ = {fixed_lam} it "
        f"keeps {short[fixed]:.3g} and {long[fixed]:.3g}."
    )


def length_adaptive_figure(alpha: float, fixed_lam: float = 0.95, max_length: int = 2048) -> go.Figure:
    """The adaptive λ as a function of the response length (log axis), against a fixed λ."""
    lengths = torch.logspace(0, torch.log10(torch.tensor(float(max_length))), 200, dtype=torch.float64)
    lam = adv.length_adaptive_lambda(lengths, alpha)
    return go.Figure(
        data=[go.Scatter(x=lengths.numpy(), y=lam.numpy(), name=f"λ = 1 − 1/({alpha:g}·|y|)",
                         line=dict(color=POSITIVE, width=3))],
        layout=dict(
            shapes=[_horizontal("line", fixed_lam, fixed_lam, line=dict(color=MUTED, dash="dash"))],
            annotations=[dict(x=0, xref="x domain", y=fixed_lam, yref="y", text=f"fixed λ = {fixed_lam}",
                              showarrow=False, xanchor="left", yanchor="bottom")],
            height=300, margin=dict(t=30, b=40), xaxis=dict(type="log", title="response length |y|"),
            yaxis=dict(title="λ_actor", range=[0, 1.02]),
        ),
    )


# ---------------------------------------------------------------------------------------------------------
# KL lab: k1, k2, k3 against the exact KL on a six-token vocabulary
# ---------------------------------------------------------------------------------------------------------

VOCABULARY = ("the", "a", "cat", "dog", "sat", "ran")
_BASE_LOGITS = torch.tensor([1.2, 0.8, 0.3, 0.0, -0.4, -0.9], dtype=torch.float64)


def shaped_logits(temperature: float, boost: float = 0.0, favourite: str = VOCABULARY[0]) -> torch.Tensor:
    """Logits over the toy vocabulary: a fixed base sharpened (temperature < 1) or flattened (> 1), plus
    `boost` on one favourite token, the way fine-tuning raises the tokens it rewards."""
    logits = _BASE_LOGITS / temperature
    logits[VOCABULARY.index(favourite)] += boost
    return logits


def exact_kl(logits: torch.Tensor, ref_logits: torch.Tensor) -> float:
    """KL(π_θ ‖ π_ref) for one state, from `rl_core.kl.kl_exact`."""
    return kl_exact(logits[None, None], ref_logits[None, None]).item()


def _estimator_values(logits: torch.Tensor, ref_logits: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each estimator's value `[V]` for every vocabulary entry, as if that token had been sampled.

    An estimator sees only the sampled token's two log-probabilities, so evaluating it once per entry and
    looking the values up gives the same numbers as evaluating it per sample, for any number of samples.
    """
    logp, ref_logp = torch.log_softmax(logits, -1), torch.log_softmax(ref_logits, -1)
    return {name: estimator(logp, ref_logp) for name, estimator in KL_ESTIMATORS.items()}


def _draw(logits: torch.Tensor, shape: tuple[int, int], seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.multinomial(torch.softmax(logits, -1), shape[0] * shape[1], replacement=True, generator=generator)
    return tokens.reshape(shape)


def kl_samples(logits: torch.Tensor, ref_logits: torch.Tensor, n: int, seed: int) -> pd.DataFrame:
    """N tokens drawn from π_θ (seeded) and k1, k2, k3 on each."""
    tokens = _draw(logits, (1, n), seed)[0]
    table = pd.DataFrame({"token": [VOCABULARY[i] for i in tokens.tolist()]})
    for name, values in _estimator_values(logits, ref_logits).items():
        table[name] = values[tokens].numpy()
    return table


def estimator_bias_variance(
    logits: torch.Tensor,
    ref_logits: torch.Tensor,
    sample_sizes: Sequence[int] = (10, 100, 1000),
    distances: Sequence[float] = (0.5, 1.0, 2.0),
    seeds: int = 200,
    seed: int = 0,
) -> pd.DataFrame:
    """Bias and variance of each estimator's N-sample mean over `seeds` independent draws of N tokens.

    The distance scales the logit gap: π_θ at distance κ has logits `ref + κ·(θ − ref)`, so κ = 1 is the
    pictured pair and κ = 0 would be π_ref itself. Each draw's first N tokens give its N-sample mean.
    """
    rows = []
    for index, kappa in enumerate(distances):
        scaled = ref_logits + kappa * (logits - ref_logits)
        truth = exact_kl(scaled, ref_logits)
        values = _estimator_values(scaled, ref_logits)
        tokens = _draw(scaled, (seeds, max(sample_sizes)), seed + index)
        for n in sample_sizes:
            # Token counts per draw: an N-sample mean is Σ_v count_v · k(v) / N.
            offsets = len(VOCABULARY) * torch.arange(seeds)[:, None]
            counts = torch.bincount((tokens[:, :n] + offsets).flatten(), minlength=seeds * len(VOCABULARY))
            counts = counts.reshape(seeds, len(VOCABULARY)).to(torch.float64)
            row = {"distance κ": kappa, "exact KL": truth, "N": n}
            for name, per_token in values.items():
                means = counts @ per_token / n
                row[f"{name} bias"] = (means.mean() - truth).item()
                row[f"{name} variance"] = means.var().item()
            rows.append(row)
    return pd.DataFrame(rows)


def kl_summary(samples: pd.DataFrame, exact: float, bias_variance: pd.DataFrame) -> str:
    """The facts the histograms and the table show, as numbers."""
    largest_n = bias_variance[bias_variance["N"] == bias_variance["N"].max()]
    k3_steadier = largest_n["k3 variance"] < largest_n["k1 variance"]
    pictured_k2_bias = bias_variance.loc[bias_variance["distance κ"] == 1.0, "k2 bias"]

    def kappas(rows: pd.DataFrame) -> str:
        return ", ".join(f"{kappa:g}" for kappa in rows["distance κ"])

    text = (
        f"Exact KL = {exact:.4f}; this draw's means: "
        + ", ".join(f"{name} = {samples[name].mean():.4f}" for name in KL_ESTIMATORS)
        + f". {(samples['k1'] < 0).mean():.0%} of the k1 values are negative. "
        f"In the table, k2's bias at κ = 1 stays between {pictured_k2_bias.min():+.4f} and "
        f"{pictured_k2_bias.max():+.4f} whatever N: more samples do not remove it. "
        f"At N = {int(largest_n['N'].iloc[0])}, k3's variance is below k1's at κ = {kappas(largest_n[k3_steadier])}"
    )
    if (~k3_steadier).any():
        text += f" but above it at κ = {kappas(largest_n[~k3_steadier])}: k3 is steadier only while π_θ stays close"
    return text + "."


def distributions_figure(logits: torch.Tensor, ref_logits: torch.Tensor) -> go.Figure:
    """π_θ and π_ref side by side over the vocabulary."""
    return go.Figure(
        data=[
            go.Bar(x=list(VOCABULARY), y=torch.softmax(values, -1).numpy(), name=name, marker_color=color)
            for name, values, color in (("π_θ", logits, POSITIVE), ("π_ref", ref_logits, MUTED))
        ],
        layout=dict(barmode="group", height=280, margin=dict(t=30, b=30), yaxis=dict(title="probability")),
    )


def kl_histograms(samples: pd.DataFrame, exact: float) -> go.Figure:
    """One histogram per estimator; the exact KL as a solid line, the sample mean dashed."""
    names = list(KL_ESTIMATORS)
    layout = _grid_layout(1, len(names), column_titles=names)
    traces, shapes = [], []
    for col, name in enumerate(names, start=1):
        axes = _axes(1, col, len(names))
        mean = samples[name].mean()
        traces.append(go.Histogram(x=samples[name], nbinsx=40, marker_color=NEUTRAL, showlegend=False,
                                   xaxis=axes[0], yaxis=axes[1]))
        shapes += [
            _vertical("line", exact, exact, axes[0], line=dict(color=NEGATIVE, width=3)),
            _vertical("line", mean, mean, axes[0], line=dict(color=POSITIVE, width=2, dash="dash")),
        ]
    layout.update(shapes=shapes, height=300, margin=dict(t=40, b=30), bargap=0.05)
    return go.Figure(data=traces, layout=layout)


# ---------------------------------------------------------------------------------------------------------
# Advantage lab: group baselines side by side
# ---------------------------------------------------------------------------------------------------------

GROUP_ESTIMATORS = ("GRPO", "Dr. GRPO", "RLOO", "REINFORCE++-baseline")


def group_advantages(groups: Sequence[Sequence[float]]) -> pd.DataFrame:
    """Rewards of one or more equal-sized groups → each estimator's advantage per response.

    REINFORCE++-baseline whitens over the valid tokens of the whole batch; every response here is one token
    long, so the whitening runs over responses, each counted once.
    """
    group_size = len(groups[0])
    if any(len(group) != group_size for group in groups):
        raise ValueError("every group must hold the same number of responses")
    R = torch.tensor([reward for group in groups for reward in group], dtype=torch.float64)
    one_token = torch.ones(len(R), 1, dtype=torch.float64)
    estimates = {
        "GRPO": adv.grpo_advantages(R, group_size),
        "Dr. GRPO": adv.dr_grpo_advantages(R, group_size),
        "RLOO": adv.rloo_advantages(R, group_size),
        "REINFORCE++-baseline": adv.reinforce_pp_baseline_advantages(R, one_token, group_size)[:, 0],
    }
    table = pd.DataFrame(
        {
            "group": [g + 1 for g, group in enumerate(groups) for _ in group],
            "response": [i + 1 for group in groups for i in range(len(group))],
            "reward R": R.numpy(),
        }
    )
    for name, values in estimates.items():
        table[name] = values.numpy()
    return table


def zero_advantage_messages(table: pd.DataFrame) -> list[str]:
    """One line per group in which every estimator gives every response exactly 0, plus the batch share
    from `rl_core.metrics.zero_advantage_group_fraction`."""
    group_size = int(table["group"].value_counts().iloc[0])
    messages = []
    for group, rows in table.groupby("group"):
        if (rows[list(GROUP_ESTIMATORS)].abs() <= ZERO).all().all():
            messages.append(
                f"Group {group}: every response scored {rows['reward R'].iloc[0]:g}, so all "
                f"{len(GROUP_ESTIMATORS)} estimators give every response advantage 0: this group contributes "
                f"no gradient at all, whatever the loss."
            )
    if messages:
        share = zero_advantage_group_fraction(torch.tensor(table["reward R"].to_numpy()), group_size)
        messages.append(f"{share:.0%} of this batch's groups are spent without teaching anything.")
    return messages


def advantage_summary(table: pd.DataFrame) -> str:
    """The relations between the estimators, read off the numbers: RLOO is Dr. GRPO scaled by G/(G−1), and
    GRPO is Dr. GRPO divided by the group's standard deviation."""
    group_size = int(table["group"].value_counts().iloc[0])
    moving = table[table["Dr. GRPO"].abs() > ZERO]
    if moving.empty:
        return "Every advantage is 0: no response stands out from its group."
    rloo_scale = (moving["RLOO"] / moving["Dr. GRPO"]).round(6).unique()
    grpo_scale = (moving["GRPO"] / moving["Dr. GRPO"]).groupby(moving["group"]).first()
    return (
        f"RLOO / Dr. GRPO = {', '.join(f'{x:.4g}' for x in rloo_scale)} for every response that moves "
        f"(G/(G−1) with G = {group_size}); GRPO / Dr. GRPO = "
        + ", ".join(f"{scale:.4g} in group {group}" for group, scale in grpo_scale.items())
        + " (one over the group's standard deviation), so GRPO rescales every group to the same spread."
    )


def advantages_figure(table: pd.DataFrame) -> go.Figure:
    """Grouped bars: one bar per estimator for every response, labelled group·response."""
    labels = [f"g{g}·y{i} (R={r:g})" for g, i, r in zip(table["group"], table["response"], table["reward R"])]
    return go.Figure(
        data=[
            go.Bar(x=labels, y=table[name], name=name, marker_color=color)
            for name, color in zip(GROUP_ESTIMATORS, (POSITIVE, NEUTRAL, NEGATIVE, MUTED))
        ],
        layout=dict(barmode="group", height=360, margin=dict(t=30, b=40), yaxis=dict(title="advantage"),
                    legend=dict(orientation="h", y=-0.2)),
    )


# ---------------------------------------------------------------------------------------------------------
# Aggregation lab: how much each token weighs under each loss aggregation
# ---------------------------------------------------------------------------------------------------------


def token_weights(
    lengths: Sequence[int], sequence_advantages: Sequence[float], mode: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(weights, push, mask)`, each `[B, T]`: `∂loss/∂L_t` and `−∂loss/∂log π_θ(a_t)` by autograd through
    `aggregate_loss` of the vanilla policy-gradient loss.

    The weight does not depend on the loss values (every mode is linear in L); the push is the direction a
    gradient step moves each token's log-probability: up for A > 0, down for A < 0, scaled by the weight.
    """
    lengths_t = torch.tensor(list(lengths))
    mask = (torch.arange(int(lengths_t.max()))[None] < lengths_t[:, None]).to(torch.float64)
    logp = torch.zeros_like(mask, requires_grad=True)
    advantages = adv.broadcast_to_tokens(torch.tensor(list(sequence_advantages), dtype=torch.float64), mask)
    per_token = vanilla_pg_loss(logp, advantages)
    weights, grad_logp = torch.autograd.grad(aggregate_loss(per_token, mask, mode), (per_token, logp))
    return weights * mask, -grad_logp, mask


def aggregation_table(lengths: Sequence[int], sequence_advantages: Sequence[float]) -> pd.DataFrame:
    """Per mode and response: the weight of one token, the response's total weight and its total push."""
    rows = []
    for mode in LOSS_AGG_MODES:
        weights, push, mask = token_weights(lengths, sequence_advantages, mode)
        for i, (length, advantage) in enumerate(zip(lengths, sequence_advantages)):
            rows.append(
                {
                    "mode": mode,
                    "response": f"y{i + 1}: {length} tokens, A = {advantage:+g}",
                    "length": length,
                    "A": advantage,
                    "weight per token": weights[i, 0].item(),
                    "total weight": weights[i].sum().item(),
                    "total push on log π": push[i].sum().item(),
                }
            )
    return pd.DataFrame(rows)


def aggregation_summary(table: pd.DataFrame) -> str:
    """How the longest response fares under each mode, compared with the shortest."""
    parts = []
    for mode, rows in table.groupby("mode", sort=False):
        longest, shortest = rows.loc[rows["length"].idxmax()], rows.loc[rows["length"].idxmin()]
        ratio = shortest["weight per token"] / longest["weight per token"]
        parts.append(
            f"{mode}: one token of the {int(shortest['length'])}-token response weighs {ratio:.3g}× one of the "
            f"{int(longest['length'])}-token response, whose tokens get a total push of "
            f"{longest['total push on log π']:+.3f}"
        )
    return ". ".join(parts) + "."


def aggregation_figure(table: pd.DataFrame) -> go.Figure:
    """Per-token weight and size of the total push per response, grouped by aggregation mode, both on log
    scales because the modes differ by orders of magnitude (the push's sign is the sign of A)."""
    layout = _grid_layout(1, 2, column_titles=["weight of one token", "|total push on log π|"])
    traces = []
    for (response, rows), color in zip(table.groupby("response", sort=False), (POSITIVE, NEGATIVE, NEUTRAL, MUTED)):
        for col, values in enumerate((rows["weight per token"], rows["total push on log π"].abs()), start=1):
            axes = _axes(1, col, 2)
            traces.append(go.Bar(x=rows["mode"], y=values, name=response, marker_color=color,
                                 showlegend=col == 1, xaxis=axes[0], yaxis=axes[1]))
    for col in (1, 2):
        layout[_axis_key(_axes(1, col, 2)[1])]["type"] = "log"
    layout.update(barmode="group", height=420, margin=dict(t=90, b=40), legend=dict(orientation="h", y=1.2))
    return go.Figure(data=traces, layout=layout)
