"""GAE lab: TD errors, advantages, critic targets, the reward-signal decay, VAPO's length-adaptive λ."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
import torch

from rl_core.formulas import advantages as adv
from rl_core.numbers import number
from ui.labs.figures import MUTED, NEGATIVE, NEUTRAL, POSITIVE, ZERO, horizontal, log_scale

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


def gae_table(rewards: Sequence[float], critic: str, gamma: float, lam_actor: float, lam_critic: float) -> pd.DataFrame:
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


def gae_summary(table: pd.DataFrame, gamma: float, lam_actor: float) -> str:
    """Which tokens the advantages favour, and whether the positive TD errors of a rising critic pile up towards
    the start: they do only with γλ > 0 (A_t = δ_t + γλ·A_{t+1}), and only where the sums outgrow the δ_t."""
    advantages = table["advantage A_t (λ_actor)"]
    if advantages.abs().max() <= ZERO:
        return "Every advantage is 0: the critic already predicts every return, so no token is singled out."
    top = table.loc[(advantages.max() - advantages) <= ZERO, "token"].astype(int).tolist()
    if len(top) == 1:
        who = f"Token {top[0]} gets"
    elif top == list(range(top[0], top[-1] + 1)):
        who = f"Tokens {top[0]}–{top[-1]} share"
    else:
        who = f"Tokens {', '.join(map(str, top))} share"
    text = (
        f"{who} the largest advantage (A = {number(advantages.max(), '.3f')}); "
        f"the last token gets {number(advantages.iloc[-1], '.3f')}."
    )
    early = table["TD error δ_t"].iloc[:-1]
    if len(early) < 2 or not (early > ZERO).all():  # one early token has nothing to pile up on
        return text
    decay = gamma * lam_actor
    text += " Every δ_t before the last token is positive"
    if decay <= ZERO:
        return text + (
            f", but with γλ = {number(decay, 'g')} each advantage is its own δ_t: no token collects "
            "the TD errors after it, so "
            "nothing piles up towards the start."
        )
    if (advantages.iloc[:-1].diff().iloc[1:] < -ZERO).all():
        return text + (
            ", and each earlier token sums more of them (weights (γλ)^k, γλ = "
            f"{number(decay, '.3g')}): the advantage grows "
            "towards the start, the bias VC-PPO blames for responses collapsing in length."
        )
    return text + (
        f"; each earlier token sums more of them (weights (γλ)^k, γλ = {number(decay, '.3g')}), yet "
        "here the advantage does "
        "not grow steadily towards the start: the δ_t differ more than the sums add up."
    )


def decay_summary(table: pd.DataFrame, lam_actor: float, lam_critic: float) -> str:
    """How much of the final reward the first token receives under each λ."""
    first = table.iloc[0]
    return (
        f"With λ_actor = {number(lam_actor, 'g')} the first token receives "
        f"{number(first['weight of r_T (λ_actor)'], '.3g')} of the "
        f"final reward; with λ_critic = {number(lam_critic, 'g')} it receives "
        f"{number(first['weight of r_T (λ_critic)'], '.3g')}."
    )


def gae_figure(table: pd.DataFrame) -> go.Figure:
    """Bars of δ_t, A_t and the critic target per token, with the critic's values as a line."""
    bars = [
        go.Bar(x=table["token"], y=table[column], name=column, marker_color=color)
        for column, color in (
            ("TD error δ_t", MUTED),
            ("advantage A_t (λ_actor)", POSITIVE),
            ("critic target (λ_critic)", NEUTRAL),
        )
    ]
    values = go.Scatter(
        x=table["token"],
        y=table["value V(s_t)"],
        name="value V(s_t)",
        mode="lines+markers",
        line=dict(color=NEGATIVE, width=2),
    )
    return go.Figure(
        data=[*bars, values],
        layout=dict(
            barmode="group",
            height=380,
            margin=dict(t=30, b=40),
            xaxis=dict(title="token t"),
            yaxis=dict(title="δ, A, target, V (reward units)"),
            legend=dict(orientation="h", y=-0.2),
        ),
    )


def decay_figure(table: pd.DataFrame) -> go.Figure:
    """How much of the final reward reaches each token under the actor's and the critic's λ."""
    return go.Figure(
        data=[
            go.Scatter(x=table["token"], y=table[column], name=column, mode="lines+markers", line=dict(color=color))
            for column, color in (("weight of r_T (λ_actor)", POSITIVE), ("weight of r_T (λ_critic)", NEUTRAL))
        ],
        layout=dict(
            height=300,
            margin=dict(t=30, b=40),
            xaxis=dict(title="token t"),
            yaxis=dict(title="(γλ)^(T−t)", range=[0, 1.05]),
            legend=dict(orientation="h", y=-0.3),
        ),
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
        f"The first token keeps {number(short[adaptive], '.3g')} of the final reward at "
        f"{int(short['length |y|'])} tokens and "
        f"{number(long[adaptive], '.3g')} at {int(long['length |y|'])} tokens with the adaptive λ; "
        f"with λ = {fixed_lam} it "
        f"keeps {number(short[fixed], '.3g')} and {number(long[fixed], '.3g')}."
    )


def length_adaptive_figure(alpha: float, fixed_lam: float = 0.95, max_length: int = 2048) -> go.Figure:
    """The adaptive λ as a function of the response length (log axis), against a fixed λ."""
    lengths = torch.logspace(0, torch.log10(torch.tensor(float(max_length))), 200, dtype=torch.float64)
    lam = adv.length_adaptive_lambda(lengths, alpha)
    return go.Figure(
        data=[
            go.Scatter(
                x=lengths.numpy(),
                y=lam.numpy(),
                name=f"λ = 1 − 1/({number(alpha, 'g')}·|y|)",
                line=dict(color=POSITIVE, width=3),
            )
        ],
        layout=dict(
            shapes=[horizontal("line", fixed_lam, fixed_lam, line=dict(color=MUTED, dash="dash"))],
            annotations=[
                dict(
                    x=0,
                    xref="x domain",
                    y=fixed_lam,
                    yref="y",
                    text=f"fixed λ = {fixed_lam}",
                    showarrow=False,
                    xanchor="left",
                    yanchor="bottom",
                )
            ],
            height=300,
            margin=dict(t=30, b=40),
            xaxis=dict(title="response length |y|", **log_scale([1, max_length], headroom=1)),
            yaxis=dict(title="λ_actor", range=[0, 1.02]),
        ),
    )
