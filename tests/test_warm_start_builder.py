"""The live lab's warm-start builder: groups of one kind in the order they opened, each closed when it starts, and
waits announced only from work already committed, at the group's own pace (a clock the test sets)."""

import multiprocessing
import os
import queue
import threading

import pytest

from rl_core.algorithms import get_preset
from rl_core.config import RunConfig
from rl_core.engine.trainer import TrainingStopped
from rl_core.runs.warm_start_builder import WarmStartBuilder, WarmStartWait, group_seconds_left, steady_pace
from rl_core.runs.warm_start_worker import build_in_worker
from ui.dashboard import warm_start_line

WAIT_S = 10  # the longest a test waits for the builder's thread to get somewhere (it never should)
START_S = 120  # the longest a test waits for a worker to start: the fork server's first start imports the engine


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Builds:
    """A stand-in for `sweep.warm_starts` that the test steps: each call hands the test its runs, its `on_step`
    and an event that ends it."""

    def __init__(self):
        self.calls: queue.Queue = queue.Queue()
        self.error: Exception | None = None

    def __call__(self, runs, cache_dir, stopped, on_step) -> None:
        release = threading.Event()
        self.calls.put(([run.seed for run in runs], on_step, release))
        while not release.wait(0.01):
            if stopped():
                raise TrainingStopped("stopped during the SFT warm start")
        if self.error is not None:
            raise self.error

    def next(self):
        return self.calls.get(timeout=WAIT_S)


def run(seed: int, task: str = "caesar") -> RunConfig:
    return RunConfig(algo=get_preset("grpo"), task=task, steps=10, seed=seed, sft_steps=50)


class Waiting:
    """A run's thread blocked in `builder.build`; `error` is what it raised."""

    def __init__(self, builder: WarmStartBuilder, config: RunConfig):
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._build, args=(builder, config), daemon=True)
        self.thread.start()

    def _build(self, builder, config):
        try:
            builder.build(config, self, [("tiny", config.sft_steps)], self.stop.is_set)
        except BaseException as error:  # noqa: BLE001 - the test reads it
            self.error = error

    def done(self) -> bool:
        self.thread.join(WAIT_S)
        return not self.thread.is_alive()


def wait_until(condition) -> None:
    done = threading.Event()
    for _ in range(WAIT_S * 100):
        if condition():
            return
        done.wait(0.01)
    raise AssertionError("the builder never got there")


def test_a_groups_time_left_is_its_steps_and_checks_at_its_own_pace():
    # 43 steps and the checks' 3 at 1 s a step; finished steps, checks left: 3 s.
    assert group_seconds_left(43, 1.0, 3.0) == pytest.approx(46.0)
    assert group_seconds_left(0, 0.5, 3.0) == pytest.approx(1.5)


def test_a_pace_is_steady_when_the_earlier_and_later_half_of_the_steps_took_about_as_long_a_step():
    assert steady_pace([(1, 0.0), (2, 1.0), (3, 2.0), (4, 3.0), (5, 4.0), (6, 5.0)])  # 1 s a step throughout
    # Middle at 4 steps (3 of 5 done): 7 s for 3 steps (2.33 s) against 2 s for 2 (1 s): not steady.
    assert not steady_pace([(1, 0.0), (2, 3.0), (3, 6.0), (4, 7.0), (5, 8.0), (6, 9.0)])
    # 2.5 s for 2 steps (1.25 s) against 2 s for 2 (1 s): at the tolerance, steady; just past it, not.
    assert steady_pace([(1, 0.0), (3, 2.5), (5, 4.5)])
    assert not steady_pace([(1, 0.0), (3, 2.6), (5, 4.6)])
    assert not steady_pace([(1, 0.0), (3, 2.0), (5, 4.6)])  # later steps slower: 1.3 s against 1 s
    # A jump from one count to the last has no later half to compare; steps that took no time compare as equal.
    assert steady_pace([(1, 100.0), (7, 106.0)])
    assert steady_pace([(1, 5.0), (2, 5.0), (3, 5.0)])
    assert not steady_pace([(1, 5.0), (2, 5.0), (3, 6.0)])


