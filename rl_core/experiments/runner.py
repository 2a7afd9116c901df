"""Running an experiment: every arm × seed is one run of a `Sweep` (worker processes, warm starts first, every
record in the run store as it comes), then each run's records are written as JSON lines and the claim's verdict
is computed from them into `summary.json`.

The output folder:

    DIR/runs/<arm>-seed<N>.jsonl   one record per step, as `train --metrics-out` writes them (plus `elapsed`)
    DIR/summary.json               the experiment, its runs, the effect per seed, mean ± std, verdict, wall time

The effect of a seed needs every arm of that seed finished; otherwise it is NaN (null in the file), which counts
against the claim, so a stopped or failed experiment can never read as "shown".
"""

from __future__ import annotations

import json
import math
import re
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from rl_core.algorithms import get_run_algo
from rl_core.config import AlgoConfig, DPOConfig, RunConfig
from rl_core.engine.models import select_device
from rl_core.engine.pretrained import check_model
from rl_core.experiments import Arm, Experiment, Records, mean_interval, seeds_needed, verdict
from rl_core.numbers import number
from rl_core.runs.records import json_safe, write_jsonl
from rl_core.runs.reuse import run_key
from rl_core.runs.store import RunStore, StoredRun
from rl_core.runs.sweep import PlannedRun, Sweep
from toy_tasks import get_task

SUMMARY_FILE = "summary.json"
RUNS_FOLDER = "runs"


@dataclass(frozen=True)
class ArmRun:
    """One planned run of an experiment: which arm, and the sweep's run for it."""

    arm: Arm
    planned: PlannedRun

    @property
    def seed(self) -> int:
        return self.planned.run.seed


def records_file(arm: Arm, seed: int) -> str:
    """The run's JSON-lines file, relative to the output folder."""
    stem = re.sub(r"[^\w.=+-]+", "_", arm.label).strip("_")
    return f"{RUNS_FOLDER}/{stem}-seed{seed}.jsonl"


def plan_experiment(
    experiment: Experiment,
    seeds: Sequence[int] | None = None,
    steps: int | None = None,
    model: str | None = None,
    device: str = "auto",
    sft_steps: int | None = None,
) -> list[ArmRun]:
    """Every arm × seed run, validated up front (ValueError names the knob or value refused).

    `steps`, `model` and `sft_steps` replace the experiment's own, for a quick try or a bigger model."""
    seeds = list(experiment.seeds if seeds is None else seeds)
    if not seeds:
        raise ValueError("seeds is empty; allowed: at least one seed")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds lists a seed twice: {' '.join(map(str, seeds))}")
    labels = [arm.label for arm in experiment.arms]
    files = {records_file(arm, 0) for arm in experiment.arms}
    if not labels or len(files) != len(labels):
        raise ValueError(f"experiment {experiment.name!r} needs arms with distinct labels (as file names): {labels}")
    get_task(experiment.task)  # ValueError naming the allowed tasks
    model = model or experiment.model
    check_model(model)  # a preset, a folder or a Hub id; ValueError naming what is allowed
    select_device(device, model)  # ValueError naming the allowed devices
    run_fields = {
        **experiment.run_fields,
        "model": model,
        "device": device,
        "steps": experiment.steps if steps is None else steps,
    }
    if sft_steps is not None:
        run_fields["sft_steps"] = sft_steps
    planned = []
    for arm in experiment.arms:
        config = arm_config(arm)
        variant = arm_variant(experiment, arm)
        for seed in seeds:
            run = RunConfig(algo=config, task=experiment.task, seed=seed, **run_fields)
            run.validate()
            planned.append(ArmRun(arm, PlannedRun(run, arm_run_label(experiment, arm), variant)))
    return planned


def arm_config(arm: Arm) -> AlgoConfig | DPOConfig:
    """What the arm trains: its preset with its overrides (an RL preset, or `dpo`)."""
    return get_run_algo(arm.preset, **arm.overrides)


def arm_variant(experiment: Experiment, arm: Arm) -> dict:
    """The arm's values of the knobs in which the experiment's arms differ; `algo` (arms of different run
    kinds, RL against DPO) by the name of what the arm trains."""
    config = arm_config(arm)
    return {knob: config.name if knob == "algo" else getattr(config, knob) for knob in experiment.knobs}


def shared_departures(experiment: Experiment) -> dict:
    """The knob values every arm sets alike where they depart from the arm's own preset, then the run's fields
    (`run_fields`) that depart from a run's defaults (e.g. `num_generations` 2, `beta` 0.1, `sft_steps` 500): with
    the knobs the arms differ in, what makes an arm's run other than its preset's."""
    run_defaults = {field.name: field.default for field in fields(RunConfig)}
    run_fields = {k: v for k, v in experiment.run_fields.items() if v != run_defaults.get(k)}
    shared: dict | None = None
    for arm in experiment.arms:
        config, preset = arm_config(arm), get_run_algo(arm.preset)
        departures = {
            field.name: getattr(config, field.name)
            for field in fields(config)
            if field.name not in experiment.knobs and getattr(config, field.name) != getattr(preset, field.name)
        }
        shared = (
            departures
            if shared is None
            else {k: v for k, v in shared.items() if k in departures and departures[k] == v}
        )
    return (shared or {}) | run_fields


