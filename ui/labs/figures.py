"""Building blocks shared by the labs' figures: colours, subplot grids made once, lines and bands."""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Sequence

import torch
from plotly.subplots import make_subplots

from rl_core.numbers import number

POSITIVE, NEGATIVE, NEUTRAL, MUTED = "#2a9d8f", "#e76f51", "#264653", "#adb5bd"
# Autograd returns exact zeros where a clamp or a min cuts the graph; the tolerance only absorbs float noise.
ZERO = 1e-12


def is_zero(x: torch.Tensor) -> torch.Tensor:
    return x.abs() <= ZERO


def log_ticks(values: Sequence[float]) -> dict:
    """Ticks for a log axis over these values: 1, 2 and 5 times each power of ten (the powers alone where the
    values span more than three decades, which would crowd the axis) from the decade below the smallest positive
    value to the one above the largest, each labelled in full ("0.02", "200"), where plotly's own labels read
    "5, 2, 0.1, 5, 2" (its minor ticks show only their leading digit)."""
    positive = [v for v in values if v > 0 and math.isfinite(v)]
    if not positive:
        return {}
    low, high = math.floor(math.log10(min(positive))), math.ceil(math.log10(max(positive)))
    ticks = [m * 10.0**k for k in range(low, high + 1) for m in ((1, 2, 5) if high - low <= 3 else (1,))]
    return dict(tickvals=ticks, ticktext=[number(t, "g") if t < 1000 else number(t, ",.0f") for t in ticks])


# How far a log axis reaches past its values, as a factor (0.3 of a decade): plotly's own range pads no bar, so
# the tallest touched the top of the plot.
LOG_HEADROOM = 2.0


def log_scale(values: Sequence[float], headroom: float = LOG_HEADROOM) -> dict:
    """A log axis over these values (their positive, finite ones) with `log_ticks`' ticks, from `headroom` times
    below the smallest to `headroom` times above the largest: the tallest bar clears the top of the plot and the
    smallest, whose bar rises from the bottom of the axis, still shows. `headroom = 1`: exactly the values' span."""
    positive = [v for v in values if v > 0 and math.isfinite(v)]
    if not positive:
        return dict(type="log")
    low, high = min(positive) / headroom, max(positive) * headroom
    return dict(type="log", range=[math.log10(low), math.log10(high)], **log_ticks(positive))


@functools.cache
def _cached_grid(rows: int, cols: int, column_titles: tuple[str, ...], row_titles: tuple[str, ...]) -> dict:
    layout = make_subplots(
        rows=rows,
        cols=cols,
        shared_xaxes=rows > 1,
        vertical_spacing=0.08,
        horizontal_spacing=0.08,
        column_titles=list(column_titles) or None,
        row_titles=list(row_titles) or None,
    ).layout.to_plotly_json()
    # The template is the default one, which every new figure gets anyway; copying it would cost most of the time.
    del layout["template"]
    return layout


def grid_layout(rows: int, cols: int, column_titles: Sequence[str] = (), row_titles: Sequence[str] = ()) -> dict:
    """A fresh copy of make_subplots' layout (axis domains and titles). Building it takes tens of milliseconds,
    so each grid is made once; every figure is then built in a single `go.Figure` call, because plotly
    re-validates the whole figure on each `add_*` call and the incremental way was too slow to redraw."""
    return copy.deepcopy(_cached_grid(rows, cols, tuple(column_titles), tuple(row_titles)))


def axis_key(ref: str) -> str:
    """The layout key of an axis reference: "x3" → "xaxis3", "y" → "yaxis"."""
    return f"{ref[0]}axis{ref[1:]}"


def subplot_axes(row: int, col: int, cols: int) -> tuple[str, str]:
    """The x and y axis names of one subplot; make_subplots numbers them row by row."""
    k = (row - 1) * cols + col
    return ("x", "y") if k == 1 else (f"x{k}", f"y{k}")


def vertical(kind: str, x0: float, x1: float, xref: str, **style) -> dict:
    """A line or band through a whole column of subplots (one shape for all rows: plotly validates each
    shape separately, and they were the largest part of drawing a figure)."""
    return dict(type=kind, x0=x0, x1=x1, y0=0, y1=1, xref=xref, yref="paper", **style)


def horizontal(kind: str, y0: float, y1: float, **style) -> dict:
    """A full-width line or band on a single-axis figure, as a layout shape."""
    return dict(type=kind, x0=0, x1=1, y0=y0, y1=y1, xref="x domain", yref="y", **style)


def readable(table, spec: str = ".4g", columns=None):
    """The table as a lab shows it: its numbers written by the lab's formatter, a minus as "−" and a power of ten
    as ×10ⁿ — `columns` (by default every float column) by `spec`, the other float columns with four significant
    digits — while the values underneath stay numbers to sort by."""
    floats = [c for c in table.columns if table[c].dtype.kind == "f"]
    chosen = floats if columns is None else list(columns)
    styled = table.style.format(lambda value: number(value, spec), subset=chosen)
    rest = [c for c in floats if c not in chosen]
    return styled.format(lambda value: number(value, ".4g"), subset=rest) if rest else styled
