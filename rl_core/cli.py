"""Command line: `python -m rl_core algos | tasks | train … | reward-model … | sweep … | experiment … | export … |
parity … | export-unipo …` (see `--help`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shlex
import sys
import time
from pathlib import Path

from tqdm import tqdm
from transformers.utils import logging as transformers_logging

from rl_core.algorithms import PRESETS, RUN_ALGOS, get_run_algo
from rl_core.bridge import parity, parity_dpo
from rl_core.bridge.export_frameworks import FRAMEWORKS, export_config
from rl_core.bridge.export_pairs import export_pair_config
from rl_core.bridge.export_unipo import UnipoWriter, unipo_document, validate_unipo
from rl_core.bridge.trl_env import trl_python
from rl_core.config import PREFERENCE_PRESETS, PairRunConfig, RewardConfig, RunConfig, parse_overrides, shown
from rl_core.engine.models import MODEL_PRESETS
from rl_core.engine.sft import default_cache_dir
from rl_core.engine.trainer import TrainingError, check_checkpoint_folder
from rl_core.experiments import EXPERIMENTS, get_experiment
from rl_core.experiments.runner import ExperimentRun
from rl_core.messages import brief
from rl_core.runs.cluster import ClusterError
from rl_core.runs.records import json_safe
from rl_core.runs.reuse import reuse_line
from rl_core.runs.run_stream import SETUP_PHASES, trainer_for
from rl_core.runs.store import RunStore, StoredRun, StoreError
from rl_core.runs.summary import format_table, run_row, summarise, write_csv
from rl_core.runs.sweep import MAX_SWEEP_RUNS, Sweep, SweepProgress, default_workers, parse_grid, plan_sweep
from toy_tasks import DEFAULT_TASK, TASKS

# What the progress bar shows of a step's record, where the record has it: a policy's batch success and reward,
# a reward model's minibatch accuracy and margin.
PROGRESS_METRICS = (
    ("success", "success_rate"),
    ("reward", "reward_mean"),
    ("accuracy", "accuracy"),
    ("margin", "margin"),
)
FINAL_NAMES = {"success_rate": "success", "reward_mean": "reward"}  # the final line's short names


class Parser(argparse.ArgumentParser):
    """argparse, with a refusal on one line of its own (`error: …`, exit 2) instead of the usage block."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


DEVICE_HELP = "auto (gpt2: cuda, then mps, then cpu; tiny and small: cpu), cpu, cuda, cuda:N, mps"
MODEL_HELP = (
    f"a preset ({', '.join(MODEL_PRESETS)}; default tiny), or a Hugging Face causal LM of the GPT-2 "
    "architecture with its own tokenizer: a folder saved with save_pretrained, or a Hub id such as "
    "openai-community/gpt2 (downloaded once, then read from the cache)"
)
RAY_ADDRESS_HELP = (
    "train every run as a task on the Ray cluster whose head is at this host:port, its CPUs as the "
    "workers (default: $RLHF_LAB_RAY_ADDRESS, else this machine)"
)


