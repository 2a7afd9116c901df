"""Advantage lab: the group baselines side by side on one group of rewards."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
import torch

from rl_core.formulas import advantages as adv
from rl_core.formulas.metrics import zero_advantage_group_fraction
from rl_core.numbers import number
from ui.labs.figures import MUTED, NEGATIVE, NEUTRAL, POSITIVE, ZERO

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
    from `rl_core.formulas.metrics.zero_advantage_group_fraction`."""
    group_size = int(table["group"].value_counts().iloc[0])
    messages = []
    for group, rows in table.groupby("group"):
        if (rows[list(GROUP_ESTIMATORS)].abs() <= ZERO).all().all():
            messages.append(
                f"Group {group}: every response scored {number(rows['reward R'].iloc[0], 'g')}, so all "
                f"{len(GROUP_ESTIMATORS)} estimators give every response advantage 0: this group contributes "
                f"no gradient at all, whatever the loss."
            )
    if messages:
        share = zero_advantage_group_fraction(torch.tensor(table["reward R"].to_numpy()), group_size)
        messages.append(f"{number(share, '.0%')} of this batch's groups are spent without teaching anything.")
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
        f"RLOO / Dr. GRPO = {', '.join(number(x, '.4g') for x in rloo_scale)} for every response that moves "
        f"(G/(G−1) with G = {group_size}); GRPO / Dr. GRPO = "
        + ", ".join(f"{number(scale, '.4g')} in group {group}" for group, scale in grpo_scale.items())
        + " (one over the group's standard deviation), so GRPO rescales every group to the same spread."
    )


def advantages_figure(table: pd.DataFrame) -> go.Figure:
    """Grouped bars: one bar per estimator for every response, labelled group·response."""
    labels = [
        f"g{g}·y{i} (R={number(r, 'g')})" for g, i, r in zip(table["group"], table["response"], table["reward R"])
    ]
    return go.Figure(
        data=[
            go.Bar(x=labels, y=table[name], name=name, marker_color=color)
            for name, color in zip(GROUP_ESTIMATORS, (POSITIVE, NEUTRAL, NEGATIVE, MUTED))
        ],
        layout=dict(
            barmode="group",
            height=360,
            margin=dict(t=30, b=40),
            yaxis=dict(title="advantage"),
            legend=dict(orientation="h", y=-0.2),
        ),
    )
