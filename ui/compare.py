"""The Compare page: presets (or values of one knob) side by side over several seeds, trained in parallel worker
processes by `rl_core.runs.sweep`, followed live through the run store, summarised and exported; below, every run in
the store, to reopen or delete.

Where things live:

* A sweep's coordinator is a daemon thread of the server; it touches only its `Sweep` and the store, never
  `st.*`. It holds one of the server's training slots per worker (`ui.jobs.TrainingSlots`, shared with the live
  labs) for as long as it trains, so sweeps never push the server past its cap; a session's sweep has at most
  `RLHF_LAB_MAX_SESSION_WORKERS` workers.
* Every run and sweep belongs to the learner who started it (`ui.session`: a token in the browser, so a reload
  or a second tab is the same learner): a learner sees, stops and deletes only their own, plus the command line's
  runs, which they may show but not delete. A sweep goes on when its page reloads, and the page opens on it.
* The page never asks a sweep how it is doing: it reads the store, which the workers write, once a second
  (`@st.fragment(run_every=…)`) while a shown run is active. Step records are cached in the session and read
  incrementally, so a refresh parses only the steps that are new.
* The runs on the charts are a list of run ids in session state; a new session opens on the learner's latest sweep.
"""

from __future__ import annotations

import dataclasses
import io
import math
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.colors import hex_to_rgb

from rl_core.algorithms import PRESETS
from rl_core.config import AlgoConfig, RunConfig, knob_differences, parse_overrides
from rl_core.experiments import EXPERIMENTS
from rl_core.messages import brief
from rl_core.numbers import number
from rl_core.runs.cluster import ClusterError
from rl_core.runs.store import SAMPLE_WINDOW, RunStore, StoredRun, StoreError
from rl_core.runs.summary import OUTCOMES, SUCCESS_TARGET, run_row, summarise, write_csv
from rl_core.runs.sweep import PlannedRun, Sweep, default_workers, parse_grid, plan_sweep
from toy_tasks import DEFAULT_TASK, TASKS
from ui import share
from ui.charts import DASHES, RUN_COLOURS, legend_below, nonnegative, step_axis, thin
from ui.jobs import TrainingSlots, planned_seconds_left
from ui.knobs import KNOBS, difference_text
from ui.lab import training_slots
from ui.limits import check_learner, check_runs
from ui.present import chart_layout
from ui.session import session_token, session_worker_cap
from ui.tokens import COLOURINGS, token_html

REFRESH_SECONDS = 1.0
DEFAULT_PRESETS = ("grpo", "rloo", "reinforce_pp")
MODES = ("Presets side by side", "One preset, several values of a knob")
# The controls that define a sweep, kept with it in the run store: a reload sets them back (not the workers, which
# say how fast, not what).
CONTROLS = tuple(
    f"compare:{name}"
    for name in ("task", "mode", "presets", "preset", "knob", "values", "seeds", "steps", "sft_steps", "extra")
)
# Records that are shares of something (0 to 1): their axis spans 0…1 whatever the data, so that a flat line at 0
# does not get plotly's made-up −1…1 axis, and a rate of 0.3 is read against the whole range.
RATES = ("success_rate",)
# Records that cannot be negative (a KL, an entropy, a share, a length): their axis starts at 0 even where float
# round-off leaves a value a hair below it (the exact KL of a policy still at its reference is measured down to
# −5×10⁻⁸), which plotly's autorange would pad to an axis from −0.02.
AT_LEAST_ZERO = ("kl_exact", "kl_k3", "entropy", "clip_frac", "response_length")
SWEEPABLE = tuple(f.name for f in dataclasses.fields(AlgoConfig) if f.name not in ("name", "title", "summary"))
CURVES = {  # record field → chart title
    "success_rate": "Success rate",
    "reward_mean": "Reward",
    "entropy": "Token entropy",
    "kl_exact": "KL to the reference (exact, per token)",
    "kl_k3": "KL to the reference (k3 per token; TRL's kl)",  # the estimate TRL reports too (rl_core.bridge.parity)
    "clip_frac": "Clip fraction",  # drawn twice: per token, and per response for GSPO (see CLIP_UNITS)
    "response_length": "Response length (tokens)",
}
CURVE_UNITS = {  # record field → the y axis title
    "success_rate": "share of responses",
    "reward_mean": "reward",
    "entropy": "nats per token",
    "kl_exact": "nats per token",
    "kl_k3": "nats per token",
    "clip_frac": "share",  # of tokens or of responses (GSPO): the charts that know which say so
    "response_length": "tokens",
}
# What a run's clip fraction counts, by its policy loss: GSPO clips whole responses, and a share of responses
# never shares an axis with a share of tokens. Vanilla PG has no clip and no clip-fraction curve.
CLIP_UNITS = {"clip": "tokens", "gspo_token": "tokens", "gspo": "responses"}
# The chart toolbar (on hover) keeps its camera button, which saves the chart as a PNG in the browser.
PLOT_CONFIG = {
    "displaylogo": False,
    "toImageButtonOptions": {"format": "png", "scale": 2, "filename": "rlhf-lab-compare"},
}


