"""Stability of every preset over a long run: does a solved task stay solved?

Every preset (default: all of `PRESETS`) × seeds (default 0 1 2) trains for 400 steps on the default task, one
run per worker process (one torch thread each). Per run it reports, from the training batches' success rate:

| column | meaning |
| --- | --- |
| last-100 mean / min | mean and minimum batch success over the last 100 steps |
| min≥50 | the lowest batch success after step 50 (the SFT start is allowed to be low) |
| largest drop | the largest fall of batch success below its best of the previous 10 steps, and where |
| spikes | steps whose grad norm is over 10× the median of the previous 50 steps and over 0.1 |
| max grad norm | the largest (pre-clip) grad norm of the run and where |
| skipped | optimiser steps skipped on an exactly zero gradient (`skip_no_signal_updates`) |

The verdict line applies the bar: every run's last-100 mean ≥ 0.90 and no step of the last 100 below 0.60.
The JSON report also holds each run's per-step success, grad norm, approx KL, entropy and KL to the reference.

    python bench/stability.py --out bench/results/stability.json [--presets ppo grpo] [--seeds 0 1 2]
                              [--steps 400] [--workers N] [--set KNOB=VALUE]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

# The engine is imported from the repository root, which a script in bench/ does not have on its path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rl_core.algorithms import PRESETS  # noqa: E402

LAST = 100  # the window the verdict judges
WARMUP = 50  # steps before "no step below" applies
DROP_WINDOW = 10
SPIKE_FACTOR, SPIKE_FLOOR, SPIKE_WINDOW = 10.0, 0.1, 50
MEAN_BAR, MIN_BAR = 0.90, 0.60
TRACES = (
    "success_rate",
    "grad_norm",
    "approx_kl",
    "clip_frac",
    "entropy",
    "kl_exact",
    "explained_variance",
    "advantage_std",
    "skipped_updates",
)


def largest_drop(success: list[float], window: int = DROP_WINDOW) -> tuple[float, int]:
    """`(max_t (max(s[t−window:t]) − s[t]), step)`: the deepest fall below the recent best (steps count from 1)."""
    drop, where = 0.0, 0
    for t in range(1, len(success)):
        fall = max(success[max(0, t - window) : t]) - success[t]
        if fall > drop:
            drop, where = fall, t + 1
    return drop, where


def grad_norm_spikes(norms: list[float]) -> list[int]:
    """Steps (from 1) whose grad norm exceeds SPIKE_FACTOR × the median of the previous SPIKE_WINDOW steps."""
    return [
        t + 1
        for t in range(1, len(norms))
        if norms[t] > SPIKE_FLOOR and norms[t] > SPIKE_FACTOR * statistics.median(norms[max(0, t - SPIKE_WINDOW) : t])
    ]


def summarise(records: list[dict]) -> dict:
    success = [r["success_rate"] for r in records]
    norms = [r["grad_norm"] for r in records]
    last = success[-LAST:]
    drop, drop_step = largest_drop(success)
    peak = max(range(len(norms)), key=norms.__getitem__)
    return {
        "last100_mean": statistics.fmean(last),
        "last100_min": min(last),
        "min_after_warmup": min(success[WARMUP:] or success),
        "largest_drop": drop,
        "largest_drop_step": drop_step,
        "spikes": grad_norm_spikes(norms),
        "max_grad_norm": norms[peak],
        "max_grad_norm_step": peak + 1,
        "skipped_updates": sum(r.get("skipped_updates", 0) for r in records),
    }


def _prepare_sft(task: str, seed: int, model: str, cache_dir: str) -> None:
    """Train (or find) one seed's SFT checkpoint, so the runs that share it do not all train it at once."""
    from rl_core.algorithms import get_preset
    from rl_core.config import RunConfig
    from rl_core.engine.trainer import Trainer

    Trainer(RunConfig(algo=get_preset("grpo"), task=task, model=model, seed=seed, device="cpu"), cache_dir).prepare()


def _run(preset: str, seed: int, steps: int, task: str, model: str, overrides: dict, cache_dir: str) -> dict:
    import torch

    from rl_core.algorithms import get_preset
    from rl_core.config import RunConfig
    from rl_core.engine.trainer import Trainer

    torch.set_num_threads(1)
    run = RunConfig(
        algo=get_preset(preset, **overrides),
        task=task,
        model=model,
        steps=steps,
        seed=seed,
        device="cpu",
        samples_per_record=0,
    )
    trainer = Trainer(run, cache_dir)
    setup = trainer.prepare()
    start, cpu_start = time.perf_counter(), time.process_time()
    records = [{k: r.get(k, 0.0) for k in TRACES} for r in trainer.steps()]
    return {
        "preset": preset,
        "seed": seed,
        "setup": setup,
        "seconds": time.perf_counter() - start,
        "cpu_seconds": time.process_time() - cpu_start,
        **summarise(records),
        "trace": {k: [r[k] for r in records] for k in TRACES},
    }


