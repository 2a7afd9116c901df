"""Predict, then run: one question per algorithm page, asked before Train and answered by the run's own records."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Prediction:
    question: str
    options: tuple[str, ...]
    # The run's records → (the option that came true, the numbers that show it); None while they cannot tell.
    answer: Callable[[list[dict]], tuple[str, str] | None]


Answer = Callable[[list[dict]], "tuple[str, str] | None"]  # records → (the option that came true, why)


def _reading(key: str, decide: Callable[[list[dict], list[float]], tuple[str, str] | None]) -> Answer:
    """An answer from the run's values of record field `key` (None while the run has none)."""

    def answer(records: list[dict]) -> tuple[str, str] | None:
        values = [r[key] for r in records if isinstance(r.get(key), (int, float))]
        return decide(records, values) if values else None

    return answer


def end_versus_start(key: str, name: str, unit: str = "") -> Answer:
    """'higher' or 'lower': the mean of the last 3 steps against the first 3 (None before 6 steps)."""

    def decide(records: list[dict], values: list[float]) -> tuple[str, str] | None:
        if len(values) < 6:
            return None
        start, end = sum(values[:3]) / 3, sum(values[-3:]) / 3
        return ("higher" if end > start else "lower"), (
            f"{name} went from {start:.3f}{unit} to {end:.3f}{unit} (the means of its first and last 3 steps)"
        )

    return _reading(key, decide)


def ever_above(key: str, name: str, threshold: float) -> Answer:
    """'yes' if the quantity exceeded `threshold` at any step."""

    def decide(records: list[dict], values: list[float]) -> tuple[str, str]:
        peak = max(values)
        step = next(r["step"] for r in records if r.get(key) == peak)
        return ("yes" if peak > threshold else "no"), f"the highest {name} was {peak:.3g} (step {step})"

    return _reading(key, decide)


def mean_near_zero(key: str, name: str, tolerance: float) -> Answer:
    """'about 0' if the run's mean of the quantity is within `tolerance` of 0, else 'clearly positive' or
    'clearly negative'."""

    def decide(records: list[dict], values: list[float]) -> tuple[str, str]:
        mean = sum(values) / len(values)
        verdict = "about 0" if abs(mean) <= tolerance else "clearly positive" if mean > 0 else "clearly negative"
        shown = f"{mean:+.3f}"
        if float(shown) == 0:  # a mean of −0.0002 reads 0.000, not "-0.000"
            shown = "0.000"
        return verdict, f"the {name} averaged {shown} over {len(values)} steps"

    return _reading(key, decide)


def last_at_least(key: str, name: str, threshold: float) -> Answer:
    """'yes' if the last step's value is at least `threshold`."""
    return _reading(
        key,
        lambda records, values: (
            "yes" if values[-1] >= threshold else "no",
            f"the {name} at the last step was {values[-1]:.3f}",
        ),
    )


def first_at_least(key: str, name: str, threshold: float) -> Answer:
    """'yes' if the first step's value is at least `threshold`."""
    return _reading(
        key,
        lambda records, values: (
            "yes" if values[0] >= threshold else "no",
            f"the {name} at step 1 was {values[0]:.3f}",
        ),
    )