@st.cache_resource(show_spinner=False)
def live_sweeps() -> dict[int, Sweep]:
    """Sweep id → the sweeps this server is running; a sweep's thread removes it when it ends."""
    return {}


def compare_page() -> None:
    st.title("Compare and ablate")
    st.markdown(
        "Train several presets, or one preset with several values of a knob, on the same task and over several "
        "seeds. Every run trains in its own worker process, so a sweep uses every core. The curves show the "
        "mean over seeds with a band from the lowest to the highest seed; the table summarises each group. "
        "Runs are kept in a run store on disk, so they survive a reload or a restart and can be compared with "
        "later ones."
    )
    try:
        store = RunStore()  # opening it marks runs whose process has gone as interrupted
    except StoreError as error:
        st.error(
            f"The run store cannot be opened ({brief(str(error.__cause__ or error))}). The server's "
            "operator can point RLHF_LAB_DB at a writable file."
        )
        return
    session = session_token()
    if "compare:shown" not in st.session_state:  # a new session (a reload): the learner's latest sweep
        st.session_state["compare:shown"] = _reopen_latest_sweep(store, session)
    shown: list[int] = st.session_state["compare:shown"]
    runs = store.runs(shown, visible_to=session)
    live = any(run.active for run in runs)
    planned, workers = _controls(live)
    _buttons(planned, workers, runs, live)
    _experiment_origin(store, runs)
    if runs:
        refresh = REFRESH_SECONDS if live else None
        st.fragment(run_every=refresh)(_dashboard)(shown, live)
    else:
        st.caption("Press **Run** to start a comparison, or reopen stored runs below.")
    _stored_runs(store)


def _experiment_origin(store: RunStore, runs: list[StoredRun]) -> None:
    """Name the experiment when the shown runs are one experiment's, started from a *See it happen* panel."""
    sweeps = {run.sweep_id for run in runs}
    if len(sweeps) != 1 or None in sweeps:
        return
    name = store.sweep_spec(sweeps.pop()).get("experiment")
    if name in EXPERIMENTS:
        st.caption(
            f"Shown: the runs of the experiment **{EXPERIMENTS[name].title}** (`{name}`), started from "
            "its *See it happen* panel, which states the measured effect once every run has finished."
        )


def _reopen_latest_sweep(store: RunStore, session: str) -> list[int]:
    """The run ids of the learner's latest sweep, its controls (as `_start` kept them) set back into the widgets,
    so that what the controls say describes the charts under them."""
    latest = store.latest_sweep(session)
    if latest is None:
        return []
    st.session_state.update(store.sweep_spec(latest).get("controls", {}))
    return [run.id for run in store.runs(sweep_id=latest, visible_to=session)]


