"""The instrument at the top of every algorithm page: controls, the session's runs, and the live dashboard.

Where a training lives, and why it cannot outlive its tab:

* Each page keeps its last few runs (`Job` objects) in `st.session_state`, so they survive reruns and page
  switches, and two browser sessions never see each other's runs.
* Every job a browser session starts is also registered in a session-scoped `st.cache_resource` whose release
  hook stops it. Streamlit releases session resources when the session's connection closes, so closing the tab
  stops the thread after its current step. A dropped connection releases it too: that run ends as "stopped"
  and stays on screen.
* Every live training of the server steps in one shared loop (`LiveLoop`), a step of each run at a time; at most
  RLHF_LAB_MAX_LIVE_RUNS runs (default 40) train in it at once, the rest wait in a queue and say so. The loop is
  one training under the cap of RLHF_LAB_MAX_TRAININGS (default 2) that it shares with the sweeps.

The knob values a learner chose live in `st.session_state[f"{page}:values"]`, not only in widget keys:
Streamlit drops the state of widgets that a run does not draw, which would reset every slider on a page switch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import time
from collections.abc import Sequence
from pathlib import Path

import streamlit as st
import torch

from rl_core.algorithms import PRESETS, get_preset
from rl_core.config import AlgoConfig, RunConfig, knob_differences
from rl_core.engine.models import MODEL_PRESETS
from rl_core.engine.pretrained import model_choices
from rl_core.engine.sft import default_cache_dir, warm_starts_to_build
from rl_core.messages import brief
from rl_core.runs.limits import (
    contention,
    estimated_evaluation_seconds,
    estimated_step_seconds,
    estimated_warm_start_seconds,
)
from rl_core.runs.store import RunStore, StoreError
from toy_tasks import DEFAULT_TASK, TASKS
from ui import chat
from ui import share as share_state
from ui.bridge import scale_exports
from ui.classroom import record_answer
from ui.dashboard import dashboard
from ui.jobs import Job, LiveLoop, TrainingSlots, token_view_responses, training_left
from ui.knobs import KNOBS, difference_text, render_knob
from ui.limits import check_learner, check_runs, server_limits
from ui.predict import Prediction
from ui.refresh import REFRESH_SECONDS, RERUN_SECONDS, LivePages, retune
from ui.session import learner_state, session_token

KEPT_RUNS = 6  # per page: the latest run plus up to five earlier ones to overlay
DEFAULT_STEPS = 50
RUN_KNOBS = ("steps", "seed")
WARM_START_KNOBS = ("sft_steps", "demo_noise")
# LoRA (peft's adapters over the frozen policy) applies to every RL algorithm: on every page, under "All knobs".
ADAPTER_KNOBS = ("use_peft", "lora_r", "lora_alpha", "lora_target_modules")


LIVE_PAGE = "lab:live_page"  # this session's key among the server's live pages (`live_pages`)
URL_WRITTEN = "lab:urls"  # the query parameters the pages of this session wrote, the latest last
URLS_KEPT = 32  # a browser's query string lags a few writes behind at most (a rerun per key press under load)


@st.cache_resource(show_spinner=False)
def training_slots() -> TrainingSlots:
    """The one cap shared by every browser session of this server."""
    return TrainingSlots.from_env()


@st.cache_resource(show_spinner=False)
def live_pages() -> LivePages:
    """The server's live dashboards and what their redraws cost, which set how often they refresh."""
    return LivePages()


@st.cache_resource(show_spinner=False)
def live_loop() -> LiveLoop:
    """The one loop that steps every browser session's live trainings, and its places."""
    return LiveLoop.from_env()


def page_runs(page: str) -> list[Job]:
    """The learner's runs on this page, kept by the server (`ui.session.learner_state`): a reload or a second tab
    shows them again, and a run that was training when the page reloaded goes on and is drawn live. A server
    that holds none for the learner (it restarted since) reads them from the run store."""
    state = learner_state()
    if f"{page}:runs" not in state:
        state[f"{page}:runs"] = stored_page_runs(page)
    return st.session_state.setdefault(f"{page}:runs", state[f"{page}:runs"])


