"""What the experiments read off a run's records: a metric averaged over all its steps, or over its last few, and
the most common effect, one arm's average minus another's.

A record whose metric is missing or NaN (nothing to measure on that step) is left out of the average."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping

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


def mean_difference(key: str, minuend: str, subtrahend: str) -> Callable[[Mapping[str, Records]], float]:
    """The effect `mean_over_steps(key)` of arm `minuend` minus that of arm `subtrahend`, on one seed's runs
    (arm label → records)."""
    return lambda runs: mean_over_steps(runs[minuend], key) - mean_over_steps(runs[subtrahend], key)


def mean_square_over_steps(records: Records, key: str) -> float:
    """The metric's second moment `mean(x²)` over every step of the run (NaN if no step has it). For a gradient's
    norm it is `E‖ĝ‖² = ‖E ĝ‖² + tr Var(ĝ)`: two estimators of the same gradient differ in it only by their
    variance."""
    values = _values(records, key)
    return statistics.fmean(v * v for v in values) if values else math.nan
