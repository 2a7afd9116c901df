"""Training speed and sample efficiency of every preset, and our GRPO step next to TRL's GRPOTrainer.

Part 1, per preset on the default task (tiny model on the CPU unless --model/--device say otherwise; --set
overrides knobs of every preset), for each seed: the setup (SFT warm start, cached on
disk, and anything else `Trainer.prepare()` does) is timed on its own, then training runs until the policy
reaches the target success rate or the time budget is spent. Reported: median wall and CPU seconds per step,
completion tokens per second, success of the SFT policy and at the end (`Trainer.evaluate()`, 256 fresh
prompts), and the steps and training seconds to the target.

"Reached" means: the rolling mean of the training success rate over the last 3 steps is at least the target
*and* `Trainer.evaluate()` at that step agrees. A rolling mean alone can be lucky on 64 samples; when the
evaluation disagrees, training goes on and the next check waits for a fresh window of 3 steps.

Part 2 (skip with --skip-trl): seconds per optimizer step of our GRPO and of TRL's GRPOTrainer on the same
work — the same SFT policy and tokenizer, 8 prompts × 8 completions of at most 8 tokens, β = 0.04, one update
per batch, the same intra-op thread count; the two sides alternate for a few rounds. TRL is not a dependency
of this project: it is installed into a throwaway virtualenv outside the repository (kept and reused, keyed
by the TRL and torch versions) and runs in a subprocess.

Run from the repository root:
    python bench/benchmark.py --out bench/results/report.json [--presets grpo ppo] [--seeds 0 1 2]
                              [--max-seconds 60] [--full-budget] [--skip-trl | --skip-presets]
    python bench/benchmark.py --out bench/results/gpu.json --model gpt2 --device cuda --skip-trl \
                              --set learning_rate=1e-4
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import torch
import transformers
from tqdm import tqdm
from transformers.utils import logging as transformers_logging

# The engine is imported from the repository root, which a script in bench/ does not have on its path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rl_core.algorithms import PRESETS, get_preset  # noqa: E402
from rl_core.bridge.trl_env import DEFAULT_ROOT as TRL_VENV_ROOT  # noqa: E402
from rl_core.bridge.trl_env import TRL_SCRIPT_PRELUDE, trl_python
from rl_core.cli import json_safe  # noqa: E402
from rl_core.config import RunConfig, parse_overrides  # noqa: E402
from rl_core.engine.models import MODEL_PRESETS  # noqa: E402
from rl_core.engine.sft import default_cache_dir  # noqa: E402
from rl_core.engine.trainer import Trainer  # noqa: E402
from toy_tasks import DEFAULT_TASK  # noqa: E402

TARGET = 0.9
WINDOW = 3  # steps in the rolling mean of the training success rate
# The comparison's workload, as knobs of our grpo preset; the TRL script receives the same numbers.
COMPARISON_KNOBS = dict(
    prompts_per_step=8, num_generations=8, max_new_tokens=8, beta=0.04, ppo_epochs=1, num_minibatches=1
)


# ------------------------------------------------------------------ helpers
def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def spread(values: list[float]) -> dict | None:
    """Median and range of the values that exist (a run that never reached the target has None)."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    return {"median": statistics.median(present), "min": min(present), "max": max(present), "n": len(present)}


def fmt(summary: dict | None, digits: int) -> str:
    if summary is None:
        return "—"
    text = f"{summary['median']:.{digits}f}"
    if summary["min"] != summary["max"]:
        text += f" ({summary['min']:.{digits}f}–{summary['max']:.{digits}f})"
    return text


def make_trainer(
    preset: str,
    seed: int,
    cache_dir: Path,
    samples_per_record: int = 4,
    model: str = "tiny",
    device: str = "cpu",
    **knobs,
) -> Trainer:
    # `steps` only bounds `Trainer.steps()`; the benchmark's time budget ends a run long before.
    run = RunConfig(
        algo=get_preset(preset, **knobs),
        task=DEFAULT_TASK,
        model=model,
        steps=1_000_000,
        seed=seed,
        device=device,
        samples_per_record=samples_per_record,
    )
    return Trainer(run, cache_dir=cache_dir)


def timed_steps(trainer: Trainer):
    """Yield `(record, wall seconds, CPU seconds)` per step. CPU time is what the step itself consumed, so it
    stays meaningful when other processes share the cores and stretch the wall time."""
    steps = trainer.steps()
    while True:
        wall, cpu = time.perf_counter(), time.process_time()
        record = next(steps, None)
        if record is None:
            return
        yield record, time.perf_counter() - wall, time.process_time() - cpu


