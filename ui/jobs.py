"""Training jobs that run in background threads, the global cap on how many trainings run at once, and the live
lab's one training loop.

Nothing here imports Streamlit: a job's thread (and the loop's, on its behalf) only ever touches its own `Job` (a
lock, a stop event, a bounded metrics history and a status), and the page reads a `JobSnapshot` taken under that
lock. Calling Streamlit from a thread that is not the script thread fails or corrupts the page, so the page polls
instead.

Every live training of the server steps in one `rl_core.runs.run_loop.RunLoop` (`LiveLoop`): a job's thread prepares its
run (models, SFT warm start), hands the trainer to the loop, and evaluates and stores its end once it leaves, so
ten learners' runs interleave step by step rather than queueing behind each other's whole training.
"""

from __future__ import annotations

import logging
import math
import os
import statistics
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from rl_core.config import RunConfig
from rl_core.engine.chat import ChatModels, Probe
from rl_core.engine.sft import default_cache_dir, warm_starts_to_build
from rl_core.engine.trainer import Trainer, TrainingStopped
from rl_core.messages import brief
from rl_core.runs import cluster
from rl_core.runs.crowd import Crowd, Entry, crowd_seconds, per_run_seconds
from rl_core.runs.first_point import (
    PREPARATION_SECONDS,
    first_point_seconds,
    first_turn_seconds,
    lane_first_step_seconds,
    lone_first_turn_seconds,
    still_ahead,
)
from rl_core.runs.limits import (
    HOUR,
    ServerLimits,
    contention,
    estimated_evaluation_seconds,
    estimated_seconds,
    estimated_step_seconds,
    estimated_warm_start_seconds,
    model_factor,
)
from rl_core.runs.run_loop import RunLoop, loop_threads
from rl_core.runs.run_stream import END, FAILED, PHASE, SETUP, RunInterrupted, end_item, prepared_items
from rl_core.runs.store import Heartbeat, RunStore, StoredRun, StoreError, max_trainings
from rl_core.runs.warm_start_builder import WarmStartBuilder, WarmStartWait

log = logging.getLogger(__name__)

ACTIVE_STATUSES = ("queued", "preparing", "training")
# Step walls of a run before its pace counts in the server's (`TrainingSlots.observe_speed`): its first one or two
# include joining the loop.
PACED_STEPS = 3
# What a page says of a run the server stopped with it (a crash, a restart), by whether it had started.
RESTARTED_WAITING = (
    "the server stopped while this run was waiting for a place, so it never started: press Train to run it"
)
RESTARTED_TRAINING = "the server stopped during this run; its steps so far are kept: press Train to run it again"


class TrainingSlots:
    """At most `limit` trainings run at once, process-wide; the others wait in arrival order.

    The CPU is shared by every browser session, and two tiny trainings already fill a small machine. A sweep holds
    one slot per worker process, so a class cannot start more work than the cap by starting sweeps."""

    KNOB = "RLHF_LAB_MAX_TRAININGS"  # the environment variable that sets `limit` in the app

    def __init__(self, limit: int):
        if limit < 1:
            raise ValueError(f"{self.KNOB}={limit} is out of range; allowed: an integer ≥ 1")
        self.limit = limit
        self._condition = threading.Condition()
        self._running = 0
        self._waiting: deque[tuple[object, int]] = deque()  # (ticket, slots) in arrival order
        self._holders: dict[object, tuple[float, int]] = {}  # ticket → (start time, slots)
        self._durations: deque[float] = deque(maxlen=20)  # seconds of the latest finished holds
        self._left: dict[object, Callable[[float | None], float]] = {}  # ticket → its seconds left (`hold`)
        self._speeds: deque[float] = deque(maxlen=20)  # measured ÷ estimated step time of the latest steps

    @classmethod
    def from_env(cls) -> TrainingSlots:
        """RLHF_LAB_MAX_TRAININGS; on a Ray cluster (RLHF_LAB_RAY_ADDRESS) its CPUs. A cluster that cannot be
        reached leaves the local cap: each training then fails with the cluster's message."""
        address = cluster.ray_address()
        if address is not None:
            try:
                return cls(cluster.connect(address))
            except cluster.ClusterError:
                pass
        return cls(max_trainings())

    @property
    def speed(self) -> float:
        """How much slower than `rl_core.runs.limits`' estimate this server's trainings step, from one step's
        record to the next (median of the latest)."""
        with self._condition:
            return statistics.median(self._speeds) if self._speeds else 1.0

    def observe_speed(self, measured_step: float, estimated_step: float) -> None:
        with self._condition:
            self._speeds.append(measured_step / estimated_step)

    @property
    def running(self) -> int:
        with self._condition:
            return self._running

    @contextmanager
    def hold(
        self,
        stop_event,
        slots: int = 1,
        ticket: object | None = None,
        seconds_left: Callable[[float | None], float] | None = None,
    ) -> Iterator[bool]:
        """Wait for `slots` free slots; yields False (without them) if `stop_event` is set while waiting.

        `ticket` names this request for `queue_place` and `wait_estimate` while it waits. `seconds_left(elapsed)`
        says how long the work will hold the slots from now (`elapsed`: seconds it has held them, None while it
        waits); it must not block, since it is called under this object's lock. Without it, a hold is assumed to
        last as long as the latest finished ones."""
        if not 1 <= slots <= self.limit:
            raise ValueError(f"workers={slots} is out of range; allowed: 1 to {self.limit} (the server's cap)")
        ticket = object() if ticket is None else ticket
        with self._condition:
            self._waiting.append((ticket, slots))
            if seconds_left is not None:
                self._left[ticket] = seconds_left
            # A timed wait, so that a Stop pressed while queued is noticed without anyone notifying us.
            while not stop_event.is_set() and (self._next_up() is not ticket or self._running + slots > self.limit):
                self._condition.wait(timeout=0.1)
            self._waiting.remove((ticket, slots))
            acquired = not stop_event.is_set()
            if acquired:
                self._running += slots
                self._holders[ticket] = (time.monotonic(), slots)
            else:
                self._left.pop(ticket, None)
            self._condition.notify_all()
        try:
            yield acquired
        finally:
            if acquired:
                with self._condition:
                    self._running -= slots
                    started, _ = self._holders.pop(ticket)
                    self._left.pop(ticket, None)
                    if not stop_event.is_set():  # a stopped training says nothing about how long one takes
                        self._durations.append(time.monotonic() - started)
                    self._condition.notify_all()

    def _next_up(self) -> object | None:
        """The waiting ticket that takes the next free slots (under the lock): the first to arrive."""
        return self._waiting[0][0]

    def queue_place(self, ticket: object) -> int | None:
        """1 for the next to start, 2 for the one after, …; None if `ticket` is not waiting."""
        with self._condition:
            return next((i + 1 for i, (t, _) in enumerate(self._waiting) if t is ticket), None)

    def wait_estimate(self, ticket: object) -> float | None:
        """Seconds until `ticket` starts: each running hold ends after its own `seconds_left` (a live-lab run:
        its remaining steps at its measured step time), each one ahead in the queue holds for its `seconds_left`;
        a hold without one lasts as long as the latest finished holds. None while that is unknown (nothing
        finished yet), or if `ticket` is not waiting."""
        with self._condition:
            if all(t is not ticket for t, _ in self._waiting):
                return None
            typical = sum(self._durations) / len(self._durations) if self._durations else None
            now = time.monotonic()

            def left(holder: object, elapsed: float | None) -> float | None:
                if holder in self._left:
                    return max(self._left[holder](elapsed), 0.0)
                return None if typical is None else max(typical - (elapsed or 0.0), 0.0)

            # When each slot frees up: now for the idle ones, when its holder is done for the busy ones.
            free = [0.0] * (self.limit - self._running)
            for holder, (started, n) in self._holders.items():
                free += [left(holder, now - started)] * n
            for waiting, n in self._waiting:  # hand slots out in arrival order until it is this ticket's turn
                if None in free:
                    return None
                free.sort()
                start = max(free[:n])
                if waiting is ticket:
                    return start
                held = left(waiting, None)
                free[:n] = [None if held is None else start + held] * n
            return None


