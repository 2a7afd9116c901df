"""The same toy run in TRL beside ours: a preset trained by the lab's trainer and by TRL's `GRPOTrainer` from the
same SFT warm start, tokenizer, prompts (in the same order), reward and settings, both stored in the run store, so
the Compare page overlays them with seed bands.

TRL's settings are the lab's own export (`export_frameworks.export_config(algo, "trl")`), executed in TRL's
throwaway virtualenv (`rl_core.bridge.trl_env`) on the CPU; only the run's bookkeeping is added (steps, logging, the
CPU, no shuffling, so that TRL draws the prompts in the order the lab's trainer does). TRL logs once per generated batch
(`logging_steps` = its optimiser steps per batch), averaging the batch's updates as the lab's records do; its log
keys become the lab's record keys by `TRL_RECORD_KEYS`.
"""

from __future__ import annotations

import random
import sys
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path

import torch

from rl_core.algorithms import get_preset
from rl_core.bridge.export_frameworks import export_config, settings
from rl_core.bridge.trl_env import TRL_SCRIPT_PRELUDE, run_trl_script
from rl_core.config import RunConfig
from rl_core.engine.trainer import Trainer
from rl_core.runs.store import RunStore
from toy_tasks.base import ExactAnswerTask

# TRL's log key → the lab's record key, for the metrics both report with the same definition.
TRL_RECORD_KEYS = {
    "reward": "reward_mean",
    "reward_std": "reward_std",
    "kl": "kl_k3",  # TRL's KL term is k3 per token (use_bias_correction_kl=False in the export)
    "entropy": "entropy",
    "clip_ratio/region_mean": "clip_frac",
    "clip_ratio/low_mean": "clip_frac_low",
    "clip_ratio/high_mean": "clip_frac_high",
    "completions/mean_length": "response_length",
}
TRL_KEYS = tuple(TRL_RECORD_KEYS.values())  # the lab's record keys that `parity_table` compares by default
LAB, TRL = "lab", "TRL GRPOTrainer"

# TRL's GRPOTrainer with the lab's exported GRPOConfig; prints its per-generation logs as one JSON line.
TRL_SCRIPT = TRL_SCRIPT_PRELUDE + textwrap.dedent(
    """
    class Logs(TrainerCallback):
        def __init__(self):
            self.rows = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "reward" in logs:
                self.rows.append(dict(logs))


    trl.GRPOConfig = functools.partial(trl.GRPOConfig, **spec["run"])
    scope = {}
    exec(spec["export"], scope)
    logs = Logs()
    trainer = trl.GRPOTrainer(model=spec["model_dir"], reward_funcs=exact_answer, args=scope["config"],
                              train_dataset=Dataset.from_list(spec["rows"]), processing_class=tokenizer,
                              callbacks=[logs])
    trainer.train()
    print(json.dumps({"logs": logs.rows, "trl": trl.__version__}))
    """
)


def trl_records(logs: list[dict]) -> list[dict]:
    """TRL's per-generation log rows as the lab's step records: step n is the n-th generated batch."""
    return [
        {"step": step, **{ours: row[theirs] for theirs, ours in TRL_RECORD_KEYS.items() if row.get(theirs) is not None}}
        for step, row in enumerate(logs, start=1)
    ]


def trl_run_settings(run: RunConfig, output_dir: Path) -> dict:
    """What the TRL run adds to the export: its length in optimiser steps, one log per generated batch, the CPU."""
    exported = settings(run.algo, "trl", run.task)
    updates_per_batch = exported["steps_per_generation"] * exported["num_iterations"]
    return {
        "output_dir": str(output_dir),
        "use_cpu": True,
        "bf16": False,
        "seed": run.seed,
        "shuffle_dataset": False,
        "max_steps": run.steps * updates_per_batch,
        "logging_steps": updates_per_batch,
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
    }


def _train_trl(python: Path, trainer: Trainer, workdir: Path) -> list[dict]:
    """TRL's run from the trainer's prepared SFT policy, on the prompts the lab's trainer draws, in its order."""
    run = trainer.run
    model_dir = workdir / "policy"
    trainer.policy.save_pretrained(model_dir)
    trainer.tokenizer.save_pretrained(model_dir)
    # The lab's trainer draws each step's prompts from random.Random(seed); so does this list, in the same order.
    prompts = trainer.task.sample_prompts(run.steps * run.algo.prompts_per_step, random.Random(run.seed))
    spec = {
        "model_dir": str(model_dir),
        "threads": torch.get_num_threads(),
        "export": export_config(run.algo, "trl", run.task),
        "run": trl_run_settings(run, workdir / "trl-output"),
        # TRL tokenises the prompt text as it is; the BOS written out is matched as the one special token, so its
        # prompt ids are the very ids the lab's rollout builds.
        "rows": [{"prompt": trainer.tokenizer.bos_token + p, "answer": trainer.task.answer(p)} for p in prompts],
    }
    return trl_records(run_trl_script(python, TRL_SCRIPT, spec, workdir)["logs"])