# ------------------------------------------------------- part 1: per preset
def measure_run(preset: str, seed: int, args) -> dict:
    load_before = load_average()
    trainer = make_trainer(preset, seed, args.cache_dir, model=args.model, device=args.device, **args.knobs)
    on_cuda = trainer.device.type == "cuda"
    if on_cuda:
        torch.cuda.reset_peak_memory_stats(trainer.device)
    bar = tqdm(
        total=args.max_seconds,
        desc=f"{preset} seed {seed}: setup",
        unit="s",
        leave=False,
        file=sys.stderr,
        bar_format="{desc} {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s {postfix}",
    )
    start = time.perf_counter()
    trainer.prepare()
    setup_s = time.perf_counter() - start
    success_start = trainer.evaluate()["success_rate"]
    bar.set_description(f"{preset} seed {seed}")

    walls, cpus, tokens, successes = [], [], [], []
    reached = None
    rejected_checks = 0
    next_check = WINDOW  # a check needs a full window of steps
    final = None
    for record, wall, cpu in timed_steps(trainer):
        walls.append(wall)
        cpus.append(cpu)
        tokens.append(record["tokens_per_second"] * record["step_time"])  # the step's completion tokens
        successes.append(record["success_rate"])
        step = len(walls)
        bar.update(min(wall, bar.total - bar.n))  # the last step may overrun the budget; the bar stops full
        bar.set_postfix_str(f"step {step}, success {record['success_rate']:.2f}")
        if reached is None and step >= next_check and statistics.fmean(successes[-WINDOW:]) >= TARGET:
            evaluation = trainer.evaluate()
            if evaluation["success_rate"] >= TARGET:
                reached = {"step": step, "seconds": sum(walls), "success": evaluation["success_rate"]}
                if not args.full_budget:
                    final = evaluation  # the policy that just passed the check is the final one
                    break
            else:
                rejected_checks += 1
                next_check = step + WINDOW
        if sum(walls) >= args.max_seconds:
            break
    bar.close()
    final = final or trainer.evaluate()
    # The first step also pays for one-time work (the optimiser's state, lazy initialisation inside torch).
    timed = slice(1, None) if len(walls) > 1 else slice(None)
    return {
        "preset": preset,
        "seed": seed,
        "setup_s": setup_s,
        "steps": len(walls),
        "train_s": sum(walls),
        "step_s_median": statistics.median(walls[timed]),
        "step_cpu_s_median": statistics.median(cpus[timed]),
        "tokens_per_s": sum(tokens) / sum(walls),
        "success_start": success_start,
        "success_end": final["success_rate"],
        "reached": reached is not None,
        "steps_to_target": reached["step"] if reached else None,
        "seconds_to_target": reached["seconds"] if reached else None,
        "success_at_target": reached["success"] if reached else None,
        "rejected_checks": rejected_checks,
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "peak_gpu_memory_gib": torch.cuda.max_memory_allocated(trainer.device) / 2**30 if on_cuda else None,
        "step_seconds": walls,
        "training_success": successes,
    }


def summarise(runs: list[dict]) -> dict:
    keys = (
        "setup_s",
        "step_s_median",
        "step_cpu_s_median",
        "tokens_per_s",
        "success_start",
        "success_end",
        "steps_to_target",
        "seconds_to_target",
        "peak_gpu_memory_gib",
    )
    summary = {k: spread([r[k] for r in runs]) for k in keys}
    summary["reached"] = f"{sum(r['reached'] for r in runs)}/{len(runs)}"
    return summary


def print_preset_table(results: dict[str, dict]) -> None:
    columns = [
        ("preset", 22, lambda name, s: name),
        ("s/step", 22, lambda name, s: fmt(s["step_s_median"], 3)),
        ("CPU s/step", 22, lambda name, s: fmt(s["step_cpu_s_median"], 3)),
        ("tok/s", 18, lambda name, s: fmt(s["tokens_per_s"], 0)),
        ("success start", 19, lambda name, s: fmt(s["success_start"], 2)),
        ("success end", 19, lambda name, s: fmt(s["success_end"], 2)),
        (f"steps→{TARGET:.0%}", 14, lambda name, s: fmt(s["steps_to_target"], 0)),
        (f"s→{TARGET:.0%}", 18, lambda name, s: fmt(s["seconds_to_target"], 1)),
        ("reached", 8, lambda name, s: s["reached"]),
        ("setup s", 18, lambda name, s: fmt(s["setup_s"], 1)),
    ]
    if any(result["summary"]["peak_gpu_memory_gib"] for result in results.values()):
        columns.append(("GPU GiB", 16, lambda name, s: fmt(s["peak_gpu_memory_gib"], 2)))
    print("  ".join(f"{title:<{width}}" for title, width, _ in columns))
    for name, result in results.items():
        print("  ".join(f"{cell(name, result['summary']):<{width}}" for _, width, cell in columns))