# Runs in the live loop at once by default: a class of twenty, each with a run or two. The loop's turn is
# time-boxed and shared per learner (rl_core.runs.run_loop), so more runs make each learner's runs step less often,
# never a turn longer, and a learner who presses Train joins at once rather than queueing behind whole runs.
DEFAULT_LIVE_RUNS = 40
# Preparations whose seconds per run `LiveLoop.preparation_wall` takes the median of: few, for the server's pace now
# (a class's burst of preparations is forgotten after five more), and a median, so one odd preparation does not move
# it. Counted apart from the loop's turns (`run_loop.TURNS_TIMED`), whose pace changes with other things.
PREPARATIONS_TIMED = 5
# The interpreter's switch interval in a server with a live loop, instead of Python's 5 ms. A training step is
# thousands of torch ops, each of which gives the interpreter lock back and must take it again; beside a thread
# that runs Python without pause (a page's script) each retake can wait a whole interval. In one process, twenty runs
# in the loop on two threads beside two such threads: three five-step runs ended after 95 s and 134 s at 5 ms, after
# 20 s at 0.5 ms; with no such thread the loop's pace moved by no more than the noise (ten learners 3.1–3.7 against
# 3.3–3.7 steps a second, bench/live_loop_pace.py).
SWITCH_INTERVAL_SECONDS = 0.0005


