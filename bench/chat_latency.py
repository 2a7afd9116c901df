"""The chat's answer time: a prompt checked, answered by the reference and by the trained policy, and both
answers' top-token heatmaps built, as the page's "Talk to this run" does on each prompt.

A run of `--task` (tiny model unless `--model`, the app's default SFT warm start) is trained by a `Job` as on a page;
then `--prompts` distinct prompts of the task are asked, greedy and sampled, on the CPU. With `--browser` the run is
trained on the GRPO page of `streamlit run app.py` in Chromium instead, and each prompt is typed into the page and
timed from Enter until the page shows its right answer (a task with one right answer per prompt). With `--fit dpo`
a DPO fit of `--steps` steps on the `preference` task (seed 0) is asked instead, as the DPO page's "Talk to this
fit" asks it; with `--fit reward_model` a reward model fitted for `--steps` steps is asked what the reward-model
page's section asks: the prompt and a pair checked, the pair scored and tabled, and the SFT policy's samples ranked.

Run from the repository root:
    python bench/chat_latency.py bench/results/chat.json [--task caesar] [--model tiny] [--steps 20] [--prompts 20]
                                 [--browser | --fit dpo | --fit reward_model]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The engine is imported from the repository root, which a script in bench/ does not have on its path.
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from bench.process_cpu import process_cpu_seconds  # noqa: E402
from rl_core.algorithms import get_preset  # noqa: E402
from rl_core.config import RunConfig  # noqa: E402
from rl_core.engine.chat import check_prompt  # noqa: E402
from rl_core.engine.models import DEFAULT_CPU_THREADS, MODEL_PRESETS  # noqa: E402
from rl_core.engine.preference_optimisation import DPOTraining, preference_warm_start  # noqa: E402
from rl_core.engine.reward_chat import check_response, judge_pair, rank_policy_samples  # noqa: E402
from rl_core.engine.reward_model import RewardModelTraining  # noqa: E402
from toy_tasks import get_task  # noqa: E402
from ui.chat import top_tokens_figure  # noqa: E402
from ui.dpo import chat_models  # noqa: E402
from ui.jobs import Job, LiveLoop  # noqa: E402
from ui.reward_chat import pair_table  # noqa: E402

FINISHED = re.compile(r"Finished \d+ steps")


def in_the_app(task: str, model: str, steps: int, prompts: list[str]) -> dict[str, list[float]]:
    """Seconds from Enter in the prompt box to the page's right answer, per prompt, after a run on the GRPO page,
    and the CPU seconds the server spent on each (contention stretches the wall time more than the CPU time)."""
    from app_driver import PAGES, browser_page, open_page, serve_app

    right = get_task(task).answer
    with tempfile.TemporaryDirectory(prefix="chat-bench-") as scratch:
        env = {"RLHF_LAB_CACHE": str(Path(scratch) / "cache"), "RLHF_LAB_DB": str(Path(scratch) / "runs.sqlite")}
        with serve_app(Path(scratch) / "streamlit.log", env=env) as (url, server), browser_page() as page:
            open_page(page, f"{url}/grpo?algo=grpo&seed=0&task={task}&model={model}&steps={steps}", PAGES["grpo"])
            page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Train", exact=True).click()
            page.get_by_text(FINISHED).first.wait_for(timeout=600_000)
            page.get_by_text("Talk to this run", exact=True).wait_for(timeout=60_000)
            box = page.get_by_label("prompt", exact=True)
            seconds, cpu = [], []
            for prompt in prompts:
                box.fill(prompt)
                time.sleep(0.5)  # the box's new text reaches the server on Enter only; let its last frame settle
                start, start_cpu = time.perf_counter(), process_cpu_seconds(server.pid)
                box.press("Enter")
                page.get_by_text(f"The right answer to {prompt} is {right(prompt)}.").wait_for(timeout=60_000)
                seconds.append(time.perf_counter() - start)
                cpu.append(process_cpu_seconds(server.pid) - start_cpu)
    return {"browser": seconds, "server_cpu": cpu}


def in_process(task: str, model: str, steps: int, prompts: list[str]) -> dict[str, list[float]]:
    """Seconds per prompt of what the page computes (check, both answers, both heatmaps), greedy and sampled."""
    run = RunConfig(algo=get_preset("grpo"), task=task, model=model, steps=steps, device="cpu")
    job = Job(run, LiveLoop(1)).start()
    if not job.join(3600) or job.snapshot().status != "finished":
        raise RuntimeError(f"the run did not finish: {job.snapshot().status} {job.snapshot().error}")
    return answer_times(job.chat_models(), task, prompts)


def answer_times(models, task: str, prompts: list[str]) -> dict[str, list[float]]:
    """Seconds per prompt of the check, both answers and both heatmaps, greedy and sampled."""
    timings = {}
    for decoding, seed in (("greedy", None), ("sampled", 0)):
        seconds = []
        for prompt in prompts:
            start = time.perf_counter()
            answers = models.answers(check_prompt(task, prompt), seed)
            for said in answers:
                top_tokens_figure(said, "an answer")
            seconds.append(time.perf_counter() - start)
        timings[decoding] = seconds
    return timings


def fit_in_process(fit: str, steps: int, prompts: list[str]) -> dict[str, list[float]]:
    """Seconds per prompt of what the DPO page's or the reward-model page's chat computes after a fit (seed 0)."""
    task = get_task("preference")
    pairs = task.preference_pairs(1000, random.Random(0), task.label_noise)
    if fit == "dpo":
        training = DPOTraining(preference_warm_start(task, 0), pairs, task, steps=steps)
        for _ in training.steps():
            pass
        return answer_times(chat_models(training), task.name, prompts)
    training = RewardModelTraining(pairs, task.tokenizer, steps=steps)
    for _ in training.steps():
        pass
    sft = preference_warm_start(task, 0)
    seconds = []
    for prompt in prompts:
        pair = next(p for p in training.held_out if p.prompt == prompt)
        start = time.perf_counter()
        asked = check_prompt(task.name, prompt)
        judgement = judge_pair(
            training.model,
            task.tokenizer,
            asked,
            check_response(task.name, pair.chosen),
            check_response(task.name, pair.rejected),
        )
        pair_table(judgement)
        rank_policy_samples(training.model, sft, task.tokenizer, asked, task.max_new_tokens, seed=0)
        seconds.append(time.perf_counter() - start)
    return {"pair_and_samples": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the JSON report")
    parser.add_argument("--task", default="caesar")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--browser", action="store_true", help="time the page in Chromium, not the engine")
    parser.add_argument("--fit", choices=("dpo", "reward_model"), help="ask a fit of the DPO or reward-model page")
    args = parser.parse_args()
    if args.fit:
        args.task = "preference"
    prompts = list(dict.fromkeys(get_task(args.task).sample_prompts(50 * args.prompts, random.Random(1))))
    prompts = prompts[: args.prompts]
    load_before = os.getloadavg()
    if args.fit:
        timings = fit_in_process(args.fit, args.steps, prompts)
    elif args.browser:
        timings = in_the_app(args.task, args.model, args.steps, prompts)
    else:
        timings = in_process(args.task, args.model, args.steps, prompts)
    load_after = os.getloadavg()
    threads = MODEL_PRESETS[args.model].cpu_threads or DEFAULT_CPU_THREADS  # what ChatModels.answers runs on
    report = {
        "task": args.task,
        "fit": args.fit,
        "model": args.model,
        "steps": args.steps,
        "prompts": len(prompts),
        "torch_threads": threads,
        **{f"{d}_seconds": s for d, s in timings.items()},
        **{f"{d}_median": statistics.median(s) for d, s in timings.items()},
        **{f"{d}_max": max(s) for d, s in timings.items()},
        "load_average_before": load_before,
        "load_average_after": load_after,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(
        f"{args.task}, {args.model}, {len(prompts)} prompts, {threads} torch thread(s): "
        + "; ".join(
            f"{d} median {statistics.median(s) * 1000:.1f} ms (max {max(s) * 1000:.1f} ms)" for d, s in timings.items()
        )
        + f"; load average {load_before[0]:.1f} → {load_after[0]:.1f}"
    )


if __name__ == "__main__":
    main()