# ------------------------------------------------------ part 2: TRL vs ours
# GRPOTrainer on a local tiny GPT-2; prints one JSON line with the wall and CPU seconds of every step.
TRL_SCRIPT = TRL_SCRIPT_PRELUDE + textwrap.dedent(
    '''
    class StepClock(TrainerCallback):
        """Wall and CPU clock at the end of every optimizer step; their differences are the step times."""

        def __init__(self):
            self.marks = []

        def on_train_begin(self, args, state, control, **kwargs):
            self.marks.append((time.perf_counter(), time.process_time()))

        def on_step_end(self, args, state, control, **kwargs):
            self.marks.append((time.perf_counter(), time.process_time()))


    config = GRPOConfig(
        output_dir=spec["output_dir"],
        use_cpu=True,
        bf16=False,
        seed=spec["seed"],
        per_device_train_batch_size=spec["prompts_per_step"] * spec["num_generations"],
        num_generations=spec["num_generations"],
        max_completion_length=spec["max_new_tokens"],
        gradient_accumulation_steps=1,
        num_iterations=spec["ppo_epochs"],
        beta=spec["beta"],
        epsilon=spec["epsilon"],
        loss_type="grpo",
        temperature=spec["temperature"],
        learning_rate=spec["learning_rate"],
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=spec["max_grad_norm"],
        max_steps=spec["steps"],
        report_to="none",
        logging_strategy="no",
        save_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    clock = StepClock()
    trainer = GRPOTrainer(
        model=spec["model_dir"],
        reward_funcs=exact_answer,
        args=config,
        train_dataset=Dataset.from_list(spec["rows"]),
        processing_class=tokenizer,
        callbacks=[clock],
    )
    trainer.train()
    print(json.dumps({
        "step_seconds": [b[0] - a[0] for a, b in zip(clock.marks, clock.marks[1:])],
        "step_cpu_seconds": [b[1] - a[1] for a, b in zip(clock.marks, clock.marks[1:])],
        "versions": {"trl": trl.__version__, "torch": torch.__version__, "transformers": transformers.__version__},
        "cuda_build": torch.version.cuda,
        "threads": torch.get_num_threads(),
    }))
    '''
)


def measure_ours(args) -> dict:
    """Our grpo preset with the comparison's knobs, from the SFT policy. TRL builds no per-token sample views
    for a dashboard, so for the same work ours builds none either."""
    trainer = make_trainer("grpo", args.seeds[0], args.cache_dir, samples_per_record=0, **COMPARISON_KNOBS)
    trainer.prepare()
    walls, cpus = [], []
    steps = tqdm(
        timed_steps(trainer), total=args.comparison_steps, desc="ours: grpo", unit="step", leave=False, file=sys.stderr
    )
    for _, wall, cpu in steps:
        walls.append(wall)
        cpus.append(cpu)
        if len(walls) == args.comparison_steps:
            break
    steps.close()
    return {"step_seconds": walls, "step_cpu_seconds": cpus}


def measure_trl(args) -> dict:
    """TRL's GRPOTrainer, in its own virtualenv, from the same SFT policy with the same tokenizer."""
    trainer = make_trainer("grpo", args.seeds[0], args.cache_dir, **COMPARISON_KNOBS)
    trainer.prepare()
    python = trl_python(args.trl_venv)
    with tempfile.TemporaryDirectory(prefix="bench-trl-") as folder:
        return _run_trl(python, trainer, Path(folder), args)