class LiveLoop(TrainingSlots):
    """Places in the live lab's one training loop (`loop`, a `RunLoop`): at most `limit` runs train in it at once;
    later ones wait in TrainingSlots' queue, told their place and an estimate of the wait.

    The loop is one training whatever its number of runs under the server's cap on trainings (`cap`,
    RLHF_LAB_MAX_TRAININGS, held in the run store across processes), as a sweep's batch is, though it steps its
    runs on up to `threads` threads (RLHF_LAB_LOOP_THREADS in the app): its first run claims a place, and a run that
    joins while others train joins their batch."""

    KNOB = "RLHF_LAB_MAX_LIVE_RUNS"

    def __init__(
        self,
        limit: int,
        cap: int | None = None,
        shared: bool = True,
        per_learner: int | None = None,
        threads: int = 1,
    ):
        super().__init__(limit)
        self.cap = max_trainings() if cap is None else cap
        self.shared = shared  # False: each run is a training of its own (a Ray task)
        self.per_learner = per_learner  # runs of one learner (a ticket's `session`) in the loop at once; None: any
        self.loop = RunLoop("live-training", threads=threads, sharing=self.learners_training)
        self.builder = WarmStartBuilder()  # the runs' SFT warm starts, a group of one kind at a time
        self._claims = threading.Lock()
        self._claimed: dict[object, set[int]] = {}  # store path → the runs of the loop's batch in that store
        self._requests: set[object] = set()  # the runs requested and not ended: queued, in the loop or on the way
        self.preparing = Crowd()  # the runs preparing now, from their place (or their warm starts built) to the loop
        self._preparations: deque[float] = deque(maxlen=PREPARATIONS_TIMED)  # the latest preparations' seconds per run

    def preparation_wall(self, concurrency: float) -> float:
        """Wall seconds a run's preparation takes in this server now, from its place in the loop (or its warm
        starts built) to joining the loop (its models built, its warm starts loaded, its probe), with `concurrency`
        runs preparing (itself included): `crowd_seconds` of the median of the latest PREPARATIONS_TIMED runs'
        seconds per run (`observe_preparation`), PREPARATION_SECONDS a run before one was timed."""
        with self._condition:
            per_run = statistics.median(self._preparations) if self._preparations else PREPARATION_SECONDS
        return crowd_seconds(per_run, concurrency)

    def observe_preparation(self, seconds: float, concurrency: float) -> None:
        """A preparation of wall `seconds` among `concurrency` runs preparing on average (`Crowd.leave`)."""
        with self._condition:
            self._preparations.append(per_run_seconds(seconds, concurrency))

    @classmethod
    def from_env(cls) -> LiveLoop:
        """RLHF_LAB_MAX_LIVE_RUNS runs at once (default DEFAULT_LIVE_RUNS), one training under the cap, stepped on
        RLHF_LAB_LOOP_THREADS threads (`loop_threads`). On a Ray cluster (RLHF_LAB_RAY_ADDRESS) each run is a task
        of its own: as many at once as it has CPUs."""
        per_learner = ServerLimits.from_env().max_learner_live_runs
        if cluster.ray_address() is not None:
            cpus = TrainingSlots.from_env().limit
            return cls(cpus, cap=cpus, shared=False, per_learner=per_learner)
        sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)  # the loop steps in this process, beside the pages
        return cls(max_trainings(DEFAULT_LIVE_RUNS, cls.KNOB), per_learner=per_learner, threads=loop_threads())

    def _next_up(self) -> object | None:
        """The first waiting run whose learner has fewer than `per_learner` runs in the loop: a learner's third
        run lets the class's next run go first."""
        for ticket, _ in self._waiting:
            learner = getattr(ticket, "session", None)
            if (
                self.per_learner is None
                or learner is None
                or sum(getattr(holder, "session", None) == learner for holder in self._holders) < self.per_learner
            ):
                return ticket
        return None

    def request(self, ticket: object) -> None:
        """A run was requested (Train pressed): it counts among the runs sharing the loop until `withdraw`."""
        with self._condition:
            self._requests.add(ticket)

    def withdraw(self, ticket: object) -> None:
        with self._condition:
            self._requests.discard(ticket)

    def learners_sharing(self, ticket: object) -> int:
        """Learners with a run requested and not ended, `ticket`'s counted too: each has or will have its share of
        the loop, whether its run is in it already, queued, preparing or building its warm starts. The loop's own
        count leaves out a class whose runs are still with the builder (a lane's run announced at it was told 31 s,
        and had no point 213 s later), and the places taken leave out the runs of a class's click whose threads have
        not reached theirs yet (90 s for 242 s). A ticket's learner is its `session`, or the ticket itself without
        one (a learner of its own)."""
        with self._condition:
            return learner_count((*self._requests, ticket))

    def learners_training(self) -> int:
        """Learners with a run requested, not ended and not queued for a place: in the loop, in a lane, preparing or
        building its warm starts, each using or about to use its share (a queued one uses none yet)."""
        with self._condition:
            queued = self._queued()
            return learner_count(t for t in self._requests if t not in queued)

    def runs_on_the_way(self, ticket: object) -> int:
        """Runs requested, other than `ticket`, on their way to the loop: not queued for a place and not joined yet
        (building their warm starts or preparing; a ticket's `on_the_way`). Until they join, a lane's pace does not
        follow the learners sharing the loop: a class's runs building their warm starts left a heavy run's lane the
        whole core, and it was told 2.64 times its wait at the learners' shares (bench/class_load.py)."""
        with self._condition:
            queued = self._queued()
            return sum(t is not ticket and t not in queued and getattr(t, "on_the_way", False) for t in self._requests)

    def _queued(self) -> set[object]:
        """The tickets queued for a place (under the lock)."""
        return {waiting for waiting, _ in self._waiting}

    def learner_runs(self, learner: str) -> tuple[int, int]:
        """This learner's runs in the loop and waiting for a place (the tickets are jobs: their `session`)."""
        with self._condition:
            live = sum(getattr(holder, "session", None) == learner for holder in self._holders)
            queued = sum(getattr(ticket, "session", None) == learner for ticket, _ in self._waiting)
            return live, queued

    def claim(self, store: RunStore, run_id: int, stopped: Callable[[], bool]) -> bool:
        """`RunStore.claim` for a run of the loop: it joins the loop's batch while the loop trains one in this
        store, else it waits for a place under the cap; False if `stopped()` turns true first."""
        while not self._claims.acquire(timeout=0.1):  # one claim at a time, so two runs never start two batches
            if stopped():
                return False
        try:
            members = self._claimed.setdefault(store.path, set())
            if not store.claim(run_id, self.cap, stopped, join=members if self.shared else ()):
                return False
            members.add(run_id)
            return True
        finally:
            self._claims.release()

    def release(self, store: RunStore, run_id: int) -> None:
        """The run has ended: it no longer holds the loop's place under the cap."""
        with self._claims:
            self._claimed.get(store.path, set()).discard(run_id)


def planned_seconds_left(runs: list[RunConfig], workers: int, slots: TrainingSlots) -> Callable[[float | None], float]:
    """A sweep's `seconds_left` for `TrainingSlots.hold`: its runs' estimated seconds, scaled by the server's
    measured speed and shared among its workers, less the time it has held its slots."""
    total = reference_seconds(runs, workers) * slots.speed
    return lambda elapsed: max(total - (elapsed or 0.0), 0.0)


def reference_seconds(runs: list[RunConfig], workers: int) -> float:
    """Seconds these runs take shared among `workers`, at the step times measured on the reference CPU
    (`estimated_seconds`), whatever this server's trainings have measured."""
    return sum(estimated_seconds(run) for run in runs) / workers


class KeptModels:
    """The models ended runs keep to be talked to (`ChatModels`), at most `budget` bytes in the whole server: the
    oldest run's go first. A run dropped from its page takes its models along (the keys are weak)."""

    def __init__(self, budget: int):
        self.budget = budget
        self._lock = threading.Lock()
        self._kept: weakref.WeakKeyDictionary[object, ChatModels] = weakref.WeakKeyDictionary()  # oldest first

    def keep(self, owner: object, models: ChatModels) -> None:
        with self._lock:
            self._kept[owner] = models
            while len(self._kept) > 1 and sum(m.nbytes for m in self._kept.values()) > self.budget:
                del self._kept[next(iter(self._kept))]

    def get(self, owner: object) -> ChatModels | None:
        with self._lock:
            return self._kept.get(owner)


