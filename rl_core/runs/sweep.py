"""Sweeps: every (preset, grid value, seed) run of a comparison trained in worker processes, each worker training
one batch of runs at a time (`rl_core.engine.run_batch`), every record written to the run store as it comes.

Processes, not threads: a step of a tiny model is mostly Python overhead around small tensor ops, which runs
under the GIL, so only processes fill several cores. Workers are not forked from the caller (forking a process
that already runs torch or Streamlit threads can deadlock) but from a fork server, a process started once per
caller that has imported the engine and runs nothing else: a worker then starts in milliseconds instead of the
4 s a fresh interpreter takes to import torch and transformers, which every sweep (every experiment) paid per
worker. Where the platform has no fork server, workers are spawned. They use one intra-op thread each: tiny
matrices gain nothing from a second thread, and a sweep already gives every core a run of its own.

Warm starts first. Runs that differ only in the preset or a knob share an SFT checkpoint and a reward model
(cached on disk per task, model, seed, noise and SFT steps). The sweep trains each distinct one once, in a
worker, before the runs that need it are handed out, so no two workers ever train the same checkpoint. The SFT
warm starts of many seeds (and a distillation's teachers, and the preference task's reward models) train as one
group (`sft.sft_policies`, `ToyTask.prepare_seeds`), the seeds cut into jobs of `WARM_START_GROUP` from the plan
alone (`warm_start_jobs`), which the workers train in parallel.

Batches. The runs that can train as one group (`rl_core.engine.trainer.group_plan`: the arms of an experiment that
share their shapes, over all its seeds) train as one vectorised program in one worker, and take one place under the
training cap, as they hold one core; a batch starts once all its warm starts are ready. A group's runs differ from
the same runs alone or in other company by float rounding (docs/ARCHITECTURE.md, "A group of runs"), so the batches
are cut from the plan alone — its runs in plan order, `GROUP_RUNS` at most, as even as can be — never by the
number of workers or by which warm starts happened to be ready together: an experiment's records do not depend on
the machine that trains it.

Reuse. A planned run identical to one in the store (`rl_core.runs.reuse.run_key`) is not trained: it answers from the
finished run's records, or watches the run in flight and trains only if that one does not finish. `fresh=True`
trains every run.

On a Ray cluster (`ray_address`, or RLHF_LAB_RAY_ADDRESS) the pool is `rl_core.runs.cluster.RayPool`: the same warm
starts and runs as Ray tasks, their records written here as they come back.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm
from transformers.utils import logging as transformers_logging

from rl_core.algorithms import get_run_algo
from rl_core.config import AlgoConfig, RewardConfig, RunConfig, parse_overrides, shown
from rl_core.engine.models import select_device
from rl_core.engine.pair_run import pair_group_plan
from rl_core.engine.pretrained import check_model, is_preset
from rl_core.engine.sft import sft_policies
from rl_core.engine.trainer import TrainingStopped, group_plan
from rl_core.formulas.distillation import TEACHER_DEMO_NOISE
from rl_core.runs import cluster
from rl_core.runs.reuse import run_key
from rl_core.runs.run_stream import RunInterrupted, batch_training_stream, store_batch, trainer_for
from rl_core.runs.store import Heartbeat, RunStore, StoredRun, max_trainings
from rl_core.runs.workers import main_script_kept_out, sigint_ignored, watch_coordinator, worker_context
from toy_tasks import get_task


@dataclass(frozen=True)
class PlannedRun:
    run: RunConfig
    label: str  # the comparison group (preset and grid values): seeds of one label are averaged together
    variant: dict  # the grid values of this run, knob → value


MAX_SWEEP_RUNS = 1000  # every run is a row in the store and a job for the pool: a typo must not queue a million
# Runs of one shape trained as one program at most: 8 seeds of an arm, or 4 seeds of two arms. An experiment's 16 runs
# as one group of 16 took 1.5× (rloo_leave_one_out) and 2.1× (std_normalisation) the CPU of the longer of its two
# groups of 8, so on two free cores two groups finish first; even on one core the 16 saved at most a fifth of the
# CPU (0.80× and 1.06× both 8s; bench/group_size.py, 10 steps, load 9–14).
GROUP_RUNS = 8
# SFT warm starts of one kind trained as one group at most: an experiment's 8 seeds in two groups, one per core.
WARM_START_GROUP = 4

# The sweeps running in this process, stopped when the interpreter exits (`_stop_live_sweeps`).
_live_sweeps: weakref.WeakSet = weakref.WeakSet()


def _stop_live_sweeps() -> None:
    """Stop every sweep still running when the interpreter exits, so that the exit waits for its runs' current steps.
    On exit `concurrent.futures` waits for every job queued in a process pool: an app server stopped with SIGTERM
    during an experiment trained every remaining run first (42 s for dynamic_sampling, minutes for clip_higher)."""
    for sweep in list(_live_sweeps):
        sweep.stop()


# threading's exit hooks run before its non-daemon threads are joined, the last registered first; concurrent.futures
# registered its wait for queued jobs when it was imported (above), so this one runs before it. `threading.
# _register_atexit` is what concurrent.futures itself uses: `atexit` hooks run only after that wait.
threading._register_atexit(_stop_live_sweeps)


def default_workers() -> int:
    """The cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def parse_grid(assignments: Sequence[str]) -> dict[str, list]:
    """`["beta=0,0.05", "epsilon=0.1,0.2"]` → `{"beta": [0.0, 0.05], "epsilon": [0.1, 0.2]}`, typed per knob."""
    grid: dict[str, list] = {}
    for assignment in assignments:
        name, sep, text = assignment.partition("=")
        name = name.strip()
        if not sep or not name or not text.strip():
            raise ValueError(f"grid {shown(assignment)} is not of the form knob=value1,value2,…")
        if name in grid:
            raise ValueError(f"the grid names {name} twice; list all its values at once, {name}=value1,value2,…")
        values = [parse_overrides([f"{name}={value}"])[name] for value in text.split(",") if value.strip()]
        if len(set(map(repr, values))) != len(values):
            raise ValueError(f"grid {shown(assignment)} repeats a value of {name}")
        grid[name] = values
    return grid


