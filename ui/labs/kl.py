"""KL lab: k1, k2, k3 against the exact KL on a six-token vocabulary."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
import torch

from rl_core.formulas.kl import KL_ESTIMATORS, kl_exact
from rl_core.numbers import number
from ui.labs.figures import MUTED, NEGATIVE, NEUTRAL, POSITIVE, axis_key, grid_layout, subplot_axes, vertical

VOCABULARY = ("the", "a", "cat", "dog", "sat", "ran")
_BASE_LOGITS = torch.tensor([1.2, 0.8, 0.3, 0.0, -0.4, -0.9], dtype=torch.float64)


def shaped_logits(temperature: float, boost: float = 0.0, favourite: str = VOCABULARY[0]) -> torch.Tensor:
    """Logits over the toy vocabulary: a fixed base sharpened (temperature < 1) or flattened (> 1), plus
    `boost` on one favourite token, the way fine-tuning raises the tokens it rewards."""
    logits = _BASE_LOGITS / temperature
    logits[VOCABULARY.index(favourite)] += boost
    return logits


def exact_kl(logits: torch.Tensor, ref_logits: torch.Tensor) -> float:
    """KL(π_θ ‖ π_ref) for one state, from `rl_core.formulas.kl.kl_exact`."""
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
        return ", ".join(f"{number(kappa, 'g')}" for kappa in rows["distance κ"])

    text = (
        f"Exact KL = {number(exact, '.4f')}; this draw's means: "
        + ", ".join(f"{name} = {number(samples[name].mean(), '.4f')}" for name in KL_ESTIMATORS)
        + f". {number((samples['k1'] < 0).mean(), '.0%')} of the k1 values are negative. "
        f"In the table, k2's bias at κ = 1 stays between {number(pictured_k2_bias.min(), '+.4f')} and "
        f"{number(pictured_k2_bias.max(), '+.4f')} whatever N: more samples do not remove it. "
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
    layout = grid_layout(1, len(names), column_titles=names)
    traces, shapes = [], []
    for col, name in enumerate(names, start=1):
        axes = subplot_axes(1, col, len(names))
        mean = samples[name].mean()
        traces.append(
            go.Histogram(
                x=samples[name], nbinsx=40, marker_color=NEUTRAL, showlegend=False, xaxis=axes[0], yaxis=axes[1]
            )
        )
        # The two lines are named once, on the first panel, for the legend.
        shapes += [
            vertical(
                "line", exact, exact, axes[0], line=dict(color=NEGATIVE, width=3), name="exact KL", showlegend=col == 1
            ),
            vertical(
                "line",
                mean,
                mean,
                axes[0],
                line=dict(color=POSITIVE, width=2, dash="dash"),
                name="mean of the samples",
                showlegend=col == 1,
            ),
        ]
        layout[axis_key(axes[0])]["title"] = dict(text=f"{name} of one sampled token")
    layout[axis_key(subplot_axes(1, 1, len(names))[1])]["title"] = dict(text="samples")
    layout.update(
        shapes=shapes,
        height=360,
        margin=dict(t=40, b=90),
        bargap=0.05,
        showlegend=True,
        legend=dict(orientation="h", yanchor="top", y=-0.3, x=0),
    )
    return go.Figure(data=traces, layout=layout)
