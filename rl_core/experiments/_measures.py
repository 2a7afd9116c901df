"""What the experiments read off a run's records: a metric averaged over all its steps, or over its last few.

A record whose metric is missing or NaN (nothing to measure on that step) is left out of the average."""

from __future__ import annotations

import math
import statistics

from rl_core.experiments import Records


def _values(records: Records, key: str) -> list[float]:
    return [r[key] for r in records if isinstance(r.get(key), (int, float)) and not math.isnan(r[key])]


def mean_over_steps(records: Records, key: str) -> float:
    """The metric's mean over every step of the run (NaN if no step has it)."""
    values = _values(records, key)
    return statistics.fmean(values) if values else math.nan


def final_mean(records: Records, key: str, last: int = 10) -> float:
    """The metric's mean over the run's last `last` steps: the end of the run, with a batch's noise averaged."""
    return mean_over_steps(records[-last:], key)