def stored_page_runs(page: str) -> list[Job]:
    """The learner's latest KEPT_RUNS runs of this page in the run store, as ended jobs (none if the store cannot
    be read, or a run's configuration no longer fits the engine's)."""
    try:
        store = RunStore(recover=False)
        stored = store.runs(visible_to=session_token(), page=page)[-KEPT_RUNS:]
        return [Job.from_store(run, store, live_loop()) for run in stored]
    except (StoreError, TypeError, ValueError):
        return []


def live_lab(
    page: str,
    variants: dict[str, str],
    lesson: Sequence[str],
    knobs: Sequence[str],
    focus: Sequence[str] = (),
    prediction: Prediction | None = None,
) -> None:
    """The instrument at the top of an algorithm page: Train/Stop, the `lesson` knobs (the few the page is
    about) and the live charts side by side; every other knob of `knobs` one click away under "All knobs".

    `variants` maps a switch label to a preset name (one entry: no switch); `focus` names the charts drawn
    first; `prediction` is asked before Train and answered from the run. The settings live in the URL."""
    runs = page_runs(page)
    current = runs[-1] if runs else None
    busy = current is not None and current.active
    all_knobs = tuple(dict.fromkeys((*lesson, *knobs, *ADAPTER_KNOBS)))
    _apply_url(page, variants, all_knobs)
    controls, effect = st.columns([10, 23], gap="medium")
    with controls:
        variant = _variant_switch(page, variants, all_knobs, busy)
        values = st.session_state.setdefault(f"{page}:values", _defaults(variant, all_knobs))
        # Widgets below the buttons hold this run's choices already; Train must start with them.
        values.update(
            {name: st.session_state[f"{page}:{name}"] for name in values if f"{page}:{name}" in st.session_state}
        )
        try:
            run = _run_config(variant, values, all_knobs)
        except ValueError:
            run = None  # the message is drawn under the knobs
        over_allowance = None if busy else _learner_refusal()
        if over_allowance:
            run = None
        _buttons(page, variants, all_knobs, run, variant, values, current, busy)
        if prediction is not None:
            st.radio(
                prediction.question,
                prediction.options,
                index=None,
                key=f"{page}:prediction",
                horizontal=True,
                disabled=busy,
                help="Answer before you press Train; the run's own numbers answer it at the end.",
                on_change=lambda: record_answer(page, prediction, "before", st.session_state[f"{page}:prediction"]),
            )
        extra = {name: [getattr(PRESETS[v], name) for v in variants.values()] for name in all_knobs}
        for name in lesson:
            _knob(page, name, values, extra[name], busy)
        more, share = st.columns(2)
        with more.popover("All knobs", width="stretch"):
            _task_and_model(page, values, busy)
            left, right = st.columns(2)
            for index, name in enumerate((*RUN_KNOBS, *WARM_START_KNOBS, *(k for k in all_knobs if k not in lesson))):
                with (left, right)[index % 2]:
                    _knob(page, name, values, extra.get(name, ()), busy)
        try:
            run = _run_config(variant, values, all_knobs)
        except ValueError as error:  # the engine (or the server's limits) names the knob that is out of range
            st.error(f"This combination cannot run: {brief(str(error))}")
            run = None
        if over_allowance:
            st.warning(over_allowance, icon=":material/timer:")
            run = None
        written = share_state.write(variant, values, _defaults(variant, all_knobs))
        _remember_url(written)
        with share.popover("Share", width="stretch"):
            st.caption("This page with these settings (copy with the icon):")
            st.code(share_state.link(written), language=None, wrap_lines=True)
            if run is not None:
                scale_exports(page, run)
    with effect:
        # One dashboard fragment per page, registered in every run under the same key, so that a refresh
        # timer still in flight when a run ends always finds it (see docs/ARCHITECTURE.md, "The freeze").
        every = _refresh_every(current) if busy else None
        fragment = st.fragment(_instrument_dashboard, run_every=every, key=f"{page}-dashboard")
        fragment(page, focus, prediction, every)
    chat.talk_to_run(page)


def _refresh_every(current: Job) -> float:
    """Seconds between the live dashboard's redraws: the class's interval (`LivePages.interval`) for pages with
    charts once the run has points, for pages waiting for a first point before (cheap redraws: a faster one)."""
    return live_pages().interval(charted=_charted(current))


