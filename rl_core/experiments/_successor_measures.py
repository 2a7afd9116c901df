"""What the successor experiments read off a run's records."""

from __future__ import annotations

import math
import statistics

from rl_core.experiments import Records


def mean_over_steps(records: Records, key: str) -> float:
    """The metric's mean over the run's steps that report it (NaN if none does)."""
    values = [r[key] for r in records if isinstance(r.get(key), (int, float)) and not math.isnan(r[key])]
    return statistics.fmean(values) if values else math.nan
