"""Who is asking: each learner has a random, unguessable token that owns the runs, sweeps and experiments they
start.

The token lives in the learner's browser, not in the connection: a cookie set on the first visit (a year), or a
`?me=<token>` link the learner can bookmark to open the same runs in another browser.

An identity is not free. The server issues every token (recorded in the run store's `identities`): a `?me=` or a
cookie it never issued is ignored, and the browser keeps the identity it has. New tokens are rate-limited per
client address (`RLHF_LAB_NEW_LEARNERS_PER_ADDRESS` an hour; the address is the connection's, or with
`RLHF_LAB_TRUSTED_PROXY=1` the last one the proxy wrote into X-Forwarded-For); a session past it gets a token of
its own that may not train, the pages still open to read. With `RLHF_LAB_CLASS_CODE` set, training also needs
the class's join link (`?class=<code>`), opened once by each learner. So a reload, a second tab,
or a restart of the server finds the same learner, while another learner still sees none of their runs. The run
store keeps the token with every run (the command line's runs carry none and are shown to everyone, read-only),
and the server keeps each learner's live objects (a page's runs, an experiment in flight) in `learner_state`, so a
page reattaches to a run that went on training while it reloaded."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import threading
import time
from collections import OrderedDict

import streamlit as st

from rl_core.runs.limits import HOUR, ServerLimits
from rl_core.runs.store import RunStore, StoreError
from ui.navigation import page_address

KEY = "lab:session"
COOKIE = "rlhf_lab_learner"
PARAM = "me"  # ?me=<token>: the bookmarkable form of the cookie
TOKEN = re.compile(r"[A-Za-z0-9_-]{16,64}")  # what a token may look like: anything else is ignored, not trusted
COOKIE_DAYS = 365
MAX_LEARNERS = 1000  # learners whose live objects the server keeps; the oldest go first (their runs stay stored)
_LOCK = threading.Lock()


CLASS_PARAM = "class"  # ?class=<code>: the join link, where the instructor set RLHF_LAB_CLASS_CODE
REFUSED = f"{KEY}:refused"  # why this session's token may not train (its address had its new learners)


def session_token() -> str:
    """This learner's token: from the link's ?me=, else the browser's cookie, if the server issued it; else a new
    one, issued to this client address if its hour's new learners allow (`REFUSED` says why not)."""
    if KEY not in st.session_state:
        st.session_state[KEY] = _identify()
    return st.session_state[KEY]


def _identify() -> str:
    offered = [
        t
        for t in (st.query_params.get(PARAM), st.context.cookies.get(COOKIE))
        if isinstance(t, str) and TOKEN.fullmatch(t)
    ]
    token = secrets.token_urlsafe(18)
    try:
        store = RunStore(recover=False)
        known = next((t for t in offered if store.issued(t)), None)
        if known is not None:
            return known
        limits = ServerLimits.from_env()
        if not store.issue_identity(token, client_address(), limits.new_learners_per_address, time.time() - HOUR):
            st.session_state[REFUSED] = limits.new_learner_refusal()
    except (StoreError, ValueError):
        pass  # no store to check against (its runs will fail and say why), or an instructor's typo the pages show
    return token


def join_class_link() -> None:
    """A page opened with the class's join link (?class=<RLHF_LAB_CLASS_CODE>): this learner may train from now on,
    in this browser and with their ?me= link (the router calls it on every page)."""
    code, link = os.environ.get("RLHF_LAB_CLASS_CODE"), st.query_params.get(CLASS_PARAM)
    if code and isinstance(link, str) and secrets.compare_digest(link.encode(), code.encode()):
        with contextlib.suppress(StoreError):
            RunStore(recover=False).join_class(session_token())


def client_address() -> str:
    """Where this session connects from: the connection's address ('' on this machine), or behind a proxy the
    instructor trusts (RLHF_LAB_TRUSTED_PROXY=1) the last address the proxy wrote into X-Forwarded-For. Without
    that trust the header is the client's own word, and is ignored."""
    if os.environ.get("RLHF_LAB_TRUSTED_PROXY") == "1":
        forwarded = st.context.headers.get("X-Forwarded-For")
        if isinstance(forwarded, str) and forwarded.strip():
            return forwarded.split(",")[-1].strip()
    address = st.context.ip_address
    return address if isinstance(address, str) else ""  # None on this machine (and in a test's bare session)


def training_refusal() -> str | None:
    """Why this session may not train though its pages are open: its address had its new learners for the hour,
    or the class needs its join link and this learner has not opened it. None if it may."""
    token = session_token()
    if REFUSED in st.session_state:
        return st.session_state[REFUSED]
    if not os.environ.get("RLHF_LAB_CLASS_CODE"):
        return None
    try:
        if RunStore(recover=False).joined(token):
            return None
    except StoreError:
        return None  # the run itself will fail on the store, and say why
    return (
        "training on this server needs the class's join link (the instructor's RLHF_LAB_CLASS_CODE, as "
        "?class=<code>): ask your instructor for it; the pages and labs stay open to read"
    )


def remember_learner() -> None:
    """Keep the token in the browser's cookie, so the next visit from this browser is the same learner (the
    router calls this once a session; it draws nothing visible)."""
    token = session_token()
    if st.context.cookies.get(COOKIE) == token or st.session_state.get(f"{KEY}:cookie") == token:
        return
    st.session_state[f"{KEY}:cookie"] = token
    st.html(
        f"<script>document.cookie = '{COOKIE}={token}; path=/; max-age={COOKIE_DAYS * 86400}; SameSite=Lax';</script>",
        unsafe_allow_javascript=True,
    )


def bookmark_link() -> str:
    """A link that opens this learner's runs in any browser: the server's address with ?me=<token>."""
    return f"{page_address()}?{PARAM}={session_token()}"


@st.cache_resource(show_spinner=False)
def _learners() -> OrderedDict[str, dict]:
    return OrderedDict()


def learner_state() -> dict:
    """What the server keeps for this learner across reloads and tabs (a page's runs, an experiment in flight),
    shared by all of the learner's sessions. Beyond MAX_LEARNERS the least recently seen learner's entry is
    dropped: a run of theirs still training finishes, and every run stays in the store."""
    token = session_token()
    learners = _learners()
    with _LOCK:
        state = learners.pop(token, None)
        learners[token] = state = {} if state is None else state
        while len(learners) > MAX_LEARNERS:
            learners.popitem(last=False)
    return state


def session_worker_cap() -> int:
    """Worker processes one session's sweep may use (RLHF_LAB_MAX_SESSION_WORKERS, default 2)."""
    return max(1, int(os.environ.get("RLHF_LAB_MAX_SESSION_WORKERS", "2")))
