"""The instructor's view of a class: how many learners are here, the class's answers to each page's question before
and after their runs, the class's runs of a page overlaid, a banner pinned on every learner's page, and the
experiments warmed up for the class.

The page exists only where the server was started with `RLHF_LAB_INSTRUCTOR_TOKEN`, and shows itself only to a
session that opened it with `?instructor=<that token>` (compared in constant time); the navigation lists it for that
session alone. A learner who finds its address is refused. Learners' runs are anonymised ("learner 1", in the order
of their first run on the page) unless the instructor asks for the tokens' short ids.
"""

from __future__ import annotations

import hmac
import os
import textwrap
import time
from urllib.parse import parse_qsl, urlencode

import plotly.graph_objects as go
import streamlit as st

from rl_core.algorithms import PRESETS
from rl_core.experiments import EXPERIMENTS
from rl_core.messages import brief
from rl_core.runs.store import PHASES, AnswerCount, RunStore, StoreError
from ui import share
from ui.charts import RUN_COLOURS
from ui.classroom import INSTRUCTOR_PARAM, banner_html
from ui.compare import CURVE_UNITS, CURVES, PLOT_CONFIG, band_figure
from ui.experiment_jobs import WarmUp
from ui.experiments_panel import experiment_workers
from ui.knobs import KNOBS, knob_text
from ui.lab import training_slots
from ui.navigation import PAGE_TITLES, page_title
from ui.present import chart_layout

TOKEN_ENV = "RLHF_LAB_INSTRUCTOR_TOKEN"
PARAM = INSTRUCTOR_PARAM
KEY = "lab:instructor"
PAGE_FILE = "app_pages/instructor.py"
QUESTION_WIDTH = 60  # characters of a chart title's line: a question wider than half a 1366-pixel screen is wrapped
ACTIVE_MINUTES = 10  # a learner seen within this many minutes counts as active
SHORT_ID = 6  # characters of a learner's token shown when the instructor asks for ids
REFRESH_SECONDS = 2.0
PHASE_NAMES = {"before": "before the run (predicted)", "after": "after the run (what it showed)"}


def instructor_token() -> str | None:
    """The token that opens the instructor's page; None (no such page) unless the server was started with one."""
    return os.environ.get(TOKEN_ENV) or None


def authorised() -> bool:
    """Whether this session opened the page with the instructor's token (`?instructor=`): remembered by the
    session, so the instructor may visit the learners' pages and come back."""
    token = instructor_token()
    if token is None:
        return False
    given = st.query_params.get(PARAM)
    if given is not None:
        st.session_state[KEY] = hmac.compare_digest(given.encode(), token.encode())
        if st.session_state[KEY]:  # held by the session now: off the address bar a projector shows to the class
            del st.query_params[PARAM]
    return bool(st.session_state.get(KEY, False))


def with_instructor_page(navigation: dict[str, list]) -> dict[str, list]:
    """The app's navigation with the instructor's page where a token is set: a section of its own for the
    instructor, unlisted for everyone else (whose visit is refused by the page itself)."""
    if instructor_token() is None:
        return navigation
    visible = authorised()
    page = st.Page(
        PAGE_FILE,
        title="Instructor",
        icon=":material/school:",
        url_path="instructor",
        visibility="visible" if visible else "hidden",
    )
    if visible:
        return navigation | {"Teach": [page]}
    last = list(navigation)[-1]
    return navigation | {last: [*navigation[last], page]}


def instructor_page() -> None:
    st.title("Instructor")
    if not authorised():
        given = st.query_params.get(PARAM) is not None
        st.error(
            ("The instructor's token in this link is wrong. " if given else "")
            + "This page is for the class's instructor: open it with the instructor's link "
            f"(`?{PARAM}=…`). Learners find every lab page in the navigation above.",
            icon=":material/lock:",
        )
        return
    try:
        store = RunStore(recover=False)
    except StoreError as error:
        st.error(brief(str(error)))
        return
    active = store.active_learners(time.time() - ACTIVE_MINUTES * 60)
    st.metric(f"Learners active in the last {ACTIVE_MINUTES} minutes", active)
    _banner_form(store)
    st.header("Predictions")
    _predictions(store.answer_counts())
    st.header("The class's runs")
    _class_runs(store)
    st.header("Experiments warm-up")
    _warm_up()


