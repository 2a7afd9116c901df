"""The same toy DPO run in TRL beside ours: the lab's `DPOTrainer` and TRL's `DPOTrainer` from the same SFT warm start,
tokenizer and preference pairs, fed the very minibatches in the same order, both stored in the run store as one
sweep (`parity --algo dpo`).

TRL's settings are the lab's own export (`export_pairs.export_pair_config(algo, "trl")`), executed in TRL's throwaway
virtualenv (`rl_core.bridge.trl_env`) on the CPU; the run's bookkeeping is added (its length, a log per optimiser
step, the CPU) and its sampler walks the dataset in order. The lab draws each step's pairs with replacement from
`Random(seed)`; the TRL dataset is those draws, written out in order, so step k of both sides sees the same pairs.
TRL logs the metrics of each optimiser step's minibatch under the names the lab's records use (`loss`,
`rewards/*`, `logps/*`); the gold success of both trained policies is the lab's final evaluation
(`DPOTrainer.evaluation` of each side's policy, the same 256 prompts).
"""

from __future__ import annotations

import random
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from rl_core.algorithms import get_run_algo
from rl_core.bridge.export_pairs import export_pair_config
from rl_core.bridge.parity import _mean_std, parity_table, print_table
from rl_core.bridge.trl_env import TRL_SCRIPT_PRELUDE, run_trl_script
from rl_core.config import RunConfig
from rl_core.engine.evaluation import evaluate_policies
from rl_core.engine.models import load_policy
from rl_core.engine.preference_optimisation import DPOTrainer
from rl_core.runs.store import RunStore

DPO_KEYS = ("loss", "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected")
LAB, TRL = "lab", "TRL DPOTrainer"
PARITY_TASK = "preference"

# TRL's DPOTrainer with the lab's exported DPOConfig, its sampler sequential; prints its per-step logs as one JSON
# line and saves the trained policy for the lab to evaluate.
TRL_SCRIPT = TRL_SCRIPT_PRELUDE + textwrap.dedent(
    """
    from torch.utils.data import SequentialSampler
    from trl import DPOTrainer


    class Logs(TrainerCallback):
        def __init__(self):
            self.rows = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "rewards/margins" in logs and "eval_loss" not in logs:
                self.rows.append(dict(logs))


    trl.DPOConfig = functools.partial(trl.DPOConfig, **spec["run"])
    scope = {}
    exec(spec["export"], scope)
    logs = Logs()
    trainer = DPOTrainer(model=spec["model_dir"], args=scope["config"], train_dataset=Dataset.from_list(spec["rows"]),
                         eval_dataset=Dataset.from_list(spec["held_out"]), processing_class=tokenizer, callbacks=[logs])
    # The lab's minibatches, in its order: no shuffling.
    trainer._get_train_sampler = lambda *args, **kwargs: SequentialSampler(trainer.train_dataset)
    trainer.train()
    trainer.save_model(spec["trained_dir"])
    print(json.dumps({"logs": logs.rows, "trl": trl.__version__}))
    """
)


def trl_dpo_run_settings(run: RunConfig, output_dir: Path) -> dict:
    """What the TRL run adds to the export: its length, a log per optimiser step, the CPU, the lab's seed."""
    return {
        "output_dir": str(output_dir),
        "use_cpu": True,
        "bf16": False,
        "seed": run.seed,
        "max_steps": run.steps,
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
    }


def lab_minibatches(trainer: DPOTrainer) -> list:
    """The pairs the lab's `DPOTraining.update` will draw, step after step: the same `choices` from a copy of its
    generator (no other draw uses it)."""
    training = trainer.training
    rng = random.Random()
    rng.setstate(training.rng.getstate())
    return [pair for _ in range(trainer.run.steps) for pair in rng.choices(training.train, k=training.batch_size)]


def _row(tokenizer, pair) -> dict:
    """A pair in TRL's standard preference format."""
    return {"prompt": tokenizer.bos_token + pair.prompt, "chosen": pair.chosen, "rejected": pair.rejected}


