"""Stacked runs against runs one after another: the model passes of a training step, per run.

For R runs of one preset (default `grpo` on its default task, the tiny model, one CPU thread), each with its own
copy of the SFT policy, its own prompts and its own generator, the two model phases of a step are timed:

* sample — `rollout.sample` once per run, against `stacked_runs.sample_runs` once for all R;
* forward + backward — `rollout.response_logits` and a policy-gradient-like loss's backward once per run, against
  `StackedPolicies.response_logits` and one backward for all R.

Each cell is the median over `--repeats` of the phase's process-CPU and wall milliseconds divided by R, and the
speed-up is alone ÷ together in CPU time (contention stretches it less than wall time). The load average is read
before and after. Everything else a step does (losses, advantages, metrics, the optimiser) is not timed here.

Run from the repository root:
    python bench/stacked_runs.py [--runs 1 4 8] [--algo grpo] [--task caesar] [--repeats 10] [--out report.json]
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the engine is imported from the repository root

import torch  # noqa: E402

from rl_core.algorithms import get_preset  # noqa: E402
from rl_core.config import RunConfig  # noqa: E402
from rl_core.engine.rollout import response_logits, sample, token_logprobs  # noqa: E402
from rl_core.engine.stacked_runs import StackedPolicies, sample_runs  # noqa: E402
from rl_core.engine.trainer import Trainer  # noqa: E402


def timed(fn, repeats: int) -> tuple[float, float]:
    """Median process-CPU and wall seconds of `fn()` over `repeats` calls (after one call that is not counted)."""
    fn()
    cpu, wall = [], []
    for _ in range(repeats):
        c, w = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return statistics.median(cpu), statistics.median(wall)


def loss(logits, batch):
    return -(token_logprobs(logits, batch.response_ids) * batch.response_mask).sum() / batch.response_mask.sum()


def measure(trainer: Trainer, runs: int, repeats: int) -> dict:
    algo, task, tokenizer = trainer.algo, trainer.task, trainer.tokenizer
    policies = [copy.deepcopy(trainer.policy) for _ in range(runs)]
    prompts = [task.sample_prompts(algo.prompts_per_step, random.Random(r)) for r in range(runs)]
    temperature, G, limit = algo.temperature, algo.num_generations, trainer.max_new_tokens

    def generators():
        return [torch.Generator().manual_seed(r) for r in range(runs)]

    stack = StackedPolicies(policies)
    rollouts = sample_runs(stack, tokenizer, prompts, limit, [temperature] * runs, generators(), G)

    def sample_alone():
        for policy, p, g in zip(policies, prompts, generators()):
            sample(policy, tokenizer, p, limit, temperature, g, G)

    def sample_together():
        sample_runs(stack, tokenizer, prompts, limit, [temperature] * runs, generators(), G)

    trained = StackedPolicies(policies, requires_grad=True)

    def backward_alone():
        for policy, batch in zip(policies, rollouts):
            loss(response_logits(policy, batch, temperature), batch).backward()

    def backward_together():
        logits = trained.response_logits(rollouts, temperature)
        sum(loss(lg, batch) for lg, batch in zip(logits, rollouts)).backward()

    row = {"runs": runs, "response_tokens_per_run": sum(r.response_mask.sum().item() for r in rollouts) / runs}
    for phase, alone, together in (("sample", sample_alone, sample_together),
                                   ("forward_backward", backward_alone, backward_together)):
        (cpu_a, wall_a), (cpu_t, wall_t) = timed(alone, repeats), timed(together, repeats)
        row[phase] = {
            "alone_cpu_ms_per_run": 1000 * cpu_a / runs, "together_cpu_ms_per_run": 1000 * cpu_t / runs,
            "alone_wall_ms_per_run": 1000 * wall_a / runs, "together_wall_ms_per_run": 1000 * wall_t / runs,
            "speedup_cpu": cpu_a / cpu_t,
        }
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--algo", default="grpo")
    parser.add_argument("--task", default="caesar")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if min(args.runs) < 1 or args.repeats < 1:
        parser.error("--runs and --repeats take positive integers")
    trainer = Trainer(RunConfig(algo=get_preset(args.algo), task=args.task, steps=1, seed=0))
    trainer.prepare()
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    rows = [measure(trainer, runs, args.repeats) for runs in args.runs]
    load_after = os.getloadavg()
    print(f"{args.algo} on {args.task}, tiny model, 1 thread; load average before {load_before[0]:.2f}, "
          f"after {load_after[0]:.2f}")
    print(f"{'R':>3} {'phase':<17} {'alone CPU ms/run':>17} {'together':>9} {'speed-up':>9} "
          f"{'alone wall ms/run':>18} {'together':>9}")
    for row in rows:
        for phase in ("sample", "forward_backward"):
            cell = row[phase]
            print(f"{row['runs']:>3} {phase:<17} {cell['alone_cpu_ms_per_run']:>17.2f} "
                  f"{cell['together_cpu_ms_per_run']:>9.2f} {cell['speedup_cpu']:>8.2f}× "
                  f"{cell['alone_wall_ms_per_run']:>18.2f} {cell['together_wall_ms_per_run']:>9.2f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "date": datetime.datetime.now().isoformat(timespec="seconds"), "algo": args.algo, "task": args.task,
            "load_average_before": load_before, "load_average_after": load_after, "rows": rows,
        }, indent=1))


if __name__ == "__main__":
    main()
