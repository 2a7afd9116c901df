"""A fit that runs in the page's script itself (the reward model's, DPO's): knobs with Train and Stop on the left,
charts of its step records on the right, redrawn as it goes.

A fit takes seconds, so it needs no background job: the charts redraw every REDRAW_EVERY steps, any click (Stop
included) interrupts the script at its next element call and so the fit at the next redraw, and the steps done so
far stay on the page. It holds one of the server's training slots while it runs, like any training.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

import plotly.graph_objects as go
import streamlit as st

from ui.charts import RUN_COLOURS, step_axis
from ui.lab import training_slots

REDRAW_EVERY = 5  # steps between redraws, and so the most steps a Stop can take to land


def select_sliders(page: str, controls: dict) -> dict:
    """One select slider per entry `key → (label, options, default, help)`; returns the chosen values by key."""
    return {
        key: st.select_slider(label, options, value=default, key=f"{page}:{key}", help=help_)
        for key, (label, options, default, help_) in controls.items()
    }


def fit_lab(
    page: str,
    knobs: Callable[[], dict],
    train: Callable[[dict, object], None],
    draw: Callable[[object, dict], None],
    invitation: str,
) -> dict | None:
    """Train and Stop above the page's `knobs()` (which draws its widgets and returns the settings) on the left,
    the fit on the right: a Train click calls `train(settings, charts)`, which keeps its fit in session state under
    `{page}:fit`; otherwise the latest fit is drawn with `draw(charts, fit)`, or `invitation` before the first.
    Returns that fit (None before the first), whose `status` is `finished`, `stopped` or what `train` set."""
    controls, effect = st.columns([10, 23], gap="medium")
    with controls:
        train_column, stop = st.columns(2)
        start = train_column.button("Train", key=f"{page}:train", type="primary", width="stretch")
        # Live only in the script run that trains: with nothing running, a Stop that looks pressable misleads.
        stop.button(
            "Stop",
            key=f"{page}:stop",
            width="stretch",
            disabled=not start,
            help=f"Ends the fit within {REDRAW_EVERY} steps; the steps done stay on the page.",
        )
        settings = knobs()
    with effect:
        charts = st.empty()
        if start:
            train(settings, charts)  # draws the fit as it goes, or says why it cannot run
            if st.session_state.get(f"{page}:fit", {}).get("status") == "finished":
                st.rerun()  # drawn again from session state, its Stop no longer live
        fit = st.session_state.get(f"{page}:fit")
        if not start and fit is None:
            charts.info(invitation, icon=":material/play_arrow:")
        elif not start:
            if fit["status"] != "finished":
                fit["status"] = "stopped"  # a click interrupted the script run that was training it
            draw(charts, fit)
    return fit


def run_fit(
    fit: dict, begin: Callable[[], Iterable[dict]], total_steps: int, charts, draw: Callable[[object, dict], None]
) -> None:
    """Wait for a training slot, then append the records of `begin()` (called holding the slot, so its own set-up
    counts as training) to `fit["records"]`, redrawing every REDRAW_EVERY steps and at the end."""
    fit["status"] = "waiting for a training slot"
    draw(charts, fit)
    with training_slots().hold(threading.Event()):
        fit["status"] = "training"
        for record in begin():
            fit["records"].append(record)
            # The fit lives in session state as it grows: a click interrupts the loop at the next redraw.
            if record["step"] % REDRAW_EVERY == 0 and record["step"] < total_steps:
                draw(charts, fit)
        fit["status"] = "finished"
    draw(charts, fit)


def status_text(fit: dict, total_steps: int) -> str:
    """The fit's state in words: training (step n of N), stopped (after n steps), or its status as it is."""
    done = sum(1 for r in fit["records"] if r["step"] > 0)
    return {"training": f"training, step {done} of {total_steps}", "stopped": f"stopped after {done} steps"}.get(
        fit["status"], fit["status"]
    )


def step_figure(title: str, records: list[dict], series, height: int = 290) -> go.Figure:
    """One line per `(key, label)` of `series` against the step; a series recorded on some steps only (held-out
    evaluations) also marks its points. The first record may be an evaluation before any step (DPO's step 0), so
    a series counts as every step's when each later record has it."""
    figure = go.Figure()
    for index, (key, label) in enumerate(series):
        points = [(r["step"], r[key]) for r in records if key in r]
        every_step = len(points) > 1 and all(key in r for r in records[1:])
        figure.add_trace(
            go.Scatter(
                x=[p[0] for p in points],
                y=[p[1] for p in points],
                name=label,
                mode="lines" if every_step else "lines+markers",
                cliponaxis=False,
                line={"color": RUN_COLOURS[index]},
            )
        )
    figure.update_layout(
        title={"text": title, "font": {"size": 13}},
        height=height,
        # The legend under the axis title (at y = −0.25 it lay on "step"), inside the margin.
        margin={"l": 10, "r": 10, "t": 35, "b": 85},
        legend={"orientation": "h", "yanchor": "top", "y": -0.3},
        xaxis=step_axis([r["step"] for r in records]),
    )
    return figure