# ---------------------------------------------------------------------------------------------- controls
def _controls(disabled: bool) -> tuple[list[PlannedRun] | None, int]:
    """The comparison the controls describe, or None with the refusal shown; and the number of workers."""
    task = st.selectbox(
        "task",
        list(TASKS),
        index=list(TASKS).index(DEFAULT_TASK),
        key="compare:task",
        disabled=disabled,
        format_func=lambda name: f"{name}: {TASKS[name].description}",
    )
    mode = st.radio("compare", MODES, key="compare:mode", horizontal=True, disabled=disabled)
    grid: list[str] = []  # as `--grid` takes it: ["knob=value1,value2,…"]
    if mode == MODES[0]:
        algos = st.multiselect(
            "presets",
            list(PRESETS),
            default=list(DEFAULT_PRESETS),
            key="compare:presets",
            disabled=disabled,
            format_func=lambda name: f"{name}: {PRESETS[name].title}",
        )
        _preset_differences(algos, disabled)
    else:
        preset, knob, values = st.columns([1, 1, 2])
        # Defaults through the session state, which "Compare this knob alone" also sets (a widget given both a
        # default and a session-state value makes Streamlit warn).
        for name, default in (("preset", "grpo"), ("knob", "beta"), ("values", "0, 0.04, 0.2")):
            st.session_state.setdefault(f"compare:{name}", default)
        algos = [preset.selectbox("preset", list(PRESETS), key="compare:preset", disabled=disabled)]
        knob_name = knob.selectbox("knob", SWEEPABLE, key="compare:knob", disabled=disabled)
        grid_text = values.text_input(
            "values (comma-separated)",
            key="compare:values",
            disabled=disabled,
            help="Every value becomes one group of runs; 'none' switches an optional knob off.",
        )
        grid = [f"{knob_name}={grid_text}"]
        if knob_name in KNOBS:
            st.caption(f"**{KNOBS[knob_name].label}**: {KNOBS[knob_name].help}")
    seeds, steps, workers = st.columns(3)
    n_seeds = seeds.number_input(
        "seeds",
        1,
        10,
        3,
        key="compare:seeds",
        disabled=disabled,
        help="Seeds 0 … N−1 of every group: the band on the charts spans them.",
    )
    n_steps = steps.number_input("steps", 1, 2000, 40, key="compare:steps", disabled=disabled)
    most = min(session_worker_cap(), training_slots().limit)
    n_workers = workers.number_input(
        "workers",
        1,
        most,
        min(default_workers(), most),
        key="compare:workers",
        disabled=disabled,
        help=f"Runs trained at once, each in its own process and each taking one of the server's {most} training "
        "slots; more workers than cores only slows each run down.",
    )
    with st.expander("More settings"):
        sft_steps = st.number_input(
            "SFT steps",
            0,
            5000,
            RunConfig.sft_steps,
            key="compare:sft_steps",
            disabled=disabled,
            help="Supervised warm start before RL, trained once per seed and cached.",
        )
        extra = st.text_area(
            "knobs for every run, one knob=value per line",
            "",
            key="compare:extra",
            disabled=disabled,
            placeholder="prompts_per_step=4\nlearning_rate=0.002",
        )
    try:
        planned = plan_sweep(
            algos,
            range(int(n_seeds)),
            task,
            int(n_steps),
            overrides=parse_overrides([line for line in extra.splitlines() if line.strip()]),
            grid=parse_grid(grid),
            sft_steps=int(sft_steps),
        )
        check_runs([p.run for p in planned])  # the server's limits: runs, steps, estimated seconds, the model
        check_learner()
    except ValueError as error:  # the engine names the knob, preset or value it refuses
        st.error(f"This comparison cannot run: {brief(str(error))}")
        return None, int(n_workers)
    groups = len({p.label for p in planned})
    st.caption(
        f"{len(planned)} runs: {groups} groups × {int(n_seeds)} seeds, {min(int(n_workers), len(planned))} at a time."
    )
    return planned, int(n_workers)