def build_parser(prog: str = "python -m rl_core") -> argparse.ArgumentParser:
    parser = Parser(prog=prog, description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    commands.add_parser("algos", help="list the algorithm presets, then DPO, IPO and the reward model")
    commands.add_parser("tasks", help="list the toy tasks")
    train = commands.add_parser("train", help="train one preset on one task")
    train.add_argument(
        "--algo",
        required=True,
        help=f"one of: {', '.join(RUN_ALGOS)} (dpo, ipo and reward_model: "
        "on a task with preference pairs, such as preference)",
    )
    _add_train_arguments(train, DEFAULT_TASK)
    reward = commands.add_parser(
        "reward-model",
        help="fit the Bradley-Terry reward model to a task's preference pairs (train --algo "
        "reward_model): loss, accuracy and margin per step, held out every eval_steps",
    )
    _add_train_arguments(reward, "preference")
    sweep = commands.add_parser(
        "sweep", help="train presets (or values of a knob) × seeds in parallel worker processes and compare them"
    )
    sweep.add_argument("--algos", required=True, help=f"comma-separated presets, from: {', '.join(RUN_ALGOS)}")
    sweep.add_argument("--seeds", type=int, default=3, help="seeds 0 … N−1 of every preset and grid value")
    sweep.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KNOB=V1,V2,…",
        help="run every preset with each of these values of a knob (repeatable: all combinations)",
    )
    sweep.add_argument(
        "--workers",
        type=int,
        default=None,
        help=f"runs trained at once, one process each (default: the cores here, {default_workers()})",
    )
    _add_run_arguments(sweep)
    sweep.add_argument("--db", type=Path, help="the run store (default: $RLHF_LAB_DB or runs.sqlite in the cache)")
    sweep.add_argument("--ray-address", help=RAY_ADDRESS_HELP)
    sweep.add_argument(
        "--fresh", action="store_true", help="train every run again, even those the run store already holds"
    )
    sweep.add_argument(
        "--out",
        type=Path,
        required=True,
        help="folder for runs/<group>-seed<N>.csv (per-step metrics), runs.csv and summary.csv",
    )
    experiment = commands.add_parser(
        "experiment", help="reproduce a paper's claim: its arms × seeds in parallel, the effect and a verdict"
    )
    experiment.add_argument("name", nargs="?", help="the experiment (see --list)")
    experiment.add_argument("--list", action="store_true", help="list the experiments, one a line, name first")
    experiment.add_argument(
        "--all",
        action="store_true",
        help="run every experiment of --list in turn, one line "
        "each (before a class: later identical requests answer from the run store)",
    )
    experiment.add_argument("--ray-address", help=RAY_ADDRESS_HELP)
    experiment.add_argument(
        "--fresh", action="store_true", help="train every run again, even those the run store already holds"
    )
    experiment.add_argument("--seeds", type=int, nargs="+", help="seeds to run (default: the experiment's, 0 … 7)")
    experiment.add_argument("--device", default="auto", help=DEVICE_HELP)
    experiment.add_argument(
        "--workers",
        type=int,
        default=None,
        help=f"runs trained at once, one process each (default: the cores here, {default_workers()})",
    )
    experiment.add_argument("--model", help=f"replace the experiment's model: {MODEL_HELP}")
    experiment.add_argument("--steps", type=int, help="replace the experiment's number of RL steps (a quick try)")
    experiment.add_argument("--db", type=Path, help="the run store (default: $RLHF_LAB_DB or runs.sqlite in the cache)")
    experiment.add_argument("--cache-dir", type=Path, help="where SFT checkpoints and reward models are cached")
    experiment.add_argument(
        "--out",
        type=Path,
        help="folder for runs/<arm>-seed<N>.jsonl and summary.json (with "
        "--all: a folder per experiment in it; default the cache's experiments folder)",
    )
    export = commands.add_parser(
        "export",
        help="a preset with overrides as TRL's GRPOConfig (Python), verl's overrides or OpenRLHF's flags "
        "(bash); dpo and ipo as TRL's DPOConfig or OpenRLHF's train_dpo, reward_model as RewardConfig or train_rm",
    )
    export.add_argument("--algo", required=True, help=f"one of: {', '.join(RUN_ALGOS)}")
    export.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help="override a knob of the preset (repeatable), e.g. --set beta=0.1",
    )
    export.add_argument(
        "--format", required=True, choices=FRAMEWORKS, help="trl (Python source), verl or openrlhf (bash)"
    )
    export.add_argument("--task", default=DEFAULT_TASK, help="the task whose length limit max_new_tokens=None means")
    export.add_argument("--out", type=Path, help="write here instead of printing")
    parity = commands.add_parser(
        "parity", help="the same toy run in TRL's GRPOTrainer beside ours: both stored, a table of how close they are"
    )
    parity.add_argument(
        "--algo",
        default="grpo",
        help="a group preset TRL's GRPOConfig takes (default grpo), or dpo "
        "(beside TRL's DPOTrainer, on the preference task's pairs)",
    )
    parity.add_argument("--task", default=None, help=f"an exact-answer task (default {DEFAULT_TASK}; dpo: preference)")
    parity.add_argument("--steps", type=int, default=60, help="RL steps (generated batches) per run (default 60)")
    parity.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds (default 0 1 2)")
    parity.add_argument("--db", type=Path, help="the run store (default: $RLHF_LAB_DB or runs.sqlite in the cache)")
    unipo = commands.add_parser(
        "export-unipo", help="write a run of the run store in UNIPO's canonical log schema (validated)"
    )
    unipo.add_argument("--run", type=int, required=True, help="the run's id in the store")
    unipo.add_argument("--db", type=Path, help="the run store (default: $RLHF_LAB_DB or runs.sqlite in the cache)")
    unipo.add_argument("--out", type=Path, required=True, help="the .json file to write")
    return parser


