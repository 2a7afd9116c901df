"""Command line: `python -m rl_core algos | tasks | train … | sweep …` (see `--help`)."""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path

from tqdm import tqdm
from transformers.utils import logging as transformers_logging

from rl_core.algorithms import PRESETS, get_preset
from rl_core.config import RunConfig, parse_overrides
from rl_core.models import MODEL_PRESETS
from rl_core.store import RunStore, StoredRun, StoreError
from rl_core.summary import format_table, run_row, summarise, write_csv
from rl_core.sweep import Sweep, default_workers, parse_grid, plan_sweep
from rl_core.trainer import Trainer, TrainingError
from toy_tasks import DEFAULT_TASK, TASKS


class Parser(argparse.ArgumentParser):
    """argparse, with a refusal on one line of its own (`error: …`, exit 2) instead of the usage block."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m rl_core", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    commands.add_parser("algos", help="list the algorithm presets")
    commands.add_parser("tasks", help="list the toy tasks")
    train = commands.add_parser("train", help="train one preset on one task")
    train.add_argument("--algo", required=True, help=f"one of: {', '.join(PRESETS)}")
    train.add_argument("--seed", type=int, default=0)
    _add_run_arguments(train)
    train.add_argument("--metrics-out", type=Path, help="write one JSON object per step to this .jsonl file")
    train.add_argument("--checkpoint", type=Path, help="save the trained policy, critic and optimiser state here")
    sweep = commands.add_parser(
        "sweep", help="train presets (or values of a knob) × seeds in parallel worker processes and compare them"
    )
    sweep.add_argument("--algos", required=True, help=f"comma-separated presets, from: {', '.join(PRESETS)}")
    sweep.add_argument("--seeds", type=int, default=3, help="seeds 0 … N−1 of every preset and grid value")
    sweep.add_argument("--grid", action="append", default=[], metavar="KNOB=V1,V2,…",
                       help="run every preset with each of these values of a knob (repeatable: all combinations)")
    sweep.add_argument("--workers", type=int, default=None,
                       help=f"runs trained at once, one process each (default: the cores here, {default_workers()})")
    _add_run_arguments(sweep)
    sweep.add_argument("--db", type=Path, help="the run store (default: $RLHF_LAB_DB or runs.sqlite in the cache)")
    sweep.add_argument("--out", type=Path, required=True,
                       help="folder for runs/<group>-seed<N>.csv (per-step metrics), runs.csv and summary.csv")
    return parser


def _add_run_arguments(command: argparse.ArgumentParser) -> None:
    """What train and sweep share: the task, model, run length, knob overrides, warm start and caches."""
    command.add_argument("--task", default=DEFAULT_TASK, help=f"one of: {', '.join(TASKS)} (default {DEFAULT_TASK})")
    command.add_argument("--model", default="tiny", help=f"model preset, one of: {', '.join(MODEL_PRESETS)}")
    command.add_argument("--steps", type=int, default=100)
    command.add_argument("--set", dest="overrides", action="append", default=[], metavar="KNOB=VALUE",
                         help="override a knob of the preset (repeatable), e.g. --set beta=0.1")
    command.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N, mps")
    command.add_argument("--demo-noise", type=float, default=None, help="fraction of imperfect SFT demonstrations")
    command.add_argument("--sft-steps", type=int, default=RunConfig.sft_steps)
    command.add_argument("--cache-dir", type=Path, help="where SFT checkpoints and reward models are cached")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except (ValueError, StoreError) as error:  # refused input found late (e.g. a checkpoint folder)
        print(f"error: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001 - one line, never a traceback; the type says where to look
        print(f"error: {type(error).__name__}: {error}", file=sys.stderr)
        return 1


def _run(args) -> int:
    transformers_logging.disable_progress_bar()  # our own bar is the only one
    if args.command == "algos":
        for preset in PRESETS.values():
            print(f"{preset.name:<22} {preset.title:<28} {preset.summary}")
        return 0
    if args.command == "tasks":
        for name, task in TASKS.items():
            marker = " (default)" if name == DEFAULT_TASK else ""
            print(f"{name:<14} {task.description}{marker}")
        return 0
    if args.command == "sweep":
        return _sweep(args)
    try:
        run = RunConfig(
            algo=get_preset(args.algo, **parse_overrides(args.overrides)),
            task=args.task,
            model=args.model,
            steps=args.steps,
            seed=args.seed,
            device=args.device,
            demo_noise=args.demo_noise,
            sft_steps=args.sft_steps,
        )
        trainer = Trainer(run, cache_dir=args.cache_dir)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return _train(trainer, args)


def _train(trainer: Trainer, args) -> int:
    start = time.perf_counter()
    bar = tqdm(total=args.steps, desc=f"{args.algo} on {args.task}", unit="step", file=sys.stderr)
    phases = {"reward": "reward model", "sft": "SFT warm start", "value_pretrain": "value pretraining"}

    def setup_progress(phase: str, done: int, total: int) -> None:
        bar.set_description(f"{phases[phase]} {done}/{total}", refresh=False)

    metrics_file = args.metrics_out.open("w") if args.metrics_out else None
    record = {}
    try:
        trainer.prepare(setup_progress)
        bar.set_description(f"{args.algo} on {args.task}")
        for record in trainer.steps():
            bar.update(1)
            bar.set_postfix(success=f"{record['success_rate']:.2f}", reward=f"{record['reward_mean']:.2f}")
            if metrics_file:
                metrics_file.write(json.dumps(json_safe(record)) + "\n")
                metrics_file.flush()
    except TrainingError as error:
        bar.close()  # ends the bar's line, so the message stands on a line of its own
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        bar.close()
        print("interrupted: stopping after the last finished step", file=sys.stderr)
    finally:
        bar.close()
        if metrics_file:
            metrics_file.close()
    if args.checkpoint:
        trainer.save_checkpoint(args.checkpoint)
    final = trainer.evaluate()
    print(
        f"final success={final['success_rate']:.3f} reward={final['reward_mean']:.3f} "
        f"steps={trainer.step_index} seconds={time.perf_counter() - start:.1f}"
    )
    return 0


def _sweep(args) -> int:
    try:
        if args.seeds < 1:
            raise ValueError(f"--seeds {args.seeds} is out of range; allowed: an integer ≥ 1")
        algos = [name.strip() for name in args.algos.split(",") if name.strip()]
        planned = plan_sweep(
            algos, range(args.seeds), args.task, args.steps,
            overrides=parse_overrides(args.overrides), grid=parse_grid(args.grid),
            model=args.model, device=args.device, demo_noise=args.demo_noise, sft_steps=args.sft_steps,
        )
        if args.out.exists() and not args.out.is_dir():
            raise ValueError(f"--out {args.out} is a file; give a folder")
        (args.out / "runs").mkdir(parents=True, exist_ok=True)  # before training: a folder we cannot write fails now
        spec = {"task": args.task, "algos": algos, "seeds": args.seeds, "steps": args.steps,
                "grid": args.grid, "overrides": args.overrides}
        sweep = Sweep(planned, RunStore(args.db), workers=args.workers, cache_dir=args.cache_dir, spec=spec)
    except OSError as error:
        print(f"error: --out {args.out}: {error.strerror}", file=sys.stderr)
        return 2
    except (ValueError, StoreError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    workers = min(sweep.workers, len(planned))
    print(f"{len(planned)} runs, {workers} at a time; the run store is {sweep.store.path}", file=sys.stderr)
    bar = tqdm(total=sum(p.run.steps for p in planned), desc="sweep", unit="step", file=sys.stderr)
    reported: set[int] = set()

    def report(runs: list[StoredRun]) -> None:
        bar.update(sum(run.steps_done for run in runs) - bar.n)
        for run in runs:
            if not run.active and run.id not in reported:
                reported.add(run.id)
                seconds = "" if math.isnan(run.wall_time) else f", {run.wall_time:.1f} s"
                success = f", final success {run.final['success_rate']:.3f}" if run.final else ""
                error = f": {run.error}" if run.error else ""
                bar.write(f"{run.label} seed {run.seed}: {run.status} after {run.steps_done} steps{seconds}{success}"
                          f"{error}", file=sys.stderr)

    start = time.perf_counter()
    try:
        runs = sweep.run(report)
    finally:
        bar.close()
    print(f"{len(runs)} runs in {time.perf_counter() - start:.1f} s, {workers} at a time", file=sys.stderr)
    rows = _write_sweep(sweep.store, runs, args.out)
    print(format_table(summarise(rows)))
    failed = [run for run in runs if run.status in ("failed", "interrupted")]
    if failed:
        print(f"error: {len(failed)} of {len(runs)} runs did not finish; see their lines above", file=sys.stderr)
    return 1 if failed else 0


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


def json_safe(value):
    """The record with NaN/inf replaced by None, so every line is strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value