def _preset_differences(algos: list[str], disabled: bool) -> None:
    """Every knob in which each chosen preset differs from the first; where that is more than one knob, say so
    and offer the one-knob comparison: the first preset over the two values of a knob the learner picks."""
    if len(algos) < 2:
        return
    base = PRESETS[algos[0]]
    changes = {name: knob_differences(base, PRESETS[name]) for name in algos[1:]}
    st.caption(
        "  \n".join(
            f"**{name}** against **{algos[0]}**: "
            + (", ".join(difference_text(k, *v) for k, v in changed.items()) or "the same knobs")
            for name, changed in changes.items()
        )
    )
    confounded = {name: changed for name, changed in changes.items() if len(changed) > 1}
    if not confounded:
        return
    st.warning(
        "; ".join(f"{name} differs from {algos[0]} in {len(changed)} knobs" for name, changed in confounded.items())
        + ": a gap between their curves may come from any of them.",
        icon=":material/compare_arrows:",
    )
    name, changed = next(iter(confounded.items()))
    knob, go_one = st.columns([2, 1], vertical_alignment="bottom")
    chosen = knob.selectbox(
        f"one knob of {name}",
        list(changed),
        key="compare:confound_knob",
        disabled=disabled,
        format_func=lambda k: difference_text(k, *changed[k]).replace("`", ""),
    )
    go_one.button(
        "Compare this knob alone",
        key="compare:one_knob",
        disabled=disabled,
        on_click=_one_knob,
        args=(algos[0], chosen, changed[chosen]),
        help=f"{algos[0]} with this knob at both values.",
    )


def _one_knob(preset: str, knob: str, values: tuple) -> None:
    """The Compare controls set to one preset over two values of one knob (a callback: before the widgets)."""
    st.session_state["compare:mode"] = MODES[1]
    st.session_state["compare:preset"] = preset
    st.session_state["compare:knob"] = knob
    st.session_state["compare:values"] = ", ".join(map(share.text, values))


def _buttons(planned: list[PlannedRun] | None, workers: int, runs: list[StoredRun], live: bool) -> None:
    registry = live_sweeps()
    session = session_token()
    sweep = next(
        (
            registry[run.sweep_id]
            for run in runs
            if run.sweep_id in registry and registry[run.sweep_id].session == session
        ),
        None,
    )
    buttons = st.container(horizontal=True)  # side by side at their labels' width, as on the experiment panels
    if buttons.button(
        "Run",
        key="compare:run",
        type="primary",
        disabled=live or planned is None,
        help="Train every run of the comparison; the charts follow them live.",
    ):
        try:
            _start(planned, workers)
        except ClusterError as error:  # RLHF_LAB_RAY_ADDRESS names a cluster that is not there
            st.error(str(error))
        else:
            st.rerun()
    buttons.button(
        "Stop",
        key="compare:stop",
        disabled=not live or sweep is None or sweep.stopping,
        on_click=sweep.stop if sweep else None,
        help="End every run of the sweep after its current step.",
    )
    if live and sweep is None:
        st.caption(
            "These runs are trained elsewhere (a *See it happen* panel, or `python -m rl_core sweep`), which "
            "alone can stop them."
        )
    if live and any(run.status == "queued" and run.steps_done == 0 for run in runs):
        st.caption(
            f"The server trains at most {training_slots().limit} runs at once, for every learner together: "
            "the sweep starts when enough of them are free."
        )


def _start(planned: list[PlannedRun], workers: int) -> None:
    registry = live_sweeps()
    workers = min(workers, len(planned))
    controls = {key: st.session_state[key] for key in CONTROLS if key in st.session_state}
    sweep = Sweep(
        planned,
        RunStore(),
        workers=workers,
        session=session_token(),
        cap=training_slots().limit,
        spec={"controls": controls},
    )
    registry[sweep.sweep_id] = sweep
    threading.Thread(
        target=_coordinate, args=(sweep, registry, training_slots()), name=f"sweep-{sweep.sweep_id}", daemon=True
    ).start()
    st.session_state["compare:shown"] = list(sweep.run_ids)