def _add_train_arguments(command: argparse.ArgumentParser, task: str) -> None:
    """What train and reward-model share: a seed, the run's arguments, and where its results go."""
    command.add_argument("--seed", type=int, default=0)
    _add_run_arguments(command, task)
    command.add_argument("--metrics-out", type=Path, help="write one JSON object per step to this .jsonl file")
    command.add_argument(
        "--checkpoint", type=Path, help="save the trained policy, critic and optimiser state here (RL presets)"
    )
    command.add_argument(
        "--unipo-out",
        type=Path,
        help="write the run in UNIPO's canonical log schema: .jsonl (a line per step) or .json (RL presets)",
    )


def _add_run_arguments(command: argparse.ArgumentParser, task: str = DEFAULT_TASK) -> None:
    """What train and sweep share: the task, model, run length, knob overrides, warm start and caches."""
    command.add_argument("--task", default=task, help=f"one of: {', '.join(TASKS)} (default {task})")
    command.add_argument("--model", default="tiny", help=MODEL_HELP)
    command.add_argument("--steps", type=int, default=100)
    command.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help="override a knob of the preset (repeatable), e.g. --set beta=0.1",
    )
    command.add_argument("--device", default="auto", help=DEVICE_HELP)
    command.add_argument("--demo-noise", type=float, default=None, help="fraction of imperfect SFT demonstrations")
    command.add_argument("--sft-steps", type=int, default=RunConfig.sft_steps)
    command.add_argument("--cache-dir", type=Path, help="where SFT checkpoints and reward models are cached")


def main(argv: list[str] | None = None, prog: str = "python -m rl_core") -> int:
    args = build_parser(prog).parse_args(argv)
    try:
        return _run(args, argv if argv is not None else sys.argv[1:])
    except (ValueError, StoreError) as error:  # refused input found late (e.g. a checkpoint folder)
        _error(str(error))
        return 2
    except ClusterError as error:  # the Ray cluster is not there (or Ray is not installed)
        _error(str(error))
        return 1
    except Exception as error:  # noqa: BLE001 - one line, never a traceback; the type says where to look
        _error(f"{type(error).__name__}: {error}")
        return 1


def _error(message: str) -> None:
    """A refusal or failure: one line of its own on stderr, path-free and at most a few hundred characters."""
    print(f"error: {brief(message)}", file=sys.stderr)


def _run(args, argv: list[str]) -> int:
    transformers_logging.disable_progress_bar()  # our own bar is the only one
    if args.command == "algos":
        for preset in [*PRESETS.values(), *PREFERENCE_PRESETS.values()]:
            print(f"{preset.name:<22} {preset.title:<28} {preset.summary}")
        return 0
    if args.command == "tasks":
        for name, task in TASKS.items():
            marker = " (default)" if name == DEFAULT_TASK else ""
            print(f"{name:<14} {task.description}{marker}")
        return 0
    if args.command == "sweep":
        return _sweep(args)
    if args.command == "experiment":
        return _experiment(args)
    if args.command == "export-unipo":
        return _export_unipo(args)
    if args.command == "parity":
        return _parity(args)
    if args.command == "export":
        return _export(args, argv)
    if args.command == "reward-model":
        args.algo = RewardConfig.name
    try:
        run = RunConfig(
            algo=get_run_algo(args.algo, **parse_overrides(args.overrides)),
            task=args.task,
            model=args.model,
            steps=args.steps,
            seed=args.seed,
            device=args.device,
            demo_noise=args.demo_noise,
            sft_steps=args.sft_steps,
        )
        if args.checkpoint and isinstance(run.algo, PairRunConfig):
            raise ValueError(
                f"--checkpoint saves an RL run's policy, critic and optimiser; algo={args.algo} has no "
                "such state to resume: drop --checkpoint"
            )
        if args.unipo_out and isinstance(run.algo, PairRunConfig):
            raise ValueError(
                f"--unipo-out writes an RL run's rollouts; algo={args.algo} samples none to train on: "
                "drop --unipo-out (--metrics-out has every step)"
            )
        if args.checkpoint:
            check_checkpoint_folder(args.checkpoint)  # before the training, not after it
        trainer = trainer_for(run, cache_dir=args.cache_dir)
    except ValueError as error:
        _error(str(error))
        return 2
    return _train(trainer, args)


