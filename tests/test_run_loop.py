"""The one loop that steps a changing set of runs (`rl_core.runs.run_loop`), with stand-in trainers whose steps only
log themselves: the order of steps, a run joining between turns, and each run ending on its own."""

import os
import threading
import time
from types import SimpleNamespace

import pytest
import torch

import rl_core.runs.run_loop
from rl_core.engine.run_batch import step_together
from rl_core.runs.run_loop import (
    CHOICE_RETRY_TURNS,
    CORES_TIMED,
    MIN_THREADED_RUNS,
    THREADS_KNOB,
    LanePacer,
    RunLoop,
    ThreadsChoice,
    _Account,
    _Member,
    choose_turn,
    first_wait,
    goes_to_lane,
    lane_pause,
    loop_threads,
    returns_from_lane,
    step_on_threads,
    works_on_its_thread,
)


class Counting:
    """A trainer's surface as the loop uses it: `step_index`, `run.steps`, `stop_event`, and the group interface of a
    run that samples nothing, as one fitted to preference pairs (`group_key`, `step_group`), each run a group of its
    own. Its step logs `(name, step)`; `fail_at` makes it raise."""

    def __init__(
        self, name: str, steps: int, log: list, fail_at: int | None = None, cost: float = 0.0, shape: object = None
    ):
        self.name, self.log, self.fail_at, self.cost, self.shape = name, log, fail_at, cost, shape
        self.run = SimpleNamespace(steps=steps)
        self.step_index = 0
        self.stop_event = threading.Event()

    def group_key(self):
        return (id(self),) if self.shape is None else (self.shape,)  # `shape`: one group with the runs of that shape

    @classmethod
    def step_group(cls, trainers):
        return [trainer.step() for trainer in trainers]

    def step(self):
        if self.step_index + 1 == self.fail_at:
            raise FloatingPointError(f"{self.name} diverged")
        self.step_index += 1
        self.log.append((self.name, self.step_index))
        return {"step": self.step_index}


class Noting(Counting):
    """A `Counting` that appends `(its name, the thread's name)` to `threads` for each of its steps."""

    def __init__(self, name: str, steps: int, log: list, threads: list, cost: float = 0.0):
        super().__init__(name, steps, log, cost=cost)
        self.threads = threads

    def step(self):
        self.threads.append((self.name, threading.current_thread().name))
        return super().step()


def train_in_thread(
    loop: RunLoop,
    trainer: Counting,
    on_record=None,
    outcome: dict | None = None,
    learner=None,
    step_seconds: float = 0.0,
    company: int | None = None,
) -> dict:
    """Start `loop.train(trainer)` (for `learner`, its step estimated at `step_seconds`, joining with `company`) in
    a thread; what it returned or raised and the records it was handed land in `outcome` (a new dict unless given),
    which is returned."""
    outcome = {} if outcome is None else outcome
    outcome["records"] = []

    def target():
        def take(record):
            outcome["records"].append(record)
            if on_record is not None:
                on_record(record)

        try:
            loop.train(trainer, take, learner=learner, step_seconds=step_seconds, company=company)
            outcome["ended"] = "returned"
        except Exception as error:  # noqa: BLE001 - what the caller of train() sees
            outcome["ended"] = error

    outcome["thread"] = threading.Thread(target=target, daemon=True)
    outcome["thread"].start()
    return outcome


def waiting_for_runs(loop: RunLoop, runs: int) -> None:
    while loop.runs < runs:
        time.sleep(0.001)


def joined(*outcomes: dict) -> None:
    for outcome in outcomes:
        outcome["thread"].join(10)
        assert not outcome["thread"].is_alive()


def joining_at(step: int, loop: RunLoop, trainer: Counting, then=None) -> tuple[dict, callable]:
    """An `on_record` for a first run that has `trainer` join the loop during its turn `step` (it is in the
    loop's list of joining runs before that turn ends), then calls `then(record)` if given; and the dict that
    `train_in_thread` fills for the joining run."""
    later: dict = {}

    def on_record(record):
        if record["step"] == step:
            train_in_thread(loop, trainer, outcome=later)
            waiting_for_runs(loop, 2)
        if then is not None:
            then(record)

    return later, on_record


def test_a_run_that_joins_during_a_turn_steps_in_the_next_and_the_runs_then_alternate():
    loop, log = RunLoop(), []
    later, on_record = joining_at(2, loop, Counting("B", 3, log))
    a = train_in_thread(loop, Counting("A", 5, log), on_record)
    joined(a)
    joined(later)
    assert log == [("A", 1), ("A", 2), ("A", 3), ("B", 1), ("A", 4), ("B", 2), ("A", 5), ("B", 3)]
    assert a["ended"] == later["ended"] == "returned"
    assert [r["step"] for r in later["records"]] == [1, 2, 3]


