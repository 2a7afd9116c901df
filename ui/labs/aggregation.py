"""Aggregation lab: how much each token weighs under each loss aggregation."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
import torch

from rl_core.formulas import advantages as adv
from rl_core.formulas.aggregation import LOSS_AGG_MODES, aggregate_loss
from rl_core.formulas.losses import vanilla_pg_loss
from rl_core.numbers import number
from ui.labs.figures import MUTED, NEGATIVE, NEUTRAL, POSITIVE, axis_key, grid_layout, log_scale, subplot_axes

# The generation limit (max_new_tokens): the longest a response may be, and Dr. GRPO's T_max. A constant, as in
# the engine, where T_max is the task's limit: dividing by the longest response of the batch instead would let one
# long response halve every other response's push.
MAX_NEW_TOKENS = 2000


def token_weights(
    lengths: Sequence[int], sequence_advantages: Sequence[float], mode: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(weights, push, mask)`, each `[B, T]`: `∂loss/∂L_t` and `−∂loss/∂log π_θ(a_t)` by autograd through
    `aggregate_loss` of the vanilla policy-gradient loss, with T_max = `MAX_NEW_TOKENS`.

    The weight does not depend on the loss values (every mode is linear in L); the push is the direction a
    gradient step moves each token's log-probability: up for A > 0, down for A < 0, scaled by the weight.
    """
    lengths_t = torch.tensor(list(lengths))
    mask = (torch.arange(int(lengths_t.max()))[None] < lengths_t[:, None]).to(torch.float64)
    logp = torch.zeros_like(mask, requires_grad=True)
    advantages = adv.broadcast_to_tokens(torch.tensor(list(sequence_advantages), dtype=torch.float64), mask)
    per_token = vanilla_pg_loss(logp, advantages)
    weights, grad_logp = torch.autograd.grad(aggregate_loss(per_token, mask, mode, MAX_NEW_TOKENS), (per_token, logp))
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
                    "response": f"y{i + 1}: {length} tokens, A = {number(advantage, '+g')}",
                    "length": length,
                    "A": advantage,
                    "weight per token": weights[i, 0].item(),
                    "total weight": weights[i].sum().item(),
                    "total push on log π": push[i].sum().item(),
                }
            )
    return pd.DataFrame(rows)


def aggregation_summary(table: pd.DataFrame) -> str:
    """How the longest response fares under each mode, compared with the shortest, each named (y1, y2) as the
    sliders number them."""
    parts = []
    for mode, rows in table.groupby("mode", sort=False):
        longest, shortest = rows.loc[rows["length"].idxmax()], rows.loc[rows["length"].idxmin()]
        ratio = shortest["weight per token"] / longest["weight per token"]
        long_name, short_name = (row["response"].split(":")[0] for row in (longest, shortest))
        parts.append(
            f"{mode}: one token of {short_name} ({int(shortest['length'])} tokens) weighs "
            f"{number(ratio, '.3g')}× one of "
            f"{long_name} ({int(longest['length'])} tokens), whose tokens get a total push of "
            f"{number(longest['total push on log π'], '+.3f')}"
        )
    return ". ".join(parts) + "."


def aggregation_figure(table: pd.DataFrame) -> go.Figure:
    """Per-token weight and size of the total push per response, grouped by aggregation mode, both on log
    scales because the modes differ by orders of magnitude (the push's sign is the sign of A)."""
    layout = grid_layout(1, 2, column_titles=["weight of one token", "|total push on log π|"])
    traces = []
    for (response, rows), color in zip(table.groupby("response", sort=False), (POSITIVE, NEGATIVE, NEUTRAL, MUTED)):
        for col, values in enumerate((rows["weight per token"], rows["total push on log π"].abs()), start=1):
            axes = subplot_axes(1, col, 2)
            traces.append(
                go.Bar(
                    x=rows["mode"],
                    y=values,
                    name=response,
                    marker_color=color,
                    showlegend=col == 1,
                    xaxis=axes[0],
                    yaxis=axes[1],
                )
            )
    for col, column in ((1, table["weight per token"]), (2, table["total push on log π"].abs())):
        layout[axis_key(subplot_axes(1, col, 2)[1])].update(log_scale(column.tolist()))
    # The legend sits in the top margin, its bottom edge 30 px above the plot, clear of the panels' titles (about
    # 21 px tall). The bottom margin holds the slanted mode names: left to plotly's automargin, they took it
    # from the plot, which shrank (more on a narrow screen), and a legend placed at a fraction of the plot's
    # height sank onto the left panel's title.
    top, plot, bottom = 90, 290, 120
    layout.update(
        barmode="group",
        height=top + plot + bottom,
        margin=dict(t=top, b=bottom),
        legend=dict(orientation="h", yanchor="bottom", y=1 + 30 / plot, x=0),
    )
    return go.Figure(data=traces, layout=layout)