def _charted(job: Job) -> bool:
    return bool(job.snapshot().records)


def _live_page() -> str:
    """This browser session's key among the server's live pages (one dashboard refreshes at a time per session)."""
    return st.session_state.setdefault(LIVE_PAGE, secrets.token_hex(8))


def _instrument_dashboard(page: str, focus: Sequence[str], prediction: Prediction | None, every: float | None) -> None:
    runs: list[Job] = st.session_state[f"{page}:runs"]
    if not runs:
        st.info("Press **Train**: the charts fill in here live, one point per RL step.", icon=":material/play_arrow:")
        return
    if every is not None and not runs[-1].active:
        # The run just ended: one full rerun (which draws the dashboard anyway) re-enables the controls and
        # stops the refresh timer; drawing it here first would only delay that.
        live_pages().forget(_live_page())
        st.rerun()
    started = time.thread_time()  # this thread's CPU: a wait for the interpreter lock is not the redraw's cost
    dashboard(page, runs, focus, prediction, every)
    if every is None:
        return
    # The drawing's CPU, and Streamlit's own work on a rerun (not measurable here: a thread can carry the end of a
    # full run of the page into the rerun after it).
    charted = _charted(runs[-1])
    live_pages().redrawn(_live_page(), time.thread_time() - started + RERUN_SECONDS, every, charted)
    if every > REFRESH_SECONDS:
        st.caption(
            f"The charts redraw every {every:.1f} s: {len(live_pages().live())} pages with charts and "
            f"{len(live_pages().live(charted=False))} waiting for a first point are training on this server, and "
            "their redraws share the server's time with the training itself."
        )
    # A page waiting for its first point keeps the interval it started with (a full run costs more than its
    # redraws); from its first point on, a page follows the class's interval.
    if charted and retune(every, live_pages().interval()):
        st.rerun()  # a full run of the page registers the dashboard again at the interval the class needs now


def _train_estimate(run: RunConfig) -> str:
    """How long the run will take at this server's pace now: the SFT warm starts the cache lacks
    (`estimated_warm_start_seconds`), then its steps, each its estimate (`estimated_step_seconds`) times the
    learners it will share the training loop with (each has an equal part of it) over the threads the loop steps
    on while it steps that many runs (`cores_ahead`), then its evaluation, which its job's thread runs off the loop,
    not shared (`training_left`); all times the machine's load (`contention`)."""
    loop = live_loop().loop
    sharing = loop.learners + (0 if live_loop().learner_runs(session_token())[0] else 1)
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    sharing = max(sharing, 1)
    slower = contention(load, cores, 1)
    warm = estimated_warm_start_seconds(warm_starts_to_build(run, default_cache_dir())) * slower
    step = estimated_step_seconds(run) * max(sharing / loop.cores_ahead(sharing), 1)
    seconds = warm + training_left(run.steps, step, estimated_evaluation_seconds(run)) * slower
    learners = "you alone in the training loop" if sharing == 1 else f"{sharing} learners sharing the training loop"
    built = (
        f"of which about {warm:,.0f} s build its SFT warm start, which this server has not cached yet"
        if warm
        else "its warm start is cached on this server"
    )
    return (
        f"About {seconds:,.0f} s at this server's pace now ({learners}, load average {load:.1f} on {cores} "
        f"cores); {built}."
    )


def _buttons(page, variants, knobs, run, variant, values, current, busy) -> None:
    train, stop, reset = st.columns(3)
    train.button(
        "Train",
        key=f"{page}:train",
        type="primary",
        disabled=busy or run is None,
        width="stretch",
        on_click=_start,
        args=(page, run, variant, values, knobs),
        help="Start a run with these settings." + ("" if run is None else f" {_train_estimate(run)}"),
    )
    stop.button(
        "Stop",
        key=f"{page}:stop",
        disabled=not busy,
        on_click=current.stop if busy else None,
        width="stretch",
        help="End the run after its current step.",
    )
    reset.button(
        "Reset",
        key=f"{page}:reset",
        on_click=_reset,
        args=(page, variants, knobs),
        width="stretch",
        help="Stop any run, forget this page's runs and put every knob back to the preset's defaults.",
    )


