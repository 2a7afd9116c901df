"""The chat's answer time: a prompt checked, answered by the reference and by the trained policy, and both
answers' top-token heatmaps built, as the page's "Talk to this run" does on each prompt.

A run of `--task` (tiny model unless `--model`, the app's default SFT warm start) is trained by a `Job` as on a page;
then `--prompts` distinct prompts of the task are asked, greedy and sampled, on the CPU.

Run from the repository root:
    python bench/chat_latency.py bench/results/chat.json [--task caesar] [--model tiny] [--steps 20] [--prompts 20]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The engine is imported from the repository root, which a script in bench/ does not have on its path.
sys.path.insert(0, str(ROOT))

from rl_core.algorithms import get_preset  # noqa: E402
from rl_core.chat import check_prompt  # noqa: E402
from rl_core.config import RunConfig  # noqa: E402
from rl_core.models import DEFAULT_CPU_THREADS, MODEL_PRESETS  # noqa: E402
from toy_tasks import get_task  # noqa: E402
from ui.chat import top_tokens_figure  # noqa: E402
from ui.jobs import Job, TrainingSlots  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the JSON report")
    parser.add_argument("--task", default="caesar")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--prompts", type=int, default=20)
    args = parser.parse_args()
    run = RunConfig(algo=get_preset("grpo"), task=args.task, model=args.model, steps=args.steps, device="cpu")
    job = Job(run, TrainingSlots(1)).start()
    if not job.join(3600) or job.snapshot().status != "finished":
        raise RuntimeError(f"the run did not finish: {job.snapshot().status} {job.snapshot().error}")
    models = job.chat_models()
    prompts = list(dict.fromkeys(get_task(args.task).sample_prompts(50 * args.prompts, random.Random(1))))
    prompts = prompts[: args.prompts]
    load_before = os.getloadavg()
    timings = {}
    for decoding, seed in (("greedy", None), ("sampled", 0)):
        seconds = []
        for prompt in prompts:
            start = time.perf_counter()
            answers = models.answers(check_prompt(args.task, prompt), seed)
            for said in answers:
                top_tokens_figure(said, "an answer")
            seconds.append(time.perf_counter() - start)
        timings[decoding] = seconds
    load_after = os.getloadavg()
    threads = MODEL_PRESETS[args.model].cpu_threads or DEFAULT_CPU_THREADS  # what ChatModels.answers runs on
    report = {
        "task": args.task, "model": args.model, "steps": args.steps, "prompts": len(prompts), "torch_threads": threads,
        **{f"{d}_seconds": s for d, s in timings.items()},
        **{f"{d}_median": statistics.median(s) for d, s in timings.items()},
        **{f"{d}_max": max(s) for d, s in timings.items()},
        "load_average_before": load_before, "load_average_after": load_after,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"{args.task}, {args.model}, {len(prompts)} prompts, {threads} torch thread(s): "
          + "; ".join(f"{d} median {statistics.median(s) * 1000:.1f} ms (max {max(s) * 1000:.1f} ms)"
                      for d, s in timings.items())
          + f"; load average {load_before[0]:.1f} → {load_after[0]:.1f}")


if __name__ == "__main__":
    main()