def plan_sweep(
    algos: Sequence[str],
    seeds: Sequence[int],
    task: str,
    steps: int,
    overrides: dict | None = None,
    grid: dict[str, list] | None = None,
    **run_fields,
) -> list[PlannedRun]:
    """Every run of the sweep, validated up front: ValueError names the preset, knob or value that is refused.

    `overrides` apply to every run; `grid` crosses each preset with every combination of its values;
    `run_fields` are further `RunConfig` fields (model, sft_steps, demo_noise, device)."""
    overrides, grid = overrides or {}, grid or {}
    if not algos:
        raise ValueError("algos is empty; name at least one preset")
    if len(set(algos)) != len(algos):
        raise ValueError(f"algos lists a preset twice: {', '.join(algos)}")
    if not seeds:
        raise ValueError("seeds is empty; allowed: at least one seed")
    both = sorted(set(overrides) & set(grid))
    if both:
        raise ValueError(f"{', '.join(both)} is both set and swept; drop one of the two")
    runs = len(algos) * math.prod(len(values) for values in grid.values()) * len(seeds)
    if runs > MAX_SWEEP_RUNS:
        raise ValueError(
            f"the sweep has {runs} runs (presets × grid values × seeds); allowed: at most {MAX_SWEEP_RUNS}"
        )
    get_task(task)  # ValueError naming the allowed tasks
    model = run_fields.get("model", RunConfig.model)
    check_model(model)  # a preset, a folder or a Hub id; ValueError naming what is allowed
    select_device(run_fields.get("device", RunConfig.device), model)
    planned = []
    for algo in algos:
        for values in itertools.product(*grid.values()):
            variant = dict(zip(grid, values))
            config = get_run_algo(algo, **overrides, **variant)
            label = " · ".join([algo, *(f"{k}={v}" for k, v in variant.items())])
            for seed in seeds:
                run = RunConfig(algo=config, task=task, steps=steps, seed=seed, **run_fields)
                run.validate()
                planned.append(PlannedRun(run, label, variant))
    return planned


def warm_start_kind(run: RunConfig) -> tuple:
    """What the warm starts trained as one group share: what a run's cached SFT checkpoint and reward model depend
    on, less the seed."""
    return run.task, run.model, run.demo_noise, run.sft_steps, run.device