def _coordinate(sweep: Sweep, registry: dict[int, Sweep], slots: TrainingSlots) -> None:
    """The sweep's thread: wait for a training slot per worker, train, then leave the registry. Never calls
    Streamlit."""
    try:
        left = planned_seconds_left([p.run for p in sweep.planned], sweep.workers, slots)
        with slots.hold(sweep.stop_event, slots=sweep.workers, seconds_left=left) as acquired:
            if acquired:
                sweep.run()
            else:  # stopped while it waited: none of its runs started
                sweep.store.settle(sweep.run_ids, "stopped")
    finally:
        registry.pop(sweep.sweep_id, None)


# ---------------------------------------------------------------------------------------------- dashboard
def _dashboard(shown: list[int], live: bool) -> None:
    """Read the shown runs from the store and redraw progress, charts and summary."""
    store = RunStore(recover=False)
    runs = store.runs(shown, visible_to=session_token())
    records = _records(store, runs)
    _progress(runs, records)
    groups: dict[str, list[list[dict]]] = {}
    for run in runs:
        groups.setdefault(run.label, []).append(records[run.id])
    # A DPO run (an experiment's arm) has no policy loss and so no clip fraction.
    losses = {run.label: run.config["algo"].get("policy_loss") for run in runs}
    charts = [
        (key, title, unit, shown)
        for key in CURVES
        for title, unit, shown in (
            [
                (
                    f"{CURVES[key]} ({counted})",
                    f"share of {counted}",
                    {label: seeds for label, seeds in groups.items() if CLIP_UNITS.get(losses[label]) == counted},
                )
                for counted in ("tokens", "responses")
            ]
            if key == "clip_frac"
            else [(CURVES[key], CURVE_UNITS[key], groups)]
        )
        if any(_finite(record.get(key)) for seeds in shown.values() for run in seeds for record in run)
    ]
    curves = [key for key, _, _, _ in charts]
    # One colour per group on every chart, also on a chart that leaves some groups out (the clip fractions).
    colours = {label: RUN_COLOURS[index % len(RUN_COLOURS)] for index, label in enumerate(groups)}
    for row in range(0, len(charts), 2):
        for column, (key, title, unit, shown) in zip(st.columns(2), charts[row : row + 2]):
            column.plotly_chart(
                band_figure(key, shown, title, unit, colours=colours), key=f"compare:chart:{title}", config=PLOT_CONFIG
            )
    if curves:
        unclipped = [label for label in groups if CLIP_UNITS.get(losses[label]) is None]
        st.caption(
            "Lines: the mean over seeds at each step; bands: from the lowest to the highest seed. To save a "
            "chart as a PNG, hover it and press the camera button in its toolbar."
            + (
                f" Not on a clip chart: {', '.join(unclipped)}, whose loss has no ratio clip."
                if unclipped and "clip_frac" in curves
                else ""
            )
        )
    _summary(runs, records, live)
    _samples(store, runs)
    if live and not any(run.active for run in runs):
        st.rerun()  # the sweep just ended: a full rerun re-enables the controls and stops this refresh


def _records(store: RunStore, runs: list[StoredRun]) -> dict[int, list[dict]]:
    """Run id → its step records, reading from the store only the steps not yet in the session's cache."""
    cache: dict[int, list[dict]] = st.session_state.setdefault("compare:records", {})
    for stale in set(cache) - {run.id for run in runs}:
        del cache[stale]
    for run in runs:
        have = cache.setdefault(run.id, [])
        if run.steps_done > len(have):
            have.extend(store.steps(run.id, after=have[-1]["step"] if have else 0))
    return {run.id: cache[run.id] for run in runs}