def _passes(result: dict) -> bool:
    return result["last100_mean"] >= MEAN_BAR and result["last100_min"] >= MIN_BAR


def format_table(results: list[dict]) -> str:
    header = (
        f"{'preset':<22} {'seed':>4} {'last100 mean':>12} {'last100 min':>11} {'min≥50':>6} "
        f"{'largest drop (step)':>19} {'spikes':>6} {'max gn (step)':>14} {'skipped':>7} {'s':>6}"
    )
    lines = [header, "-" * len(header)]
    for r in results:
        ok = _passes(r)
        lines.append(
            f"{r['preset']:<22} {r['seed']:>4} {r['last100_mean']:>12.3f} {r['last100_min']:>11.3f} "
            f"{r['min_after_warmup']:>6.2f} {r['largest_drop']:>12.2f} ({r['largest_drop_step']:>3}) "
            f"{len(r['spikes']):>6} {r['max_grad_norm']:>7.2f} ({r['max_grad_norm_step']:>3}) "
            f"{r['skipped_updates']:>7} {r['seconds']:>6.0f}{'' if ok else '  ✗'}"
        )
    failed = [f"{r['preset']}/{r['seed']}" for r in results if not _passes(r)]
    verdict = (
        f"all {len(results)} runs: last-100 mean ≥ {MEAN_BAR} and no step of the last {LAST} below {MIN_BAR}"
        if not failed
        else f"{len(failed)} of {len(results)} runs miss the bar: {', '.join(failed)}"
    )
    return "\n".join(lines + [verdict])


def main(argv: list[str] | None = None) -> int:
    from rl_core.config import parse_overrides
    from rl_core.engine.sft import default_cache_dir
    from toy_tasks import DEFAULT_TASK

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="JSON report")
    parser.add_argument("--presets", nargs="+", default=list(PRESETS), choices=list(PRESETS), metavar="PRESET")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--task", default=DEFAULT_TASK)
    parser.add_argument("--model", default="tiny")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help="override a knob of every preset (repeatable)",
    )
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--cache-dir", default=str(default_cache_dir()))
    args = parser.parse_args(argv)
    overrides = parse_overrides(args.overrides)
    started = time.time()
    # Longest runs first (a critic or 64 prompts per step), so the pool does not end on one straggler.
    order = sorted(
        ((p, s) for p in args.presets for s in args.seeds),
        key=lambda ps: -(PRESETS[ps[0]].use_critic + PRESETS[ps[0]].prompts_per_step / 64),
    )
    results = []
    with ProcessPoolExecutor(args.workers, mp_context=get_context("spawn")) as pool:
        for future in [pool.submit(_prepare_sft, args.task, s, args.model, args.cache_dir) for s in args.seeds]:
            future.result()
        futures = [
            pool.submit(_run, p, s, args.steps, args.task, args.model, overrides, args.cache_dir) for p, s in order
        ]
        for future in as_completed(futures):
            result = future.result()
            results.append(result)
            print(
                f"done {result['preset']}/{result['seed']}: last-100 mean {result['last100_mean']:.3f}, "
                f"min {result['last100_min']:.3f} ({result['seconds']:.0f} s)",
                flush=True,
            )
            write_report(args, overrides, results, started)  # an interrupted sweep keeps what it finished
    print(write_report(args, overrides, results, started))
    return 0


def write_report(args, overrides: dict, results: list[dict], started: float) -> str:
    """Write the JSON report of the runs finished so far (sorted as asked); returns the table."""
    rank = {p: i for i, p in enumerate(args.presets)}
    results = sorted(results, key=lambda r: (rank[r["preset"]], r["seed"]))
    table = format_table(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "created": datetime.datetime.now(datetime.UTC).isoformat(),
                "host": platform.node(),
                "load_average": os.getloadavg(),
                "wall_seconds": time.time() - started,
                "settings": {
                    "task": args.task,
                    "model": args.model,
                    "steps": args.steps,
                    "seeds": args.seeds,
                    "overrides": overrides,
                    "workers": args.workers,
                },
                "table": table,
                "runs": results,
            },
            indent=1,
        )
    )
    return table


if __name__ == "__main__":
    raise SystemExit(main())