def test_a_records_elapsed_sums_its_own_step_times():
    loop, log = RunLoop(), []
    a = train_in_thread(loop, Counting("A", 4, log))
    joined(a)
    times = [r["step_time"] for r in a["records"]]
    assert [r["elapsed"] for r in a["records"]] == pytest.approx([sum(times[: i + 1]) for i in range(4)])


def test_a_run_whose_step_raises_ends_alone_and_its_caller_gets_the_error():
    loop, log = RunLoop(), []
    steady = Counting("A", 6, log)
    b, on_record = joining_at(1, loop, Counting("B", 6, log, fail_at=3))
    a = train_in_thread(loop, steady, on_record)
    joined(a)
    joined(b)
    assert isinstance(b["ended"], FloatingPointError) and str(b["ended"]) == "B diverged"
    assert a["ended"] == "returned" and steady.step_index == 6
    assert log == [("A", 1), ("A", 2), ("B", 1), ("A", 3), ("B", 2), ("A", 4), ("A", 5), ("A", 6)]


def test_a_consumer_that_raises_ends_its_run_only():
    loop, log = RunLoop(), []

    def full_store(record):
        if record["step"] == 2:
            raise OSError("the run store is full")

    b, on_record = joining_at(1, loop, Counting("B", 4, log), then=full_store)
    a = train_in_thread(loop, Counting("A", 4, log), on_record)
    joined(a)
    joined(b)
    assert isinstance(a["ended"], OSError) and b["ended"] == "returned"
    assert log == [("A", 1), ("A", 2), ("B", 1), ("B", 2), ("B", 3), ("B", 4)]


def test_stop_of_one_run_leaves_the_other_stepping():
    loop, log = RunLoop(), []
    stopped = Counting("A", 100, log)

    def stop_after_two(record):
        if record["step"] == 2:
            stopped.stop_event.set()

    b, on_record = joining_at(1, loop, Counting("B", 5, log), then=stop_after_two)
    a = train_in_thread(loop, stopped, on_record)
    joined(a)
    joined(b)
    assert a["ended"] == b["ended"] == "returned"
    assert log == [("A", 1), ("A", 2), ("B", 1), ("B", 2), ("B", 3), ("B", 4), ("B", 5)]


def test_a_fault_of_the_loop_itself_ends_every_run_in_it(monkeypatch):
    def broken(*args):
        raise MemoryError("out of memory")

    monkeypatch.setattr(rl_core.runs.run_loop, "choose_turn", broken)
    loop, log = RunLoop(), []
    a = train_in_thread(loop, Counting("A", 3, log))
    joined(a)
    assert isinstance(a["ended"], MemoryError) and loop.runs == 0


def test_the_thread_ends_with_its_last_run_and_the_next_run_starts_another():
    loop, log = RunLoop(), []
    joined(train_in_thread(loop, Counting("A", 2, log)))
    assert loop.runs == 0
    b = train_in_thread(loop, Counting("B", 2, log))
    joined(b)
    assert b["ended"] == "returned" and log == [("A", 1), ("A", 2), ("B", 1), ("B", 2)]


@pytest.fixture
def declared_costs(monkeypatch):
    """Each step costs its trainer's `cost` seconds, whatever the clock says: the loop's accounts see round
    numbers."""

    def costed(runs):
        outcomes = step_together(runs)
        for run, outcome in zip(runs, outcomes):
            if isinstance(outcome, dict):
                outcome["step_time"] = run.cost
        return outcomes

    monkeypatch.setattr(rl_core.runs.run_loop, "step_together", costed)


def test_a_learner_with_three_runs_steps_as_often_as_a_learner_with_one(declared_costs):
    # Two learners share a 1 s turn: 0.5 s each. Every step costs 0.5 s, so each learner steps one run a turn,
    # X's three in rotation: after six turns X's runs have two steps each and Y's one run six. (Estimated at 0 s,
    # X's three would all step in X's first turn and X would then sit out two.)
    loop, log = RunLoop(turn_seconds=1.0), []
    stepped, others_in = threading.Event(), threading.Event()

    def hold_the_loop(record):  # Y0's first turn is its own; the others join while it is held
        stepped.set()
        others_in.wait(10)

    first = train_in_thread(loop, Counting("Y0", 1, log, cost=0.5), hold_the_loop, learner="Y", step_seconds=0.5)
    stepped.wait(10)
    runs = [Counting(f"X{i}", 2, log, cost=0.5) for i in range(3)] + [Counting("Y", 6, log, cost=0.5)]
    outcomes = []
    for n, run in enumerate(runs):  # one at a time, so that they join in this order
        outcomes.append(train_in_thread(loop, run, learner=run.name[0], step_seconds=0.5))
        waiting_for_runs(loop, n + 2)
    others_in.set()
    joined(first, *outcomes)
    assert log == [
        ("Y0", 1),
        ("X0", 1),
        ("Y", 1),
        ("X1", 1),
        ("Y", 2),
        ("X2", 1),
        ("Y", 3),
        ("X0", 2),
        ("Y", 4),
        ("X1", 2),
        ("Y", 5),
        ("X2", 2),
        ("Y", 6),
    ]