def _train_trl(python: Path, trainer: DPOTrainer, workdir: Path) -> tuple[list[dict], dict]:
    """TRL's run from the trainer's prepared SFT policy on the lab's minibatches; its per-step records and the
    gold evaluation of the policy it trained."""
    run, tokenizer = trainer.run, trainer.tokenizer
    model_dir, trained_dir = workdir / "policy", workdir / "trained"
    trainer.policy.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    spec = {
        "model_dir": str(model_dir),
        "trained_dir": str(trained_dir),
        "threads": torch.get_num_threads(),
        "export": export_pair_config(run.algo, "trl"),
        "run": trl_dpo_run_settings(run, workdir / "trl-output"),
        # The BOS written out is tokenised as the one special token, as the lab's prompt ids begin; TRL appends EOS
        # to each response, as the lab's sequence log-probabilities include it.
        "rows": [_row(tokenizer, pair) for pair in lab_minibatches(trainer)],
        # The export evaluates every eval_steps on held-out pairs: the lab's own.
        "held_out": [_row(tokenizer, pair) for pair in trainer.training.held_out],
    }
    logs = run_trl_script(python, TRL_SCRIPT, spec, workdir)["logs"]
    records = [{"step": step, **{key: row[key] for key in DPO_KEYS if key in row}} for step, row in enumerate(logs, 1)]
    policy = load_policy(trained_dir).to(trainer.device).eval()
    return records, evaluate_policies([replace(trainer.evaluation(), policy=policy)])[0]


def run_dpo_parity(
    steps: int,
    seeds: list[int],
    python: Path,
    store: RunStore,
    progress: Callable[[str], None] = lambda line: None,
    **knobs,
) -> dict[str, list[int]]:
    """Both sides for every seed on the `preference` task, stored as one sweep; returns the run ids by side."""
    algo = get_run_algo("dpo", **knobs)
    sweep = store.create_sweep(
        {"parity": {"algo": "dpo", "task": PARITY_TASK, "steps": steps, "seeds": seeds, "knobs": knobs}}
    )
    ids: dict[str, list[int]] = {LAB: [], TRL: []}
    for seed in seeds:
        run = RunConfig(algo=algo, task=PARITY_TASK, steps=steps, seed=seed, samples_per_record=0)
        trainer = DPOTrainer(run)
        trainer.prepare()
        with tempfile.TemporaryDirectory(prefix="parity-trl-dpo-") as folder:
            progress(f"seed {seed}: TRL's DPOTrainer, {steps} steps (in its own virtualenv)")
            trl, trl_final = _train_trl(python, trainer, Path(folder))
        progress(f"seed {seed}: the lab's DPOTrainer, {steps} steps")
        lab = list(trainer.steps())
        for side, records, final in ((LAB, lab, trainer.evaluate()), (TRL, trl, trl_final)):
            run_id = store.add_run(run, f"{side} · dpo", {"framework": side}, sweep)
            store.start_run(run_id)
            for record in records:
                store.add_step(run_id, {k: v for k, v in record.items() if k != "samples"})
            complete = len(records) == steps
            store.finish_run(
                run_id,
                "finished" if complete else "failed",
                final=final,
                error=None if complete else f"{len(records)} of {steps} steps logged",
            )
            ids[side].append(run_id)
    return ids


def final_success_row(store: RunStore, ids: dict[str, list[int]]) -> dict:
    """The gold success of each side's trained policy (the lab's final evaluation), mean ± std over seeds."""
    row: dict = {"metric": "gold success (final)"}
    for side, run_ids in ids.items():
        row[side] = _mean_std([run.final["success_rate"] for run in store.runs(run_ids)])
    return row


def main(steps: int, seeds: list[int], python: Path, store: RunStore, progress: Callable[[str], None]) -> int:
    ids = run_dpo_parity(steps, seeds, python, store, progress)
    rows = parity_table(store, ids, DPO_KEYS)
    final = final_success_row(store, ids)
    print_table(f"dpo on {PARITY_TASK}, {steps} steps, seeds {' '.join(map(str, seeds))}", rows, ids)
    print(" | ".join([final["metric"], *(f"{m:.3f} ± {sd:.3f}" for m, sd in list(final.values())[1:])]))
    return 0
