"""The server's limits (`rl_core.limits`) as the pages apply them: to each run, each sweep, and each learner.

A limit refuses like an out-of-range knob: the page names the knob (or the environment variable that sets the
limit) and what is allowed, and Train / Run stays disabled."""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from rl_core.config import RunConfig
from rl_core.limits import ServerLimits
from rl_core.store import RunStore, StoreError
from ui.session import session_token

HOUR = 3600.0


def learner() -> str:
    """Whom the per-learner limit counts: the owner of the runs a page starts (today its browser session)."""
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
    """ValueError once this learner's runs trained for the hour's allowance (counted in the run store)."""
    try:
        spent = RunStore(recover=False).training_seconds(learner(), since=time.time() - HOUR)
    except StoreError:
        return  # the run itself will fail on the store, and say why
    server_limits().check_learner(spent)
