"""Who is asking: each browser session of the app gets a random token that owns the runs and sweeps it starts.

The run store keeps the token with every run, so a page lists, stops and deletes only its own session's runs
(runs from the command line carry none and are shown to everyone, read-only). A reload is a new session, as it
is for the live lab, whose trainings stop when their tab closes."""

from __future__ import annotations

import os
import secrets

import streamlit as st

KEY = "lab:session"


def session_token() -> str:
    """This browser session's token (created on first use)."""
    if KEY not in st.session_state:
        st.session_state[KEY] = secrets.token_hex(8)
    return st.session_state[KEY]


def session_worker_cap() -> int:
    """Worker processes one session's sweep may use (RLHF_LAB_MAX_SESSION_WORKERS, default 2)."""
    return max(1, int(os.environ.get("RLHF_LAB_MAX_SESSION_WORKERS", "2")))
