"""A group of warm starts trained in a process of its own, for the live lab's builder.

The builder's thread lives in the server's interpreter, beside the live loop's thread and every page's reruns: a
group trained there waits for the GIL at every step (a group of 18 seeds stepped at 1.2–2 s a step, about 0.15 s
alone). Trained in a worker process (`worker_context`: forked from the server that preloaded the engine, in
milliseconds) it has a core of its own; its steps, and its outcome, come back over a pipe."""

from __future__ import annotations

import contextlib
import os
import pickle
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from pathlib import Path

import torch
from transformers.utils import logging as transformers_logging

from rl_core.config import RunConfig
from rl_core.engine.trainer import TrainingStopped
from rl_core.runs.sweep import warm_starts
from rl_core.runs.workers import main_script_kept_out, sigint_ignored, watch_coordinator, worker_context

# Seconds a stopped worker has to end by itself before it is terminated. In a phase with steps it notices its stop
# at its next step; in one without (the seeds' reward models fitted, the warm starts' success checks) it never
# would. Terminating it loses nothing: a checkpoint is written to a staging folder and renamed into place (`sft`,
# `toy_tasks.preference`), and a stopped group's warm starts are for no one.
STOP_GRACE_S = 1.0
# build(runs, cache_dir, stopped, on_step), as `sweep.warm_starts`: what the worker runs, and how the live lab's
# builder (`warm_start_builder.WarmStartBuilder`) has a group built (`build_in_worker` is one).
Build = Callable[[Sequence[RunConfig], Path | None, Callable[[], bool], Callable[[int], None]], None]
POLL_S = 0.1  # seconds between the builder's looks at whether every run of the group was stopped


def build_in_worker(
    runs: Sequence[RunConfig],
    cache_dir: Path | None,
    stopped: Callable[[], bool],
    on_step: Callable[[int], None],
    clock: Callable[[], float] = time.monotonic,
    build: Build = warm_starts,
) -> None:
    """`build(runs, cache_dir, stopped, on_step)` (`sweep.warm_starts`; a module's function, which the worker
    imports), trained in a worker process: `on_step` is called here as the worker steps; once `stopped()` turns true
    the worker is asked to stop, and terminated if it has not ended within STOP_GRACE_S on `clock`; raises what the
    worker's build raised (TrainingStopped once stopped)."""
    context = worker_context()
    receiver, sender = context.Pipe(duplex=False)
    stop = context.Event()
    worker = context.Process(
        target=_build,
        args=(build, list(runs), cache_dir, stop, sender, os.getpid()),
        name="warm-start-worker",
        daemon=True,
    )
    if stopped():
        stop.set()  # a group stopped before its worker starts never steps (the worker may step within milliseconds)
    with main_script_kept_out(), sigint_ignored():
        worker.start()
    sender.close()  # the worker now holds the only sending end: once it ends, the pipe reads as end-of-file here
    stop_asked_at: float | None = None
    try:
        while True:
            if stop_asked_at is None and stopped():
                stop.set()
                stop_asked_at = clock()
            elif stop_asked_at is not None and clock() - stop_asked_at > STOP_GRACE_S:
                worker.terminate()  # in a phase without steps (reward models, checks): it would not notice
            if not wait([receiver], POLL_S):
                continue
            try:
                kind, value = receiver.recv()
            except EOFError:
                worker.join()
                if stop_asked_at is not None:
                    raise TrainingStopped("stopped during the SFT warm start") from None
                raise RuntimeError(f"the warm-start worker ended with exit code {worker.exitcode}") from None
            if kind == "step":
                on_step(value)
            elif kind == "error":
                raise value
            else:
                return
    finally:
        receiver.close()
        worker.join(STOP_GRACE_S)
        if worker.is_alive():
            worker.kill()
            worker.join()


def _build(
    build: Build, runs: list[RunConfig], cache_dir: Path | None, stop, sender: Connection, coordinator: int
) -> None:
    """In the worker: train the group with `build`, sending ("step", done) after each step, then ("done", None) or
    ("error", what it raised)."""
    torch.set_num_threads(1)  # one core: the server's own threads (the live loop) keep the other
    transformers_logging.disable_progress_bar()
    watch_coordinator(coordinator)  # the server gone, the group's warm starts are for no one
    try:
        build(runs, cache_dir, stop.is_set, lambda done: sender.send(("step", done)))
    except Exception as error:  # noqa: BLE001 - the builder raises it in every run of the group
        sender.send(("error", _carried(error)))
    else:
        sender.send(("done", None))
    finally:
        sender.close()


def _carried(error: Exception) -> Exception:
    """`error` if it survives the pipe (pickled here, unpickled in the server), else a RuntimeError saying it."""
    with contextlib.suppress(Exception):
        return pickle.loads(pickle.dumps(error))
    return RuntimeError(f"{type(error).__name__}: {error}")
