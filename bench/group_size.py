"""An experiment's runs as the sweep groups them (groups of at most `GROUP_RUNS`) against all of them as one group:
CPU seconds of each group, in one process, one thread.

The sweep trains each group in its own worker, so on free cores the experiment's training takes about as long as
its longest group, and one group of all the runs takes its whole CPU on one core. A group's CPU here includes what
its worker pays besides the steps: preparing the runs (loading their warm starts, which are cached beforehand,
untimed) and evaluating them after the last step.

Run from the repository root:
    python bench/group_size.py rloo_leave_one_out std_normalisation [--steps 10] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
# The engine is imported from the repository root, which a script in bench/ does not have on its path.
sys.path.insert(0, str(ROOT))

from rl_core.config import RunConfig  # noqa: E402
from rl_core.engine.sft import default_cache_dir  # noqa: E402
from rl_core.experiments import get_experiment  # noqa: E402
from rl_core.experiments.runner import plan_experiment  # noqa: E402
from rl_core.runs.run_stream import batch_training_stream  # noqa: E402
from rl_core.runs.sweep import batches, warm_starts  # noqa: E402


def group_cpu(runs: list[RunConfig], cache_dir: Path) -> float:
    """CPU seconds of this process while `runs` train as one group, from preparing them to their evaluation."""
    started = time.process_time()
    for _ in batch_training_stream(runs, cache_dir):
        pass
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiments", nargs="+", help="experiment names (python -m rl_core experiment --list)")
    parser.add_argument("--steps", type=int, default=10, help="steps per run (default 10: the ratio, not the run)")
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir(), help="where the warm starts are cached")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as in the sweep's workers
    for name in args.experiments:
        runs = [arm_run.planned.run for arm_run in plan_experiment(get_experiment(name), steps=args.steps)]
        warm_starts(runs, args.cache_dir)  # trained or loaded once, untimed
        load_before = os.getloadavg()[0]
        groups = [group_cpu([runs[i] for i in batch], args.cache_dir) for batch in batches(dict(enumerate(runs)))]
        whole = group_cpu(runs, args.cache_dir)
        print(
            f"{name}, {len(runs)} runs × {args.steps} steps: the sweep's groups "
            f"{' + '.join(f'{cpu:.1f}' for cpu in groups)} CPU s; one group of {len(runs)}: {whole:.1f} CPU s = "
            f"{whole / max(groups):.2f}× the longest group, {whole / sum(groups):.2f}× all of them; "
            f"load average {load_before:.1f} → {os.getloadavg()[0]:.1f}"
        )


if __name__ == "__main__":
    main()