def arm_run_label(experiment: Experiment, arm: Arm) -> str:
    """How the store labels a run of this arm (the Compare page lists it so)."""
    return f"{experiment.name}: {arm.label}"


def past_run_seconds(experiment: Experiment, store: RunStore) -> list[float]:
    """Wall seconds of the finished runs of this experiment (as planned now: its steps) in the store, the setup of
    each included — what the next run of it will take on the same machine. A reused row trained nothing and is
    left out."""
    runs = store.runs(labels=[arm_run_label(experiment, arm) for arm in experiment.arms])
    return [
        run.wall_time
        for run in runs
        if run.status == "finished" and not run.reused and run.steps_total == experiment.steps
    ]


def unused_seeds(experiment: Experiment, store: RunStore, count: int, after: int = -1, **plan_options) -> list[int]:
    """The first `count` seeds above `after` for which the store holds no run of the experiment, finished or in
    flight (`plan_options` as in `plan_experiment`): new samples of its effect, not the recorded ones again."""
    seeds, seed = [], after + 1
    while len(seeds) < count:
        keys = [run_key(arm_run.planned.run) for arm_run in plan_experiment(experiment, [seed], **plan_options)]
        if not store.reusable(keys):
            seeds.append(seed)
        seed += 1
    return seeds


def seed_effects(experiment: Experiment, records: Mapping[int, Mapping[str, Records]]) -> dict[int, float]:
    """Seed → the experiment's effect on that seed's runs (arm label → records); NaN where an arm is missing."""
    labels = [arm.label for arm in experiment.arms]
    return {
        seed: float(experiment.effect(by_arm)) if all(by_arm.get(label) for label in labels) else math.nan
        for seed, by_arm in records.items()
    }


def summarise_effects(experiment: Experiment, effects: Mapping[int, float]) -> dict:
    """Per-seed effects, their mean ± sample std and 95 % t-interval (over the seeds that have one), how many seeds
    have the expected sign against how many the verdict needs, and the verdict."""
    finite = [e for e in effects.values() if not math.isnan(e)]
    return {
        "effects": {str(seed): effect for seed, effect in effects.items()},
        "effect_mean": statistics.fmean(finite) if finite else math.nan,
        "effect_std": statistics.stdev(finite) if len(finite) > 1 else (0.0 if finite else math.nan),
        "effect_interval": list(mean_interval(finite)),
        "seeds_with_expected_sign": sum((e > 0) if experiment.expected == "positive" else (e < 0) for e in finite),
        "seeds_needed": seeds_needed(len(effects)),
        "verdict": verdict(list(effects.values()), experiment.expected),
    }


def effect_sentence(experiment: Experiment, summary: Mapping) -> str:
    """The measured effect in one sentence, from the numbers: both halves of the verdict rule, and which failed."""
    effects = summary["effects"]
    mean, std = summary["effect_mean"], summary["effect_std"]
    if math.isnan(mean):
        return f"No seed finished every arm, so {experiment.metric} was not measured."
    sign = "positive" if experiment.expected == "positive" else "negative"
    per_seed = ", ".join("—" if math.isnan(e) else number(e, "+.3g") for e in effects.values())
    low, high = summary["effect_interval"]
    if math.isinf(low):
        interval = "one seed gives no interval of the mean"
    else:
        away = low > 0 if experiment.expected == "positive" else high < 0
        interval = f"its 95 % interval [{number(low, '+.3g')}, {number(high, '+.3g')}] " + (
            "lies on the expected side of 0" if away else "does not exclude 0"
        )
    right, needed = summary["seeds_with_expected_sign"], summary["seeds_needed"]
    return (
        f"{experiment.metric}: {number(mean, '+.3g')} (standard deviation {number(std, '.2g')}) over "
        f"{len(effects)} seeds ({per_seed}); "
        f"{right} of {len(effects)} {sign} as the claim expects ({needed} needed) and {interval}, "
        f"so the claim is {summary['verdict']}."
    )