def test_a_learner_whose_steps_cost_twice_its_share_steps_every_other_turn(declared_costs):
    # Shares of 0.5 s: C's 1 s step leaves it 0.5 s in debt, so it sits out the next turn; D's 0.5 s steps go on.
    loop, log = RunLoop(turn_seconds=1.0), []
    c, on_record = joining_at(1, loop, Counting("C", 2, log, cost=1.0))
    d = train_in_thread(loop, Counting("D", 5, log, cost=0.5), on_record)
    joined(d, c)
    assert log == [("D", 1), ("D", 2), ("C", 1), ("D", 3), ("D", 4), ("C", 2), ("D", 5)]


def test_ten_learners_whose_steps_together_outlast_a_turn_all_step_in_every_turn(declared_costs, monkeypatch):
    # Ten learners, a run each at 0.35 s a step: 3.5 s for all against a 1 s turn. A share is at least the cheapest
    # step, so every learner steps once a turn and the ten runs are handed over as one batch each turn. With shares
    # of 0.1 s each run would run 0.25 s into debt and sit out turns in a pattern of its own: batches of one or two.
    batches = []
    costed = rl_core.runs.run_loop.step_together

    def logged(runs):
        batches.append(sorted(run.name for run in runs))
        return costed(runs)

    monkeypatch.setattr(rl_core.runs.run_loop, "step_together", logged)
    loop, log = RunLoop(turn_seconds=1.0), []
    stepped, others_in = threading.Event(), threading.Event()

    def hold_the_loop(record):  # the first turn is the holder's own; the ten join while it is held
        stepped.set()
        others_in.wait(10)

    first = train_in_thread(loop, Counting("H", 1, log, cost=0.35), hold_the_loop, learner="H", step_seconds=0.35)
    stepped.wait(10)
    runs = [Counting(f"R{k}", 3, log, cost=0.35) for k in range(10)]
    outcomes = []
    for n, run in enumerate(runs):
        outcomes.append(train_in_thread(loop, run, learner=run.name, step_seconds=0.35))
        waiting_for_runs(loop, n + 2)
    others_in.set()
    joined(first, *outcomes)
    everyone = sorted(run.name for run in runs)
    assert batches == [["H"], everyone, everyone, everyone]


def test_a_turn_in_which_every_learner_is_in_debt_is_skipped_not_run():
    # Shares of 1.0 / 2 = 0.5 s. A owes 1.2 s and B 0.7 s (their steps took longer than estimated). Earning once
    # leaves A at -0.7 and B at -0.2: nobody would step. A second round: A -0.2, B 0.3, so B steps; A does not.
    # In debt alike (1.0 s each), both need three rounds: -0.5, 0.0 (not in credit), then 0.5, and both step.
    a, b = (_Member(None, print, learner, step_seconds=0.3) for learner in "AB")
    accounts = {"A": _Account(-1.2), "B": _Account(-0.7)}
    assert choose_turn([a, b], accounts, 1.0, turn=4) == [b]
    assert accounts["A"].credit == pytest.approx(-0.2) and accounts["B"].credit == pytest.approx(0.3)
    assert (a.stepped_at, b.stepped_at) == (-1, 4)

    accounts = {"A": _Account(-1.0), "B": _Account(-1.0)}
    assert choose_turn([a, b], accounts, 1.0, turn=5) == [a, b]
    assert accounts["A"].credit == pytest.approx(0.5) and accounts["B"].credit == pytest.approx(0.5)
    assert (a.stepped_at, b.stepped_at) == (5, 5)


def test_a_run_whose_step_costs_more_than_a_turn_steps_in_its_own_lane_and_the_loop_goes_on():
    # The heavy run's first step waits until the light run has stepped five times: in the loop's turn it would
    # wait for ever (the light run's steps come after it), in its lane the loop goes on.
    loop, log = RunLoop(turn_seconds=1.0), []
    five = threading.Event()
    heavy = Counting("H", 1, log)
    light_step = heavy.step

    def held_step():
        five.wait(10)
        return light_step()

    heavy.step = held_step
    light = train_in_thread(loop, Counting("L", 5, log), lambda record: record["step"] == 5 and five.set())
    h = train_in_thread(loop, heavy, learner="H", step_seconds=30.0)
    joined(light, h)
    assert five.is_set() and log[-1] == ("H", 1) and light["ended"] == h["ended"] == "returned"