def warm_start_jobs(runs: dict[int, RunConfig]) -> list[list[int]]:
    """The runs (by id, in plan order) cut into warm-start jobs: the distinct seeds of one `warm_start_kind` in
    groups of `WARM_START_GROUP` at most (a loaded model's: one), as even as can be (8 seeds: 4 and 4), each job
    with every run of its seeds. Cut from the plan alone, as the batches are: a warm start trained in a group
    differs from the same seed's in other company by float rounding."""
    kinds: dict[tuple, dict[int, list[int]]] = {}
    for run_id, run in runs.items():
        kinds.setdefault(warm_start_kind(run), {}).setdefault(run.seed, []).append(run_id)
    jobs = []
    for (_, model, *_), by_seed in kinds.items():
        seeds = list(by_seed)
        # A loaded model's group would hold a copy of its weights and AdamW moments per seed, where `check_fits`
        # sized one: its seeds train one per job, as before.
        most = WARM_START_GROUP if is_preset(model) else 1
        size = math.ceil(len(seeds) / math.ceil(len(seeds) / most))
        for i in range(0, len(seeds), size):
            jobs.append([run_id for seed in seeds[i : i + size] for run_id in by_seed[seed]])
    return jobs


def warm_starts(
    runs: Sequence[RunConfig],
    cache_dir: Path | None,
    stopped: Callable[[], bool] = lambda: False,
    on_step: Callable[[int], None] = lambda done: None,
) -> None:
    """Train (or find cached) what `runs` start from: the seeds' reward models (`ToyTask.prepare_seeds`: the
    preference task fits them as one group), then the SFT checkpoints of one (task, model, noise, SFT steps, device)
    across seeds as one group (`sft.sft_policies`), then so their teachers (on-policy distillation's π_T);
    TrainingStopped once `stopped()` turns true. `on_step(done)` after each step of a group (`done` counts from 1
    in each group; 0 while another thread trains one of its checkpoints)."""

    def progress(done: int, losses: list[float]) -> None:
        if stopped():
            raise TrainingStopped("stopped during the SFT warm start")
        on_step(done)

    kinds: dict[tuple, list[RunConfig]] = {}
    for run in runs:
        if not isinstance(run.algo, RewardConfig):  # a reward model is fitted from scratch: nothing to start from
            kinds.setdefault(warm_start_kind(run), []).append(run)
    for family in kinds.values():
        trainer = trainer_for(family[0], cache_dir)  # for its task, tokenizer, device and demo noise
        seeds = list(dict.fromkeys(run.seed for run in family))
        trainer.task.prepare_seeds(trainer.cache_dir, trainer.device, seeds)  # their reward models as one group
        # The group's success checks score with the task prepared for the last seed: a success is the task's own
        # check, which no seed's reward model changes.
        sft_policies(
            trainer.task,
            trainer.tokenizer,
            family[0].model,
            seeds,
            trainer.demo_noise,
            family[0].sft_steps,
            trainer.device,
            trainer.cache_dir,
            progress=progress,
        )
        teachers: dict[tuple, dict[int, None]] = {}  # (teacher model, its SFT steps) → its seeds, in order
        for run in family:
            if getattr(run.algo, "teacher_model", None) is not None:
                teachers.setdefault((run.algo.teacher_model, run.algo.teacher_sft_steps), {})[run.seed] = None
        for (model, steps), teacher_seeds in teachers.items():
            sft_policies(
                trainer.task,
                trainer.tokenizer,
                model,
                list(teacher_seeds),
                TEACHER_DEMO_NOISE,
                steps,
                trainer.device,
                trainer.cache_dir,
                progress=progress,
            )


