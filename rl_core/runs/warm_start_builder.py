"""The live lab's SFT warm starts, built by one builder a group at a time, so that every wait it announces is one it
can know.

Warm starts built each in its own thread share one interpreter: every classmate who pressed Train a second later
slowed every warm start already building, and an announcement made at the click could not know them (0.33 to 0.67
of the real wait in a class of twenty, bench/class_load.py). Here a run whose warm starts the cache lacks joins the
group of its kind (`sweep.warm_start_kind`: the seeds of one task, model, noise and SFT steps) that is still
forming, or opens a new one; the builder takes the groups in the order they opened and trains each as one
vectorised group (`sweep.warm_starts`, as a sweep does: far less than its runs one by one), in a worker process of
its own (`warm_start_worker.build_in_worker`), so it does not share the server's GIL. A group is closed when it
starts, so a later click never joins, and never slows, a group under way.

A run's wait is then known from work already committed: while its group builds, the steps left at the group's own
pace and the success checks after them; while its group forms, the builder's time left on the group under way
(when that is the only one ahead), without a number for its own group, which may still grow.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from rl_core.config import RunConfig
from rl_core.engine.pretrained import is_preset
from rl_core.runs.first_point import CHECK_SFT_STEPS, PACED_AFTER, STEADY_PACE
from rl_core.runs.limits import SFT_STEP_SECONDS, model_factor
from rl_core.runs.sweep import warm_start_kind
from rl_core.runs.warm_start_worker import Build, build_in_worker
from rl_core.runs.workers import start_worker_server


@dataclass(frozen=True)
class WarmStartWait:
    """Where a run stands with the builder, for its page."""

    runs: int  # runs in its group (itself included)
    groups_ahead: int  # groups the builder trains before its own (the one under way included); 0: its own builds
    done: int  # its group's steps done (0 while it forms)
    total: int  # its group's steps in all
    seconds_left: float | None  # until its group's warm starts are ready; None while unknown (forming, unpaced)
    free_in: float | None  # forming: seconds until the builder is free for its group, when that is known


@dataclass(eq=False)
class _Group:
    kind: Hashable
    members: dict[object, RunConfig] = field(default_factory=dict)  # ticket → its run, in arrival order
    stops: dict[object, Callable[[], bool]] = field(default_factory=dict)  # ticket → whether its run was stopped
    builds: set[tuple[str, int]] = field(default_factory=set)  # (model, SFT steps) of every warm start it trains
    started: bool = False
    done: int = 0  # steps over all its sub-groups (a policy's, then a teacher's)
    _last: int = 0  # the latest `on_step` count, which restarts at each sub-group
    stepped_at: list[tuple[int, float]] = field(default_factory=list)  # (steps done, when) at each `on_step`
    paced: bool = False  # its pace has been steady once (`steady_pace`): its number stays from then on
    ended: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    @property
    def total(self) -> int:
        return sum(steps for _, steps in self.builds)

    @property
    def seeds(self) -> int:
        return len({run.seed for run in self.members.values()})

    @property
    def last_step_at(self) -> float:
        return self.stepped_at[-1][1]

    def stepped(self, done: int, now: float) -> None:
        """`on_step(done)` of `sweep.warm_starts`: `done` counts from 1 in each sub-group, 0 while waiting."""
        self.done += done - self._last if done >= self._last else done
        self._last = done
        if done == 0:
            return
        self.stepped_at.append((self.done, now))


def steady_pace(stepped_at: Sequence[tuple[int, float]], tolerance: float = STEADY_PACE) -> bool:
    """Whether a group's steps `(steps done, when)`, from its first, kept one pace: the seconds a step of the steps
    up to the first point at or past half of them, and of the steps after it, within `tolerance`× of each other
    (either half without steps or without time: not known to differ, steady)."""
    (first_done, first_at), (last_done, last_at) = stepped_at[0], stepped_at[-1]
    middle = next(point for point in stepped_at if point[0] - first_done >= (last_done - first_done) / 2)
    if middle[0] in (first_done, last_done):
        return True
    earlier = (middle[1] - first_at) / (middle[0] - first_done)
    later = (last_at - middle[1]) / (last_done - middle[0])
    if min(earlier, later) <= 0:
        return earlier == later
    return max(earlier, later) / min(earlier, later) <= tolerance


def group_seconds_left(steps_left: int, step: float, check_steps: float) -> float:
    """Seconds until a group's warm starts are ready: its steps left, then its seeds' success checks and
    checkpoints, which take `check_steps` of its steps (CHECK_SFT_STEPS until a group here measured them), at `step`
    seconds a step: (steps_left + check_steps) × step."""
    return (steps_left + check_steps) * step


class WarmStartBuilder:
    """One thread that trains the pending warm starts of the live lab, group by group in the order they opened.

    `build(run, ticket, builds, stopped)` blocks the caller (a run's thread) until the run's warm starts are in the
    cache; `wait(ticket)` says where that run stands. `build_group(runs, cache_dir, stopped, on_step)` trains (or
    finds cached) a group's warm starts in `cache_dir`: `sweep.warm_starts` in a worker process (`build_in_worker`: a
    core of its own, outside the server's GIL; injectable for tests); `clock` is the monotonic clock its paces are
    read on."""

    def __init__(
        self,
        cache_dir=None,
        build_group: Build | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        if build_group is None:
            start_worker_server()  # its engine import starts now, not at the first Train click
        self._cache_dir = cache_dir
        self._build = build_group or build_in_worker
        self._clock = clock
        self._lock = threading.Condition()
        self._groups: list[_Group] = []  # the group under way (started) first, then the forming ones in order
        self._thread: threading.Thread | None = None
        # The latest group's step per seed (tiny-model seconds), what a run not yet with the builder is told, and
        # its checks' seconds in its steps: a group's checks and steps both grow with its seeds.
        self._seed_step = SFT_STEP_SECONDS
        self._check_steps = CHECK_SFT_STEPS

    @property
    def busy(self) -> bool:
        """Whether a group builds or forms: a run that comes now joins a group whose start and size are not known."""
        with self._lock:
            return bool(self._groups)

    @property
    def seed_step_seconds(self) -> float:
        """Seconds of one seed's SFT step of the tiny model in the latest group built here (or the estimate)."""
        with self._lock:
            return self._seed_step

    def build(
        self, run: RunConfig, ticket: object, builds: Sequence[tuple[str, int]], stopped: Callable[[], bool]
    ) -> None:
        """Have `run`'s warm starts `builds` ((model, SFT steps) the cache lacks) built, in the forming group of its
        kind; return once they are, or at once when `stopped()` turns true (a group under way goes on while any of
        its runs is not stopped). Raises what the group's build raised."""
        with self._lock:
            group = self._forming(run)
            group.members[ticket] = run
            group.stops[ticket] = stopped
            group.builds.update(builds)
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="warm-start-builder", daemon=True)
                self._thread.start()
            self._lock.notify_all()
        try:
            while not group.ended.wait(0.1):
                if stopped():
                    return
        finally:
            with self._lock:
                if not group.started:
                    group.members.pop(ticket, None)
                    group.stops.pop(ticket, None)
                    if not group.members:
                        self._groups.remove(group)
        if group.error is not None:
            raise group.error

    def _forming(self, run: RunConfig) -> _Group:
        """The group not yet started that `run` joins (under the lock): its kind's, else a new one. A loaded model's
        seeds train one to a group: `check_fits` sized one copy of its weights and moments."""
        kind = warm_start_kind(run)
        if is_preset(run.model):
            for group in self._groups:
                if not group.started and group.kind == kind:
                    return group
        group = _Group(kind)
        self._groups.append(group)
        return group

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._groups:
                    self._thread = None
                    return
                group = self._groups[0]
                group.started = True  # closed: a later run of its kind opens the next group
            self._train(group)

    def _train(self, group: _Group) -> None:
        """Build a started group's warm starts; its runs read the outcome once `ended` is set."""
        with self._lock:
            runs, stops = list(group.members.values()), list(group.stops.values())
        try:
            self._build(runs, self._cache_dir, lambda: all(s() for s in stops), lambda done: self._stepped(group, done))
        except Exception as error:  # noqa: BLE001 - each of its runs raises it in its own thread
            group.error = error
        with self._lock:
            self._learn(group)
            self._groups.remove(group)
        group.ended.set()

    def _stepped(self, group: _Group, done: int) -> None:
        with self._lock:
            group.stepped(done, self._clock())

    def _learn(self, group: _Group) -> None:
        """The paces later announcements start from, from a group that has ended (under the lock)."""
        step = self._step(group)
        if step is None or group.error is not None:
            return
        self._seed_step = step / group.seeds / max(model_factor(model) for model, _ in group.builds)
        self._check_steps = (self._clock() - group.last_step_at) / step

    def _step(self, group: _Group) -> float | None:
        """A group's own seconds a step, once it has taken PACED_AFTER steps since its first."""
        if not group.stepped_at:
            return None
        (first_done, first_at), (last_done, last_at) = group.stepped_at[0], group.stepped_at[-1]
        if last_done - first_done < PACED_AFTER:
            return None
        return (last_at - first_at) / (last_done - first_done)

    def _left(self, group: _Group) -> float | None:
        """Seconds until a started group ends, from its own pace; None before it has one, and until that pace has
        been steady (`steady_pace`): a pace still changing gives the page no number, only its step count."""
        step = self._step(group)
        if step is None:
            return None
        group.paced = group.paced or steady_pace(group.stepped_at)
        if not group.paced:
            return None
        ends = group.last_step_at + group_seconds_left(max(group.total - group.done, 0), step, self._check_steps)
        return max(ends - self._clock(), 0.0)

    def wait(self, ticket: object) -> WarmStartWait | None:
        """Where `ticket`'s run stands with the builder; None if it is not waiting for it."""
        with self._lock:
            place = next((i for i, g in enumerate(self._groups) if ticket in g.members), None)
            if place is None:
                return None
            group = self._groups[place]
            if group.started:
                return WarmStartWait(len(group.members), 0, group.done, group.total, self._left(group), None)
            under_way = self._groups[0] if self._groups[0].started else None
            # Known only when the group under way is the only one ahead: a forming group ahead may still grow.
            free_in = self._left(under_way) if under_way is not None and place == 1 else None
            if under_way is None and place == 0:
                free_in = 0.0
            return WarmStartWait(len(group.members), place, 0, group.total, None, free_in)