def first_then_joining(first: tuple[str, int, float], joining: tuple[str, int, float]) -> tuple[list, list, dict, dict]:
    """Two runs in a loop with a 1 s turn, each `(name, steps, cost of a step)`: the first trains (for learner `first`'s
    name), the other joins during its first step. The log, the `(name, thread)` of every step, and both outcomes."""
    loop, log, threads = RunLoop(turn_seconds=1.0), [], []
    name, steps, cost = joining
    later, on_record = joining_at(1, loop, Noting(name, steps, log, threads, cost=cost))
    name, steps, cost = first
    earlier = train_in_thread(loop, Noting(name, steps, log, threads, cost=cost), on_record, learner=name)
    joined(earlier)
    joined(later)
    return log, threads, earlier, later


def test_a_run_measured_slower_than_a_turn_and_four_times_the_other_moves_to_a_lane(declared_costs):
    # S is estimated at 0 s and measured at 9 s a step, F at 0.5 s; a turn is 1 s. Alone, S steps in the loop (its
    # estimate is within the turn); F joins during S's first step. S's estimate is then 4.5 s, F's 0.25 s: S steps
    # its next step in a lane, F goes on in the loop.
    _, threads, _, _ = first_then_joining(("S", 3, 9.0), ("F", 4, 0.5))
    assert [thread for name, thread in threads if name == "S"] == ["training-loop"] + ["training-loop-lane"] * 2
    assert [thread for name, thread in threads if name == "F"] == ["training-loop"] * 4


def test_a_run_goes_to_a_lane_for_a_step_longer_than_a_turn_and_four_times_the_cheapest_others():
    assert goes_to_lane(2.0, [], turn_seconds=1.0)  # nothing to compare with: the turn is the only test
    assert not goes_to_lane(0.9, [0.1], turn_seconds=1.0)  # within a turn, however it compares
    assert not goes_to_lane(2.0, [1.5, 1.8], turn_seconds=1.0)  # a busy machine: every run slower alike
    assert not goes_to_lane(2.4, [0.6, 3.0], turn_seconds=1.0)  # 4 × the cheapest exactly: not more
    assert goes_to_lane(12.8, [0.6, 3.0], turn_seconds=1.0)


def test_a_lane_run_rejoins_the_loop_only_beside_measured_runs_that_its_step_would_not_go_to_a_lane_beside():
    assert returns_from_lane(0.9, [0.1], turn_seconds=1.0)  # within a turn
    assert returns_from_lane(2.4, [0.6, 3.0], turn_seconds=1.0)  # 4 × the cheapest exactly
    assert not returns_from_lane(2.5, [0.6, 3.0], turn_seconds=1.0)
    assert not returns_from_lane(0.5, [], turn_seconds=1.0)  # no measured run: the loop's next would wait on it


def test_a_lane_run_whose_step_comes_down_near_the_others_rejoins_the_loop(declared_costs):
    # S costs 9 s a step for two steps, then 0.5 s; F 0.5 s; a turn is 1 s. S's first step is in the loop (estimated
    # at 0 s, alone), F joining during it. Its estimate is then 4.5 s against F's 0.25 s: its second step is in a
    # lane. From there its estimate goes 6.75, 3.625, 2.06 (more than 4 × F's 0.375 s, which F holds at its second
    # step until S has left the lane), then 1.28 s: still more than a turn, no longer four times F's, so after its
    # fifth step S rejoins the loop and steps its last three there.
    loop, log, threads = RunLoop(turn_seconds=1.0), [], []
    slow, fast = Noting("S", 8, log, threads, cost=9.0), {}
    fifth = threading.Event()

    def hold_until_slow_left_its_lane(record):
        if record["step"] == 2:
            assert fifth.wait(10)
            deadline = time.monotonic() + 10
            while loop.steps_in_lane(0.0, slow) and time.monotonic() < deadline:
                time.sleep(0.001)

    def on_slow_record(record):
        if record["step"] == 1:
            train_in_thread(loop, Noting("F", 6, log, threads, cost=0.5), hold_until_slow_left_its_lane, fast, "F")
            waiting_for_runs(loop, 2)
        slow.cost = 9.0 if record["step"] < 2 else 0.5
        if record["step"] == 5:
            fifth.set()

    s = train_in_thread(loop, slow, on_slow_record, learner="S")
    joined(s)
    joined(fast)
    assert s["ended"] == fast["ended"] == "returned"
    assert [thread for name, thread in threads if name == "S"] == (
        ["training-loop"] + ["training-loop-lane"] * 4 + ["training-loop"] * 3
    )


