"""An experiment started from a page, in a background thread: it waits its turn for training slots, then runs
`rl_core.experiments.runner` (worker processes, the run store, JSON lines, summary.json).

A request whose every run the store holds or trains already (`RunStore.reusable`) takes no slots: it answers from
the stored records at once, or watches the runs in flight fill in. Should a watched run not finish, its watcher
trains it, within the store's training cap (`RunStore.claim`) rather than the page's queue.

Like `ui.jobs.Job`, nothing here imports Streamlit and the thread touches only its own job: the page reads a
snapshot taken under the job's lock, and the runs' records from the run store.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rl_core.engine.sft import default_cache_dir
from rl_core.experiments import Experiment
from rl_core.experiments.runner import ExperimentRun, plan_experiment
from rl_core.messages import brief
from rl_core.runs.reuse import every_run_reusable, recorded_when
from rl_core.runs.store import RunStore, StoreError
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
    seeds: tuple[int, ...]  # the seeds it runs
    recorded: str | None = None  # when its runs were recorded, if every one was reused (`reuse.recorded_when`)
    training_for: float | None = None  # seconds since its runs began training (None before)

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
        self.options = options  # ExperimentRun's: seeds, steps, sft_steps, fresh, …
        # What `plan_experiment` takes besides the seeds: steps, model, sft_steps, …
        self.plan_options = {k: v for k, v in options.items() if k not in ("session", "cache_dir", "fresh", "seeds")}
        self.runs = [
            arm_run.planned.run for arm_run in plan_experiment(experiment, options.get("seeds"), **self.plan_options)
        ]
        self.seeds = tuple(dict.fromkeys(run.seed for run in self.runs))
        self.from_store = not options.get("fresh") and self._reusable()
        self.out = Path(default_cache_dir()) / "experiments" / f"{experiment.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        self.stop_event = threading.Event()
        self._lock = threading.Lock()
        self._status = "queued"
        self._run: ExperimentRun | None = None
        self._summary: dict | None = None
        self._error: str | None = None
        self._recorded: str | None = None
        self._training_started: float | None = None
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
                seeds=self.seeds,
                recorded=self._recorded,
                training_for=None if self._training_started is None else time.monotonic() - self._training_started,
            )

    def _reusable(self) -> bool:
        """Whether the store holds or trains every run of the request already (False if it cannot be read: the
        job's thread then reports why)."""
        try:
            return every_run_reusable(RunStore(recover=False), self.runs)
        except StoreError:
            return False

    def _work(self) -> None:
        status, summary, error = "stopped", None, None
        try:
            if self.from_store:
                status, summary = self._experiment()
            else:
                left = planned_seconds_left(self.runs, self.workers, self.slots)
                with self.slots.hold(self.stop_event, self.workers, ticket=self, seconds_left=left) as acquired:
                    if acquired:
                        status, summary = self._experiment()
        except Exception as exc:  # noqa: BLE001 - the page shows the message, never a traceback
            status, error = "failed", brief(f"{type(exc).__name__}: {exc}")
        with self._lock:
            self._status, self._summary, self._error = status, summary, error

    def _experiment(self) -> tuple[str, dict]:
        """Run the experiment (its slots held, or none needed); its status and summary."""
        # The runs enter the store only now: queued runs there would need a heartbeat while waiting.
        run = ExperimentRun(
            self.experiment, self.out, RunStore(), workers=self.workers, cap=self.slots.limit, **self.options
        )
        with self._lock:
            self._run, self._status, self._training_started = run, "training", time.monotonic()
        if self.stop_event.is_set():  # Stop pressed while the runs were being written
            run.stop()
        summary = run.run()
        stored = run.sweep.store.runs(run.sweep.run_ids)
        if all(stored_run.reused and stored_run.status == "finished" for stored_run in stored):
            with self._lock:
                self._recorded = recorded_when(stored_run.finished_at for stored_run in stored)
        return ("stopped" if run.sweep.stopping else "finished"), summary


@dataclass(frozen=True)
class WarmUpSnapshot:
    status: str  # training, finished, stopped
    done: dict[str, str]  # experiment name → how it ended (finished, stopped, failed), in order
    current: str | None  # the experiment in progress
    current_status: str | None  # its status (queued while it waits for slots)
    total: int

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_STATUSES


class WarmUp(BackgroundJob):
    """Every experiment in turn, as `python -m rl_core experiment --all` runs them: an `ExperimentJob` each, whose
    runs no learner owns (like the command line's, every session sees them), so that a panel's Run afterwards
    answers from the store at once. A run already recorded is reused, not trained again. `stop()` ends the
    experiment in progress and starts no other."""

    def __init__(self, experiments: list[Experiment], slots: TrainingSlots, workers: int):
        self.experiments = list(experiments)
        self.slots = slots
        self.workers = workers
        self.stop_event = threading.Event()
        self._lock = threading.Lock()
        self._status = "training"
        self._done: dict[str, str] = {}
        self._current: ExperimentJob | None = None
        self._thread = threading.Thread(target=self._work, name="experiment-warm-up", daemon=True)

    def stop(self) -> None:
        self.stop_event.set()
        with self._lock:
            if self._current is not None:
                self._current.stop()

    def snapshot(self) -> WarmUpSnapshot:
        with self._lock:
            current = self._current
            return WarmUpSnapshot(
                status=self._status,
                done=dict(self._done),
                total=len(self.experiments),
                current=None if current is None else current.experiment.name,
                current_status=None if current is None else current.snapshot().status,
            )

    def _work(self) -> None:
        for experiment in self.experiments:
            if self.stop_event.is_set():
                break
            try:
                job = ExperimentJob(experiment, self.slots, self.workers)
            except Exception as exc:  # noqa: BLE001 - a plan the server refuses: the list says why, the rest go on
                with self._lock:
                    self._done[experiment.name] = f"failed: {brief(str(exc))}"
                continue
            with self._lock:
                self._current = job
            if self.stop_event.is_set():  # Stop pressed before this job was visible to it
                job.stop()
            job.start().join()
            ended = job.snapshot()
            with self._lock:
                self._done[experiment.name] = ended.status + (f": {ended.error}" if ended.error else "")
                self._current = None
        with self._lock:
            self._status = "stopped" if self.stop_event.is_set() else "finished"
