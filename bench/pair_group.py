"""CPU per run-step of fits to preference pairs trained as one group of R runs (DPO; the reward model), against R = 1.

For each R (default 1, 2, 4, 8), in one process on one CPU thread:

* DPO: R tiny random policies (seeds 0 … R−1) fitted to their seed's pairs of the `reverse` task (the correct
  reversal against the prompt, 1,000 pairs, a fifth held out), as a DPO run steps (`DPOTrainer.step_group`): each
  step evaluates the policy on 64 fixed prompts (sampled, read by the reference, scored), the held-out pairs every
  10th step, then one update of 32 pairs. Printed: the whole step, and the update alone.
* The reward model: R fresh tiny reward models fitted to their seed's pairs of the `preference` task (3,000 pairs,
  minibatches of 64, as the task's own reward model), one `RewardModelGroup.step` per step.

One step untimed, then `--steps` steps timed with the process-CPU clock; printed in milliseconds per run-step, with
the ratio to R = 1 measured in the same process, and the load average before and after.

Run from the repository root:
    python bench/pair_group.py [--runs 1 2 4 8] [--steps 10]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from rl_core.engine.models import build_policy  # noqa: E402
from rl_core.engine.preference_optimisation import DPOGroup, DPOTraining  # noqa: E402
from rl_core.engine.reward_model import PreferencePair, RewardModelGroup, RewardModelTraining  # noqa: E402
from rl_core.engine.tokenizer import build_char_tokenizer  # noqa: E402
from toy_tasks import get_task  # noqa: E402

TOKENIZER = build_char_tokenizer()
HELD_OUT_EVERY = 10  # DPOConfig.eval_steps


def dpo_group(runs: int) -> DPOGroup:
    task = get_task("reverse")
    trainings = []
    for seed in range(runs):
        rng = random.Random(seed)
        pairs = [PreferencePair(p, task.answer(p), p[:-1]) for p in task.sample_prompts(1000, rng)]
        torch.manual_seed(seed)
        policy = build_policy("tiny", TOKENIZER)
        trainings.append(DPOTraining(policy, pairs, task, steps=1000, batch_size=32, n_eval_prompts=64, seed=seed))
    return DPOGroup(trainings)


def dpo_ms(runs: int, steps: int) -> tuple[float, float]:
    """CPU ms per run-step of DPO: the whole step, and its update alone."""
    group = dpo_group(runs)
    group.evaluate([0] * runs, [True] * runs)
    group.update()  # untimed: first calls allocate
    whole = update = 0.0
    for step in range(1, steps + 1):
        started = time.process_time()
        group.evaluate([0] * runs, [step % HELD_OUT_EVERY == 0] * runs)
        evaluated = time.process_time()
        group.update()
        ended = time.process_time()
        whole += ended - started
        update += ended - evaluated
    return 1000 * whole / (steps * runs), 1000 * update / (steps * runs)


def reward_model_ms(runs: int, steps: int) -> float:
    """CPU ms per run-step of the reward model's fit."""
    task = get_task("preference")
    trainings = [
        RewardModelTraining(
            task.preference_pairs(task.n_pairs, random.Random(seed), task.label_noise),
            TOKENIZER,
            preset=task.reward_model_preset,
            steps=1000,
            batch_size=task.rm_batch_size,
            learning_rate=task.rm_learning_rate,
            seed=seed,
        )
        for seed in range(runs)
    ]
    group = RewardModelGroup(trainings)
    group.step()  # untimed: first calls allocate
    started = time.process_time()
    for _ in range(steps):
        group.step()
    return 1000 * (time.process_time() - started) / (steps * runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", type=int, default=[1, 2, 4, 8])
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    base = None
    for runs in args.runs:
        whole, update = dpo_ms(runs, args.steps)
        base = base or (whole, update)
        print(
            f"DPO          R={runs:3d}: {whole:6.1f} ms per run-step ({whole / base[0]:.2f}× R = 1), "
            f"update {update:6.1f} ms ({update / base[1]:.2f}×)"
        )
    base = None
    for runs in args.runs:
        ms = reward_model_ms(runs, args.steps)
        base = base or ms
        print(f"reward model R={runs:3d}: {ms:6.1f} ms per run-step ({ms / base:.2f}× R = 1)")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
