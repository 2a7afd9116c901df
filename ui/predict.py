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


def _series(records: list[dict], key: str) -> list[float]:
    return [r[key] for r in records if isinstance(r.get(key), (int, float))]


def end_versus_start(key: str, name: str, unit: str = "") -> Callable[[list[dict]], tuple[str, str] | None]:
    """'higher' or 'lower': the mean of the last 3 steps against the first 3."""

    def answer(records: list[dict]) -> tuple[str, str] | None:
        values = _series(records, key)
        if len(values) < 6:
            return None
        start, end = sum(values[:3]) / 3, sum(values[-3:]) / 3
        return ("higher" if end > start else "lower"), f"{name} went from {start:.3f}{unit} to {end:.3f}{unit}"

    return answer


def ever_above(key: str, name: str, threshold: float) -> Callable[[list[dict]], tuple[str, str] | None]:
    """'yes' if the quantity exceeded `threshold` at any step."""

    def answer(records: list[dict]) -> tuple[str, str] | None:
        values = _series(records, key)
        if not values:
            return None
        peak = max(values)
        step = next(r["step"] for r in records if r.get(key) == peak)
        return ("yes" if peak > threshold else "no"), f"the highest {name} was {peak:.3g} (step {step})"

    return answer


def mean_near_zero(key: str, name: str, tolerance: float) -> Callable[[list[dict]], tuple[str, str] | None]:
    """'about 0' if the run's mean of the quantity stays within `tolerance` of 0, else 'clearly positive' or
    'clearly negative'."""

    def answer(records: list[dict]) -> tuple[str, str] | None:
        values = _series(records, key)
        if not values:
            return None
        mean = sum(values) / len(values)
        verdict = "about 0" if abs(mean) <= tolerance else "clearly positive" if mean > 0 else "clearly negative"
        return verdict, f"the {name} averaged {mean:+.3f} over {len(values)} steps"

    return answer


def last_at_least(key: str, name: str, threshold: float) -> Callable[[list[dict]], tuple[str, str] | None]:
    """'yes' if the last step's value is at least `threshold`."""

    def answer(records: list[dict]) -> tuple[str, str] | None:
        values = _series(records, key)
        if not values:
            return None
        return ("yes" if values[-1] >= threshold else "no"), f"the {name} at the last step was {values[-1]:.3f}"

    return answer


def first_at_least(key: str, name: str, threshold: float) -> Callable[[list[dict]], tuple[str, str] | None]:
    """'yes' if the first step's value is at least `threshold`."""

    def answer(records: list[dict]) -> tuple[str, str] | None:
        values = _series(records, key)
        if not values:
            return None
        return ("yes" if values[0] >= threshold else "no"), f"the {name} at step 1 was {values[0]:.3f}"

    return answer
