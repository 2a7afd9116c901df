"""What a class shares through the run store, on the learners' side: their answers to the pages' questions
(before a run, and what the run showed), when each was last seen, and the banner the instructor pins on every
learner's page. The instructor's page (`ui.instructor`) reads it all back.

The store is a convenience here, never a condition: a store that cannot be opened or written costs the class view
a learner's answer, and the learner's page goes on as before."""

from __future__ import annotations

import html
import time

import streamlit as st

from rl_core.runs.store import RunStore, StoreError
from ui.predict import Prediction
from ui.present import keep_presenting
from ui.session import session_token

INSTRUCTOR_PARAM = "instructor"  # ?instructor=<token> opens the instructor's page (ui/instructor.py)
SEEN_EVERY = 30.0  # seconds between two writes of a learner's "last seen": a page redraws every second


def record_answer(page: str, prediction: Prediction, phase: str, answer: str | None) -> None:
    """Keep this learner's answer to the page's question (`before`: predicted, `after`: what their run showed),
    once per change."""
    key = f"class:answer:{page}:{phase}"
    if answer is None or st.session_state.get(key) == answer:
        return
    try:
        RunStore(recover=False).answer(session_token(), page, phase, prediction.question, prediction.options, answer)
    except StoreError:
        return
    st.session_state[key] = answer


def mark_seen() -> None:
    """This learner is here (at most one write every SEEN_EVERY seconds per session)."""
    now = time.time()
    if now - st.session_state.get("class:seen", 0.0) < SEEN_EVERY:
        return
    try:
        RunStore(recover=False).seen(session_token(), now)
    except StoreError:
        return
    st.session_state["class:seen"] = now


def pinned_banner() -> None:
    """The instructor's pinned link at the top of the page, if one is pinned."""
    try:
        pinned = RunStore(recover=False).pinned()
    except StoreError:
        return
    if pinned is not None:
        text, link = pinned
        st.html(banner_html(text, keep_presenting(link)))


def banner_html(text: str, link: str) -> str:
    """The banner: one line, the whole of it a link (to a page of this server, opened in the same tab)."""
    return (
        f'<a href="{html.escape(link)}" target="_self" style="display:block;padding:0.5rem 1rem;'
        'border-radius:0.5rem;background:#fff3cd;color:#664d03;font-weight:600;text-decoration:none">'
        f"{html.escape(text)} →</a>"
    )
