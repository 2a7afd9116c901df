"""An experiment started from a page, in a background thread: it waits its turn for training slots, then runs
`rl_core.experiments.runner` (worker processes, the run store, JSON lines, summary.json).

Like `ui.jobs.Job`, nothing here imports Streamlit and the thread touches only its own job: the page reads a
snapshot taken under the job's lock, and the runs' records from the run store.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rl_core.experiments import Experiment
from rl_core.experiments.runner import ExperimentRun, plan_experiment
from rl_core.messages import brief
from rl_core.sft import default_cache_dir
from rl_core.store import RunStore
from ui.jobs import ACTIVE_STATUSES, BackgroundJob, TrainingSlots, planned_seconds_left


@dataclass(frozen=True)
class ExperimentSnapshot:
    status: str  # queued, training, finished, stopped, failed
    place: int | None  # place in the queue for training slots while queued (1: next)
    running_elsewhere: int  # slots held by other trainings while queued
    arms: dict[int, str]  # run id → arm label, once the runs are in the store
    summary: dict | None  # the runner's summary.json, once finished
    error: str | None
    out: Path

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_STATUSES


class ExperimentJob(BackgroundJob):
    """One experiment over its seeds; it takes `workers` training slots at once and trains that many runs at a
    time. `stop()` ends it after the current step of every run (or leaves the queue)."""

    def __init__(self, experiment: Experiment, slots: TrainingSlots, workers: int, **options):
        self.experiment = experiment
        self.slots = slots
        self.workers = max(1, min(workers, slots.limit))
        self.options = options  # ExperimentRun's: seeds, steps, sft_steps, …
        self.out = Path(default_cache_dir()) / "experiments" / f"{experiment.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        self.stop_event = threading.Event()
        self._lock = threading.Lock()
        self._status = "queued"
        self._run: ExperimentRun | None = None
        self._summary: dict | None = None
        self._error: str | None = None
        self._thread = threading.Thread(target=self._work, name=f"experiment-{experiment.name}", daemon=True)

    def stop(self) -> None:
        self.stop_event.set()
        with self._lock:
            if self._run is not None:
                self._run.stop()

    def snapshot(self) -> ExperimentSnapshot:
        with self._lock:
            queued = self._status == "queued"
            return ExperimentSnapshot(
                status=self._status,
                place=self.slots.queue_place(self) if queued else None,
                running_elsewhere=self.slots.running if queued else 0,
                arms={} if self._run is None else {i: a.arm.label for i, a in self._run.runs_by_id.items()},
                summary=self._summary,
                error=self._error,
                out=self.out,
            )

    def _work(self) -> None:
        status, summary, error = "stopped", None, None
        try:
            plan = {k: v for k, v in self.options.items() if k not in ("session", "cache_dir")}  # ExperimentRun's own
            runs = [arm_run.planned.run for arm_run in plan_experiment(self.experiment, **plan)]
            left = planned_seconds_left(runs, self.workers, self.slots)
            with self.slots.hold(self.stop_event, self.workers, ticket=self, seconds_left=left) as acquired:
                if acquired:
                    # The runs enter the store only now: queued runs there would need a heartbeat while waiting.
                    run = ExperimentRun(self.experiment, self.out, RunStore(), workers=self.workers,
                                        cap=self.slots.limit, **self.options)
                    with self._lock:
                        self._run, self._status = run, "training"
                    if self.stop_event.is_set():  # Stop pressed while the runs were being written
                        run.stop()
                    summary = run.run()
                    status = "stopped" if run.sweep.stopping else "finished"
        except Exception as exc:  # noqa: BLE001 - the page shows the message, never a traceback
            status, error = "failed", brief(f"{type(exc).__name__}: {exc}")
        with self._lock:
            self._status, self._summary, self._error = status, summary, error