def _run_trl(python: Path, trainer: Trainer, workdir: Path, args) -> dict:
    model_dir = workdir / "policy"
    trainer.policy.save_pretrained(model_dir)
    trainer.tokenizer.save_pretrained(model_dir)
    algo = trainer.algo
    n_prompts = args.comparison_steps * algo.prompts_per_step
    prompts = trainer.task.sample_prompts(n_prompts, random.Random(trainer.run.seed))
    spec = {
        "model_dir": str(model_dir),
        "output_dir": str(workdir / "trl-output"),
        # TRL tokenises the prompt text as it is; the BOS token written out is matched as one special token,
        # so TRL's prompts are the very ids our rollout builds.
        "rows": [{"prompt": trainer.tokenizer.bos_token + p, "answer": trainer.task.answer(p)} for p in prompts],
        "steps": args.comparison_steps,
        "seed": trainer.run.seed,
        "threads": torch.get_num_threads(),
        **{k: getattr(algo, k) for k in COMPARISON_KNOBS},
        **{k: getattr(algo, k) for k in ("epsilon", "temperature", "learning_rate", "max_grad_norm")},
    }
    (workdir / "spec.json").write_text(json.dumps(spec))
    script = workdir / "trl_grpo.py"
    script.write_text(TRL_SCRIPT)
    # Offline: the model and tokenizer are local folders, and nothing else may be fetched.
    env = os.environ | {
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_VERBOSITY": "error",
        "PYTHONWARNINGS": "ignore",
        "TOKENIZERS_PARALLELISM": "false",
    }
    print(f"TRL: {args.comparison_steps} steps in a subprocess (its imports take a while)", file=sys.stderr)
    done = subprocess.run(
        [str(python), str(script), str(workdir / "spec.json")],
        capture_output=True,
        text=True,
        env=env,
        cwd=workdir,
        timeout=args.trl_timeout,
    )
    if done.returncode:
        raise RuntimeError(f"the TRL run failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare_with_trl(args) -> dict:
    """Alternate TRL and ours for a few rounds and pool the steps after each block's warm-up: the load of a shared
    machine drifts over minutes, and alternating spreads that drift over both sides alike."""
    rounds = {"trl": [], "ours": []}
    for _ in tqdm(range(args.comparison_rounds), desc="TRL comparison", unit="round", file=sys.stderr):
        for name in rounds:
            load = load_average()
            block = measure_trl(args) if name == "trl" else measure_ours(args)
            block["load_average"] = [load, load_average()]
            rounds[name].append(block)
    warmup = args.comparison_warmup
    sides = {}
    for name, blocks in rounds.items():
        walls = [s for block in blocks for s in block["step_seconds"][warmup:]]
        cpus = [s for block in blocks for s in block["step_cpu_seconds"][warmup:]]
        sides[name] = {
            "step_s_median": statistics.median(walls),
            "step_s_min": min(walls),
            "step_cpu_s_median": statistics.median(cpus),
            "rounds": blocks,
        }
    return {
        "workload": {
            **COMPARISON_KNOBS,
            "task": DEFAULT_TASK,
            "model": "tiny",
            "seed": args.seeds[0],
            "steps": args.comparison_steps,
            "warmup_steps_skipped": warmup,
            "rounds": args.comparison_rounds,
            "threads": torch.get_num_threads(),
        },
        **sides,
        "trl_versions": rounds["trl"][0]["versions"],
        "ratio_trl_over_ours": sides["trl"]["step_s_median"] / sides["ours"]["step_s_median"],
        "ratio_trl_over_ours_cpu": sides["trl"]["step_cpu_s_median"] / sides["ours"]["step_cpu_s_median"],
    }


def print_comparison(result: dict) -> None:
    work = result["workload"]
    print(
        f"\nGRPO step vs TRL {result['trl_versions']['trl']}: {work['rounds']} alternating round(s) of "
        f"{work['steps']} steps per side, first {work['warmup_steps_skipped']} of each left out, "
        f"{work['threads']} thread(s)"
    )
    print(f"{'':<6}{'wall s/step':>12}{'min':>8}{'CPU s/step':>12}  load average at the start of each round")
    for name in ("ours", "trl"):
        side = result[name]
        loads = " | ".join(" ".join(f"{x:.2f}" for x in block["load_average"][0]) for block in side["rounds"])
        print(
            f"{name:<6}{side['step_s_median']:>12.4f}{side['step_s_min']:>8.4f}"
            f"{side['step_cpu_s_median']:>12.4f}  {loads}"
        )
    ratio, cpu_ratio = result["ratio_trl_over_ours"], result["ratio_trl_over_ours_cpu"]
    verdict = "met" if ratio >= 2 else "not met"
    print(f"TRL / ours: {ratio:.2f}× wall, {cpu_ratio:.2f}× CPU (target ≥ 2× wall: {verdict})")


# ---------------------------------------------------------------------- main
def machine_info() -> dict:
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "load_average": load_average(),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the JSON report to write")
    parser.add_argument(
        "--presets",
        nargs="+",
        default=list(PRESETS),
        choices=list(PRESETS),
        metavar="PRESET",
        help=f"default: all ({', '.join(PRESETS)})",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="default: 0 1 2")
    parser.add_argument("--max-seconds", type=float, default=60.0, help="training budget of each run (default 60)")
    parser.add_argument(
        "--full-budget",
        action="store_true",
        help="keep training to --max-seconds after the target is reached (success at the end then "
        "shows whether the policy stays there)",
    )
    parser.add_argument(
        "--model",
        default="tiny",
        choices=list(MODEL_PRESETS),
        help="model preset of part 1 (default tiny; the TRL comparison always uses tiny)",
    )
    parser.add_argument("--device", default="cpu", help="device of part 1: cpu (default), cuda, cuda:N, mps, auto")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help="override a knob of every preset in part 1 (repeatable), e.g. --set learning_rate=1e-4",
    )
    parser.add_argument("--skip-presets", action="store_true", help="only compare with TRL's GRPOTrainer")
    parser.add_argument("--skip-trl", action="store_true", help="skip the comparison with TRL's GRPOTrainer")
    parser.add_argument("--comparison-steps", type=int, default=30, help="steps of each side of the comparison")
    parser.add_argument("--comparison-warmup", type=int, default=5, help="first steps of each block left out")
    parser.add_argument("--comparison-rounds", type=int, default=3, help="alternating TRL/ours rounds (default 3)")
    parser.add_argument(
        "--trl-venv",
        type=Path,
        default=TRL_VENV_ROOT,
        help="folder of the throwaway virtualenvs holding TRL (default: %(default)s)",
    )
    parser.add_argument("--trl-timeout", type=float, default=900.0, help="seconds before the TRL run is abandoned")
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir(), help="SFT checkpoint cache")
    args = parser.parse_args(argv)
    if args.comparison_steps <= args.comparison_warmup:
        parser.error("--comparison-steps must exceed --comparison-warmup")
    if args.comparison_rounds < 1:
        parser.error("--comparison-rounds must be at least 1")
    if args.skip_presets and args.skip_trl:
        parser.error("--skip-presets and --skip-trl together leave nothing to measure")
    try:
        args.knobs = parse_overrides(args.overrides)
    except ValueError as error:
        parser.error(str(error))
    return args


