"""What a run shows while and after it trains: its progress, the charts of the chosen runs, the token view, and
the answer to the page's prediction. Drawn by one fragment per page (ui/lab.py), from job snapshots only."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import streamlit as st

from rl_core.numbers import number
from rl_core.runs.run_stream import SETUP_PHASES
from rl_core.runs.warm_start_builder import WarmStartWait
from toy_tasks import TASKS
from ui.bridge import unipo_download
from ui.charts import CHARTS, ChartRun, caption, figure, has_data, run_colour
from ui.classroom import record_answer
from ui.jobs import Job, JobSnapshot
from ui.predict import Prediction
from ui.runs import differences, download, full_labels, labels, picker, short_label, token_label
from ui.tokens import COLOURINGS, EOS_TOKEN, group_summary, groups, legend_html, token_html, token_term

TABS = ("Charts", "Tokens")
# A first point nearer than this on an idle server gets no number but "under 3 s": a second's rounding is a third
# of such a wait or more (runs with a cached warm start, told 1–2 s, were 0.25–0.6 of the real wait,
# bench/class_load.py). On a loaded one the bound grows with the load (`short_wait_bound`).
SHORT_WAIT_SECONDS = 3
ALL_GROUPS = "all"


def dashboard(
    page: str, runs: list[Job], focus: Sequence[str], prediction: Prediction | None, refresh: float | None = None
) -> None:
    """Progress of the latest run, then tabs: every chart with data (the page's `focus` charts first) and the
    token view. Clicking a chart point opens that step in the token view. `refresh`: seconds between the page's
    redraws while it is live."""
    current = runs[-1]
    snap = current.snapshot()
    progress(snap, current, refresh)
    if prediction is not None:
        reveal(page, current, snap, prediction)
    if not snap.records:
        return
    names = labels(runs)
    shown = picker(page, runs, names)
    differences(shown)
    _follow_chart_click(page)
    # The token view's run and step, settled before the charts are drawn: every chart marks that step.
    token_job = _token_job(page, runs)
    token_snap = snap if token_job is current else token_job.snapshot()
    step = _token_step(page, token_snap)
    charts_tab, tokens_tab = st.tabs(TABS, key=f"{page}:tab", on_change="rerun")
    if charts_tab.open:
        with charts_tab:
            # With several runs on the page a colour names a run (the picker's swatches) on every chart.
            _charts(page, shown, names, focus, by_run=len(runs) > 1, step=step)
            if not snap.active:
                download(page, shown, names)
                unipo_download(page, current)
    if tokens_tab.open:
        with tokens_tab:
            if len(runs) > 1:
                _token_run_picker(page, runs, names)
            token_view(page, token_job, token_snap, token_label(token_job), newest=token_job is current)


def progress(snap: JobSnapshot, job: Job, refresh: float | None = None) -> None:
    """The run's state in a line. Before its first point, the seconds until it shows: every phase still ahead of it
    (`JobSnapshot.first_point_in`) and half the page's `refresh` interval (a point waits that long on average for
    the page's next redraw)."""
    first = None if snap.first_point_in is None else snap.first_point_in + (refresh or 0.0) / 2
    until = f"{first_point_wait(first, snap.slower)} to its first point" if first is not None else ""
    if snap.status == "queued":
        ahead = snap.waiting_for + (snap.queue_place or 1) - 1  # the runs training and those queued before it
        running = "1 is" if snap.waiting_for == 1 else f"{snap.waiting_for} are"
        place = f"; you are number {snap.queue_place} in the queue" if snap.queue_place else ""
        # from the running trainings' remaining steps at their measured pace, and the warm starts the runs ahead
        # still build (TrainingSlots.wait_estimate), then this run's own phases before its first point
        wait = f", {first_point_wait(first, snap.slower)} to wait for its first point" if first is not None else ""
        st.info(
            f"Queued behind {ahead} {'run' if ahead == 1 else 'runs'}: {running} training, the most the server "
            f"trains at once… this run starts as soon as one of them ends{place}{wait}.",
            icon=":material/hourglass_top:",
        )
    elif snap.warm_start is not None:
        st.progress(*warm_start_line(snap.warm_start, until))
    elif snap.phase is not None:
        phase, done, total = snap.phase
        task = TASKS[job.run.task]
        what = SETUP_PHASES[phase] if phase != "reward" or hasattr(task, "reward_model_preset") else "the task"
        building = "building the warm start" if phase in ("sft", "teacher") else "setting up"
        text = f"{building.capitalize()}: {what} {done}/{total}{', ' + until if until else ''}"
        st.progress(done / max(total, 1), text=text)
    elif snap.status in ("preparing", "training"):
        eta = f", about {snap.eta:.0f} s left" if snap.eta is not None else ""
        if snap.steps_done == 0:  # before its first point: say why it waits
            sharing = f", {snap.learners} learners share it" if snap.learners > 1 else ""
            doing = "waiting for its first turn in the training loop" if snap.status == "training" else "preparing"
            eta = f", {doing}{sharing}{', ' + until if until else ''}"
        st.progress(
            snap.steps_done / snap.steps_total,
            text=f"step {snap.steps_done}/{snap.steps_total} · {snap.elapsed:.0f} s{eta}",
        )
    elif snap.status == "failed":
        st.error(f"The run failed after {snap.steps_done} steps: {snap.error}")
    elif snap.status == "stopped":
        why = f" {snap.error[0].upper()}{snap.error[1:]}." if snap.error else ""  # the server stopped it
        st.warning(f"Stopped after {snap.steps_done} of {snap.steps_total} steps.{why}")
    elif snap.status == "interrupted":
        st.warning(f"Interrupted after {snap.steps_done} of {snap.steps_total} steps: {snap.error}")
    else:
        st.success(f"Finished {snap.steps_done} steps in {snap.elapsed:.0f} s.")
    if "value_pretrain_explained_variance" in snap.setup:
        st.caption(
            "Explained variance of the critic after value pretraining: "
            f"**{snap.setup['value_pretrain_explained_variance']:.3f}** (1 = it predicts the returns)."
        )


def short_wait_bound(slower: float) -> int:
    """The wait below which a first point gets a bound, not a number, on a server whose work takes `slower` times as
    long as on an idle one (`ui.jobs.server_slower`): ⌈SHORT_WAIT_SECONDS × slower⌉ seconds.

    A short wait is a preparation and a turn or two of the loop, and on a loaded server those stretch by whatever
    else takes the interpreter then (pages loading as their learners press Train, with their runs' preparations),
    which the loop's past turns do not show. At load 4.4 on 2 cores, runs told "under 3 s" while they prepared beside
    two others drew their points after 4.1-6.2 s, their first turns 3.2-5.8 s where the loop's latest turns were
    1.5 s (bench/class_load.py); ⌈3 × 2.2⌉ = 7 s bounds them."""
    return math.ceil(SHORT_WAIT_SECONDS * max(slower, 1.0))


def first_point_wait(seconds: float, slower: float = 1.0) -> str:
    """How long a first point is in words: "about N s", N the whole seconds nearest; "under B s" below
    B = `short_wait_bound(slower)`."""
    bound = short_wait_bound(slower)
    return f"under {bound} s" if seconds < bound else f"about {seconds:.0f} s"


def warm_start_line(wait: WarmStartWait, until: str) -> tuple[float, str]:
    """A progress bar's value and text for a run whose SFT warm start is with the builder: its group's steps once
    it builds (and the first point's time, once its pace is known); while it forms, what it waits for, with no
    number for its own group, which a later click may still join."""
    group = f"as one group with {wait.runs - 1} other {'run' if wait.runs == 2 else 'runs'}" if wait.runs > 1 else ""
    if wait.groups_ahead == 0:
        text = f"Building the warm start{' ' + group if group else ''}: SFT step {wait.done}/{wait.total}"
        return min(wait.done / max(wait.total, 1), 1.0), text + (f", {until}" if until else "")
    ahead = f"{wait.groups_ahead} {'group' if wait.groups_ahead == 1 else 'groups'} of other warm starts"
    when = f"after {ahead}" if wait.free_in is None else f"the builder is free for it in about {wait.free_in:.0f} s"
    return 0.0, f"Waiting to build the warm start{' ' + group if group else ''}: {when}"


def reveal(page: str, job: Job, snap: JobSnapshot, prediction: Prediction) -> None:
    """Once the run has ended, the page's question answered from its records, next to what the learner said."""
    said = st.session_state.get(f"{page}:predictions", {}).get(job.number)
    if snap.active:
        return
    answer = prediction.answer(snap.records)
    if answer is not None:
        record_answer(page, prediction, "after", answer[0])
    if said is None:  # no prediction: the answer still, and the invitation for the next run
        if answer is not None:
            st.info(
                f"{prediction.question} The run says **{answer[0]}**: {answer[1]}. Answer before the next "
                "Train to test your intuition.",
                icon=":material/quiz:",
            )
        return
    if answer is None:
        st.info(f"You predicted **{said}**; this run is too short to tell.")
        return
    truth, evidence = answer
    message = f"You predicted **{said}**; the run says **{truth}**: {evidence}."
    (st.success if said == truth else st.warning)(message, icon=":material/quiz:")


# ---------------------------------------------------------------------------------------------- charts
def _chart_key(page: str, title: str) -> str:
    return f"{page}:chart:{title}"


def _charts(
    page: str, shown: list[Job], names: dict[int, str], focus: Sequence[str], by_run: bool, step: int | None
) -> None:
    chart_runs = [
        ChartRun(
            names[job.number], job.snapshot().records, job.run.algo, tag=f"#{job.number}", colour=run_colour(job.number)
        )
        for job in shown
    ]
    number_of = {run.tag: job.number for run, job in zip(chart_runs, shown)}
    ordered = sorted(
        CHARTS, key=lambda chart: (chart.title not in focus, focus.index(chart.title) if chart.title in focus else 0)
    )
    charts = [chart for chart in ordered if has_data(chart, chart_runs)]
    for row in range(0, len(charts), 2):
        for column, chart in zip(st.columns(2), charts[row : row + 2]):
            with column:
                drawn = figure(chart, chart_runs, by_run, marked_step=step)
                # Which run each trace draws (its meta is the run's tag), so that a click opens that run's samples.
                st.session_state[f"{page}:trace_runs:{chart.title}"] = [number_of[trace.meta] for trace in drawn.data]
                st.plotly_chart(
                    drawn,
                    key=_chart_key(page, chart.title),
                    on_select="rerun",
                    selection_mode="points",
                    config={"displayModeBar": False},
                )
                st.caption(caption(chart, chart_runs))
    st.caption(
        "Click a point on a chart to see that step's sampled responses in the Tokens tab; the dotted line "
        "on every chart marks the step the Tokens tab shows."
    )


def _follow_chart_click(page: str) -> None:
    """A newly clicked chart point opens its step in the token view (read before the tabs and the step
    slider are drawn, so their state can still be set in this run)."""
    for chart in CHARTS:
        state = st.session_state.get(_chart_key(page, chart.title))
        points = (state or {}).get("selection", {}).get("points", []) if state else []
        clicked = (chart.title, tuple(p.get("x") for p in points))
        if points and st.session_state.get(f"{page}:clicked:{chart.title}") != clicked:
            st.session_state[f"{page}:clicked:{chart.title}"] = clicked
            st.session_state[f"{page}:token_step"] = int(points[0]["x"])
            st.session_state[f"{page}:tab"] = "Tokens"
            trace_runs = st.session_state.get(f"{page}:trace_runs:{chart.title}", [])
            curve = points[0].get("curve_number")
            if isinstance(curve, int) and 0 <= curve < len(trace_runs):
                st.session_state[f"{page}:token_run"] = trace_runs[curve]


def _token_run_picker(page: str, runs: list[Job], names: dict[int, str]) -> None:
    """The Tokens tab's choice of run. The run shown is kept under `{page}:token_run` (a chart click and the newest
    run set it too); the widget is keyed by that run and the list of runs, so each new run or click draws a fresh
    widget, and a value the browser still holds from an earlier list can never be taken for the learner's choice."""
    numbers = [job.number for job in runs]
    shown = st.session_state[f"{page}:token_run"]
    key = f"{page}:token_run_picker:{shown}:{'-'.join(map(str, numbers))}"

    def chosen() -> None:
        st.session_state[f"{page}:token_run"] = st.session_state[key]

    st.selectbox(
        "samples of run",
        numbers,
        index=numbers.index(shown),
        key=key,
        on_change=chosen,
        format_func=lambda n: short_label(names[n]),
        help="Whose sampled responses to show; clicking a run's point on a chart chooses it too."
        + full_labels(numbers, names),
    )


def _token_job(page: str, runs: list[Job]) -> Job:
    """The run whose samples the token view shows: the one the learner last trained, clicked (a chart point) or
    chose (the Tokens tab). A new run takes over from an earlier click: its charts are the ones on the page."""
    key, newest = f"{page}:token_run", runs[-1].number
    if st.session_state.get(key) not in [job.number for job in runs] or st.session_state.get(f"{key}:newest") != newest:
        st.session_state[key] = newest
    st.session_state[f"{key}:newest"] = newest
    return next(job for job in runs if job.number == st.session_state[key])


def _token_step(page: str, snap: JobSnapshot) -> int | None:
    """The step the token view shows (None before the first): the newest while training, unless the learner chose
    one (a chart click, the step slider). A clicked step whose samples were thinned away opens the nearest kept."""
    steps = sorted(snap.samples)
    if not steps:
        return None
    key = f"{page}:token_step"
    chosen = st.session_state.get(key)
    if isinstance(chosen, int) and chosen not in steps and st.session_state.get(f"{key}:latest") != chosen:
        st.session_state[key] = min(steps, key=lambda s: (abs(s - chosen), s))
    follow_newest(key, steps)
    return st.session_state[key]


def follow_newest(key: str, options: list) -> None:
    """Keep a widget's choice (`key`) on the newest of `options` as they grow, unless the learner chose an older
    one; a choice no longer offered falls back to the newest."""
    latest = f"{key}:latest"
    if st.session_state.get(key) not in options or st.session_state.get(latest) == st.session_state[key]:
        st.session_state[key] = options[-1]
    st.session_state[latest] = options[-1]


# ---------------------------------------------------------------------------------------------- tokens
def token_view(page: str, job: Job, snap: JobSnapshot, name: str, newest: bool) -> None:
    """The chosen run's step (`_token_step`, already settled): the token picker and its term of the loss first,
    then the step's responses, group by group where the algorithm samples groups."""
    swatch = f'<span style="color:{run_colour(job.number)};font-weight:700">━</span>'
    why = "the newest run" if newest else "the run you chose"
    st.markdown(
        f'<div style="font-size:0.9rem">{swatch} samples of run <b>{html.escape(name)}</b> ({why})</div>',
        unsafe_allow_html=True,
    )
    steps = sorted(snap.samples)
    if not steps:
        st.caption("No sampled responses recorded for this run.")
        return
    grouped = job.run.algo.num_generations > 1  # one response per prompt (the policy gradient's): no groups
    if grouped:
        step_column, group_column, colour_column = st.columns([3, 2, 3])
    else:
        step_column, colour_column = st.columns(2)
    step = step_column.select_slider(
        "step",
        steps,
        key=f"{page}:token_step",
        help="Scrub through the run: every step's samples are kept "
        "(evenly thinned on long runs, the latest always kept); the charts mark the step shown.",
    )
    by_group = groups(snap.samples[step], job.run.algo.num_generations)
    group = ALL_GROUPS
    if grouped:
        group_key = f"{page}:token_group"
        options = [ALL_GROUPS, *range(len(by_group))]
        if st.session_state.get(group_key) not in options:
            st.session_state[group_key] = ALL_GROUPS
        group = group_column.selectbox(
            "group",
            options,
            key=group_key,
            disabled=len(by_group) < 2,
            format_func=lambda g: f"all {len(by_group)} groups" if g == ALL_GROUPS else group_summary(g, by_group[g]),
            help="The step's groups (one prompt, its G responses each): all of them, or one.",
        )
    colour_by = colour_column.radio(
        "colour tokens by",
        list(COLOURINGS),
        key=f"{page}:colour_by",
        horizontal=True,
        help="Hover a token for all its numbers.",
    )
    shown = by_group if group == ALL_GROUPS else [by_group[group]]
    first = 0 if group == ALL_GROUPS else group
    samples = [sample for members in shown for sample in members]
    headings, row = {}, 0
    for index, members in enumerate(shown, start=first):
        if grouped:
            headings[row] = group_summary(index, members)
        row += len(members)
    # The KL coefficient this step's loss used (adaptive β moves it from the config's).
    beta = next((r.get("beta") for r in snap.records if r.get("step") == step), None)
    # Keyed by what the list shows: a new run, step or group draws a fresh picker whose labels are the list's.
    _token_formula(f"{page}:{job.number}:{step}:{group}", job, samples, beta)
    st.markdown(legend_html(samples, colour_by), unsafe_allow_html=True)
    st.caption(COLOURINGS[colour_by].legend + " Ratios and clips are measured after this step's updates.")
    st.markdown(token_html(samples, colour_by, headings), unsafe_allow_html=True)


def _token_formula(shown: str, job: Job, samples: list[dict], beta: float | None) -> None:
    """Pick a token; see the run's own loss with its numbers filled in. `shown` names the list the picker
    indexes (page, run, step, group)."""
    algo = job.run.algo
    row_column, token_column = st.columns([1, 4])
    row = row_column.selectbox(
        "response",
        range(len(samples)),
        key=f"{shown}:token_row",
        format_func=lambda i: f"{i + 1}. {samples[i]['prompt']}",
        help="The numbered responses listed below.",
    )
    sample = samples[row]
    tokens = sample["tokens"]
    index = token_column.pills(
        "token",
        range(len(tokens)),
        key=f"{shown}:{row}:token_index",
        format_func=lambda i: f"{'⏎' if tokens[i] == EOS_TOKEN else tokens[i]} ({i})",
    )
    if index is None or index >= len(tokens):
        st.caption("Pick a token to see its term of the loss with its own numbers.")
        return
    term = token_term(sample, index, algo, beta)
    st.latex(term.formula)
    kl = "" if term.kl is None else f", and **{number(term.kl_weight, '+.4f')}** from the KL term"
    st.markdown(
        f"**{term.case}.** Gradient weight on log π(`{tokens[index]}`): **{number(term.weight, '+.4f')}** from the "
        f"policy loss{kl} (−∂ℓ/∂log π: positive pushes the token up, negative down, 0 leaves it alone)."
    )