# ---------------------------------------------------------------------------------------------- predictions
def answer_figure(count: AnswerCount) -> go.Figure:
    """Bars per answer: how many learners predicted it, and how many runs showed it."""
    options = list(count.options) + sorted({a for c in count.counts.values() for a in c} - set(count.options))
    traces = [
        dict(
            type="bar",
            name=PHASE_NAMES[phase],
            x=options,
            y=[count.counts[phase].get(option, 0) for option in options],
            marker=dict(color=RUN_COLOURS[index]),
            text=[count.counts[phase].get(o, 0) for o in options],
        )
        for index, phase in enumerate(PHASES)
    ]
    lines = [f"<b>{page_title(count.page)}</b>", *textwrap.wrap(count.question, QUESTION_WIDTH)]
    # A 14-px line is about 20 px tall: the top margin holds every line of the title, hung from 10 px below the
    # figure's top (plotly anchors a title of several lines by its first).
    top = 20 + 20 * len(lines)
    height = 260 + top
    title = dict(text="<br>".join(lines), font=dict(size=14), yref="container", y=1 - 10 / height, yanchor="top")
    layout = dict(
        title=title,
        barmode="group",
        height=height,
        margin=dict(l=50, r=10, t=top, b=10),
        yaxis=dict(title=dict(text="learners"), dtick=1),
        legend=dict(orientation="h", yanchor="top", y=-0.15),
    )
    return go.Figure(data=traces, layout=chart_layout(layout), _validate=False)


def _predictions(counts: list[AnswerCount]) -> None:
    if not counts:
        st.info(
            "No learner has answered a page's question yet: each algorithm page asks one before Train.",
            icon=":material/quiz:",
        )
        return
    st.caption(
        "Each learner's latest answer counts once: what they predicted before Train, and what their latest "
        "finished run showed."
    )
    for row in range(0, len(counts), 2):
        for column, count in zip(st.columns(2), counts[row : row + 2]):
            column.plotly_chart(
                answer_figure(count), key=f"instructor:answers:{count.page}:{count.question}", config=PLOT_CONFIG
            )


# ---------------------------------------------------------------------------------------------- the class's runs
def learner_names(sessions: list[str], show_ids: bool) -> dict[str, str]:
    """Session → how the instructor's charts name it: "learner 1", … in order of first appearance, or the token's
    first SHORT_ID characters."""
    ordered = list(dict.fromkeys(sessions))
    return {s: s[:SHORT_ID] if show_ids else f"learner {i + 1}" for i, s in enumerate(ordered)}


def _class_runs(store: RunStore) -> None:
    pages = [page for page in lab_pages() if store.runs(page=page)]
    if not pages:
        st.info("No learner has trained on a page yet.", icon=":material/group:")
        return
    left, middle, right = st.columns([2, 2, 1])
    page = left.selectbox("Page", pages, format_func=page_title, key="instructor:runs_page")
    key = middle.selectbox("Curve", list(CURVES), format_func=CURVES.get, key="instructor:runs_curve")
    show_ids = right.toggle(
        "Show the learners' short ids",
        key="instructor:show_ids",
        help="Off: learners are numbered in the order of their first run on the page.",
    )
    runs = store.runs(page=page)
    names = learner_names([run.session for run in runs], show_ids)
    groups = {f"{names[run.session]} · #{run.page_run}": [store.steps(run.id)] for run in runs}
    title = f"{CURVES[key]}: {counted(len(runs), 'run')} of {counted(len(names), 'learner')}"
    st.plotly_chart(band_figure(key, groups, title, CURVE_UNITS[key]), key="instructor:runs_chart", config=PLOT_CONFIG)