class Sweep:
    """A planned sweep, written to the store as queued runs on creation; `run()` trains them.

    `run()` blocks, so a page calls it from a background thread; `stop()` may come from any thread and ends
    every run after its current step (queued runs end as stopped without starting)."""

    def __init__(
        self,
        planned: Sequence[PlannedRun],
        store: RunStore,
        workers: int | None = None,
        cache_dir: Path | None = None,
        spec: dict | None = None,
        session: str | None = None,
        cap: int | None = None,
        fresh: bool = False,
        ray_address: str | None = None,
    ):
        """`cap`: a worker starts a run only while fewer than `cap` runs of the store train, in any process (the
        app passes its training cap); default RLHF_LAB_MAX_TRAININGS, else this sweep's worker count.
        `fresh`: train every run, even one the store already holds or trains.
        `ray_address` (default RLHF_LAB_RAY_ADDRESS): train every run as a task on that Ray cluster
        (`rl_core.runs.cluster`); workers and cap then default to the cluster's CPUs. ClusterError if it is not
        there."""
        self.ray_address = cluster.ray_address(ray_address)
        cluster_cpus = cluster.connect(self.ray_address) if self.ray_address else None
        self.workers = (cluster_cpus or default_workers()) if workers is None else workers
        if self.workers < 1:
            raise ValueError(f"workers={self.workers} is out of range; allowed: an integer ≥ 1")
        self.cap = (cluster_cpus or max_trainings(default=self.workers)) if cap is None else cap
        if not planned:
            raise ValueError("the sweep has no runs")
        self.planned = list(planned)
        self.store = store
        self.cache_dir = cache_dir
        self._context = worker_context()
        self._stop = self._context.Event()
        self.session = session  # the app session that owns the sweep and its runs (None: shared)
        self.sweep_id = store.create_sweep(spec or {"labels": sorted({p.label for p in self.planned})}, session)
        self.run_ids = [
            store.add_run(p.run, p.label, p.variant, self.sweep_id, session, key=run_key(p.run), reuse=not fresh)
            for p in self.planned
        ]

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def stop_event(self):
        """The event `stop()` sets (shared with the workers), for whoever waits on the sweep's behalf."""
        return self._stop

    def stop(self) -> None:
        self._stop.set()

    def run(self, report: Callable[[list[StoredRun]], None] | None = None, interval: float = 1.0) -> list[StoredRun]:
        """Train every run that is not reused; `report` gets the sweep's runs from the store every `interval`
        seconds and at the end. Ctrl+C becomes a stop request: the runs end after their current step and are kept
        as stopped. No worker process starts unless a run must train."""
        stored = self.store.runs(self.run_ids)
        to_train = [run.id for run in stored if run.active and not run.reused]
        watching = {run.id for run in stored if run.active and run.reused}
        workers = min(self.workers, len(to_train) + len(watching))  # a watched run may fall to this sweep to train
        _live_sweeps.add(self)
        try:
            with Heartbeat(self.store), ExitStack() as stack:
                pool: LocalPool | cluster.RayPool | None = None

                def get_pool() -> LocalPool | cluster.RayPool:
                    nonlocal pool
                    if pool is None:
                        pool = (
                            cluster.RayPool(stack, workers, self._stop, self.store, self.cap)
                            if self.ray_address
                            else LocalPool(stack, workers, self._context, self._stop, self.store, self.cap)
                        )
                    return pool

                try:
                    self._dispatch(get_pool, to_train, watching, report, interval)
                except BaseException:
                    self.stop()  # before the pool's exit waits for the workers: they must end their runs
                    raise
        finally:
            _live_sweeps.discard(self)
            # Whatever ended the sweep early, no run of it stays queued or running.
            self.store.settle(
                self.run_ids,
                "stopped" if self.stopping else "interrupted",
                None if self.stopping else "the sweep ended before this run did",
            )
        final = self.store.runs(self.run_ids)
        if report:
            report(final)
        return final

    def _dispatch(
        self,
        pool: Callable[[], LocalPool | cluster.RayPool],
        to_train: list[int],
        watching: set[int],
        report: Callable[[list[StoredRun]], None] | None,
        interval: float,
    ) -> None:
        runs = dict(zip(self.run_ids, self.planned))
        # A future maps to the runs it stands for: a warm start to every run sharing it, a training to its batch.
        pending: dict[Future, list[int]] = {}
        warm_starts: set[Future] = set()
        ready: set[int] = set()  # runs whose warm start is trained
        waiting: list[list[int]] = []  # batches some of whose warm starts are not

        def prepare_runs(ids: list[int]) -> None:
            for job in warm_start_jobs({run_id: runs[run_id].run for run_id in ids}):
                future = pool().warm_start([runs[run_id].run for run_id in job], self.cache_dir)
                pending[future] = job
                warm_starts.add(future)
            waiting.extend(batches({run_id: runs[run_id].run for run_id in ids}))

        def start_ready_batches() -> None:
            for batch in [b for b in waiting if set(b) <= ready]:
                waiting.remove(batch)
                pending[pool().train(batch, [runs[run_id].run for run_id in batch], self.cache_dir)] = batch

        def drop(ids: list[int]) -> None:
            """Runs that will not train (their warm start failed) leave their batches; the rest still train."""
            for batch in waiting:
                batch[:] = [run_id for run_id in batch if run_id not in ids]
            waiting[:] = [batch for batch in waiting if batch]

        prepare_runs(to_train)
        while pending or watching:
            try:
                if pending:
                    done, _ = wait(pending, timeout=interval, return_when=FIRST_COMPLETED)
                else:
                    done = set()
                    self._stop.wait(interval)
            except KeyboardInterrupt:
                self.stop()
                continue
            if self.stopping:
                watching.clear()  # what did not start is marked stopped at the end
            follows = {run_id: self.store.follow(run_id) for run_id in watching}
            watching -= {run_id for run_id, outcome in follows.items() if outcome != "waiting"}
            prepare_runs([run_id for run_id, outcome in follows.items() if outcome == "train"])
            for future in done:
                ids = pending.pop(future)
                if self.stopping:
                    continue  # what did not start is marked stopped at the end
                try:
                    future.result()
                    if future in warm_starts:
                        ready.update(ids)
                except BrokenProcessPool as error:  # a worker was killed: the pool and every run in it are gone
                    self.store.settle(ids, "interrupted", f"a worker process died: {error}")
                    drop(ids)
                except RunInterrupted as error:  # a Ray worker or node went away during a warm start
                    self.store.settle(ids, "interrupted", str(error))
                    drop(ids)
                except Exception as error:  # noqa: BLE001 - a warm start failed: so do the runs that need it
                    self.store.settle(ids, "failed", f"{type(error).__name__}: {error}")
                    drop(ids)
            if not self.stopping:
                start_ready_batches()
            if self.stopping:
                # Runs not yet handed to a worker never start; the workers end theirs between steps.
                for future in [f for f in pending if f.cancel()]:
                    self.store.settle(pending.pop(future), "stopped")
            if report:
                report(self.store.runs(self.run_ids))


