"""The server's limits (`rl_core.runs.limits`) as the pages apply them: to each run, each sweep, and each learner.

A limit refuses like an out-of-range knob: the page names the knob (or the environment variable that sets the
limit) and what is allowed, and Train / Run stays disabled."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import pandas as pd
import streamlit as st
import torch

from rl_core.config import RunConfig
from rl_core.messages import brief
from rl_core.runs.limits import HOUR, ServerLimits
from rl_core.runs.run_loop import THREADS_KNOB, loop_threads
from rl_core.runs.store import DEFAULT_MAX_MB, SAMPLE_WINDOW, RunStore, StoreError, max_trainings
from ui.jobs import DEFAULT_LIVE_RUNS, LiveLoop
from ui.session import session_token, training_refusal


def learner() -> str:
    """Whom the per-learner limit counts: the owner of the runs a page starts (the token in the browser)."""
    return session_token()


def server_limits() -> ServerLimits:
    """The limits from the server's environment (read each time: cheap, and an instructor's change applies)."""
    return ServerLimits.from_env()


def check_runs(runs: Sequence[RunConfig]) -> None:
    """ValueError naming the first limit that `runs`, started together, would pass: how many, then each run."""
    limits = server_limits()
    limits.check_run_count(len(runs))
    cuda = torch.cuda.is_available()
    for run in runs:
        limits.check_run(run, cuda)


def check_learner() -> None:
    """ValueError if this session may not train (`ui.session.training_refusal`: no identity of its own, or no join
    link where the class needs one), or once this learner's runs trained for the hour's allowance (counted in the
    run store)."""
    refusal = training_refusal()
    if refusal is not None:
        raise ValueError(refusal)
    try:
        spent = RunStore(recover=False).training_seconds(learner(), since=time.time() - HOUR)
    except StoreError:
        return  # the run itself will fail on the store, and say why
    server_limits().check_learner(spent)


def limits_panel() -> None:
    """The server's limits and caps, as a table with the variables that set them (the overview's "This server")."""
    try:
        rows = server_limits().as_table()
        rows.append(("RLHF_LAB_MAX_TRAININGS", str(max_trainings()), "trainings at once, every learner together"))
        rows.append(
            (
                LiveLoop.KNOB,
                str(max_trainings(DEFAULT_LIVE_RUNS, LiveLoop.KNOB)),
                "live-lab runs stepping together in one of those trainings",
            )
        )
        rows.append(
            (
                THREADS_KNOB,
                str(loop_threads()),
                "torch threads the live-lab loop may step its runs on (it uses them while that is faster)",
            )
        )
    except ValueError as error:  # an instructor's typo in a variable: say which
        st.error(brief(str(error)))
        return
    rows.append(
        (
            "RLHF_LAB_CLASS_CODE",
            "set" if os.environ.get("RLHF_LAB_CLASS_CODE") else "not set",
            "training needs the class's join link (?class=<code>)",
        )
    )
    rows.append(
        (
            "RLHF_LAB_TRUSTED_PROXY",
            os.environ.get("RLHF_LAB_TRUSTED_PROXY", "0"),
            "1: X-Forwarded-For names the learner's address (behind a proxy of the instructor's)",
        )
    )
    megabytes = os.environ.get("RLHF_LAB_STORE_MAX_MB", str(DEFAULT_MAX_MB))
    rows.append(("RLHF_LAB_STORE_MAX_MB", f"{megabytes} MB", "the run store on disk (delete old runs on Compare)"))
    st.dataframe(pd.DataFrame(rows, columns=["variable", "value", "limits"]), hide_index=True, key="overview:limits")
    st.caption(
        f"A run's duration is estimated from measured step times (tiny model, CPU); the run store keeps "
        f"every step's metrics and each run's sampled tokens for its latest {SAMPLE_WINDOW} steps. The "
        "instructor sets these variables when starting the server (README, *Serving a class*)."
    )
