"""Where a sweep's worker processes come from: a fork server that has imported the engine once, from which each
worker forks in milliseconds (a spawned interpreter spends about 4 s importing torch and transformers), or spawned
interpreters where the platform has no fork server; and how a worker ends itself once the process it works for
has died (`watch_coordinator`: a sweep's workers, the live lab's warm-start worker).

This module imports nothing heavy, so that the command line can start the server before it imports torch itself:
on two cores the two imports then run side by side."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from rl_core.runs.store import process_alive

WORKER_MODULE = "rl_core.runs.sweep"  # what the fork server imports: the workers' functions, and with them the engine
RAY_ADDRESS_VARIABLE = "RLHF_LAB_RAY_ADDRESS"  # set: sweeps train on that Ray cluster, not in local workers
# Options after which a command line trains nothing here: it lists, prints help, or hands its runs to a Ray cluster.
TRAINS_ELSEWHERE = {"--list", "-h", "--help", "--ray-address"}
PARENT_WATCH_INTERVAL = 0.5  # seconds between a worker's checks that its coordinator still lives
GONE_GRACE_S = 5.0  # seconds a worker whose coordinator died gives `on_gone` (a busy store) before it exits anyway


def trains_in_local_workers(argv: Sequence[str], environ: Mapping[str, str]) -> bool:
    """Whether the command line `argv` (without the program) trains runs in this machine's worker processes:
    `experiment` and `sweep` do, unless they only list or print help, or train on a Ray cluster."""
    if list(argv[:1]) not in (["experiment"], ["sweep"]) or environ.get(RAY_ADDRESS_VARIABLE):
        return False
    return not {argument.split("=", 1)[0] for argument in argv[1:]} & TRAINS_ELSEWHERE


def worker_context() -> multiprocessing.context.BaseContext:
    """The fork server's context, its server preloading `WORKER_MODULE`, where the platform has one; else spawn's."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([WORKER_MODULE])  # only read when the server starts, the first time a worker does
    return context


def start_worker_server() -> None:
    """Start the fork server now, where the platform has one: it imports the engine (3–6 s on 2 cores) in its own
    process, so the first sweep's workers fork from it at once instead of waiting for that import."""
    if isinstance(worker_context(), multiprocessing.context.ForkServerContext):
        from multiprocessing import forkserver  # a POSIX module: imported only where the platform has a fork server

        with main_script_kept_out(), sigint_ignored():  # the server would otherwise run the caller's script
            forkserver.ensure_running()


@contextmanager
def sigint_ignored() -> Iterator[None]:
    """SIGINT ignored meanwhile, when called from the main thread (elsewhere signals cannot be set; nothing changes).

    Ctrl+C reaches every process of the terminal's group, and the parent turns it into a stop request. A process
    started meanwhile (a spawned worker, or the fork server, whose workers inherit its handlers) keeps the ignored
    signal through exec (a Python handler would not survive it), so a worker never dies of a Ctrl+C, not even
    while it is still importing torch."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def main_script_kept_out() -> Iterator[None]:
    """A spawned worker first runs the parent's `__main__` script from its path. Under Streamlit that is the page
    script being run (Streamlit installs it as `__main__`; Streamlit's AppTest, a temporary file), which in a
    worker draws a page without a server or fails outright, and the pool dies with it. The workers need nothing
    from it, so while the pool starts them (inside `submit`, for spawned pools) `__main__` is a bare module."""
    main = sys.modules.get("__main__")
    if getattr(main, "__file__", None) is None:
        yield
        return
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def watch_coordinator(coordinator: int, on_gone: Callable[[], None] = lambda: None) -> threading.Thread:
    """Start a daemon thread that ends this worker process soon after process `coordinator` dies, however it dies
    (SIGKILL and OOM included): it calls `on_gone()` (what the worker must settle first: a sweep's runs marked
    interrupted), given GONE_GRACE_S, then exits.

    A worker is not killed with its parent: an orphan would train on, unseen and unstoppable, holding a core. A
    forked worker's parent is the fork server, which outlives the coordinator while any worker lives, so the worker
    looks at the coordinator itself, every PARENT_WATCH_INTERVAL seconds."""

    def watch() -> None:
        while process_alive(coordinator):
            time.sleep(PARENT_WATCH_INTERVAL)
        threading.Timer(GONE_GRACE_S, os._exit, (1,)).start()
        on_gone()
        os._exit(1)

    thread = threading.Thread(target=watch, name="coordinator-watch", daemon=True)
    thread.start()
    return thread