def counted(n: int, noun: str) -> str:
    """ "1 run", "2 runs": the count and its noun, plural unless one."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def lab_pages() -> list[str]:
    """The app's pages by their URL path (their file's name), in the navigation's order; the instructor's own is
    not among them."""
    return list(PAGE_TITLES)


# ---------------------------------------------------------------------------------------------- the banner
def banner_link(page: str, settings: str) -> tuple[str, dict]:
    """The link a banner opens (`/page?settings`) and the settings it carries, checked as a page checks a link's;
    ValueError names the setting refused."""
    if page not in lab_pages():
        raise ValueError(f"page={page!r} is not a page of the lab; allowed: {', '.join(lab_pages())}")
    values: dict = {}
    for name, text in parse_qsl(settings.strip().lstrip("?"), keep_blank_values=True):
        if name == "algo":
            if text not in PRESETS:
                raise ValueError(f"algo={text!r} is not a preset; allowed: {', '.join(PRESETS)}")
        elif name not in KNOBS and name not in share.RUN_PARAMS:
            raise ValueError(
                f"{name} is not a knob; write knob=value pairs joined by &, e.g. algo=dapo&epsilon_high=0.28"
            )
        values[name] = text if name == "algo" else share.parse(name, text)
    if "algo" in values:
        share.check_algo(values["algo"], {k: v for k, v in values.items() if k != "algo"})
    query = urlencode({k: share.text(v) if k != "algo" else v for k, v in values.items()})
    return f"/{page}" + (f"?{query}" if query else ""), values


def banner_text(page: str, values: dict) -> str:
    """ "Now open: DAPO, ε_high 0.28": the preset's title (else the page) and each setting as its knob reads."""
    what = PRESETS[values["algo"]].title if "algo" in values else page
    settings = ", ".join(
        f"{KNOBS[k].label.split(' · ')[0] if k in KNOBS else k} {knob_text(k, v)}"
        for k, v in values.items()
        if k != "algo"
    )
    return f"Now open: {what}" + (f", {settings}" if settings else "")


def _banner_form(store: RunStore) -> None:
    st.header("Banner on every learner's page")
    pinned = store.pinned()
    if pinned is not None:
        st.html(banner_html(*pinned))
        st.button("Unpin", key="instructor:unpin", on_click=store.unpin)
    with st.form("instructor:banner"):
        page_column, settings_column = st.columns([1, 2])
        page = page_column.selectbox("Page", lab_pages(), index=lab_pages().index("grpo"), format_func=page_title)
        settings = settings_column.text_input(
            "Settings (as in a share link)",
            placeholder="algo=grpo&epsilon_high=0.28",
            help="knob=value pairs joined by &; algo names the preset.",
        )
        text = st.text_input("Banner text", placeholder="empty: written from the page and its settings")
        if st.form_submit_button("Pin", type="primary"):
            try:
                link, values = banner_link(page, settings)
            except ValueError as error:
                st.error(f"Not pinned: {brief(str(error))}")
                return
            store.pin(text.strip() or banner_text(page, values), link)
            st.rerun()


# ---------------------------------------------------------------------------------------------- warm-up
@st.cache_resource(show_spinner=False)
def _warm_up_holder() -> dict:
    """The server's one warm-up, shared by every instructor session."""
    return {}


def _warm_up() -> None:
    holder = _warm_up_holder()
    job: WarmUp | None = holder.get("job")
    active = job is not None and job.active
    st.caption(
        f"Runs every experiment ({len(EXPERIMENTS)}) in turn, as `python -m rl_core experiment --all` does, "
        "within the server's training cap, so that a learner's *See it happen* answers at once from the "
        "recorded runs. Runs already recorded are reused. Measured: about 20 minutes on 2 CPU cores with "
        "every warm start to train first (9 minutes once they are cached), 4 minutes on 16 cores."
    )
    start, stop = st.columns(2)
    if start.button("Warm up every experiment", key="instructor:warm_up", type="primary", disabled=active):
        holder["job"] = WarmUp(list(EXPERIMENTS.values()), training_slots(), experiment_workers()).start()
        st.rerun()
    stop.button(
        "Stop the warm-up", key="instructor:warm_up_stop", disabled=not active, on_click=job.stop if active else None
    )
    if job is not None:
        st.fragment(run_every=REFRESH_SECONDS if active else None)(_warm_up_progress)(job)


def _warm_up_progress(job: WarmUp) -> None:
    snap = job.snapshot()
    current = f"; now {snap.current} ({snap.current_status})" if snap.current else ""
    st.progress(len(snap.done) / snap.total, text=f"{len(snap.done)} of {snap.total} experiments{current}")
    if snap.done:
        st.dataframe(
            [{"experiment": name, "ended": ended} for name, ended in snap.done.items()],
            hide_index=True,
            key="instructor:warm_up_table",
        )
    if not snap.active and st.session_state.get("instructor:warm_up_seen") != id(job):
        st.session_state["instructor:warm_up_seen"] = id(job)
        st.rerun()  # re-enables the button and stops this refresh
