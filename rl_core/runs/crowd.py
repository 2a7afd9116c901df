"""Runs going through one phase together (the live lab's preparations in the server): how many are in it now, and
how many were on average while one of them went through it.

A phase's wall time depends on its company: the runs of a class preparing at once share the process (its GIL, its
two cores) and each takes about as many times longer as there are of them (0.7 s for a run alone, 1.5–3.3 s for
three at once, bench/class_load.py). With the median of the latest preparations' walls read as is after a class's
eighteen had prepared at once, three runs preparing later were told 6 s for 3.7 s to their first point. So each
phase is timed with its mean company (`mean_concurrency`), kept as seconds per run (`per_run_seconds`: the phase's
wall shared among the runs in it, as when they take turns on one core), and announced for the company now
(`crowd_seconds`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


def mean_concurrency(area: float, seconds: float) -> float:
    """The mean number of runs in a phase over one run's `seconds` in it, from `area`, the integral of their count
    over those seconds (run-seconds): area ÷ seconds, at least 1 (the run itself); 1 for an instant."""
    return max(area / seconds, 1.0) if seconds > 0 else 1.0


def per_run_seconds(seconds: float, concurrency: float) -> float:
    """A phase's wall `seconds` among `concurrency` runs (its mean company, itself included), per run:
    seconds ÷ max(concurrency, 1)."""
    return seconds / max(concurrency, 1.0)


def crowd_seconds(per_run: float, concurrency: float) -> float:
    """The wall seconds of a phase of `per_run` seconds a run when `concurrency` runs (itself included) go through
    it together: per_run × max(concurrency, 1)."""
    return per_run * max(concurrency, 1.0)


@dataclass(frozen=True)
class Entry:
    """A run's way into the phase: when it entered and the crowd's run-seconds then."""

    since: float
    area: float


class Crowd:
    """The runs in one phase: their count now, and its integral over time (run-seconds) to time each run's company.
    Thread-safe; every call gives the clock's reading `now` (one clock for all the calls)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._count = 0
        self._area = 0.0  # the count's integral, up to `_at`
        self._at = 0.0

    @property
    def count(self) -> int:
        with self._lock:
            return self._count

    def _advance(self, now: float) -> None:
        self._area += self._count * max(now - self._at, 0.0)
        self._at = now

    def enter(self, now: float) -> Entry:
        with self._lock:
            self._advance(now)
            self._count += 1
            return Entry(now, self._area)

    def leave(self, entry: Entry, now: float) -> float:
        """The run of `entry` leaves the phase; returns its mean company there (`mean_concurrency`)."""
        with self._lock:
            self._advance(now)
            self._count -= 1
            return mean_concurrency(self._area - entry.area, now - entry.since)
