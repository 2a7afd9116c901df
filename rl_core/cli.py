"""Command line: `python -m rl_core algos | tasks | train …` (see `--help`)."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from tqdm import tqdm
from transformers.utils import logging as transformers_logging

from rl_core.algorithms import PRESETS, get_preset
from rl_core.config import RunConfig, parse_overrides
from rl_core.models import MODEL_PRESETS
from rl_core.trainer import Trainer, TrainingError
from toy_tasks import DEFAULT_TASK, TASKS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m rl_core", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("algos", help="list the algorithm presets")
    commands.add_parser("tasks", help="list the toy tasks")
    train = commands.add_parser("train", help="train one preset on one task")
    train.add_argument("--algo", required=True, help=f"one of: {', '.join(PRESETS)}")
    train.add_argument("--task", default=DEFAULT_TASK, help=f"one of: {', '.join(TASKS)} (default {DEFAULT_TASK})")
    train.add_argument("--model", default="tiny", help=f"model preset, one of: {', '.join(MODEL_PRESETS)}")
    train.add_argument("--steps", type=int, default=100)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--set", dest="overrides", action="append", default=[], metavar="KNOB=VALUE",
                       help="override a knob of the preset (repeatable), e.g. --set beta=0.1")
    train.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N, mps")
    train.add_argument("--demo-noise", type=float, default=None, help="fraction of imperfect SFT demonstrations")
    train.add_argument("--sft-steps", type=int, default=RunConfig.sft_steps)
    train.add_argument("--metrics-out", type=Path, help="write one JSON object per step to this .jsonl file")
    train.add_argument("--checkpoint", type=Path, help="save the trained policy, critic and optimiser state here")
    train.add_argument("--cache-dir", type=Path, help="where SFT checkpoints and reward models are cached")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
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


def json_safe(value):
    """The record with NaN/inf replaced by None, so every line is strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value