def batches(runs: dict[int, RunConfig]) -> list[list[int]]:
    """The runs (by id, in plan order) cut into batches: those of one `group_plan` (for runs fitted to preference
    pairs, `pair_group_plan`) together, `GROUP_RUNS` at most and as even as can be (16 runs: 8 and 8; 10: 5 and 5),
    each batch in plan order."""
    by_plan: dict[object, list[int]] = {}
    for run_id, run in runs.items():
        by_plan.setdefault(group_plan(run) if isinstance(run.algo, AlgoConfig) else pair_group_plan(run), []).append(
            run_id
        )
    out = []
    for ids in by_plan.values():
        count = math.ceil(len(ids) / GROUP_RUNS)
        size = math.ceil(len(ids) / count)
        out.extend(ids[i : i + size] for i in range(0, len(ids), size))
    return out


def batch_count(runs: Sequence[RunConfig]) -> int:
    """How many batches a sweep of `runs` trains (`batches`)."""
    return len(batches(dict(enumerate(runs))))


class SweepProgress:
    """`sweep.run(progress)` draws a tqdm bar over the steps of every run and writes one line per run as it ends
    (status, whether it was reused, steps, seconds, final success, error); `close()` ends the bar."""

    def __init__(self, planned: Sequence[PlannedRun], description: str = "sweep"):
        self.bar = tqdm(total=sum(p.run.steps for p in planned), desc=description, unit="step", file=sys.stderr)
        self.reported: set[int] = set()

    def __call__(self, runs: list[StoredRun]) -> None:
        # Until the warm starts are done every run is queued and the bar stands still: say so.
        statuses = [run.status for run in runs]
        self.bar.set_postfix_str(
            f"{statuses.count('running')} running, {statuses.count('queued')} queued", refresh=False
        )
        self.bar.update(sum(run.steps_done for run in runs) - self.bar.n)
        for run in runs:
            if not run.active and run.id not in self.reported:
                self.reported.add(run.id)
                seconds = "" if math.isnan(run.wall_time) else f", {run.wall_time:.1f} s"
                final = run.final or {}
                success = (
                    f", final success {final['success_rate']:.3f}"
                    if "success_rate" in final
                    else f", held-out accuracy {final['heldout_accuracy']:.3f}"
                    if "heldout_accuracy" in final
                    else ""
                )
                error = f": {run.error}" if run.error else ""
                status = f"{run.status} (reused)" if run.reused else run.status
                self.bar.write(
                    f"{run.label} seed {run.seed}: {status} after {run.steps_done} steps{seconds}{success}{error}",
                    file=sys.stderr,
                )

    def close(self) -> None:
        self.bar.close()


