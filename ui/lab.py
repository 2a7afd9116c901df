"""The live lab under every algorithm page: controls, the session's runs, and the dashboard that follows them.

Where a training lives, and why it cannot outlive its tab:

* Each page keeps its last few runs (`Job` objects) in `st.session_state`, so they survive reruns and page
  switches, and two browser sessions never see each other's runs.
* Every job a browser session starts is also registered in a session-scoped `st.cache_resource` whose release
  hook stops it. Streamlit releases session resources when the session's connection closes, so closing the tab
  stops the thread after its current step. A dropped connection releases it too: that run ends as "stopped"
  and stays on screen.
* A process-wide `TrainingSlots` caps how many trainings run at once (env RLHF_LAB_MAX_TRAININGS, default 2);
  the rest wait in a queue and say so.

The knob values a learner chose live in `st.session_state[f"{page}:values"]`, not only in widget keys:
Streamlit drops the state of widgets that a run does not draw, which would reset every slider on a page switch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pandas as pd
import streamlit as st
import torch

from rl_core.algorithms import PRESETS, get_preset
from rl_core.config import AlgoConfig, RunConfig
from rl_core.models import MODEL_PRESETS
from toy_tasks import DEFAULT_TASK, TASKS
from ui.bridge import scale_exports, unipo_download
from ui.charts import CHARTS, ChartRun, figure, has_data
from ui.jobs import SETUP_PHASES, Job, JobSnapshot, TrainingSlots
from ui.knobs import KNOBS, render_knob
from ui.session import session_token
from ui.tokens import COLOURINGS, token_html

REFRESH_SECONDS = 1.0
KEPT_RUNS = 5  # per page: the latest run plus up to four earlier ones to overlay
DEFAULT_STEPS = 50
RUN_KNOBS = ("steps", "seed")
WARM_START_KNOBS = ("sft_steps", "demo_noise")
DESCRIPTIVE_FIELDS = ("name", "title", "summary")


@st.cache_resource(show_spinner=False)
def training_slots() -> TrainingSlots:
    """The one cap shared by every browser session of this server."""
    return TrainingSlots.from_env()


def _stop_jobs(jobs: list[Job]) -> None:
    for job in jobs:
        job.stop()


@st.cache_resource(scope="session", on_release=_stop_jobs, show_spinner=False)
def session_jobs() -> list[Job]:
    """Every job this browser session started; released, and so stopped, when the session disconnects."""
    return []


def live_lab(page: str, variants: dict[str, str], knobs: Sequence[str]) -> None:
    """The lab for one page. `variants` maps a switch label to a preset name (one entry: no switch);
    `knobs` are the AlgoConfig fields the page exposes, in display order."""
    runs: list[Job] = st.session_state.setdefault(f"{page}:runs", [])
    current = runs[-1] if runs else None
    busy = current is not None and current.active
    st.header("Live lab", anchor="live-lab")
    variant = _variant_switch(page, variants, knobs, busy)
    values = st.session_state.setdefault(f"{page}:values", _defaults(variant, knobs))

    setup, algo_column = st.columns([1, 2], gap="large")
    with setup:
        _task_and_model(page, values, busy)
        for name in RUN_KNOBS:
            _knob(page, name, values, (), busy)
        with st.expander("SFT warm start"):
            for name in WARM_START_KNOBS:
                _knob(page, name, values, (), busy)
    with algo_column:
        columns = st.columns(2)
        for index, name in enumerate(knobs):
            with columns[index % 2]:
                _knob(page, name, values, [getattr(PRESETS[v], name) for v in variants.values()], busy)

    try:
        run = _run_config(variant, values, knobs)
    except ValueError as error:  # the engine names the knob that is out of range
        st.error(f"This combination cannot run: {error}")
        run = None
    train, stop, reset, _ = st.columns([1, 1, 1, 4])
    train.button(
        "Train", key=f"{page}:train", type="primary", disabled=busy or run is None,
        on_click=_start, args=(page, run, variant, values, knobs), help="Start a run with these settings.",
    )
    stop.button(
        "Stop", key=f"{page}:stop", disabled=not busy, on_click=current.stop if busy else None,
        help="End the run after its current step.",
    )
    reset.button(
        "Reset", key=f"{page}:reset", on_click=_reset, args=(page, variants, knobs),
        help="Stop any run, forget this page's runs and put every knob back to the preset's defaults.",
    )
    if run is not None:
        scale_exports(page, run)

    if current is None:
        st.caption("Press **Train** to start. The charts below fill in live, one point per RL step.")
        return
    labels = _labels(runs)
    overlays = _comparison_picker(page, runs, labels)
    # `busy` was read once for the whole run: if the job ends in between, the live dashboard sees it and reruns
    # the app, so controls drawn disabled are never left that way.
    if busy:
        st.fragment(run_every=REFRESH_SECONDS)(_dashboard)(page, current, overlays, labels, busy)
    else:
        _dashboard(page, current, overlays, labels, busy)
        _download(page, [current, *overlays], labels)
        unipo_download(page, current)


# ---------------------------------------------------------------------------------------------- controls
def _defaults(variant: str, knobs: Sequence[str]) -> dict:
    preset = PRESETS[variant]
    run_defaults = {f.name: f.default for f in dataclasses.fields(RunConfig) if f.name != "algo"}
    return {
        "task": DEFAULT_TASK,
        "model": "tiny",
        "steps": DEFAULT_STEPS,
        **{name: run_defaults[name] for name in ("seed", *WARM_START_KNOBS)},
        **{name: getattr(preset, name) for name in knobs},
    }


def _variant_switch(page: str, variants: dict[str, str], knobs: Sequence[str], busy: bool) -> str:
    labels = list(variants)
    if len(labels) == 1:
        return variants[labels[0]]
    key = f"{page}:variant"
    label = st.radio(
        "Variant", labels, key=key, horizontal=True, disabled=busy, on_change=_apply_variant,
        args=(page, variants, knobs), help="Switching loads that variant's preset defaults into the knobs.",
    )
    base, chosen = PRESETS[variants[labels[0]]], PRESETS[variants[label]]
    changes = _differences(base, chosen)
    if changes:
        st.caption(f"{chosen.title} changes from {base.title}: " + ", ".join(changes))
    return variants[label]


def _differences(base: AlgoConfig, other: AlgoConfig) -> list[str]:
    return [
        f"`{f.name}` {getattr(base, f.name)} → {getattr(other, f.name)}"
        for f in dataclasses.fields(AlgoConfig)
        if f.name not in DESCRIPTIVE_FIELDS and getattr(base, f.name) != getattr(other, f.name)
    ]


def _apply_variant(page: str, variants: dict[str, str], knobs: Sequence[str]) -> None:
    values = st.session_state[f"{page}:values"]
    preset = PRESETS[variants[st.session_state[f"{page}:variant"]]]
    for name in knobs:
        values[name] = st.session_state[f"{page}:{name}"] = getattr(preset, name)


def _knob(page: str, name: str, values: dict, extra, disabled: bool) -> None:
    key = f"{page}:{name}"
    if key not in st.session_state:
        st.session_state[key] = values[name]
    render_knob(name, key, extra, disabled)
    values[name] = st.session_state[key]


def _task_and_model(page: str, values: dict, disabled: bool) -> None:
    for name in ("task", "model"):
        st.session_state.setdefault(f"{page}:{name}", values[name])
    st.selectbox(
        "task", list(TASKS), key=f"{page}:task", disabled=disabled,
        format_func=lambda name: f"{name}: {TASKS[name].description}",
        help="The toy task the policy is trained on; each is small enough to learn on a CPU in minutes.",
    )
    values["task"] = st.session_state[f"{page}:task"]
    st.caption(TASKS[values["task"]].lesson)
    # The 124M shape is only worth offering where a GPU can train it.
    models = [m for m in MODEL_PRESETS if m != "gpt2" or torch.cuda.is_available()]
    st.selectbox(
        "model size", models, key=f"{page}:model", disabled=disabled,
        format_func=lambda name: f"{name}: {MODEL_PRESETS[name].description}",
        help="The GPT-2 shape of the policy (the reference and critic copy it).",
    )
    values["model"] = st.session_state[f"{page}:model"]


def _run_config(variant: str, values: dict, knobs: Sequence[str]) -> RunConfig:
    """The run these values describe; ValueError names the first knob out of range."""
    algo = get_preset(variant, **{name: values[name] for name in knobs})
    run = RunConfig(
        algo=algo,
        task=values["task"],
        model=values["model"],
        steps=values["steps"],
        seed=values["seed"],
        sft_steps=values["sft_steps"],
        demo_noise=values["demo_noise"],
        samples_per_record=max(4, min(algo.num_generations, 8)),  # a whole group when it fits
    )
    run.validate()
    return run


def _start(page: str, run: RunConfig, variant: str, values: dict, knobs: Sequence[str]) -> None:
    runs: list[Job] = st.session_state[f"{page}:runs"]
    number = st.session_state.get(f"{page}:counter", 0) + 1
    st.session_state[f"{page}:counter"] = number
    settings = {"variant": PRESETS[variant].title} | {
        name: values[name] for name in ("task", "model", *RUN_KNOBS, *WARM_START_KNOBS, *knobs)
    }
    label = f"{PRESETS[variant].title} · {page} page #{number}"
    job = Job(run, training_slots(), settings=settings, number=number, label=label, session=session_token()).start()
    jobs = session_jobs()
    jobs[:] = [j for j in jobs if j.active] + [job]
    runs.append(job)
    finished = [j for j in runs if not j.active]
    while len(runs) > KEPT_RUNS and finished:
        runs.remove(finished.pop(0))


def _reset(page: str, variants: dict[str, str], knobs: Sequence[str]) -> None:
    for job in st.session_state.get(f"{page}:runs", []):
        job.stop()
    prefix = f"{page}:"
    for key in [k for k in st.session_state if isinstance(k, str) and k.startswith(prefix)]:
        del st.session_state[key]
    st.session_state[f"{page}:values"] = _defaults(next(iter(variants.values())), knobs)


# ---------------------------------------------------------------------------------------------- runs
def _labels(runs: list[Job]) -> dict[int, str]:
    """`#n` plus the settings in which the page's runs differ, e.g. `#3 · beta=0.1, num_generations=4`."""
    keys = [k for k in runs[0].settings if len({repr(r.settings.get(k)) for r in runs}) > 1] if runs else []
    labels = {}
    for job in runs:
        shown = ", ".join(f"{k}={KNOBS[k].format(job.settings[k]) if k in KNOBS else job.settings[k]}" for k in keys)
        labels[job.number] = f"#{job.number}" + (f" · {shown}" if shown else "")
    return labels