def test_runs_slower_than_a_turn_alike_stay_in_the_loop(declared_costs):
    # Both cost 2 s a step, a turn is 1 s. A steps alone first (estimated at 0 s: within the turn); B joins during
    # that step. From then on each is at most 2 s against the other's 1–2 s, never four times the other's, and the
    # one left alone at the end is judged by its estimate: neither goes to a lane. By the turn alone each would
    # from its third step.
    log, threads, a, later = first_then_joining(("A", 4, 2.0), ("B", 4, 2.0))
    assert a["ended"] == later["ended"] == "returned" and sorted(log) == [(n, i) for n in "AB" for i in (1, 2, 3, 4)]
    assert [thread for _, thread in threads] == ["training-loop"] * 8


def test_a_lane_waits_for_the_other_learners_shares():
    assert lane_pause(12.8, learners=20) == pytest.approx(12.8 * 19)
    assert lane_pause(12.8, learners=1) == 0.0
    # The loop's time two cores: a learner's share is 2/20 of a core, so 12.8 s of work then 12.8 × 9 s of wait.
    assert lane_pause(12.8, learners=20, cores=2) == pytest.approx(12.8 * 9)
    assert lane_pause(12.8, learners=2, cores=2) == 0.0  # a whole core's share: a lane uses one core at most
    assert lane_pause(12.8, learners=1, cores=2) == 0.0
    # 12.8 CPU-s its thread used took 25.6 s of wall (the loop's thread held the interpreter half the time): its
    # share at 20 learners is 12.8 × 20 = 256 s of wall in all, of which the work took 25.6.
    assert lane_pause(12.8, learners=20, wall_seconds=25.6) == pytest.approx(256 - 25.6)
    assert lane_pause(12.8, learners=1, wall_seconds=25.6) == 0.0  # its own core's worth took longer still


def test_a_lanes_pacer_waits_its_share_of_the_work_since_its_last_wait():
    """Between a lane's updates: 2 s of work (2 CPU-s of its thread) at 3 learners waits 4 s; then 0.5 s of work, a
    learner gone, 0.5 s; then 3 s of wall in which its thread had 1 CPU-s (the loop's held the interpreter), at 2
    learners: 1 × 2 − 3 < 0, no wait; then 1 s of wall and 1 CPU-s: 1 s. Its waits leave its CPU clock alone."""
    now, cpu = [10.0], [100.0]
    waits = []

    class Stop:
        def wait(self, seconds):
            waits.append(seconds)
            now[0] += seconds
            return False

    learners = iter([3, 2, 2, 2])
    pace = LanePacer(lambda: next(learners), Stop(), lambda: now[0], work_clock=lambda: cpu[0])
    now[0] += 2.0
    cpu[0] += 2.0
    assert pace() == 4.0 and now[0] == 16.0
    now[0] += 0.5
    cpu[0] += 0.5
    assert pace() == 0.5
    now[0] += 3.0
    cpu[0] += 1.0
    assert pace() == 0.0
    now[0] += 1.0
    cpu[0] += 1.0
    assert pace() == 1.0
    assert waits == [4.0, 0.5, 0.0, 1.0]
    # It counts the step's updates (its calls) from the step's start, which the lane sets after each step and its
    # wait, and the work of those after the first: 0.5 + 1 + 1 CPU-s.
    assert (pace.updates, pace.worked) == (4, 2.5)
    pace.next_step()
    assert (pace.updates, pace.worked) == (0, 0.0)


def test_a_lane_counts_its_threads_cpu_seconds_only_for_a_run_whose_work_they_are():
    # A run on the CPU with one torch thread works on its thread alone; on an accelerator, or with torch's other
    # intra-op threads, much of its work is elsewhere, and the lane counts the wall.
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert works_on_its_thread(SimpleNamespace(device=torch.device("cpu")))
        assert not works_on_its_thread(SimpleNamespace(device=torch.device("cuda")))
        torch.set_num_threads(2)
        assert not works_on_its_thread(SimpleNamespace(device=torch.device("cpu")))
    finally:
        torch.set_num_threads(threads)