class LocalPool:
    """The sweep's worker processes on this machine (`worker_context`), one batch of runs per worker at a time."""

    def __init__(self, stack: ExitStack, workers: int, context, stop_event, store: RunStore, cap: int):
        self.pool = stack.enter_context(
            ProcessPoolExecutor(
                workers,
                mp_context=context,
                initializer=_init_worker,
                initargs=(stop_event, str(store.path), os.getpid(), cap),
            )
        )

    def warm_start(self, runs: list[RunConfig], cache_dir: Path | None) -> Future:
        """Train what the runs start from (`warm_starts`)."""
        return _submit(self.pool, _warm_start, runs, cache_dir)

    def train(self, run_ids: list[int], runs: list[RunConfig], cache_dir: Path | None) -> Future:
        """Train the runs as one batch; their outcomes are their statuses in the store, the future only says when
        the batch ended."""
        return _submit(self.pool, _train, run_ids, runs, cache_dir)


def _submit(pool: ProcessPoolExecutor, fn: Callable, *args) -> Future:
    """`pool.submit`, with SIGINT ignored meanwhile (`sigint_ignored`: the workers a pool starts inside this call
    never die of a Ctrl+C, which the parent turns into a stop request) and the caller's `__main__` script kept from
    the workers."""
    with main_script_kept_out(), sigint_ignored():
        return pool.submit(fn, *args)


# ---------------------------------------------------------------------------------------------- in the workers
_stop_event = None  # the sweep's stop event, shared with the parent
_store: RunStore | None = None
_current_runs: list[int] = []  # the batch this worker trains now, if any
_cap = 1  # runs of the store that may train at once, across processes


def _init_worker(stop_event, db_path: str, coordinator: int, cap: int) -> None:
    global _stop_event, _store, _cap
    _cap = cap
    torch.set_num_threads(1)
    transformers_logging.disable_progress_bar()
    _stop_event = stop_event
    _store = RunStore(db_path, recover=False)  # the parent's store recovered stale runs when it opened
    Heartbeat(_store).start()  # for the life of the worker: it refreshes whichever run this process trains
    watch_coordinator(coordinator, _interrupt_current_runs)  # an orphan would train on, unseen and unstoppable


def _interrupt_current_runs() -> None:
    """The coordinator is gone: the batch this worker was training is marked interrupted."""
    if _current_runs:
        # the store may be busy or gone; recovery marks the run later
        with contextlib.suppress(Exception):
            _store.settle(_current_runs, "interrupted", error="the sweep's coordinator process ended")


def _warm_start(runs: list[RunConfig], cache_dir: Path | None) -> None:
    warm_starts(runs, cache_dir, _stop_event.is_set)


def _train(run_ids: list[int], runs: list[RunConfig], cache_dir: Path | None) -> None:
    """Train one batch of runs, writing each record to the store; each run's outcome is its status there."""
    global _current_runs
    # Waits while the store's cap is taken by other processes' trainings (another server, a command-line sweep).
    if not _store.claim(run_ids, _cap, _stop_event.is_set):
        _store.settle(run_ids, "stopped")
        return
    _current_runs = run_ids
    try:
        store_batch(_store, run_ids, batch_training_stream(runs, cache_dir, _stop_event))
    finally:
        _current_runs = []