def test_a_groups_number_waits_for_a_steady_pace_and_then_stays():
    clock, builds = Clock(), Builds()
    builder = WarmStartBuilder(build_group=builds, clock=clock)
    waiting = Waiting(builder, run(0))
    _, on_step, release = builds.next()
    on_step(1)
    for done, at in ((2, 103.0), (3, 106.0), (4, 107.0), (5, 108.0), (6, 109.0)):
        clock.now = at
        on_step(done)  # two slow steps (3 s), then 1 s a step: 2.33 s against 1 s a step, no number
    assert builder.wait(waiting) == WarmStartWait(1, 0, 6, 50, None, None)
    # 1 s a step on: at step d the middle is the first count at or past half of the d − 1 steps, m = ⌈(d + 1)/2⌉,
    # whose earlier half took (m + 3)/(m − 1) s a step against the later's 1 s: within 1.25× from m = 17, d = 32.
    for done in range(7, 33):
        clock.now += 1.0
        on_step(done)
        if done < 32:
            assert builder.wait(waiting).seconds_left is None, done
    # 35 s for 31 steps since the first; 18 steps left and the 3 steps of checks.
    assert builder.wait(waiting).seconds_left == pytest.approx(21 * 35 / 31)
    clock.now += 20.0
    on_step(33)  # one step of 20 s: the halves differ again, and the number stays (at the pace it now has)
    assert builder.wait(waiting).seconds_left == pytest.approx(20 * 55 / 32)
    release.set()
    assert waiting.done() and waiting.error is None


def test_groups_build_in_the_order_they_opened_each_closed_when_it_starts_with_waits_from_committed_work():
    clock, builds = Clock(), Builds()
    builder = WarmStartBuilder(build_group=builds, clock=clock)
    first = Waiting(builder, run(0))
    seeds, on_step, release_first = builds.next()  # alone: its group starts at once, closed
    assert seeds == [0]
    second, third = Waiting(builder, run(1)), Waiting(builder, run(2))
    other_kind = Waiting(builder, run(0, task="reverse"))
    wait_until(lambda: builder.wait(other_kind) is not None)
    wait_until(lambda: builder.wait(third) is not None and builder.wait(third).runs == 2)
    # Nothing is known of the group under way before its PACED_AFTER steps; the forming group has no number.
    assert builder.wait(first) == WarmStartWait(1, 0, 0, 50, None, None)
    assert builder.wait(second) == WarmStartWait(2, 1, 0, 50, None, None)
    on_step(1)
    clock.now = 106.0
    on_step(7)  # 6 steps in 6 s: 1 s a step; 43 left and 3 of checks
    assert builder.wait(first) == WarmStartWait(1, 0, 7, 50, 46.0, None)
    assert builder.wait(third) == WarmStartWait(2, 1, 0, 50, None, 46.0)  # only the group under way ahead
    assert builder.wait(other_kind) == WarmStartWait(1, 2, 0, 50, None, None)  # a forming group ahead may grow
    clock.now = 110.0
    assert builder.wait(first).seconds_left == pytest.approx(42.0)  # counting down between steps
    clock.now = 149.0
    on_step(50)
    clock.now = 153.0  # its check took 4 s: 4 of its 1 s steps
    release_first.set()
    seeds, on_step, release = builds.next()
    assert seeds == [1, 2] and first.done() and first.error is None
    assert builder.seed_step_seconds == pytest.approx(1.0)  # 1 s a step, one seed, the tiny model
    late = Waiting(builder, run(3))  # the group of its kind is under way: it opens the next one, after reverse
    wait_until(lambda: builder.wait(late) is not None)
    assert builder.wait(late) == WarmStartWait(1, 2, 0, 50, None, None)
    assert builder.wait(second).runs == 2  # the latecomer did not join a group under way
    on_step(1)
    clock.now = 163.0
    on_step(6)  # 2 s a step: 44 left, then 4 steps of checks as measured
    assert builder.wait(second).seconds_left == pytest.approx((44 + 4) * 2.0)
    release.set()
    assert builds.next()[0] == [0]  # reverse, opened before the latecomer
    assert second.done() and third.done()


def test_a_stopped_run_leaves_a_forming_group_and_a_failed_build_fails_every_run_of_its_group():
    builds = Builds()
    builder = WarmStartBuilder(build_group=builds, clock=Clock())
    first = Waiting(builder, run(0))
    _, _, release_first = builds.next()
    leaving, staying = Waiting(builder, run(1)), Waiting(builder, run(2))
    wait_until(lambda: (builder.wait(staying) or builder.wait(leaving)).runs == 2)
    leaving.stop.set()
    assert leaving.done() and leaving.error is None
    assert builder.wait(leaving) is None and builder.wait(staying).runs == 1
    builds.error = ValueError("the disk is full")
    release_first.set()
    assert first.done() and isinstance(first.error, ValueError)
    seeds, _, release = builds.next()
    assert seeds == [2]  # without the stopped run
    release.set()
    assert staying.done() and str(staying.error) == "the disk is full"


