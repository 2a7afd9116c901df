"""The one loop that steps a changing set of runs (`rl_core.runs.run_loop`), with stand-in trainers whose steps only
log themselves: the order of steps, a run joining between turns, and each run ending on its own."""

import threading
import time
from types import SimpleNamespace

import pytest

from rl_core.runs.run_loop import RunLoop


class Counting:
    """A trainer's surface as the loop uses it: `step_index`, `run.steps`, `stop_event` and `step_phases()`, a
    coroutine that asks for no sample. Its step logs `(name, step)`; `fail_at` makes that step raise."""

    def __init__(self, name: str, steps: int, log: list, fail_at: int | None = None):
        self.name, self.log, self.fail_at = name, log, fail_at
        self.run = SimpleNamespace(steps=steps)
        self.step_index = 0
        self.stop_event = threading.Event()

    def step_phases(self):
        if self.step_index + 1 == self.fail_at:
            raise FloatingPointError(f"{self.name} diverged")
        self.step_index += 1
        self.log.append((self.name, self.step_index))
        return {"step": self.step_index}, None
        yield  # a coroutine, as a trainer's step is


def train_in_thread(loop: RunLoop, trainer: Counting, on_record=None, outcome: dict | None = None) -> dict:
    """Start `loop.train(trainer)` in a thread; what it returned or raised and the records it was handed land in
    `outcome` (a new dict unless given), which is returned."""
    outcome = {} if outcome is None else outcome
    outcome["records"] = []

    def target():
        def take(record):
            outcome["records"].append(record)
            if on_record is not None:
                on_record(record)
        try:
            loop.train(trainer, take)
            outcome["ended"] = "returned"
        except Exception as error:  # noqa: BLE001 - what the caller of train() sees
            outcome["ended"] = error

    outcome["thread"] = threading.Thread(target=target, daemon=True)
    outcome["thread"].start()
    return outcome


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
            while loop.runs < 2:
                time.sleep(0.001)
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
    assert [r["elapsed"] for r in a["records"]] == pytest.approx([sum(times[:i + 1]) for i in range(4)])


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
    import rl_core.runs.run_loop

    def broken(runs):
        raise MemoryError("out of memory")

    monkeypatch.setattr(rl_core.runs.run_loop, "step_together", broken)
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