def _comparison_picker(page: str, runs: list[Job], labels: dict[int, str]) -> list[Job]:
    earlier = [job for job in runs[:-1] if not job.active]
    if not earlier:
        return []
    st.markdown(f"**Overlay earlier runs** on the charts of the latest one ({labels[runs[-1].number]}):")
    columns = st.columns(min(len(earlier), 4))
    return [
        job
        for index, job in enumerate(earlier)
        if columns[index % len(columns)].checkbox(labels[job.number], key=f"{page}:compare:{job.number}")
    ]


def _download(page: str, shown: list[Job], labels: dict[int, str]) -> None:
    rows = [
        {"run": labels[job.number], **{f"knob:{k}": v for k, v in job.settings.items()}, **record}
        for job in shown
        for record in job.snapshot().records
    ]
    if rows:
        st.download_button(
            "Download metrics (CSV)", pd.DataFrame(rows).to_csv(index=False), file_name=f"{page}-metrics.csv",
            mime="text/csv", key=f"{page}:download", help="Every step's metrics of the runs on the charts.",
        )


# ---------------------------------------------------------------------------------------------- dashboard
def _dashboard(page: str, job: Job, overlays: list[Job], labels: dict[int, str], live: bool) -> None:
    """Snapshot the jobs and redraw everything; runs every REFRESH_SECONDS while `job` trains."""
    snap = job.snapshot()
    _progress(snap)
    if snap.records:
        _headline(snap)
        chart_runs = [ChartRun(labels[j.number], s.records, j.run.algo) for j, s in
                      [(job, snap), *((o, o.snapshot()) for o in overlays)]]
        charts = [chart for chart in CHARTS if has_data(chart, chart_runs)]
        for row in range(0, len(charts), 2):
            for column, chart in zip(st.columns(2), charts[row : row + 2]):
                with column:
                    st.plotly_chart(figure(chart, chart_runs), key=f"{page}:chart:{chart.title}",
                                    config={"displayModeBar": False})
                    st.caption(chart.caption)
        _token_view(page, snap)
    if live and not snap.active:
        st.rerun()  # the run just ended: one full rerun re-enables the controls and stops this refresh