def test_a_lane_runs_progress_is_its_steps_updates_and_work_after_its_first_and_no_other_run_has_one(monkeypatch):
    # A run whose step costs more than the turn steps in a lane (its work counted on the test's clock): its sampling
    # and first update take 3 s, and the wait after it ends at 5 s; while it waits after its second update, done
    # at 6 s (the test's stop event stands in for the wait), the loop reports one update done after the first, of
    # 1 s of work (the wait not counted). While it waits after its first: none yet. A run in the loop's turns has
    # no lane progress.
    monkeypatch.setattr(rl_core.runs.run_loop, "works_on_its_thread", lambda trainer: False)
    now = [0.0]
    loop = RunLoop(clock=lambda: now[0])
    in_wait, go_on = threading.Semaphore(0), threading.Semaphore(0)

    class Waiting(threading.Event):
        def wait(self, timeout=None):
            in_wait.release()
            return go_on.acquire(timeout=10) and False

    class Updating(Counting):
        def step(self):
            now[0] = 3.0  # its sampling and first update took 3 s
            self.share_pause()  # the group's step calls it after each update
            now[0] = 6.0
            self.share_pause()
            return super().step()

    heavy = Updating("H", 1, [])
    heavy.stop_event = Waiting()
    light = Counting("L", 1, [])
    assert loop.lane_progress(heavy) is None and loop.lane_progress(light) is None  # in no lane
    outcome = train_in_thread(loop, heavy, step_seconds=5 * loop.turn_seconds)
    assert in_wait.acquire(timeout=10)
    assert loop.lane_progress(heavy) == (0, 0.0)
    now[0] = 5.0
    go_on.release()
    assert in_wait.acquire(timeout=10)
    now[0] = 7.0
    assert loop.lane_progress(heavy) == (1, 1.0)
    assert loop.lane_progress(light) is None
    go_on.release()
    go_on.release()  # the wait after its step
    joined(outcome)


def test_a_lanes_pauses_leave_their_shares_to_the_learners_the_server_counts_too(monkeypatch):
    # A run whose step costs five turns steps in a lane, alone in the loop: paced for the loop's one learner, it
    # would take a whole core while the server's other learners' runs build their warm starts outside the loop.
    # With the server counting six, its pauses count six; with none counted, the loop's own one.
    monkeypatch.setattr(rl_core.runs.run_loop, "works_on_its_thread", lambda trainer: False)
    counted = []

    class Pacer(LanePacer):
        def __call__(self):
            counted.append(self.learners())
            return 0.0

    monkeypatch.setattr(rl_core.runs.run_loop, "LanePacer", Pacer)
    for sharing, learners in ((lambda: 6, 6), (None, 1), (lambda: 0, 1)):
        loop, counted[:] = RunLoop(sharing=sharing), []
        joined(train_in_thread(loop, Counting("H", 1, []), step_seconds=5 * loop.turn_seconds))
        assert counted == [learners]  # its one wait, after its step


def test_the_loop_times_a_turn_from_its_start_to_the_next_and_a_run_from_joining_to_its_first_record():
    # The clock's readings in order: the run joins, turn 1 starts (it takes the run in), the run's first record is
    # handed over, turns 2, 3 and 4 start.
    readings = iter([0.0, 0.5, 2.0, 2.5, 4.5, 5.5])
    loop = RunLoop(clock=lambda: next(readings))
    assert loop.turn_wall is None and loop.first_record_wall() is None and loop.intake_wall is None  # nothing timed
    joined(train_in_thread(loop, Counting("A", 4, [])))
    # Joined at 0 s, first record at 2 s; turn 1 took the run in (not an ordinary turn), then 2 s and 1 s.
    assert loop.first_record_wall() == 2.0 == loop.first_record_wall(company=1)
    assert loop.turn_wall == 1.5
    assert loop.intake_wall == 2.0  # turn 1, from 0.5 s to 2.5 s


def test_the_loop_keeps_each_runs_first_wait_with_the_company_it_joined_with():
    # A joins alone and its first step takes 2 s on the clock; then B joins with a company of 4 and its takes 5 s.
    now = [0.0]

    class Costing(Counting):  # its step moves the clock on by its cost
        def step(self):
            now[0] += self.cost
            return super().step()

    loop = RunLoop(clock=lambda: now[0])
    joined(train_in_thread(loop, Costing("A", 1, [], cost=2.0), company=1))
    joined(train_in_thread(loop, Costing("B", 1, [], cost=5.0), company=4))
    assert loop.first_record_wall(company=1) == 2.0  # A's alone: B joined with more company
    assert loop.first_record_wall(company=4) == loop.first_record_wall() == 3.5  # both


def test_a_first_wait_is_told_from_runs_that_joined_with_as_little_company_else_from_the_latest_runs():
    burst = [(7.0, 20)] * 4  # a class's runs joining together
    assert first_wait([], company=3) is None
    assert first_wait(burst, company=3) == 7.0  # none joined with 3 or fewer: the latest runs'
    assert first_wait([*burst, (3.0, 2)], company=3) == 3.0 and first_wait([*burst, (3.0, 2)], company=1) == 7.0
    assert first_wait([*burst, (3.0, 2), (2.5, 3)], company=3) == 2.75
    assert first_wait([*burst, (3.0, 2)], company=None) == 7.0  # company not known (queued): the latest five's
    assert first_wait([(9.0, 1)] * 6 + [(1.0, 1)] * 5, company=1) == 1.0  # the latest five of them