def check_parity_run(algo: str, task: str) -> None:
    """Refuse what the TRL side cannot train as the lab does (ValueError naming the knob)."""
    from toy_tasks import get_task

    if not isinstance(get_task(task), ExactAnswerTask):
        raise ValueError(f"task={task!r} is not an exact-answer task; parity runs TRL with an exact-answer reward")
    preset = get_preset(algo)
    settings(preset, "trl", task)  # refuses a preset TRL's GRPOConfig cannot take (e.g. one completion per prompt)
    if preset.overlong_punishment or preset.dynamic_sampling:
        raise ValueError(f"algo={algo!r} uses DAPO's sampling or shaping, which TRL's GRPOConfig cannot set")


def run_parity(
    algo: str,
    task: str,
    steps: int,
    seeds: list[int],
    python: Path,
    store: RunStore,
    progress: Callable[[str], None] = lambda line: None,
) -> dict[str, list[int]]:
    """Both sides for every seed, stored as one sweep; returns the run ids by side."""
    check_parity_run(algo, task)
    sweep = store.create_sweep({"parity": {"algo": algo, "task": task, "steps": steps, "seeds": seeds}})
    ids: dict[str, list[int]] = {LAB: [], TRL: []}
    for seed in seeds:
        run = RunConfig(algo=get_preset(algo), task=task, steps=steps, seed=seed, samples_per_record=0)
        trainer = Trainer(run)
        trainer.prepare()
        with tempfile.TemporaryDirectory(prefix="parity-trl-") as folder:
            progress(f"seed {seed}: TRL's GRPOTrainer, {steps} steps (in its own virtualenv)")
            trl = _train_trl(python, trainer, Path(folder))
        progress(f"seed {seed}: the lab's trainer, {steps} steps")
        lab = list(trainer.steps())
        for side, records in ((LAB, lab), (TRL, trl)):
            run_id = store.add_run(run, f"{side} · {algo}", {"framework": side}, sweep)
            store.start_run(run_id)
            for record in records:
                store.add_step(run_id, {k: v for k, v in record.items() if k != "samples"})
            store.finish_run(
                run_id,
                "finished" if len(records) == steps else "failed",
                error=None if len(records) == steps else f"{len(records)} of {steps} steps logged",
            )
            ids[side].append(run_id)
    return ids


def parity_table(store: RunStore, ids: dict[str, list[int]], keys=TRL_KEYS) -> list[dict]:
    """Per metric both sides report: for each side the mean over seeds (± the sample std over seeds) of each run's
    mean over all steps and over its last 10 steps, and the largest gap between the two sides' per-step seed means."""
    runs = {side: [store.steps(run_id) for run_id in run_ids] for side, run_ids in ids.items()}
    rows = []
    for key in keys:
        curves = {
            side: [[r[key] for r in records if key in r] for records in side_runs] for side, side_runs in runs.items()
        }
        if any(not curve for side_curves in curves.values() for curve in side_curves):
            continue
        row: dict = {"metric": key}
        for side, side_curves in curves.items():
            row[f"{side}: all steps"] = _mean_std([sum(c) / len(c) for c in side_curves])
            row[f"{side}: last 10"] = _mean_std([sum(c[-10:]) / len(c[-10:]) for c in side_curves])
        lab, trl = (_seed_means(side_curves) for side_curves in curves.values())  # the lab's side first
        row["largest step gap"] = max(abs(x - y) for x, y in zip(lab, trl))
        rows.append(row)
    return rows


def _mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample std (0 for one value)."""
    mean = sum(values) / len(values)
    return mean, (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5 if len(values) > 1 else 0.0


def _seed_means(curves: list[list[float]]) -> list[float]:
    """The per-step mean over seeds, over the steps every seed reports."""
    return [sum(values) / len(values) for values in zip(*curves)]


def main(algo: str, task: str, steps: int, seeds: list[int], python: Path, store: RunStore) -> int:
    ids = run_parity(algo, task, steps, seeds, python, store, lambda line: print(line, file=sys.stderr))
    print_table(f"{algo} on {task}, {steps} steps, seeds {' '.join(map(str, seeds))}", parity_table(store, ids), ids)
    return 0


def print_table(title: str, rows: list[dict], ids: dict[str, list[int]]) -> None:
    """The parity table on stdout, one row per metric: each side's mean ± std over seeds, then (where a row has it)
    the largest step gap."""
    print(f"{title}: mean ± std over seeds")
    print(" | ".join(rows[0]))
    for row in rows:
        cells = [
            f"{value[0]:.3f} ± {value[1]:.3f}" if isinstance(value, tuple) else f"{value:.3f}"
            for value in list(row.values())[1:]
        ]
        print(" | ".join([row["metric"], *cells]))
    sides = ", ".join(f"{side} {run_ids}" for side, run_ids in ids.items())
    print(f"runs: {sides} (the Compare page overlays them: Stored runs → Show on the charts)")