def _remember_url(params: dict[str, str]) -> None:
    written = [p for p in st.session_state.get(URL_WRITTEN, []) if p != params]
    st.session_state[URL_WRITTEN] = [*written, params][-URLS_KEPT:]


def _apply_url(page: str, variants: dict[str, str], knobs: Sequence[str]) -> None:
    """Settings from the URL, unless it holds what a page of this session wrote there itself (this page's own
    settings, or another page's just before a page switch): a shared link, a reload. Not only the latest write:
    each rerun brings the browser's query string, which under fast key presses still holds an earlier one, and
    applying that would move the sliders back under the learner's hand."""
    params = share_state.settings_params()  # not ?me= (whose) nor ?present= (how to draw)
    if not params or params in st.session_state.get(URL_WRITTEN, []):
        return
    choices = {
        "task": list(TASKS),
        "model": _models(),
        **{name: KNOBS[name].options for name in knobs if KNOBS[name].kind == "choice"},
    }
    preset, chosen, refused = share_state.read(params, variants, knobs, _check_link, choices)
    for message in refused:
        st.warning(f"A setting in the link was refused, the default kept: {brief(message)}", icon=":material/link_off:")
    preset = preset or variants[st.session_state.get(f"{page}:variant", next(iter(variants)))]
    values = _defaults(preset, knobs) | chosen
    st.session_state[f"{page}:values"] = values
    if len(variants) > 1:
        st.session_state[f"{page}:variant"] = next(label for label, name in variants.items() if name == preset)
    for name, value in values.items():
        st.session_state[f"{page}:{name}"] = value
    _remember_url(params)


def _learner_refusal() -> str | None:
    """Why this learner may not start another run now (the hour's training allowance is used up, or their runs
    training and waiting in the live loop are as many as a learner may have), or None."""
    try:
        check_learner()
        server_limits().check_learner_runs(*live_loop().learner_runs(session_token()))
    except ValueError as error:
        return brief(str(error))
    return None


def _check_link(preset: str, values: dict) -> None:
    """ValueError for a link's value that the preset or the server's limits refuse."""
    share_state.check_algo(preset, values)
    runs = {name: values[name] for name in ("steps", "sft_steps", "model") if name in values}
    server_limits().check_fields(torch.cuda.is_available(), **runs)


def _models() -> list[str]:
    """The models this server can train: the preset shapes (the 124M one only where a GPU can,
    `rl_core.runs.limits`), then the model folders under RLHF_LAB_MODELS_DIR and the Hub ids the instructor allows
    (`rl_core.engine.pretrained.model_choices`)."""
    return [m for m in model_choices() if m != "gpt2" or torch.cuda.is_available()]


def _model_label(name: str) -> str:
    if name in MODEL_PRESETS:
        return f"{name}: {MODEL_PRESETS[name].description}"
    if Path(name).is_dir():
        return f"{Path(name).name}: a Hugging Face model folder, with its own tokenizer"
    return f"{name}: from the Hugging Face Hub, with its own tokenizer"


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
    base = PRESETS[variants[labels[0]]]
    changes = "\n".join(
        f"- **{label}** changes " + ", ".join(_differences(base, PRESETS[variants[label]])) for label in labels[1:]
    )
    label = st.radio(
        "Variant",
        labels,
        key=key,
        horizontal=True,
        disabled=busy,
        on_change=_apply_variant,
        args=(page, variants, knobs),
        help=f"Switching loads that variant's preset defaults into the knobs. From {base.title}:\n{changes}",
    )
    return variants[label]


def _differences(base: AlgoConfig, other: AlgoConfig) -> list[str]:
    return [difference_text(name, *pair) for name, pair in knob_differences(base, other).items()]


def _apply_variant(page: str, variants: dict[str, str], knobs: Sequence[str]) -> None:
    values = st.session_state[f"{page}:values"]
    preset = PRESETS[variants[st.session_state[f"{page}:variant"]]]
    for name in knobs:
        values[name] = st.session_state[f"{page}:{name}"] = getattr(preset, name)