def _progress(runs: list[StoredRun], records: dict[int, list[dict]]) -> None:
    """One row per run, in columns that fit a 1024-pixel screen: the group as wide as its longest label, short
    headers (their meaning on hover), and a run's error in full under the table rather than in a column."""
    table = pd.DataFrame(
        [
            {
                "run": run.id,
                "group": run.label,
                "seed": run.seed,
                "status": run.status,
                "progress": run.steps_done / run.steps_total,
                "steps": f"{run.steps_done}/{run.steps_total}",
                "success": records[run.id][-1].get("success_rate") if records[run.id] else None,
                "seconds": None if math.isnan(run.wall_time) else run.wall_time,
            }
            for run in runs
        ]
    )
    st.dataframe(
        table,
        hide_index=True,
        key="compare:progress",
        column_config={
            "progress": st.column_config.ProgressColumn("progress", min_value=0.0, max_value=1.0, format="percent"),
            "success": st.column_config.NumberColumn(format="%.2f", help="The success rate of the run's latest step."),
            "seconds": st.column_config.NumberColumn(format="%.1f", help="Wall time so far, setup included."),
        },
    )
    for run in runs:
        if run.error:
            st.caption(f"#{run.id} {run.label} · seed {run.seed}, {run.status}: {brief(run.error)}")
    if any(run.status == "queued" for run in runs):
        st.caption("Queued runs wait for their seed's SFT warm start (trained once, then cached) or a free worker.")


def _at_least_zero(keys: list[str], traces: list[dict]) -> bool:
    """Whether a chart's axis starts at 0: its records cannot be negative, or every value drawn is ≥ 0."""
    return all(key in AT_LEAST_ZERO for key in keys) or nonnegative(
        [y for trace in traces for y in (trace.get("y") or ()) if y is not None]
    )


def band_figure(
    key: str | Sequence[str],
    groups: dict[str, list[list[dict]]],
    title: str | None = None,
    unit: str | None = None,
    log: bool = False,
    names: Mapping[str, str] | None = None,
    colours: Mapping[str, str] | None = None,
) -> go.Figure:
    """One curve per group: the mean over its seeds of `key` at every step, in a min–max band; the y axis
    titled `unit`, by default the curve's own (`CURVE_UNITS`), and logarithmic with `log`. Several keys share the
    chart: a colour per group (`colours[label]`, else by the group's place), a dash per key, each curve named by
    its group and `names[key]`."""
    keys = [key] if isinstance(key, str) else list(key)
    traces = []
    for index, (label, seeds) in enumerate(groups.items()):
        colour = (colours or {}).get(label, RUN_COLOURS[index % len(RUN_COLOURS)])
        for dash, shown in zip(DASHES, keys):
            traces += _band_traces(
                shown, seeds, colour, dash, label if len(keys) == 1 else f"{label} · {(names or {}).get(shown, shown)}"
            )
    layout = dict(
        title=dict(text=title or CURVES[keys[0]], font=dict(size=15)),
        **legend_below([trace["name"] for trace in traces if trace.get("showlegend", True)]),
        xaxis=step_axis([step for trace in traces for step in trace["x"]]),
        yaxis=dict(
            title=dict(text=unit or CURVE_UNITS[keys[0]]),
            **({"type": "log"} if log else {}),
            **({"range": [-0.02, 1.02]} if not log and all(shown in RATES for shown in keys) else {}),
            **({"rangemode": "nonnegative"} if not log and _at_least_zero(keys, traces) else {}),
        ),
        uirevision=" ".join(keys),  # keep zoom and hidden traces across the live refreshes
    )
    # traceorder: plotly lists a legend backwards once a trace fills to the next one, as the bands do
    layout["legend"]["traceorder"] = "normal"
    if not traces:  # no step trained yet: a note, not plotly's empty frame (axes from −1 to 6 and 4, made up)
        layout |= dict(
            xaxis=dict(visible=False),
            yaxis=dict(visible=False),
            annotations=[
                dict(
                    text="No steps yet: the curves appear as the runs train.",
                    showarrow=False,
                    xref="paper",
                    yref="paper",
                    x=0.5,
                    y=0.5,
                    font=dict(size=13, color="#666"),
                )
            ],
        )
    # Validation skipped as in ui.charts (it dominates a redraw); a test builds these figures with it on.
    return go.Figure(data=traces, layout=chart_layout(layout), _validate=False)