def _train(trainer, args) -> int:
    start = time.perf_counter()
    try:  # the output files before the progress bar, so that a refusal stands on a line of its own
        metrics_file = args.metrics_out.open("w") if args.metrics_out else None
        unipo = UnipoWriter(args.unipo_out, dataclasses.asdict(trainer.run)) if args.unipo_out else None
    except (ValueError, OSError) as error:
        _error(str(error))
        return 2
    bar = tqdm(total=args.steps, desc=f"{args.algo} on {args.task}", unit="step", file=sys.stderr)

    def setup_progress(phase: str, done: int, total: int) -> None:
        bar.set_description(f"{SETUP_PHASES[phase]} {done}/{total}", refresh=False)

    record = {}
    try:
        trainer.prepare(setup_progress)
        bar.set_description(f"{args.algo} on {args.task}")
        for record in trainer.steps():
            bar.update(1)
            bar.set_postfix({name: f"{record[key]:.2f}" for name, key in PROGRESS_METRICS if key in record})
            if metrics_file:
                metrics_file.write(json.dumps(json_safe(record)) + "\n")
                metrics_file.flush()
            if unipo:
                unipo.add(record)
    except TrainingError as error:
        bar.close()  # ends the bar's line, so the message stands on a line of its own
        _error(str(error))
        return 1
    except KeyboardInterrupt:
        bar.close()
        print("interrupted: stopping after the last finished step", file=sys.stderr)
    finally:
        bar.close()
        if metrics_file:
            metrics_file.close()
        if unipo:
            unipo.close()
    if args.checkpoint:
        trainer.save_checkpoint(args.checkpoint)
    final = trainer.evaluate()
    # A policy's success and reward on fresh prompts; a reward model's held-out loss, accuracy and margin.
    outcome = " ".join(f"{FINAL_NAMES.get(key, key)}={value:.3f}" for key, value in final.items())
    print(f"final {outcome} steps={trainer.step_index} seconds={time.perf_counter() - start:.1f}")
    return 0


def _sweep(args) -> int:
    try:
        if not 1 <= args.seeds <= MAX_SWEEP_RUNS:
            raise ValueError(
                f"--seeds {shown(args.seeds)} is out of range; allowed: an integer from 1 to {MAX_SWEEP_RUNS}"
            )
        algos = [name.strip() for name in args.algos.split(",") if name.strip()]
        planned = plan_sweep(
            algos,
            range(args.seeds),
            args.task,
            args.steps,
            overrides=parse_overrides(args.overrides),
            grid=parse_grid(args.grid),
            model=args.model,
            device=args.device,
            demo_noise=args.demo_noise,
            sft_steps=args.sft_steps,
        )
        if args.out.exists() and not args.out.is_dir():
            raise ValueError(f"--out {args.out} is a file; give a folder")
        (args.out / "runs").mkdir(parents=True, exist_ok=True)  # before training: a folder we cannot write fails now
        spec = {
            "task": args.task,
            "algos": algos,
            "seeds": args.seeds,
            "steps": args.steps,
            "grid": args.grid,
            "overrides": args.overrides,
        }
        sweep = Sweep(
            planned,
            RunStore(args.db),
            workers=args.workers,
            cache_dir=args.cache_dir,
            spec=spec,
            fresh=args.fresh,
            ray_address=args.ray_address,
        )
    except (OSError, ValueError, StoreError) as error:
        return _refuse(error, args.out)
    workers = min(sweep.workers, len(planned))
    print(f"{len(planned)} runs, {workers} at a time; the run store is {sweep.store.path}", file=sys.stderr)
    progress = SweepProgress(planned)
    start = time.perf_counter()
    try:
        runs = sweep.run(progress)
    finally:
        progress.close()
    print(
        f"{len(runs)} runs in {time.perf_counter() - start:.1f} s, {workers} at a time; {reuse_line(runs)}",
        file=sys.stderr,
    )
    rows = _write_sweep(sweep.store, runs, args.out)
    print(format_table(summarise(rows)))
    failed = [run for run in runs if run.status in ("failed", "interrupted")]
    if failed:
        _error(f"{len(failed)} of {len(runs)} runs did not finish; see their lines above")
    return 1 if failed else 0