# A page that lets the learner switch the policy loss also loads the clip range that loss is meant for: GSPO's
# ε = 3e-4 on token ratios would clip nearly every token.
CLIP_RANGE_OF_LOSS = {"vanilla": "pg", "clip": "grpo", "gspo": "gspo", "gspo_token": "gspo"}


def _follow_policy_loss(page: str) -> None:
    preset = PRESETS[CLIP_RANGE_OF_LOSS[st.session_state[f"{page}:policy_loss"]]]
    values = st.session_state[f"{page}:values"]
    for name in ("epsilon", "epsilon_high"):
        values[name] = st.session_state[f"{page}:{name}"] = getattr(preset, name)


def _knob(page: str, name: str, values: dict, extra, disabled: bool) -> None:
    key = f"{page}:{name}"
    if key not in st.session_state:
        st.session_state[key] = values[name]
    on_change = (_follow_policy_loss, (page,)) if name == "policy_loss" else (None, ())
    render_knob(name, key, extra, disabled, *on_change)
    values[name] = st.session_state[key]


def _task_and_model(page: str, values: dict, disabled: bool) -> None:
    for name in ("task", "model"):
        st.session_state.setdefault(f"{page}:{name}", values[name])
    st.selectbox(
        "task",
        list(TASKS),
        key=f"{page}:task",
        disabled=disabled,
        format_func=lambda name: f"{name}: {TASKS[name].description}",
        help="The toy task the policy is trained on; each is small enough to learn on a CPU in minutes.",
    )
    values["task"] = st.session_state[f"{page}:task"]
    st.caption(TASKS[values["task"]].lesson)
    st.selectbox(
        "model",
        _models(),
        key=f"{page}:model",
        disabled=disabled,
        format_func=_model_label,
        help="The policy (the reference and critic copy it): a GPT-2 shape from random weights with the character "
        "tokenizer, or a pretrained GPT-2 with its own tokenizer (a folder under RLHF_LAB_MODELS_DIR or a Hub id "
        "the instructor allows in RLHF_LAB_HUB_MODELS).",
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
        samples_per_record=token_view_responses(algo.prompts_per_step, algo.num_generations),
    )
    run.validate()
    check_runs([run])
    return run


def variant_title(variant: str, algo: AlgoConfig) -> str:
    """A run's variant as its labels name it: the preset's title, and the policy loss where the run's is not the
    preset's own (`policy_loss=dro` on the GRPO variant: "GRPO with policy_loss=dro"). A CISPO or SAPO run is
    named by its variant's title; a loss without a variant of its own must be named too."""
    preset = PRESETS[variant]
    if algo.policy_loss == preset.policy_loss:
        return preset.title
    return f"{preset.title} with policy_loss={algo.policy_loss}"


def _start(page: str, run: RunConfig, variant: str, values: dict, knobs: Sequence[str]) -> None:
    runs = page_runs(page)
    # Numbers go on from the learner's kept runs: a reload keeps them but starts a fresh session.
    number = max([st.session_state.get(f"{page}:counter", 0), *(job.number for job in runs)]) + 1
    st.session_state[f"{page}:counter"] = number
    title = variant_title(variant, run.algo)
    settings = {"variant": title} | {
        name: values[name] for name in ("task", "model", *RUN_KNOBS, *WARM_START_KNOBS, *knobs)
    }
    label = f"{title} · {page} page #{number}"
    st.session_state.setdefault(f"{page}:predictions", {})[number] = st.session_state.get(f"{page}:prediction")
    job = Job(
        run, live_loop(), settings=settings, number=number, label=label, session=session_token(), page=page
    ).start()
    runs.append(job)
    finished = [j for j in runs if not j.active]
    while len(runs) > KEPT_RUNS and finished:
        runs.remove(finished.pop(0))


def _reset(page: str, variants: dict[str, str], knobs: Sequence[str]) -> None:
    for job in page_runs(page):
        job.stop()
    learner_state()[f"{page}:runs"] = []
    with contextlib.suppress(StoreError):
        RunStore(recover=False).leave_page(session_token(), page)  # nor do they come back after a restart
    prefix = f"{page}:"
    for key in [k for k in st.session_state if isinstance(k, str) and k.startswith(prefix)]:
        del st.session_state[key]
    st.session_state[f"{page}:values"] = _defaults(next(iter(variants.values())), knobs)
