"""The engine from Python (a notebook, a script): `train` one run and get its records, `run_experiment` to reproduce a
paper's claim and get its summary. The same validation as the command line: bad input is a ValueError naming the
knob and what is allowed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rl_core.algorithms import get_run_algo
from rl_core.config import RunConfig
from rl_core.engine.sft import default_cache_dir
from rl_core.experiments import get_experiment
from rl_core.experiments.runner import ExperimentRun
from rl_core.runs.run_stream import trainer_for
from rl_core.runs.store import RunStore
from toy_tasks import DEFAULT_TASK


@dataclass
class TrainedRun:
    """What `train` returns: the run's configuration, its setup metrics (SFT success, …), one record per step,
    the final evaluation, and the trainer (its `policy`, `reference` and `tokenizer` for a closer look)."""

    run: RunConfig
    setup: dict
    records: list[dict]
    final: dict
    trainer: object


def train(
    algo: str = "grpo",
    task: str = DEFAULT_TASK,
    model: str = "tiny",
    steps: int = 100,
    seed: int = 0,
    device: str = "auto",
    sft_steps: int = RunConfig.sft_steps,
    cache_dir: str | Path | None = None,
    on_record: Callable[[dict], None] | None = None,
    final_prompts: int = 256,
    **knobs,
) -> TrainedRun:
    """Train `algo` (a preset of `python -m rl_core algos`, or `dpo`) with `knobs` overridden (`beta=0.1`, …) on
    `task` from `model` (a preset, a folder saved with `save_pretrained`, or a Hugging Face Hub id); `on_record`
    sees each step's record as it comes; the final evaluation samples one response to each of `final_prompts`
    fresh prompts."""
    run = RunConfig(
        algo=get_run_algo(algo, **knobs),
        task=task,
        model=model,
        steps=steps,
        seed=seed,
        device=device,
        sft_steps=sft_steps,
    )
    trainer = trainer_for(run, cache_dir=Path(cache_dir) if cache_dir else None)
    setup = trainer.prepare()
    records = []
    for record in trainer.steps():
        records.append(record)
        if on_record is not None:
            on_record(record)
    return TrainedRun(run, setup, records, trainer.evaluate(n_prompts=final_prompts), trainer)


def run_experiment(
    name: str,
    seeds: Sequence[int] | None = None,
    steps: int | None = None,
    model: str | None = None,
    device: str = "auto",
    workers: int | None = None,
    out: str | Path | None = None,
    db: str | Path | None = None,
    cache_dir: str | Path | None = None,
) -> dict:
    """Run the experiment `name` (`python -m rl_core experiment --list`) over `seeds` (default its own, 0–7) and
    return its summary (`effects` per seed, `verdict`, `sentence`, …), also written to `out`/summary.json (default
    the cache's experiments folder). Runs already in the run store (`db`, default `$RLHF_LAB_DB`) are reused."""
    experiment = get_experiment(name)
    folder = Path(out) if out else default_cache_dir() / "experiments" / experiment.name
    planned = ExperimentRun(
        experiment,
        folder,
        RunStore(db),
        seeds=seeds,
        workers=workers,
        cache_dir=Path(cache_dir) if cache_dir else None,
        steps=steps,
        model=model,
        device=device,
    )
    return planned.run()