# A run's two models take 0.8 MiB (tiny), 6.2 MiB (small) or 656 MiB (the gpt2 shape with the lab's 98-token
# vocabulary): the chat keeps three gpt2-shaped runs, or every small run the learners keep on their pages.
KEPT_MODELS = KeptModels(budget=2 << 30)


class MetricHistory:
    """The scalar records of one run, at most `capacity` of them.

    When full, every other stored record is dropped and from then on only every second (fourth, …) new step is
    kept, so a long run keeps an evenly spaced, coarser history instead of growing without bound."""

    def __init__(self, capacity: int = 1000):
        self.capacity = capacity
        self.records: list[dict] = []
        self.stride = 1

    def add(self, record: dict) -> None:
        if (record["step"] - 1) % self.stride:
            return
        self.records.append(record)
        if len(self.records) > self.capacity:
            self.records = self.records[::2]
            self.stride *= 2


# Responses a step the lab records for its token view: every group of the step, up to this many (whole groups),
# so that a late step's one solved group (A = 0 everywhere) is not all there is to see. At the defaults (8 prompts
# × 8 responses) that is the whole batch; recording 64 rather than 8 left a step's time unchanged (0.20 s).
TOKEN_VIEW_RESPONSES = 64


def token_view_responses(prompts_per_step: int, num_generations: int) -> int:
    """How many of a step's responses the lab records: whole groups, every one up to TOKEN_VIEW_RESPONSES (and at
    least one group)."""
    groups = max(1, min(prompts_per_step, TOKEN_VIEW_RESPONSES // num_generations))
    return groups * num_generations


class SampleHistory:
    """The sampled responses of every step, at most `capacity` responses in all: when full, every other stored
    step is dropped and from then on only every second (fourth, …) new step is kept, as in MetricHistory. A
    response is about 4.5 kB of per-token lists (measured at 4.5 tokens), so 3200 of them (50 steps of 64, or 400
    of 8) stay within about 15 MB a run."""

    def __init__(self, capacity: int = 3200):
        self.capacity = capacity
        self.steps: dict[int, list[dict]] = {}
        self.stride = 1
        self.latest: dict[int, list[dict]] = {}  # the newest step, kept even where the stride skips it

    def view(self) -> dict[int, list[dict]]:
        return self.steps | self.latest

    def add(self, step: int, samples: list[dict]) -> None:
        if not samples:
            return
        self.latest = {step: samples}
        if (step - 1) % self.stride:
            return
        self.steps[step] = samples
        while sum(map(len, self.steps.values())) > self.capacity and len(self.steps) > 1:
            self.steps = {s: v for i, (s, v) in enumerate(self.steps.items()) if i % 2 == 0}
            self.stride *= 2


@dataclass(frozen=True)
class JobSnapshot:
    """A consistent copy of a job's state for drawing; the training thread never sees it."""

    status: str
    steps_total: int
    records: list[dict]  # scalar metrics, at most MetricHistory.capacity, the latest step always included
    samples: dict[int, list[dict]]  # step → that step's token-level views (SampleHistory), the latest included
    phase: tuple[str, int, int] | None  # (setup phase, done, total) while preparing
    setup: dict  # what prepare() reported, e.g. the value-pretraining explained variance
    error: str | None
    waiting_for: int  # trainings running elsewhere while this one is queued
    queue_place: int | None  # 1: next to start; None unless queued
    wait_estimate: float | None  # seconds until it starts, once the server has timed a finished training
    elapsed: float  # seconds from the job's creation (and start: the lab does both at once) to its end, or to now
    seconds_per_step: float | None  # wall seconds between its latest steps: in the live loop, a turn of every run
    first_point_in: float | None = None  # seconds until its first point (`Job.first_point_in`); None once it has one
    learners: int = 0  # learners sharing the live loop now
    warm_start: WarmStartWait | None = None  # where it stands with the warm-start builder, while it waits for it
    slower: float = 1.0  # `server_slower` as it was drawn: a short wait's bound grows with it (`ui.dashboard`)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    @property
    def steps_done(self) -> int:
        return self.records[-1]["step"] if self.records else 0

    @property
    def eta(self) -> float | None:
        """Seconds left, from the wall time of the last few steps (a record's `step_time` is what the step cost
        this run; in the shared loop each of its steps also waits for the other runs' steps of the turn)."""
        if self.seconds_per_step is None or not self.active:
            return None
        return (self.steps_total - self.steps_done) * self.seconds_per_step


def training_left(steps: int, step_seconds: float, evaluation: float) -> float:
    """Seconds a live run holds its place from now: its `steps` still to come at `step_seconds` each (in the loop,
    the wall from one of its records to the next, a turn shared with the other learners), then its evaluation of
    `evaluation` seconds, which its job's thread runs off the loop: steps × step_seconds + evaluation."""
    return steps * step_seconds + evaluation


def machine_slower() -> float:
    """How many times longer one thread's CPU work takes on this machine now than on an idle one (`contention`
    at the load average now, on this machine's cores)."""
    return contention(os.getloadavg()[0], os.cpu_count() or 1, 1)


def learner_count(tickets: Iterable[object]) -> int:
    """The learners `tickets` belong to: a ticket's learner is its `session`, or the ticket itself without one (a
    learner of its own)."""
    return len({getattr(t, "session", None) or t for t in tickets})


def server_slower() -> float:
    """How many times longer the server's own work takes now than on an idle machine: the load average per core,
    at least 1 (`contention` with no worker added: the server's threads are in the load already)."""
    return contention(os.getloadavg()[0], os.cpu_count() or 1, 0)


def time_left(elapsed: float, done: int, total: int) -> float | None:
    """Seconds until `total` units are done at the pace of the first `done`: `elapsed × (total − done) / done`;
    None before the first is done, and once all are (what comes next is another wait)."""
    return elapsed * (total - done) / done if 0 < done < total else None


class BackgroundJob:
    """What the app's jobs share: a daemon thread (`_thread`) that writes only to its job, under `_lock`, and a
    `_status` that is active while it is one of ACTIVE_STATUSES."""

    _thread: threading.Thread
    _lock: threading.Lock
    _status: str

    def start(self):
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end; True if it has (a job rebuilt from the store never had one)."""
        if self._thread.ident is not None:
            self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def active(self) -> bool:
        with self._lock:
            return self._status in ACTIVE_STATUSES


@dataclass(eq=False)
class Job(BackgroundJob):
    """One training run: its daemon thread waits for a place in the live loop (`slots`), prepares the run, has the
    loop step it, and records its end; `stop()` ends it after the current step."""

    run: RunConfig
    slots: LiveLoop
    settings: dict = field(default_factory=dict)  # the knob values the learner chose, for labels and CSV
    number: int = 0  # the run's number on its page
    label: str = ""  # how the run is listed in the run store, next to the Compare page's runs
    session: str | None = None  # the browser session that owns the run in the store
    page: str | None = None  # the lab page whose run it is, in the store too (a restarted server shows it there)
    stop_event: threading.Event = field(default_factory=threading.Event)
    clock: Callable[[], float] = time.monotonic  # seconds, monotonic: when its phases began; injectable for tests

    def __post_init__(self):
        self._lock = threading.Lock()
        self._status = "queued"
        self._history = MetricHistory()
        self._latest: dict | None = None
        self._samples = SampleHistory()
        self._probe: Probe | None = None
        self._probe_start: list[float] = []  # the probe before RL, never thinned away
        self._probe_steps = MetricHistory()  # {"step", "probabilities"} after each step
        self._phase: tuple[str, int, int] | None = None
        self._with_builder = False  # whether its warm starts are with the builder (`slots.builder`) now
        self._preparation: Entry | None = None  # among the runs preparing (`slots.preparing`) until it joined
        self._joined_at: float | None = None  # when it joined the loop
        self._company: int | None = None  # the runs joining the loop with it, itself included, when it joined
        self._trainer = None  # its trainer once it joined the loop (a lane's step progress is read from it)
        self._setup: dict = {}
        self._error: str | None = None
        self._started = self.clock()
        self._ended: float | None = None
        self._step_walls: deque[float] = deque(maxlen=10)  # wall seconds from each step's record to the next
        self._last_step_at: float | None = None  # when the latest record came
        # What the run's estimates start from, read once: the SFT warm starts the cache lacks, as (model, steps, the
        # model's factor), and its step's estimated seconds. A run whose model cannot be read now (a loaded model's
        # folder deleted since) has none: a page rebuilding it from the store still draws, and a run started with
        # it fails with the trainer's own message.
        try:
            self._builds = [(m, n, model_factor(m)) for m, n in warm_starts_to_build(self.run, default_cache_dir())]
            self._step_estimate = estimated_step_seconds(self.run)
            self._evaluation_estimate = estimated_evaluation_seconds(self.run)
        except (OSError, ValueError) as unreadable:
            log.info("a run of %s is not estimated: %s", self.run.model, unreadable)
            self._builds, self._step_estimate, self._evaluation_estimate = [], 0.0, 0.0
        # Seconds of training left, read without a lock by the slots' wait estimates (`seconds_left`): the SFT
        # warm starts the cache lacks and the steps' estimate scaled by this server's measured speed until the
        # first steps, then their measured time; and the evaluation (`training_left`).
        # Its first step is not among them: its first record comes after its first turn (`_first_turn_ahead`).
        self._seconds_left = estimated_warm_start_seconds(
            [(model, steps) for model, steps, _ in self._builds]
        ) + training_left(self.run.steps - 1, self._step_estimate * self.slots.speed, self._evaluation_seconds())
        self._limits = ServerLimits()  # the server's, read again when the run starts (`_work`)
        self._cut_short: str | None = None  # why the server stopped the run (its learner's hour was spent)
        self._thread = threading.Thread(target=self._work, name=f"training-{self.run.algo.name}", daemon=True)

    @classmethod
    def from_store(cls, stored: StoredRun, store: RunStore, slots: LiveLoop) -> Job:
        """A page's run as the store kept it, for a server that did not train it (it restarted since): its
        records and latest samples, ended as it ended. A run the store still lists as training (its owner
        another process) shows what it has recorded so far, as stopped; its thread never starts."""
        job = cls(
            RunConfig.from_dict(stored.config),
            slots,
            settings=stored.variant,
            number=stored.page_run or 0,
            label=stored.label,
            session=stored.session,
            page=stored.page,
        )
        job._status = stored.status if stored.status in ("finished", "failed", "interrupted") else "stopped"
        job._error = stored.error
        if stored.status == "interrupted":  # the server that had it stopped (RunStore.recover): say what was lost
            job._error = (RESTARTED_WAITING if stored.started_at is None else RESTARTED_TRAINING) + f" ({stored.error})"
        for record in store.steps(stored.id):
            job._history.add(record)
            job._latest = record
        if job._latest is not None:
            job._samples.add(job._latest["step"], store.samples(stored.id))
        job._ended = job._started + (0.0 if math.isnan(stored.wall_time) else stored.wall_time)
        return job

    @property
    def on_the_way(self) -> bool:
        """Whether it has not joined the loop and has not ended (read without its lock: `LiveLoop.runs_on_the_way`
        asks under the slots' own, and leaves out the runs queued for a place)."""
        return self._joined_at is None and self._status in ACTIVE_STATUSES

    def start(self):
        self.slots.request(self)  # from the click on, it is one of the runs that will share the loop
        return super().start()

    def stop(self) -> None:
        self.stop_event.set()

    def seconds_left(self, elapsed: float | None = None) -> float:
        """Its training's seconds left (`training_left`), and before its first record, its preparation still ahead
        (`_preparation_ahead`) and its first turn (`_first_turn_ahead`): runs ahead of a queue that were still
        preparing made its wait 0.55-0.74 of the real one in a class round, and with their preparation counted,
        runs ahead that had not had their first turn 0.59-0.67 (bench/class_load.py)."""
        now = self.clock()
        return self._seconds_left + self._preparation_ahead(now) + self._first_turn_ahead(now, self._company)

    def _first_turn_ahead(self, now: float, company: int | None) -> float:
        """What is left at `now` of its wait from joining the loop to its first record, joining with `company` runs
        (`RunLoop.first_record_wall`; None: not known), as the loop times such waits now (`first_turn_seconds`,
        else half the turn under way and the turn that takes it in), whether it has joined yet or not; 0 once it has
        a record. Reads its fields without its lock, as `_preparation_ahead` does."""
        if self._latest is not None:
            return 0.0
        loop = self.slots.loop
        turn = loop.turn_wall
        if turn is None:  # nothing timed in the loop: its first turn is its own step
            turn = self._step_estimate * self.slots.speed
        return still_ahead(first_turn_seconds(turn, loop.first_record_wall(company)), self._joined_at, now)

    def _preparation_ahead(self, now: float) -> float:
        """What is left at `now` of its preparation, at the pace of the runs preparing now, itself included; 0 once
        it joined the loop. Reads its fields without its lock (the slots' wait estimates call it under theirs)."""
        entry = self._preparation
        if self._joined_at is not None:
            return 0.0
        company = self.slots.preparing.count + (entry is None)
        return still_ahead(self.slots.preparation_wall(company), None if entry is None else entry.since, now)

    def _evaluation_seconds(self) -> float:
        """Its evaluation's estimate at the machine's load now (`machine_slower`), not at the server's `speed`: that
        is the loop's steps' pace, each step a turn shared among the learners, and the evaluation runs in the job's
        own thread, off the loop (at the speed of 24 learners, the class bench's queue counted a run's evaluation
        as 8 s, and was told 30 s for 17-18 s; a tiny run's took 0.05 s at load 3)."""
        return self._evaluation_estimate * machine_slower()

    def snapshot(self) -> JobSnapshot:
        with self._lock:
            records = list(self._history.records)
            if self._latest is not None and (not records or records[-1] is not self._latest):
                records.append(self._latest)
            return JobSnapshot(
                status=self._status,
                steps_total=self.run.steps,
                records=records,
                samples=self._samples.view(),
                phase=self._phase,
                setup=dict(self._setup),
                error=self._error,
                waiting_for=self.slots.running if self._status == "queued" else 0,
                queue_place=self.slots.queue_place(self) if self._status == "queued" else None,
                wait_estimate=self.slots.wait_estimate(self) if self._status == "queued" else None,
                elapsed=(self._ended or self.clock()) - self._started,
                seconds_per_step=statistics.fmean(self._step_walls) if self._step_walls else None,
                first_point_in=self._first_point_in(),
                learners=self.slots.loop.learners,
                warm_start=self.slots.builder.wait(self) if self._with_builder else None,
                slower=server_slower() if self._latest is None else 1.0,
            )

    def _first_point_in(self) -> float | None:
        """Seconds until the run's first point, under the lock (`first_point_seconds`): with the warm-start
        builder, its group's time left (None while the group forms, a later click may still join it, or before the
        group has a pace, and as it reaches the builder); queued, its warm starts at the builder's latest pace per
        seed, as a group of one (None while the builder is busy); then its preparation and its wait in the loop as
        this server times them now (a run that joins alone: `lone_first_turn_seconds`; one that joins with others:
        the waits of runs that joined with as many or fewer, `RunLoop.first_record_wall`; one that steps in a lane of
        its own: its first step there, `lane_first_step_seconds`, and None while other runs are on their way to the
        loop, `LiveLoop.runs_on_the_way`), less what has passed of each; queued, the
        queue's wait before all that. None once it has a point or ended."""
        if self._latest is not None or self._status not in ACTIVE_STATUSES:
            return None
        now, loop = self.clock(), self.slots.loop
        if self._in_lane():
            if self.slots.runs_on_the_way(self):
                # Its pace waits on theirs: until they join, its lane has more than its share of the loop's cores,
                # and how long that lasts is their warm starts' and preparations' time.
                return None
            # A lane of its own: its first point is its own first step, which neither the loop's turns nor the
            # other runs' first records time (from them the class bench's heavy run was told 1 s, then 6 s, for 13
            # and 23 s), at the machine's load now, paced for the learners sharing the loop.
            # Once its step has done updates after its first, their work says more than the estimate (a heavy run
            # announced 262 s from its estimate had no point 651 s later), paced as the estimate is.
            progress = None if self._trainer is None else loop.lane_progress(self._trainer)
            work = None
            if progress is not None and hasattr(self._trainer.algo, "ppo_epochs"):  # RL: its updates are counted
                updates = self._trainer.algo.ppo_epochs * self._trainer.algo.num_minibatches
                work = time_left(progress[1], progress[0], updates - 1)  # the rest, at its updates' work so far
            learners, slower = self.slots.learners_sharing(self), machine_slower()
            if work is not None:
                first_turn = lane_first_step_seconds(work, learners, loop.cores_ahead(learners), slower)
            else:
                lane = lane_first_step_seconds(self._step_estimate, learners, loop.cores_ahead(learners), slower)
                first_turn = still_ahead(lane, self._joined_at, now)
        elif self._alone() and loop.turn_wall is not None and loop.intake_wall is not None:
            first_turn = still_ahead(lone_first_turn_seconds(loop.turn_wall, loop.intake_wall), self._joined_at, now)
        else:
            first_turn = self._first_turn_ahead(now, self._joining_company())
        preparation = self._preparation_ahead(now)
        if self._with_builder:
            wait = self.slots.builder.wait(self)
            if wait is None or wait.seconds_left is None:  # not in its group yet (or just out of it): not known
                return None
            return wait.seconds_left + first_point_seconds(0, 0.0, preparation, first_turn)
        builds = 0.0
        if self._builds and self._status != "training":  # its warm starts, in tiny-model steps, as a group of one
            if self._status != "queued" or self.slots.builder.busy:
                # About to join a group whose size and start are not known yet: one that forms behind the builder's
                # work, or the one it opens, which the classmates who clicked with it join (a class's runs whose
                # pages drew before their threads reached the idle builder were told under 3 s for 17-18 s).
                return None
            builds = sum(n * f for _, n, f in self._builds)
        own = first_point_seconds(builds, self.slots.builder.seed_step_seconds, preparation, first_turn)
        if self._status == "queued":
            wait = self.slots.wait_estimate(self)
            return None if wait is None else wait + own
        return own

    def _in_lane(self) -> bool:
        """Whether it steps in a lane of its own (`RunLoop.steps_in_lane`): its step's estimate is more than a turn
        and far more than the loop's runs' steps (once it joined, whether the loop put it in one)."""
        return self.slots.loop.steps_in_lane(self._step_estimate, self._trainer)

    def _joining_company(self) -> int | None:
        """The runs that join the loop with it, itself included: those preparing (itself among them until it joins)
        and those that joined and await their first record; as counted when it joined, once it has; None while
        queued (who it will join with is not known)."""
        if self._company is not None:
            return self._company
        if self._status == "queued":
            return None
        return self.slots.preparing.count + (self._preparation is None) + self.slots.loop.awaiting_first

    def _alone(self) -> bool:
        """Whether the run goes into the loop by itself (under the lock): it has its place and no other run is
        preparing with it; a run with the builder joins with its group, a queued one with whoever gets places then."""
        others = self.slots.preparing.count - (self._preparation is not None)
        return self._status != "queued" and not self._with_builder and others == 0

    def chat_models(self) -> ChatModels | None:
        """The ended run's policy and reference to talk to; None while it runs, if it never trained a step, or
        once the server has let them go (`KEPT_MODELS`)."""
        return KEPT_MODELS.get(self)

    def probe(self) -> tuple[Probe | None, list[tuple[int, list[float]]]]:
        """The run's probe and its probabilities by step, step 0 being the policy before RL."""
        with self._lock:
            if self._probe is None:
                return None, []
            steps = [(r["step"], r["probabilities"]) for r in self._probe_steps.records]
            return self._probe, [(0, self._probe_start), *steps]

    # ------------------------------------------------------------------ the training thread
    def _local_trainer(self) -> Trainer | None:
        """The run's trainer in this process, or None when RLHF_LAB_RAY_ADDRESS sends it to a Ray cluster."""
        return Trainer(self.run, stop_event=self.stop_event) if cluster.ray_address() is None else None

    def _remote(self) -> Iterator[dict]:
        """The run's items (`rl_core.runs.run_stream`) from a task on the Ray cluster that RLHF_LAB_RAY_ADDRESS names:
        this thread only relays them."""
        cluster.connect(cluster.ray_address())
        return cluster.remote_stream(self.run, stopped=self.stop_event.is_set)

    def _start_probe(self, trainer: Trainer) -> None:
        """The chat's probe: one decision of a fixed prompt, read off the reference and the policy before RL."""
        temperature = self.run.algo.temperature
        probe = Probe.of(self.run.task, trainer.reference, trainer.tokenizer, trainer.max_new_tokens, temperature)
        self._set(probe=probe, probe_start=probe.probabilities(trainer.policy, temperature))

    def _probe_step(self, trainer: Trainer, step: int) -> None:
        """The probe's probabilities under the policy after `step` (the stream's clock leaves this pass out)."""
        probabilities = self._probe.probabilities(trainer.policy, self.run.algo.temperature)
        with self._lock:
            self._probe_steps.add({"step": step, "probabilities": probabilities})

    def _prepare(self) -> None:
        """Its preparation begins: it joins the runs preparing (`slots.preparing`)."""
        self._set(preparation=self.slots.preparing.enter(self.clock()))

    def _prepared(self, now: float) -> tuple[float, float]:
        """Its preparation ends at `now` (it joins the loop or the builder, or its run goes to the cluster): the
        preparation's wall seconds and its mean company (`Crowd.leave`). Each of those paths comes after a
        `_prepare`: the one on taking its place in `_work`, or the one after the builder."""
        with self._lock:
            entry, self._preparation = self._preparation, None
        if entry is None:
            raise RuntimeError("a run's preparation ended that had not begun")
        return now - entry.since, self.slots.preparing.leave(entry, now)

    def _stop_preparing(self, now: float) -> None:
        """A run that ended (failed, stopped, or trained) is no longer preparing, if it still was: it may have ended
        before its place was taken, while preparing, or after joining the loop."""
        with self._lock:
            preparing = self._preparation is not None
        if preparing:  # only this job's thread begins and ends its preparation
            self._prepared(now)

    def _set(self, **fields) -> None:
        with self._lock:
            for name, value in fields.items():
                setattr(self, f"_{name}", value)

    def _add(self, record: dict) -> None:
        scalars = {k: v for k, v in record.items() if k != "samples"}
        now = self.clock()
        with self._lock:
            # From the first record on: before it the run waited for its turn and its probe.
            if self._last_step_at is not None:
                self._step_walls.append(now - self._last_step_at)
            self._last_step_at = now
            if self._step_walls:
                # The steps still to come at the measured wall pace (a median: a first step is slow; in the live
                # loop a step comes once a turn of every run), then the evaluation.
                walls = statistics.median(self._step_walls)
                self._seconds_left = training_left(self.run.steps - record["step"], walls, self._evaluation_seconds())
            paced = statistics.median(self._step_walls) if len(self._step_walls) >= PACED_STEPS else None
            self._history.add(scalars)
            self._latest = scalars
            self._samples.add(record["step"], record.get("samples", []))
        if paced is not None and self._step_estimate > 0:
            # The server's pace now, in the loop's company, for the runs that have not stepped yet (the queue's
            # announcements): a run's estimate read off the finished runs alone was its pace with the class gone.
            self.slots.observe_speed(paced, self._step_estimate)

    def _take(self, item: dict, trainer: Trainer | None, store: RunStore, run_id: int) -> None:
        """One item of the run (`rl_core.runs.run_stream`) other than its end: setup progress, or a step's record."""
        if PHASE in item:
            self._set(phase=tuple(item[PHASE]))
        elif SETUP in item:
            self._set(status="training", phase=None, setup=item[SETUP])
            if trainer is not None:
                self._start_probe(trainer)
        else:
            self._add(item)
            if trainer is not None:
                self._probe_step(trainer, item["step"])
            store.add_step(run_id, item)
            self._within_allowance(store)

    def _within_allowance(self, store: RunStore) -> None:
        """Stop the run once its learner's runs have trained the hour's allowance: a run goes on only while its
        learner has time to spend, whether or not its page is still open."""
        if self.session is None:
            return
        try:
            self._limits.check_learner(store.training_seconds(self.session, since=time.time() - HOUR))
        except ValueError as spent:
            self._cut_short = brief(str(spent))
            self.stop_event.set()

    def _train(self, trainer: Trainer | None, store: RunStore, run_id: int) -> dict | None:
        """Train the run to its end; the evaluation after its last step (None if it stopped early).

        Here, the run is prepared in this thread and stepped in the live loop, whose thread calls `_take` with
        each record before the run's next step (the probe reads the policy then); the evaluation runs here again,
        off the loop."""
        if trainer is None:
            self._prepared(self.clock())  # prepared on the cluster, not in this server's interpreter
            final = None
            for item in self._remote():
                if END in item:
                    final = item.get("final")
                else:
                    self._take(item, None, store, run_id)
            return final
        if self._builds:  # built with the other runs' of its kind, then loaded from the cache by `prepare`
            self._prepared(self.clock())  # the builder's wait is not its preparation
            self._set(with_builder=True)
            try:
                builds = [(model, steps) for model, steps, _ in self._builds]
                self.slots.builder.build(self.run, self, builds, self.stop_event.is_set)
            finally:
                self._set(with_builder=False, builds=[])
                self._prepare()
        for item in prepared_items(trainer):
            self._take(item, trainer, store, run_id)
        joined = self.clock()
        self.slots.observe_preparation(*self._prepared(joined))
        self._set(joined_at=joined, trainer=trainer, company=self._joining_company())
        # The run spends its learner's share of the loop (a run without a session is a learner of its own).
        self.slots.loop.train(
            trainer,
            lambda record: self._take(record, trainer, store, run_id),
            learner=self.session,
            step_seconds=estimated_step_seconds(self.run),
            company=self._company,
        )
        end = end_item(trainer)
        if FAILED in end:
            raise end[FAILED]
        return end.get("final")

    def _work(self) -> None:
        status, error, final = "finished", None, None
        store = run_id = None
        try:
            # The pages refuse such runs; this holds for any caller (a link that slipped past a page).
            self._limits = ServerLimits.from_env()
            self._limits.check_run(self.run, cuda=torch.cuda.is_available())
            # Every run is kept in the run store from its request on: it outlives the session and can be compared,
            # and a server that dies while it waits leaves a queued row that the next one marks interrupted, for
            # the learner's page to say so.
            store = RunStore()
            run_id = store.add_run(
                self.run,
                self.label or f"{self.run.algo.name} · live lab",
                self.settings,
                session=self.session,
                page=self.page,
                page_run=self.number if self.page else None,
            )
            with self.slots.hold(self.stop_event, ticket=self, seconds_left=self.seconds_left) as acquired:
                if acquired:
                    self._set(status="preparing")
                    self._prepare()
                    # The cap holds across processes sharing the store: another server, a command-line sweep.
                    if not self.slots.claim(store, run_id, self.stop_event.is_set):
                        raise TrainingStopped("stopped while other processes' runs held the training cap")
                    trainer = self._local_trainer()
                    final = self._train(trainer, store, run_id)
                    # A run trained on a cluster has no models here; one that never stepped has nothing to say.
                    if trainer is not None and self._last_step_at is not None:
                        KEPT_MODELS.keep(self, ChatModels.of(trainer))
        except TrainingStopped:
            pass
        except RunInterrupted as exc:  # its Ray worker or node went away: the learner can train it again
            status, error = "interrupted", brief(str(exc))
        except Exception as exc:  # noqa: BLE001 - whatever fails, the page shows its message, never a traceback
            status, error = "failed", brief(f"{type(exc).__name__}: {exc}")
        if status == "finished" and self.stop_event.is_set():
            status, error = "stopped", self._cut_short
        if run_id is not None:
            try:
                store.finish_run(run_id, status, final=final, error=error)
            except Exception as exc:  # noqa: BLE001 - a full disk, say: the job must still end and show why
                status, error = "failed", error or brief(f"the run store could not record the run's end: {exc}")
            finally:
                self.slots.release(store, run_id)
        self._stop_preparing(self.clock())
        self.slots.withdraw(self)
        self._set(status=status, error=error, phase=None, ended=self.clock())


_upkeep_begun = threading.Event()


def start_server_upkeep() -> list[int]:
    """Once per server process, at its first page: the runs a dead server left queued or running are marked
    interrupted at once (`RunStore.recover`; the learners' pages then say so), and a heartbeat keeps this
    process's own queued and running rows fresh, so that no other process takes a long wait for a dead one.
    Returns the ids it marked."""
    if _upkeep_begun.is_set():
        return []
    _upkeep_begun.set()
    try:
        store = RunStore(recover=False)
        lost = store.recover()
    except StoreError:
        return []  # each run will fail on the store, and say why
    Heartbeat(store).start()
    return lost


_warm_start_begun = threading.Event()


def warm_default_start(run: RunConfig) -> None:
    """Build the default run's SFT policy (and reward model) once per server process, in the background.

    The first Train of a fresh install then loads a cached checkpoint instead of spending seconds on the SFT
    warm start while the learner waits for the first chart point. RLHF_LAB_WARM_START=0 turns it off."""
    if _warm_start_begun.is_set() or os.environ.get("RLHF_LAB_WARM_START") == "0":
        return
    _warm_start_begun.set()
    threading.Thread(target=lambda: Trainer(run).prepare(), name="sft-warm-start", daemon=True).start()