def _progress(snap: JobSnapshot) -> None:
    if snap.status == "queued":
        running = "1 training is" if snap.waiting_for == 1 else f"{snap.waiting_for} trainings are"
        place = f"; you are number {snap.queue_place} in the queue" if snap.queue_place else ""
        estimate = (f", about {snap.wait_estimate:.0f} s to wait" if snap.wait_estimate is not None
                    else " (an estimate of the wait appears once a training here has run to its end)" if place else "")
        st.info(
            f"queued: {running} running… this run starts as soon as a slot frees up{place}{estimate}.",
            icon=":material/hourglass_top:",
        )
    elif snap.phase is not None:
        phase, done, total = snap.phase
        st.progress(done / max(total, 1), text=f"Setting up: {SETUP_PHASES[phase]} {done}/{total}")
    elif snap.status in ("preparing", "training"):
        eta = f", about {snap.eta:.0f} s left" if snap.eta is not None else ""
        st.progress(
            snap.steps_done / snap.steps_total,
            text=f"step {snap.steps_done}/{snap.steps_total} · {snap.elapsed:.0f} s{eta}",
        )
    elif snap.status == "failed":
        st.error(f"The run failed after {snap.steps_done} steps: {snap.error}")
    elif snap.status == "stopped":
        st.warning(f"Stopped after {snap.steps_done} of {snap.steps_total} steps.")
    else:
        st.success(f"Finished {snap.steps_done} steps in {snap.elapsed:.0f} s.")
    if "value_pretrain_explained_variance" in snap.setup:
        st.caption(
            "Explained variance of the critic after value pretraining: "
            f"**{snap.setup['value_pretrain_explained_variance']:.3f}** (1 = it predicts the returns)."
        )


def _headline(snap: JobSnapshot) -> None:
    latest, first = snap.records[-1], snap.records[0]
    shown = {"reward": "reward_mean", "success rate": "success_rate", "entropy": "entropy", "KL (exact)": "kl_exact",
             "clip fraction": "clip_frac", "response length": "response_length"}
    for column, (label, key) in zip(st.columns(len(shown)), shown.items()):
        if key in latest:
            column.metric(label, f"{latest[key]:.3f}", f"{latest[key] - first[key]:+.3f}",
                          help=f"At step {latest['step']}; the arrow shows the change since step {first['step']}.")


def _token_view(page: str, snap: JobSnapshot) -> None:
    st.subheader(f"Samples from step {snap.steps_done}")
    colour_by = st.radio(
        "colour tokens by", list(COLOURINGS), key=f"{page}:colour_by", horizontal=True,
        help="Hover a token for all its numbers.",
    )
    st.caption(COLOURINGS[colour_by].legend)
    st.markdown(token_html(snap.samples, colour_by), unsafe_allow_html=True)