def _refuse(error: Exception, out: Path | None) -> int:
    """Bad input or an unwritable folder, in one line; exit status 2."""
    message = f"--out {out}: {error.strerror}" if isinstance(error, OSError) else str(error)
    _error(message)
    return 2


def _parity(args) -> int:
    if args.algo not in (*PRESETS, "dpo"):
        raise ValueError(f"algo={args.algo!r} is unknown; allowed: {', '.join(PRESETS)}, dpo")
    if not 1 <= args.steps <= 1000:
        raise ValueError(f"steps={args.steps} is out of range; allowed: 1 to 1000")
    if args.algo == "dpo":
        if args.task not in (None, parity_dpo.PARITY_TASK):
            raise ValueError(
                f"task={args.task!r}: parity --algo dpo trains on the {parity_dpo.PARITY_TASK} task's "
                "pairs; drop --task"
            )
        return parity_dpo.main(
            args.steps, args.seeds, trl_python(), RunStore(args.db), lambda line: print(line, file=sys.stderr)
        )
    task = args.task or DEFAULT_TASK
    parity.check_parity_run(args.algo, task)  # before the TRL virtualenv is made
    return parity.main(args.algo, task, args.steps, args.seeds, trl_python(), RunStore(args.db))


def _export(args, argv: list[str]) -> int:
    try:
        if args.task not in TASKS:
            raise ValueError(f"task {args.task!r} is unknown; allowed: {', '.join(TASKS)}")
        algo = get_run_algo(args.algo, **parse_overrides(args.overrides))
        command = "python -m rl_core " + shlex.join(argv)
        text = (
            export_pair_config(algo, args.format, command)
            if isinstance(algo, PairRunConfig)
            else export_config(algo, args.format, args.task, command=command)
        )
        if args.out:
            args.out.write_text(text)
        else:
            print(text, end="")
    except ValueError as error:
        _error(str(error))
        return 2
    except OSError as error:
        _error(f"--out {args.out}: {error.strerror}")
        return 2
    return 0


def _export_unipo(args) -> int:
    """A stored run (every step's metrics and sample views) as one validated UNIPO document."""
    if args.out.suffix != ".json":
        _error(f"--out {args.out}: the file must end in .json")
        return 2
    try:
        store = RunStore(args.db, recover=False, create=False)  # reads only: a missing file is refused, not made
        run = store.run(args.run)
        records = [record | {"samples": store.samples(run.id, record["step"])} for record in store.steps(run.id)]
        document = unipo_document(run.config, records)
        validate_unipo(document)
        args.out.write_text(json.dumps(document))
    except KeyError as error:
        _error(str(error.args[0]))
        return 2
    except (ValueError, StoreError, OSError) as error:
        _error(str(error))
        return 2
    print(f"wrote {args.out}: {len(records)} steps of run {run.id} ({run.label}), {args.out.stat().st_size} bytes")
    return 0


def _write_sweep(store: RunStore, runs: list[StoredRun], out: Path) -> list[dict]:
    """runs/<group>-seed<N>.csv per run, runs.csv (one row per run) and summary.csv (per group) under `out`."""
    rows = []
    for run in runs:
        records = store.steps(run.id)
        name = re.sub(r"[^\w.=+-]+", "_", run.label)
        with (out / "runs" / f"{name}-seed{run.seed}.csv").open("w", newline="") as file:
            write_csv(file, records, first=("step",))
        rows.append(run_row(run, records))
    with (out / "runs.csv").open("w", newline="") as file:
        write_csv(file, rows)
    with (out / "summary.csv").open("w", newline="") as file:
        write_csv(file, summarise(rows))
    return rows