def plain_verdict(experiment: Experiment, summary: Mapping) -> str:
    """The verdict in one or two sentences a newcomer reads: what was compared, whether it went as the claim says,
    and on how many seeds; the numbers behind it are `effect_sentence`'s."""
    labels = [arm.label for arm in experiment.arms]
    compared = f"comparing {labels[0]} with {' and '.join(labels[1:])}"
    if math.isnan(summary["effect_mean"]):
        return f"Not measured, {compared}: no seed finished every arm."
    right, needed, n = summary["seeds_with_expected_sign"], summary["seeds_needed"], len(summary["effects"])
    claim = experiment.plain or experiment.title + "."
    if summary["verdict"] == "shown":
        return f"Shown on {right} of {n} seeds, {compared}: {_sentence_inside(claim)}"
    if summary["verdict"] == "weak" and right >= needed:
        how = f"Weak, {compared}: the claim's way on {right} of {n} seeds, but they vary too much to rule out chance"
    elif summary["verdict"] == "weak":
        how = f"Weak, {compared}: the claim's way on average, but on only {right} of {n} seeds ({needed} needed)"
    else:
        how = f"Not shown, {compared}: the claim's way on only {right} of {n} seeds, and not on average"
    return f"{how}. The claim: {claim}"


def _sentence_inside(sentence: str) -> str:
    """A sentence continued after a colon: its first word in lower case unless it is a name (GSPO, PPO's, DPO)."""
    word = sentence.split(" ", 1)[0]
    return sentence[0].lower() + sentence[1:] if word == "A" or word[1:].islower() else sentence


class ExperimentRun:
    """An experiment planned and written to the store as queued runs; `run()` trains them and writes `out`.

    A run the store already holds (or trains) is reused, as in `Sweep`, unless `fresh`; its JSON lines and its row of
    summary.json are written from the reused records, as for a run trained here.

    `stop()` may come from any thread (the app's Stop button): every run ends after its current step."""

    def __init__(
        self,
        experiment: Experiment,
        out: Path,
        store: RunStore,
        seeds: Sequence[int] | None = None,
        workers: int | None = None,
        cache_dir: Path | None = None,
        session: str | None = None,
        cap: int | None = None,
        fresh: bool = False,
        ray_address: str | None = None,
        **plan_options,
    ):
        self.experiment = experiment
        self.arm_runs = plan_experiment(experiment, seeds, **plan_options)
        self.out = Path(out)
        if self.out.exists() and not self.out.is_dir():
            raise ValueError(f"out={self.out} is a file; give a folder")
        (self.out / RUNS_FOLDER).mkdir(parents=True, exist_ok=True)  # a folder we cannot write fails now
        self.seeds = list(dict.fromkeys(arm_run.seed for arm_run in self.arm_runs))
        spec = {"experiment": experiment.name, "seeds": self.seeds, "arms": [a.label for a in experiment.arms]}
        # `session`: the browser session that owns the runs (None from the command line: visible to every session).
        self.sweep = Sweep(
            [a.planned for a in self.arm_runs],
            store,
            workers=workers,
            cache_dir=cache_dir,
            spec=spec,
            session=session,
            cap=cap,
            fresh=fresh,
            ray_address=ray_address,
        )
        self.runs_by_id = dict(zip(self.sweep.run_ids, self.arm_runs))

    def stop(self) -> None:
        self.sweep.stop()

    def run(self, report: Callable[[list[StoredRun]], None] | None = None) -> dict:
        """Train every run (`report` as in `Sweep.run`), write the JSON lines and summary.json; return the summary."""
        start = time.perf_counter()
        runs = self.sweep.run(report)
        wall_time = time.perf_counter() - start
        store = self.sweep.store
        records: dict[int, dict[str, Records]] = {seed: {} for seed in self.seeds}
        rows = []
        for run in runs:
            arm_run = self.runs_by_id[run.id]
            steps = store.steps(run.id)
            path = records_file(arm_run.arm, run.seed)
            write_jsonl(
                self.out / path, [{**record, "samples": store.samples(run.id, record["step"])} for record in steps]
            )
            if run.status == "finished":
                records[run.seed][arm_run.arm.label] = steps
            rows.append(
                {
                    "arm": arm_run.arm.label,
                    "seed": run.seed,
                    "run_id": run.id,
                    "status": run.status,
                    "steps": run.steps_done,
                    "wall_time": run.wall_time,
                    "records": path,
                    "error": run.error,
                }
            )
        first = self.arm_runs[0].planned.run
        summary = {
            **self.describe(),
            "model": first.model,
            "steps": first.steps,
            "device": str(select_device(first.device, first.model)),  # what "auto" chose
            "seeds": self.seeds,
            "sweep_id": self.sweep.sweep_id,
            "runs": rows,
            **summarise_effects(self.experiment, seed_effects(self.experiment, records)),
            "wall_time": wall_time,
        }
        summary["sentence"] = effect_sentence(self.experiment, summary)
        (self.out / SUMMARY_FILE).write_text(json.dumps(json_safe(summary), indent=2, ensure_ascii=False))
        return summary

    def describe(self) -> dict:
        """What the experiment is, as summary.json states it."""
        e = self.experiment
        return {
            "experiment": e.name,
            "title": e.title,
            "claim": e.claim,
            "source": e.source,
            "task": e.task,
            "metric": e.metric,
            "expected": e.expected,
            "knobs": list(e.knobs),
            "arms": [{"label": a.label, "preset": a.preset, "overrides": dict(a.overrides)} for a in e.arms],
        }