def _band_traces(key: str, seeds: list[list[dict]], colour: str, dash: str, name: str) -> list[dict]:
    """One group's curve of `key`: the mean over its seeds, in a min–max band where it has several."""
    by_step: dict[int, list[float]] = {}
    for records in seeds:
        for record in records:
            if _finite(record.get(key)):
                by_step.setdefault(record["step"], []).append(record[key])
    points = thin([(step, values) for step, values in sorted(by_step.items())])
    if not points:
        return []
    steps = [step for step, _ in points]
    traces = []
    if len(seeds) > 1:
        traces.append(
            dict(
                type="scatter",
                x=steps,
                y=[max(v) for _, v in points],
                mode="lines",
                line=dict(width=0, color=colour),
                showlegend=False,
                hoverinfo="skip",
            )
        )
        traces.append(
            dict(
                type="scatter",
                x=steps,
                y=[min(v) for _, v in points],
                mode="lines",
                fill="tonexty",
                fillcolor="rgba({}, {}, {}, 0.2)".format(*hex_to_rgb(colour)),
                line=dict(width=0, color=colour),
                showlegend=False,
                hoverinfo="skip",
            )
        )
    traces.append(
        dict(
            type="scatter",
            x=steps,
            y=[sum(v) / len(v) for _, v in points],
            mode="lines+markers" if len(steps) < 30 else "lines",
            name=name,
            cliponaxis=False,
            line=dict(color=colour, width=2, dash=dash),
            marker=dict(size=5),
        )
    )
    return traces


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _mean_and_spread(mean: float, std: float) -> str:
    if not _finite(mean):
        return "–"
    return number(mean) + (f" ± {number(std, '.2g')}" if _finite(std) else "")


def _summary(runs: list[StoredRun], records: dict[int, list[dict]], live: bool) -> None:
    rows = [run_row(run, records[run.id]) for run in runs]
    summary = summarise(rows)
    st.subheader("Summary")
    table = {
        "group": [s["label"] for s in summary],
        "seeds": [s["seeds"] for s in summary],
        f"reached {SUCCESS_TARGET:.0%}": [s["reached_target"] for s in summary],
    }
    # Mean and spread in one column each, so the table fits the page's width.
    for name, title in OUTCOMES.items():
        table[title] = [_mean_and_spread(s[f"{name}_mean"], s[f"{name}_std"]) for s in summary]
    # Fits a 1024-pixel screen: the group column as wide as its longest label (a fixed wide one pushed the table
    # past the page) and the longest titles shortened, their full meaning on hover.
    st.dataframe(
        pd.DataFrame(table),
        hide_index=True,
        key="compare:summary",
        width="stretch",
        column_config={
            f"reached {SUCCESS_TARGET:.0%}": st.column_config.NumberColumn(
                "reached", help=f"How many of the group's seeds had a batch with {SUCCESS_TARGET:.0%} success."
            ),
            OUTCOMES["kl_final"]: st.column_config.TextColumn(
                "KL", help="The exact per-token KL to the reference at the last step."
            ),
            OUTCOMES["entropy_final"]: st.column_config.TextColumn(
                "entropy", help="The token entropy at the last step."
            ),
        },
    )
    st.caption(
        f"Mean and ± sample standard deviation over seeds; click a column header to sort. Final success: the "
        f"trained policy on 256 fresh prompts (empty until a run finishes). Steps and seconds to "
        f"{SUCCESS_TARGET:.0%}: the first step whose batch got there, averaged over the seeds that did. KL and "
        "entropy: the last step's. Wall time: setup included."
    )
    if live:  # a download button resends its whole file on every refresh
        st.caption("The CSV downloads appear when the runs have ended.")
        return
    summary_csv, metrics_csv = io.StringIO(), io.StringIO()
    write_csv(summary_csv, summary)
    write_csv(
        metrics_csv,
        [
            {"run": run.id, "group": run.label, "algo": run.algo, "seed": run.seed, **run.variant, **record}
            for run in runs
            for record in records[run.id]
        ],
        first=("run", "group", "algo", "seed", "step"),
    )
    table_column, metrics_column = st.columns(2)
    table_column.download_button(
        "Summary table (CSV)",
        summary_csv.getvalue(),
        "compare-summary.csv",
        "text/csv",
        key="compare:download_summary",
        on_click="ignore",
        icon=":material/download:",
    )
    metrics_column.download_button(
        "Every step's metrics (CSV)",
        metrics_csv.getvalue(),
        "compare-metrics.csv",
        "text/csv",
        key="compare:download_metrics",
        on_click="ignore",
        icon=":material/download:",
    )