def run_presets(report: dict, args) -> None:
    # Train (or load) each seed's SFT policy once up front, so no run's setup time includes it.
    report["sft_warm_start_s"] = {}
    for seed in tqdm(args.seeds, desc="SFT warm start", unit="seed", file=sys.stderr):
        start = time.perf_counter()
        # Every preset starts from the same SFT policy.
        make_trainer("grpo", seed, args.cache_dir, model=args.model, device=args.device).prepare()
        report["sft_warm_start_s"][seed] = time.perf_counter() - start
    runs = [(preset, seed) for preset in args.presets for seed in args.seeds]
    for preset, seed in tqdm(runs, desc="runs", unit="run", file=sys.stderr):
        report["presets"].setdefault(preset, {"runs": []})["runs"].append(measure_run(preset, seed, args))
    for result in report["presets"].values():
        result["summary"] = summarise(result["runs"])
    knobs = "".join(f", {name}={value}" for name, value in args.knobs.items())
    print(
        f"\n{DEFAULT_TASK}, {args.model} model, {args.device}{knobs}, seeds {' '.join(map(str, args.seeds))}: "
        "median (min–max)"
    )
    print_preset_table(report["presets"])
    sft = ", ".join(f"seed {seed}: {seconds:.1f}" for seed, seconds in report["sft_warm_start_s"].items())
    print(f"SFT warm start (trained once, then cached), s: {sft}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    transformers_logging.disable_progress_bar()  # the benchmark's bars are the only ones
    report = {
        "machine": machine_info(),
        "settings": {
            "task": DEFAULT_TASK,
            "model": args.model,
            "device": args.device,
            "knobs": args.knobs,
            "target_success": TARGET,
            "rolling_window": WINDOW,
            "max_seconds": args.max_seconds,
            "full_budget": args.full_budget,
            "seeds": args.seeds,
        },
        "presets": {},
    }
    if not args.skip_presets:
        run_presets(report, args)
    if not args.skip_trl:
        report["trl_comparison"] = compare_with_trl(args)
        print_comparison(report["trl_comparison"])
    report["machine"]["load_average_end"] = load_average()
    machine = report["machine"]
    print(f"\nload average: {machine['load_average']} at start, {machine['load_average_end']} at end")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(json_safe(report), indent=2))
    print(f"report written to {args.out}")


if __name__ == "__main__":
    main()
