"""Who is asking: each learner has a random, unguessable token that owns the runs, sweeps and experiments they
start.

The token lives in the learner's browser, not in the connection: a cookie set on the first visit (a year), or a
`?me=<token>` link the learner can bookmark to open the same runs in another browser. So a reload, a second tab,
or a restart of the server finds the same learner, while another learner still sees none of their runs. The run
store keeps the token with every run (the command line's runs carry none and are shown to everyone, read-only),
and the server keeps each learner's live objects (a page's runs, an experiment in flight) in `learner_state`, so a
page reattaches to a run that went on training while it reloaded."""

from __future__ import annotations

import os
import re
import secrets
import threading
from collections import OrderedDict

import streamlit as st

from ui.navigation import page_address

KEY = "lab:session"
COOKIE = "rlhf_lab_learner"
PARAM = "me"  # ?me=<token>: the bookmarkable form of the cookie
TOKEN = re.compile(r"[A-Za-z0-9_-]{16,64}")  # what a token may look like: anything else is ignored, not trusted
COOKIE_DAYS = 365
MAX_LEARNERS = 1000  # learners whose live objects the server keeps; the oldest go first (their runs stay stored)
_LOCK = threading.Lock()


def session_token() -> str:
    """This learner's token: from the link's ?me=, else the browser's cookie, else a new one."""
    if KEY not in st.session_state:
        known = (st.query_params.get(PARAM), st.context.cookies.get(COOKIE))
        st.session_state[KEY] = next((t for t in known if isinstance(t, str) and TOKEN.fullmatch(t)), None) \
            or secrets.token_urlsafe(18)
    return st.session_state[KEY]


def remember_learner() -> None:
    """Keep the token in the browser's cookie, so the next visit from this browser is the same learner (the
    router calls this once a session; it draws nothing visible)."""
    token = session_token()
    if st.context.cookies.get(COOKIE) == token or st.session_state.get(f"{KEY}:cookie") == token:
        return
    st.session_state[f"{KEY}:cookie"] = token
    st.html(f"<script>document.cookie = '{COOKIE}={token}; path=/; max-age={COOKIE_DAYS * 86400}; "
            "SameSite=Lax';</script>", unsafe_allow_javascript=True)


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