def joined_while_held(loop: RunLoop, runs: list[Counting]) -> list[dict]:
    """`runs` trained in `loop`, each its own learner, all joining while the turn of a holder (a run of a shape of
    its own, one step) is held, so that they all step from the next turn on; their outcomes once all have ended."""
    held, all_in = threading.Event(), threading.Event()
    holder = train_in_thread(loop, Counting("H", 1, []), lambda record: held.set() or all_in.wait(10))
    held.wait(10)
    outcomes = []
    for n, run in enumerate(runs):  # one at a time, so that they join in this order
        outcomes.append(train_in_thread(loop, run, learner=n))
        waiting_for_runs(loop, n + 2)
    all_in.set()
    joined(holder, *outcomes)
    return outcomes


@pytest.fixture
def one_torch_thread():
    """Torch's count at 1 in this thread, which threads started from now on take too; the count before given back."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_a_turn_of_enough_runs_steps_on_the_loops_intra_op_threads_and_gives_them_back(monkeypatch, one_torch_thread):
    # Eight runs of one shape: on two threads, one program on torch's two intra-op threads (the choice tries all
    # threads first), the holder's turn alone on one (under MIN_THREADED_RUNS); on one thread, every turn on one.
    assert MIN_THREADED_RUNS == 4
    steps, after = [], []

    def logged(runs):
        steps.append(([run.name for run in runs], threading.current_thread().name, torch.get_num_threads()))
        return step_together(runs)

    monkeypatch.setattr(rl_core.runs.run_loop, "step_together", logged)
    for threads in (2, 1):
        loop, steps[:], after[:] = RunLoop(threads=threads), [], []
        runs = [Counting(f"R{k}", 2, [], shape="tiny") for k in range(8)]
        outcomes = joined_while_held(loop, runs)
        names = [run.name for run in runs]
        assert steps == [(["H"], "training-loop", 1)] + [(names, "training-loop", threads)] * 2
        assert all([r["step"] for r in outcome["records"]] == [1, 2] for outcome in outcomes)
        assert all(outcome["ended"] == "returned" for outcome in outcomes)
        assert loop.cores == 1  # idle again
        # Ahead, with eight runs: two turns of eight are no whole cycle of the choice, so the middle of one and two
        # threads; with three runs, or on one thread, 1.
        assert loop.cores_ahead(8) == (1.5 if threads == 2 else 1.0)
        assert loop.cores_ahead(3) == 1.0
    assert RunLoop(threads=3).cores_ahead(4) == 2.0
    # The step on two threads gives this thread its count back.
    steps[:] = []
    assert [r["step"] for r in step_on_threads([Counting("S", 1, [])], 2)] == [1]
    assert steps == [(["S"], threading.current_thread().name, 2)] and torch.get_num_threads() == 1


def test_the_cores_ahead_are_the_latest_cycle_of_turns_that_stepped_enough_runs(monkeypatch):
    # Four runs of CORES_TIMED + 5 steps each on two threads: once the loop has stepped a whole cycle of turns of four,
    # the cores ahead are the mean of the latest CORES_TIMED of them, as the steps themselves ran (the choice
    # tries each setting and keeps the faster of two that cost nothing, so both may appear).
    seen = []

    def logged(runs):
        if len(runs) >= MIN_THREADED_RUNS:
            seen.append(torch.get_num_threads())
        return step_together(runs)

    monkeypatch.setattr(rl_core.runs.run_loop, "step_together", logged)
    loop = RunLoop(threads=2)
    joined_while_held(loop, [Counting(f"R{k}", CORES_TIMED + 5, [], shape="tiny") for k in range(4)])
    assert len(seen) == CORES_TIMED + 5
    assert loop.cores_ahead(4) == pytest.approx(sum(seen[-CORES_TIMED:]) / CORES_TIMED)


def test_a_turn_of_fewer_runs_than_the_minimum_steps_on_one_thread(declared_costs, monkeypatch):
    # Seven runs of one shape on two threads, every step 0.5 s, a turn of 1 s: each of A, B and C earns 1 / 3 s, raised
    # to the cheapest step, and steps one run a turn (A's five in rotation): three runs a turn, under
    # MIN_THREADED_RUNS, so one thread, and `cores`, which a lane's pauses and the Train button's estimate read, says 1.
    batches, cores_seen = [], []
    costed = rl_core.runs.run_loop.step_together

    def logged(runs):
        batches.append((len(runs), torch.get_num_threads()))
        return costed(runs)

    monkeypatch.setattr(rl_core.runs.run_loop, "step_together", logged)
    loop = RunLoop(turn_seconds=1.0, threads=2)
    held, all_in = threading.Event(), threading.Event()
    holder = train_in_thread(loop, Counting("H", 1, []), lambda record: held.set() or all_in.wait(10), learner="H")
    held.wait(10)
    outcomes = []
    for n, learner in enumerate("AAAAABC"):  # A's five runs two steps each, in rotation: ten turns, as B's ten
        run = Counting(f"{learner}{n}", 2 if learner == "A" else 10, [], cost=0.5, shape="tiny")
        record = lambda record: cores_seen.append(loop.cores)  # noqa: E731 - read inside the turn
        outcomes.append(train_in_thread(loop, run, record, learner=learner, step_seconds=0.5))
        waiting_for_runs(loop, n + 2)
    all_in.set()
    joined(holder, *outcomes)
    assert batches == [(1, 1)] + [(3, 1)] * 10
    assert len(cores_seen) == 30 and set(cores_seen) == {1}


def test_a_failing_step_ends_the_runs_it_stepped_and_gives_the_threads_back(monkeypatch, one_torch_thread):
    # The group's step raises (a fault of the program, not of one run's step) on the loop's two threads: the runs
    # it stepped end with that error, the thread has its one count back, and the holder's run, stepped before, ended
    # as it should.
    def fails(runs):
        if len(runs) > 1:
            assert torch.get_num_threads() == 2
            raise MemoryError("the group ran out of memory")
        return step_together(runs)

    monkeypatch.setattr(rl_core.runs.run_loop, "step_together", fails)
    runs = [Counting(f"R{k}", 3, [], shape="tiny") for k in range(4)]
    assert all(isinstance(outcome, MemoryError) for outcome in step_on_threads(runs, 2))
    assert torch.get_num_threads() == 1
    outcomes = joined_while_held(RunLoop(threads=2), runs)
    assert all(isinstance(outcome["ended"], MemoryError) and not outcome["records"] for outcome in outcomes)


def test_the_loop_threads_knob_is_read_and_a_bad_value_named(monkeypatch):
    monkeypatch.setenv(THREADS_KNOB, "3")
    assert loop_threads() == 3
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(THREADS_KNOB, bad)
        with pytest.raises(ValueError, match=r"RLHF_LAB_LOOP_THREADS=.* allowed: an integer ≥ 1"):
            loop_threads()
    monkeypatch.delenv(THREADS_KNOB)
    assert loop_threads() == len(os.sched_getaffinity(0))
    with pytest.raises(ValueError, match="threads=0 is out of range"):
        RunLoop(threads=0)


def test_the_loop_keeps_the_threads_that_stepped_its_runs_faster_and_tries_the_other_again():
    choice = ThreadsChoice(threads=2)
    runs = ("r1", "r2", "r3", "r4")
    # Nothing measured: all threads first. A turn of other runs than the turn before (the first turn, new runs) is
    # not measured, since it built its groups anew: two measured turns need three on the same runs.
    assert choice.choose(turn=1) == 2
    for seconds in (9.0, 0.8, 1.2):
        choice.timed(runs, 2, seconds)
    assert choice.choose(turn=4) == 1  # two measurements of 2 threads (0.2 and 0.3 s a run): now one thread's
    # A change of threads alone builds nothing anew: its first turn is measured (0.1 and 0.15 s a run).
    for seconds in (0.4, 0.6):
        choice.timed(runs, 1, seconds)
    assert choice.choose(turn=6) == 1  # medians 0.125 against 0.25 s a run stepped: one thread
    # Other runs stepped on one thread meanwhile are measured against the ones before them only from their second
    # turn: (0.3 + 0.3 s) / 2 runs replaces the older of one thread's two.
    choice.timed(("r1", "r2"), 1, 5.0)
    choice.timed(("r1", "r2"), 1, 0.6)
    assert choice.choose(turn=7) == 1  # one thread: median of 0.15 and 0.3 = 0.225, still under 0.25
    # CHOICE_RETRY_TURNS after the settings were first compared (turn 6), two threads are measured anew, and win
    # if faster now.
    assert choice.choose(turn=6 + CHOICE_RETRY_TURNS - 1) == 1
    assert choice.choose(turn=6 + CHOICE_RETRY_TURNS) == 2
    assert choice.choose(turn=7 + CHOICE_RETRY_TURNS) == 2
    for seconds in (3.0, 0.2, 0.2):  # the first on other runs than the turn before's
        choice.timed(runs, 2, seconds)
    assert choice.choose(turn=50) == 2  # 0.05 s a run against 0.225
    assert ThreadsChoice(threads=1).choose(turn=1) == 1