def _samples(store: RunStore, runs: list[StoredRun]) -> None:
    with st.expander("Samples of a run's latest step"):
        st.caption(
            f"The run store keeps every step's metrics, and a run's sampled tokens for its latest "
            f"{SAMPLE_WINDOW} steps only (they are most of a step's bytes): the disk cannot fill."
        )
        names = {run.id: f"#{run.id} {run.label} · seed {run.seed}" for run in runs}
        run_id = st.selectbox("run", list(names), format_func=names.get, key="compare:sample_run")
        colour_by = st.radio("colour tokens by", list(COLOURINGS), key="compare:colour_by", horizontal=True)
        samples = store.samples(run_id) if run_id is not None else []
        if samples:
            st.caption(COLOURINGS[colour_by].legend)
            st.markdown(token_html(samples, colour_by), unsafe_allow_html=True)
        else:
            st.caption("No samples recorded for this run yet.")


# ---------------------------------------------------------------------------------------------- stored runs
def _stored_runs(store: RunStore) -> None:
    st.header("Stored runs")
    st.caption(
        "The runs of this session (comparisons and live labs), newest first, and the runs shared with every "
        "learner (from the command line; read-only). Other learners' runs are theirs alone."
    )
    notice = st.session_state.pop("compare:notice", None)
    if notice:
        st.info(notice)
    session = session_token()
    runs = store.runs(visible_to=session)[::-1]
    if not runs:
        st.caption("No runs of yours yet, and none shared from the command line.")
        return
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "run": run.id,
                    "status": run.status,
                    "task": run.task,
                    "group": run.label,
                    "algo": run.algo,
                    "seed": run.seed,
                    "steps": f"{run.steps_done}/{run.steps_total}",
                    "owner": "you" if run.session == session else "shared",
                    "date": datetime.fromtimestamp(run.created_at).strftime("%Y-%m-%d %H:%M"),
                }
                for run in runs
            ]
        ),
        hide_index=True,
        key="compare:stored_table",
    )
    # A multiselect keeps its choice by the options' labels: a status in them would change while a run trains and
    # drop the run from the choice (the table shows the status). A run deleted meanwhile leaves the choice.
    labels = {run.id: f"#{run.id} {run.label} · seed {run.seed} · {run.task}" for run in runs}
    if "compare:stored" in st.session_state:
        st.session_state["compare:stored"] = [i for i in st.session_state["compare:stored"] if i in labels]
    chosen = st.multiselect(
        "runs",
        list(labels),
        format_func=lambda run_id: labels.get(run_id, f"#{run_id}"),
        key="compare:stored",
        placeholder="choose runs to reopen or delete",
    )
    buttons = st.container(horizontal=True)
    buttons.button(
        "Show on the charts",
        key="compare:reopen",
        disabled=not chosen,
        on_click=_reopen,
        args=(chosen,),
        help="Overlay these runs, grouped by preset and knob values, in place of the current ones.",
    )
    buttons.button(
        "Delete",
        key="compare:delete",
        disabled=not chosen,
        on_click=_delete,
        args=(store, chosen),
        help="Remove these runs and their metrics from the store (runs still training and shared runs are kept).",
    )


def _reopen(run_ids: list[int]) -> None:
    st.session_state["compare:shown"] = sorted(run_ids)


def _delete(store: RunStore, run_ids: list[int]) -> None:
    deleted = store.delete(run_ids, session=session_token())
    kept = len(run_ids) - deleted
    st.session_state["compare:notice"] = f"Deleted {deleted} run(s)." + (
        f" {kept} kept: still training or shared." if kept else ""
    )
    st.session_state["compare:stored"] = []
    st.session_state["compare:shown"] = [run.id for run in store.runs(st.session_state.get("compare:shown", []))]
