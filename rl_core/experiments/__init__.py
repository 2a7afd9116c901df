"""One-click experiments: each file in this package reproduces one claim of a paper as arms that differ only in
the knobs the claim is about, run over seeds, with the effect computed from the runs' per-step records.

A file defines `EXPERIMENT`, an `Experiment`; importing this package registers every file, so a new experiment is
a new small file. Running them (worker processes, the run store, `summary.json`) is `rl_core.experiments.runner`'s
job; this module only says what an experiment *is* and how its verdict follows from its measured effects.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

# Student's t quantile from scipy.special, which importing transformers' GPT-2 has loaded already; scipy.stats would
# add 0.6–0.7 CPU s of imports to every command for this one number (measured at load 16–19).
from scipy.special import stdtrit

Records = list[dict]  # one run's per-step records, as `Trainer.steps()` yields them
Direction = Literal["positive", "negative"]
Verdict = Literal["shown", "weak", "not shown"]

# Eight seeds: with three, "every sign right" happens one time in eight when there is no effect at all.
DEFAULT_SEEDS = tuple(range(8))
# "shown" needs the expected sign on this share of the seeds (7 of 8) and a 95 % interval of the mean away from 0.
SIGN_SHARE = 7 / 8
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Arm:
    """One side of the comparison: a preset and the knobs it overrides."""

    label: str
    preset: str
    overrides: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Experiment:
    """A claim, the arms that test it, and how to read the effect off their records.

    `effect(records_by_arm)` turns one seed's runs (arm label → records) into one number whose sign the claim
    predicts (`expected`). `knobs` names every knob in which the arms' configurations differ — a test checks that
    they differ in exactly these; `("algo",)` where the arms are different run kinds (an RL preset against `dpo`),
    which differ in the whole algorithm."""

    name: str
    title: str
    claim: str  # one sentence
    source: str  # the papers the claim comes from
    arms: tuple[Arm, ...]
    knobs: tuple[str, ...]
    task: str
    steps: int
    metric: str  # what the effect measures, with its unit, e.g. "entropy (nats/token), ε_high 0.28 minus 0.2"
    effect: Callable[[Mapping[str, Records]], float]
    expected: Direction
    model: str = "tiny"
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    run_fields: Mapping[str, object] = field(default_factory=dict)  # other RunConfig fields (sft_steps, …)
    pages: tuple[str, ...] = ()  # the app pages whose "See it happen" panel offers it
    charts: tuple[str, ...] = ()  # record keys to draw, arms overlaid with seed bands
    log_charts: tuple[str, ...] = ()  # of `charts`, those drawn on a log axis: arms whose values differ 100-fold
    # Chart title → keys of `charts` drawn on that one chart (a colour per arm, a dash per key), where the claim
    # compares the keys with each other (k1's spread against k3's) and separate axes would hide it.
    together: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # The claim for a newcomer, one or two sentences without symbols or numbers of seeds: a page opens with it, the
    # claim itself (its metric, seed sets and history) is one click further.
    plain: str = ""


def seeds_needed(seeds: int) -> int:
    """How many of `seeds` seeds must have the expected sign: ⌈7/8 · n⌉ (7 of 8, all of 3)."""
    return math.ceil(SIGN_SHARE * seeds - 1e-9)


def mean_interval(effects: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Student-t interval of the mean effect: x̄ ± t(n−1, (1 + c)/2) · s/√n over the finite effects.

    With fewer than two finite effects the spread is unknown and the interval is (−∞, ∞); equal effects give the
    point itself."""
    finite = [e for e in effects if not math.isnan(e)]
    if len(finite) < 2:
        return (-math.inf, math.inf)
    mean = statistics.fmean(finite)
    half = float(stdtrit(len(finite) - 1, (1 + confidence) / 2)) * statistics.stdev(finite) / math.sqrt(len(finite))
    return (mean - half, mean + half)


def verdict(effects: Sequence[float], expected: Direction) -> Verdict:
    """ "shown" when at least ⌈7/8 · n⌉ of the n seeds' effects have the expected sign **and** the 95 % t-interval
    of the mean effect lies on the expected side of 0; "weak" when only the mean does; else "not shown".

    A NaN effect (the metric never appeared) counts against the claim: it is a seed without the expected sign."""
    sign = 1.0 if expected == "positive" else -1.0
    signed = [sign * e for e in effects]
    right = sum(not math.isnan(s) and s > 0 for s in signed)
    low, _ = mean_interval(signed)
    if signed and right >= seeds_needed(len(signed)) and low > 0:
        return "shown"
    finite = [s for s in signed if not math.isnan(s)]
    if finite and statistics.fmean(finite) > 0:
        return "weak"
    return "not shown"


EXPERIMENTS: dict[str, Experiment] = {}

for _module in pkgutil.iter_modules(__path__):
    if _module.name.startswith("_") or _module.ispkg:
        continue
    _experiment = getattr(importlib.import_module(f"{__name__}.{_module.name}"), "EXPERIMENT", None)
    if _experiment is not None:
        EXPERIMENTS[_experiment.name] = _experiment


def get_experiment(name: str) -> Experiment:
    if name not in EXPERIMENTS:
        raise ValueError(f"experiment {name!r} is unknown; allowed: {', '.join(EXPERIMENTS) or 'none yet'}")
    return EXPERIMENTS[name]
