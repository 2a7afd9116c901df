"""Training slots taken several at once (an experiment's worker processes), in arrival order, with each waiter's
place in the queue."""

import threading
import time

import pytest

from ui.jobs import TrainingSlots


def holder(
    slots: TrainingSlots,
    count: int,
    owner: str,
    entered: dict,
    release: threading.Event,
    stop: threading.Event | None = None,
) -> threading.Thread:
    def hold():
        with slots.hold(stop or threading.Event(), count, ticket=owner) as acquired:
            entered[owner] = acquired
            release.wait(30)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    return thread


def wait_for(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_slots_are_taken_together_in_arrival_order_and_a_waiter_knows_its_place():
    slots, entered = TrainingSlots(3), {}
    release_a, release_b, release_c = threading.Event(), threading.Event(), threading.Event()
    holder(slots, 1, "a", entered, release_a)
    wait_for(lambda: "a" in entered)
    holder(slots, 3, "b", entered, release_b)  # needs all three: waits for a
    wait_for(lambda: slots.queue_place("b") == 1)
    holder(slots, 1, "c", entered, release_c)  # a slot is free, but b came first
    wait_for(lambda: slots.queue_place("c") == 2)
    time.sleep(0.3)
    assert slots.running == 1 and "b" not in entered and "c" not in entered and slots.queue_place("a") is None
    release_a.set()
    wait_for(lambda: entered.get("b"))
    assert slots.running == 3 and slots.queue_place("c") == 1 and "c" not in entered
    release_b.set()
    wait_for(lambda: entered.get("c"))
    assert slots.running == 1
    release_c.set()
    wait_for(lambda: slots.running == 0)


def test_a_stopped_waiter_leaves_the_queue_without_slots_and_too_many_slots_are_refused():
    slots, entered = TrainingSlots(1), {}
    release, stop = threading.Event(), threading.Event()
    holder(slots, 1, "a", entered, release)
    wait_for(lambda: "a" in entered)
    released = threading.Event()
    released.set()
    waiter = holder(slots, 1, "b", entered, released, stop)
    wait_for(lambda: slots.queue_place("b") == 1)
    stop.set()
    waiter.join(5)
    assert entered["b"] is False and slots.queue_place("b") is None and slots.running == 1
    release.set()
    with (
        pytest.raises(ValueError, match=r"workers=2 is out of range; allowed: 1 to 1"),
        slots.hold(threading.Event(), 2),
    ):
        pass
