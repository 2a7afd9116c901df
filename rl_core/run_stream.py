"""A training as a stream of items, and the one place where a sweep's stream is written to the run store.

Wherever a run trains (a sweep's worker process, a task on a Ray cluster, a thread of the app), the training is
`training_stream(run)`, a generator of plain dicts:

* `{PHASE: [phase, done, total]}` while `Trainer.prepare()` builds the reward model, SFT policy and critic,
* `{SETUP: {...}}` once, what `prepare()` returned,
* each step's record (it has `"step"`, and `"elapsed"`, seconds of RL so far, for "time to 90 %"),
* `{END: "finished", "final": {...}}` (the evaluation after the last step) or `{END: "stopped"}`.

Plain dicts cross a process or a machine as they are (pickled by a process pool or by Ray), so the coordinator sees
the same items whether the run trained beside it or on another machine, and `store_stream` writes them.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from rl_core.config import DPOConfig, RunConfig
from rl_core.messages import brief
from rl_core.preference_optimisation import DPOTrainer
from rl_core.store import RunStore
from rl_core.trainer import Trainer, TrainingStopped

PHASE, SETUP, END = "phase", "setup", "end"


class RunInterrupted(Exception):
    """The process that trained the run went away mid-run (a killed Ray worker, a lost node): the run ends as
    interrupted, not failed, and can be trained again."""


def trainer_for(run: RunConfig, cache_dir: Path | None = None, stop_event=None) -> Trainer | DPOTrainer:
    """The trainer of the run's kind: `DPOTrainer` for an offline DPO run (`algo` a `DPOConfig`), else `Trainer`."""
    kind = DPOTrainer if isinstance(run.algo, DPOConfig) else Trainer
    return kind(run, cache_dir=cache_dir, stop_event=stop_event or threading.Event())


def training_stream(run: RunConfig, cache_dir: Path | None = None, stop_event=None) -> Iterator[dict]:
    """Train `run` and yield its items (module docstring); `stop_event.is_set()` ends it after the current step."""
    yield from trainer_stream(trainer_for(run, cache_dir, stop_event))


def trainer_stream(trainer: Trainer | DPOTrainer) -> Iterator[dict]:
    """A trainer's items (module docstring), for a caller that keeps the trainer (the app's chat reads its models).

    A record's "elapsed" counts the training only: the time the consumer spends between two items (writing the
    store, a live view's own passes) is left out."""
    yield from _prepared(trainer)
    started = time.perf_counter()
    try:
        for record in trainer.steps():
            record["elapsed"] = time.perf_counter() - started
            paused = time.perf_counter()
            yield record
            started += time.perf_counter() - paused
    except TrainingStopped:
        yield {END: "stopped"}
        return
    if trainer.step_index < trainer.run.steps:  # the stop event ended it early
        yield {END: "stopped"}
    else:
        yield {END: "finished", "final": trainer.evaluate()}


def _prepared(trainer: Trainer | DPOTrainer) -> Iterator[dict]:
    """`trainer.prepare()` with its progress as PHASE items, then its SETUP item.

    `prepare` reports through a callback, so it runs in a thread that hands its reports over; only the latest
    report waiting is yielded (an SFT warm start reports every step, and a remote caller needs only the newest)."""
    items: queue.Queue = queue.Queue()

    def prepare() -> None:
        try:
            items.put({SETUP: trainer.prepare(lambda phase, done, total: items.put({PHASE: [phase, done, total]}))})
        except BaseException as error:  # noqa: BLE001 - raised again in the generator's own thread
            items.put(error)

    threading.Thread(target=prepare, name="prepare", daemon=True).start()
    while True:
        item = items.get()
        while PHASE in item and not items.empty():
            item = items.get()
        if isinstance(item, BaseException):
            raise item
        yield item
        if SETUP in item:
            return


def store_stream(store: RunStore, run_id: int, items: Iterator[dict],
                 seen: Callable[[dict], None] | None = None) -> str:
    """Write a claimed run's stream to the store: each step as it comes, then the run's end; returns its status.

    A stream that raises ends the run: TrainingStopped as stopped, RunInterrupted as interrupted, anything else as
    failed, its message kept. `seen` gets every item first (a live view of the run)."""
    status, final, error = "stopped", None, None  # a stream that ends without its END item was cut short
    try:
        for item in items:
            if seen is not None:
                seen(item)
            if "step" in item:
                store.add_step(run_id, item)
            elif END in item:
                status, final = item[END], item.get("final")
    except TrainingStopped:
        status = "stopped"
    except RunInterrupted as interrupted:
        status, error = "interrupted", brief(str(interrupted))
    except Exception as failure:  # noqa: BLE001 - the store keeps the message; a sweep goes on with other runs
        status, error = "failed", brief(f"{type(failure).__name__}: {failure}")
    store.finish_run(run_id, status, final=final, error=error)
    return status