def test_a_page_says_what_its_warm_start_waits_for_and_a_number_only_once_its_group_builds():
    assert warm_start_line(WarmStartWait(3, 0, 10, 50, 46.0, None), "about 49 s to its first point") == (
        0.2,
        "Building the warm start as one group with 2 other runs: SFT step 10/50, about 49 s to its first point",
    )
    assert warm_start_line(WarmStartWait(1, 0, 2, 50, None, None), "") == (
        0.04,
        "Building the warm start: SFT step 2/50",
    )
    assert warm_start_line(WarmStartWait(2, 1, 0, 50, None, 12.4), "") == (
        0.0,
        "Waiting to build the warm start as one group with 1 other run: the builder is free for it in about 12 s",
    )
    assert warm_start_line(WarmStartWait(1, 2, 0, 50, None, None), "") == (
        0.0,
        "Waiting to build the warm start: after 2 groups of other warm starts",
    )


def test_a_real_group_trains_in_a_worker_process_and_its_steps_and_errors_come_back(tmp_path):
    """The builder's default build: `sweep.warm_starts` in a worker forked from the fork server, not this process."""
    steps, trainers = [], []

    def on_step(done: int) -> None:
        steps.append(done)
        trainers.extend(p.pid for p in multiprocessing.active_children() if p.name == "warm-start-worker")

    group = [RunConfig(algo=get_preset("grpo"), task="caesar", steps=2, seed=seed, sft_steps=3) for seed in (0, 1)]
    build_in_worker(group, tmp_path / "cache", lambda: False, on_step)
    assert steps == [1, 2, 3]  # the group's three SFT steps, as one vectorised group of both seeds
    assert trainers and os.getpid() not in trainers
    assert len(list((tmp_path / "cache").rglob("model.safetensors"))) == 2  # each seed's checkpoint, in the cache here
    with pytest.raises(TrainingStopped):  # every run stopped: the worker stops at its first step
        stopping = RunConfig(algo=get_preset("grpo"), task="caesar", steps=2, seed=0, sft_steps=4)
        build_in_worker([stopping], tmp_path / "cache", lambda: True, on_step)
    assert steps == [1, 2, 3] and not list((tmp_path / "cache").rglob("*steps4"))
    (tmp_path / "a file").write_text("")
    with pytest.raises(Exception, match="a file"):  # the worker's error, raised here
        build_in_worker(group, tmp_path / "a file", lambda: False, on_step)


def blocking_phase(runs, cache_dir, stopped, on_step) -> None:
    """A stand-in for `sweep.warm_starts` in a phase without steps (a reward model's fit, a success check): it says
    it has begun, then never looks at its stop."""
    on_step(0)
    threading.Event().wait()


class CountedClock(Clock):
    """A clock the test sets that counts its readings."""

    def __init__(self):
        super().__init__()
        self.readings = 0

    def __call__(self) -> float:
        self.readings += 1
        return self.now


def test_a_worker_stopped_in_a_phase_without_steps_is_terminated_once_its_grace_is_over_and_reported_stopped():
    clock, begun, stop, outcome = CountedClock(), threading.Event(), threading.Event(), {}
    workers = []

    def on_step(done: int) -> None:
        workers.extend(p for p in multiprocessing.active_children() if p.name == "warm-start-worker")
        begun.set()

    def build() -> None:
        try:
            build_in_worker([run(0)], None, stop.is_set, on_step, clock=clock, build=blocking_phase)
        except BaseException as error:  # noqa: BLE001 - the test reads it
            outcome["error"] = error

    thread = threading.Thread(target=build, daemon=True)
    thread.start()
    assert begun.wait(START_S)  # the worker is in its phase without steps
    stop.set()  # every run of the group stopped, at 100 s on the clock
    wait_until(lambda: clock.readings >= 3)  # the stop asked, and the grace read twice since: not over yet
    assert thread.is_alive() and workers[0].is_alive()
    clock.now += 1.1  # a second (and a little) after the stop: its grace is over
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert isinstance(outcome.get("error"), TrainingStopped)  # its runs are told they were stopped
    assert not workers[0].is_alive()