def _experiment(args) -> int:
    if args.list:
        for experiment in EXPERIMENTS.values():
            print(f"{experiment.name:<22} {experiment.title}  [{experiment.task}; {len(experiment.arms)} arms]")
        return 0
    try:
        if args.all and args.name is not None:
            raise ValueError(f"--all runs every experiment; drop the name {args.name!r} or --all")
        if args.name is None and not args.all:
            raise ValueError(f"name an experiment (one of: {', '.join(EXPERIMENTS)}), or pass --all or --list")
        if args.out is None and not args.all:
            raise ValueError("--out is required: the folder for the runs' JSON lines and summary.json")
        if args.steps is not None and args.steps < 1:
            raise ValueError(f"--steps {args.steps} is out of range; allowed: an integer ≥ 1")
        store = RunStore(args.db)
    except (OSError, ValueError, StoreError) as error:
        return _refuse(error, args.out)
    if args.all:
        return _all_experiments(args, store)
    try:
        experiment = get_experiment(args.name)
        run = _plan_experiment(experiment, args, store, args.out)
    except (OSError, ValueError, StoreError) as error:
        return _refuse(error, args.out)
    summary, reused = _run_experiment(run)
    print(f"claim: {experiment.claim}")
    for seed, effect in summary["effects"].items():
        print(f"seed {seed}: effect {effect:+.4g}")
    print(f"{summary['sentence']} ({summary['wall_time']:.0f} s)")
    print(f"verdict: {summary['verdict']}; records and summary.json in {args.out}")
    print(reused)
    return _unfinished(summary)


def _all_experiments(args, store: RunStore) -> int:
    """Every experiment in turn, each in a folder of its own under --out; one line each on stdout."""
    folder = args.out or default_cache_dir() / "experiments"
    status = 0
    for experiment in EXPERIMENTS.values():
        try:
            run = _plan_experiment(experiment, args, store, folder / experiment.name)
        except (OSError, ValueError, StoreError) as error:
            return _refuse(error, folder / experiment.name)
        summary, reused = _run_experiment(run)
        print(f"{experiment.name}: {summary['verdict']}, {reused}, {summary['wall_time']:.1f} s", flush=True)
        status = max(status, _unfinished(summary))
    return status


def _plan_experiment(experiment, args, store: RunStore, out: Path) -> ExperimentRun:
    return ExperimentRun(
        experiment,
        out,
        store,
        seeds=args.seeds,
        workers=args.workers,
        cache_dir=args.cache_dir,
        steps=args.steps,
        model=args.model,
        device=args.device,
        fresh=args.fresh,
        ray_address=args.ray_address,
    )


def _run_experiment(run: ExperimentRun) -> tuple[dict, str]:
    """Run it under a progress bar; its summary and the line that says how many runs it reused."""
    planned = [arm_run.planned for arm_run in run.arm_runs]
    experiment = run.experiment
    print(
        f"{experiment.title}: {len(planned)} runs ({len(experiment.arms)} arms × {len(run.seeds)} seeds), "
        f"{min(run.sweep.workers, len(planned))} at a time; the run store is {run.sweep.store.path}",
        file=sys.stderr,
    )
    progress = SweepProgress(planned, description=experiment.name)
    try:
        summary = run.run(progress)
    finally:
        progress.close()
    return summary, reuse_line(run.sweep.store.runs(run.sweep.run_ids))


def _unfinished(summary: dict) -> int:
    """1, with a line on stderr, if a run of the experiment did not finish; else 0."""
    failed = [row for row in summary["runs"] if row["status"] in ("failed", "interrupted")]
    if failed:
        print(
            f"error: {len(failed)} of {len(summary['runs'])} runs did not finish; see their lines above",
            file=sys.stderr,
        )
    return 1 if failed else 0
