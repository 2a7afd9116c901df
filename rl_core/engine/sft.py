"""Supervised warm start: fit the policy to a task's (imperfect) demonstrations; the result is π_ref.

Checkpoints are cached on disk per (task, model, seed, noise, steps), written to a temporary folder
and renamed into place, so an interrupted run never leaves a half-written checkpoint behind.

With the task's default demonstrations and step count, the SFT policy should succeed at the rate the task is
designed around (`ToyTask.sft_success_band`): RL has something to fix, and the policy is not garbage. A warm start
outside the band (a tiny model is sometimes short of the skill after the default steps) trains on for another
round when it falls short, and starts again from other initial weights when it overshoots, up to SFT_ATTEMPTS
rounds; the checkpoint's `sft.json` says what happened, and so does a warning.

The warm starts of many seeds (a sweep's, an experiment's) train as one group, `sft_policies`: their policies'
weights stacked (`stacked_runs.Stack`), one pass, one backward and one AdamW step for all of them, each seed on its
own demonstrations; the seeds that need another round go on as a smaller group. One seed is a group of one. A
warm start trained in a group differs from the same seed's alone by float rounding (the stacked pass pads each
seed's batch to the group's longest), as a run in a group of runs does (docs/ARCHITECTURE.md, "A group of runs").
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import math
import os
import random
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import platformdirs
import torch
from safetensors import safe_open
from transformers import GPT2LMHeadModel, PreTrainedTokenizerBase

from rl_core.engine.models import load_policy
from rl_core.engine.packing import prefix_tree
from rl_core.engine.pretrained import check_fits, initial_policy, is_preset, model_identity, sft_learning_rate
from rl_core.engine.rollout import encode_pairs, sample
from rl_core.engine.stacked_adamw import StackedAdamW
from rl_core.engine.stacked_runs import Stack, StackedGPT2, own_storage, response_token_logprobs
from rl_core.runs.reuse import fingerprint
from rl_core.runs.staging import discard_damaged, publish, remove_stale_staging, staging_folder
from toy_tasks.base import ToyTask

log = logging.getLogger(__name__)

DEFAULT_SFT_STEPS = 200  # the step count the tasks' success bands are designed for (RunConfig.sft_steps)
SFT_ATTEMPTS = 3
SFT_EVAL_PROMPTS = 256
SFT_EVAL_SEED = 12345
# A prompt's demonstrations go on in a further sequence past this many positions. A group pads every seed's
# sequences to its longest one, and short sequences waste the least: a group of 8 seeds ran 21–39 % fewer positions
# per seed at 32 than at the default 256 on the tasks whose prompts repeat (coin_flip, count, preference,
# digit_sum_long), and as many on the others.
SFT_SEQUENCE_LENGTH = 32


# One lock per checkpoint folder: a thread that asks for a checkpoint another thread of this process is training
# (the app's background warm start, say) waits for it instead of training a second copy on the same cores.
_checkpoint_locks: dict[Path, threading.Lock] = {}
_checkpoint_locks_guard = threading.Lock()


def _checkpoint_lock(folder: Path) -> threading.Lock:
    with _checkpoint_locks_guard:
        return _checkpoint_locks.setdefault(folder, threading.Lock())


def default_cache_dir() -> Path:
    """Where SFT checkpoints and reward models live; `RLHF_LAB_CACHE` overrides the user cache directory."""
    return Path(os.environ.get("RLHF_LAB_CACHE") or platformdirs.user_cache_dir("rlhf-lab"))


def sft_loss(logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Token-mean negative log-likelihood of the demonstrated responses (EOS included) given their prompts,
    `L = −Σ_i Σ_t m_{i,t} log π(y_{i,t} | x_i, y_{i,<t}) / Σ_i Σ_t m_{i,t}`, of the response tokens'
    log-probabilities and mask `[…, B, T]`: one loss per leading index (per run of a group)."""
    return -(logp * mask).sum((-2, -1)) / mask.sum((-2, -1))


def demonstration_batch(task: ToyTask, tokenizer, rng: random.Random, size: int, demo_noise: float, device):
    """`size` prompts and their demonstrations, drawn from `rng` (prompts first, then each demonstration in turn),
    in the teacher-forcing layout, its prefix tree's sequences `SFT_SEQUENCE_LENGTH` long at most."""
    prompts = task.sample_prompts(size, rng)
    responses = [task.demonstration(p, rng, demo_noise) for p in prompts]
    batch = encode_pairs(tokenizer, prompts, responses, device)
    batch.__dict__["prefix_tree"] = prefix_tree(
        batch.sequences, batch.attention_mask, batch.prompt_length, batch.response_mask, budget=SFT_SEQUENCE_LENGTH
    )
    return batch


def train_sft(
    policies: Sequence[GPT2LMHeadModel],
    tokenizer: PreTrainedTokenizerBase,
    task: ToyTask,
    steps: int,
    demo_noise: float,
    seeds: Sequence[int],
    learning_rate: float,
    batch_size: int = 64,
    progress: Callable[[int, list[float]], None] | None = None,
) -> list[list[float]]:
    """AdamW on the demonstration NLL with a linear warm-down, `lr_k = lr · (1 − k / steps)`, for R policies of one
    shape at once (R = 1 included): policy r draws its demonstrations from `random.Random(seeds[r])`, and all R
    train as one program (`stacked_runs`: one pass, one backward, one `StackedAdamW` step per step); returns every
    step's losses `[steps][R]`. Each policy keeps its own trained weights (no longer views of the group's buffer)."""
    device = next(policies[0].parameters()).device
    runs = len(policies)
    rngs = [random.Random(seed) for seed in seeds]
    stack = Stack(policies, trainable=True)
    optimizer = StackedAdamW.at_torch_defaults(stack.buffer, [learning_rate] * runs, [None] * runs)
    everyone = torch.ones(runs, dtype=torch.bool)
    pad = tokenizer.pad_token_id
    losses = []
    for step in range(steps):
        batches = [demonstration_batch(task, tokenizer, rng, batch_size, demo_noise, device) for rng in rngs]
        loss = sft_loss(*response_token_logprobs(StackedGPT2(policies[0], stack.views()), batches, pad))
        stack.buffer.grad = None
        loss.sum().backward()  # the runs' losses touch only their own rows: each row gets its own run's gradient
        optimizer.learning_rates([learning_rate * (1.0 - step / max(steps, 1))] * runs)  # as LambdaLR computes it
        optimizer.step(everyone)
        losses.append(loss.tolist())
        if progress is not None:
            progress(step + 1, losses[-1])
    own_storage(policies)  # a checkpoint saves one model's tensors, not the buffer
    return losses


@functools.lru_cache(maxsize=64)
def _task_source(task_type: type) -> str:
    """The code of a task's module as this process imported it (read once: a page asks for many folders)."""
    return inspect.getsource(inspect.getmodule(task_type))


def checkpoint_folder(cache_dir: Path, task: ToyTask, tokenizer, model_preset: str, seed: int, demo_noise, steps):
    """Where the warm start of this (task, model, seed, noise, steps) is cached. The architecture (a loaded model's
    files), its SFT learning rate and the task's code are part of the name, so a changed preset, a folder saved
    again or a task whose demonstrations changed never loads a stale checkpoint."""
    sources = (
        model_identity(model_preset, tokenizer)
        + f"lr={sft_learning_rate(model_preset)}"
        + _task_source(type(task))
        + f"band={task.sft_success_band}"
    )
    version = fingerprint(sources, 10)
    model_name = model_preset if is_preset(model_preset) else re.sub(r"[^\w.-]+", "_", model_preset)[-40:].strip("_")
    return cache_dir / "sft" / f"{task.name}-{model_name}-{version}-seed{seed}-noise{demo_noise:g}-steps{steps}"


def warm_starts_to_build(run, cache_dir: Path) -> list[tuple[str, int]]:
    """The SFT warm starts a `RunConfig` trains before its first step because `cache_dir` has no checkpoint of
    them yet, as (model, SFT steps): its policy's, and on-policy distillation's teacher (`teacher_model`,
    `teacher_sft_steps`, on noise-free demonstrations)."""
    from rl_core.engine.pretrained import model_tokenizer
    from rl_core.formulas.distillation import TEACHER_DEMO_NOISE
    from toy_tasks import TASKS, get_task

    if run.task not in TASKS:
        return []  # the trainer refuses the run, with its own message
    # An instance, as the trainer's: the folder's name takes the code of the instance's class, and the class itself
    # would give its metaclass's (every warm start then read as not cached: a cached run was told 111 s for 35 s).
    task, tokenizer = get_task(run.task), model_tokenizer(run.model)
    wanted = [(run.model, task.default_demo_noise if run.demo_noise is None else run.demo_noise, run.sft_steps)]
    teacher = getattr(run.algo, "teacher_model", None)
    if teacher is not None:
        wanted.append((teacher, TEACHER_DEMO_NOISE, run.algo.teacher_sft_steps))
    return [
        (model, steps)
        for model, noise, steps in wanted
        if not checkpoint_folder(cache_dir, task, tokenizer, model, run.seed, noise, steps).exists()
    ]


def sft_policy(
    task: ToyTask,
    tokenizer: PreTrainedTokenizerBase,
    model_preset: str,
    seed: int,
    demo_noise: float,
    steps: int,
    device: torch.device,
    cache_dir: Path | None = None,
    progress: Callable[[int, float], None] | None = None,
) -> tuple[GPT2LMHeadModel, dict]:
    """The SFT policy for this (task, model, seed, noise, steps), trained once and then loaded from the cache,
    and its report: `success_rate`, `attempts`, `band` (None when the band does not apply) and a `note` when the
    warm start had to be retrained or stayed outside its band: `sft_policies` of one seed. The task must be
    prepared (its reward ready).

    `model_preset` is a preset's name, or a loaded model's (`rl_core.engine.pretrained`): its SFT starts from its
    pretrained weights, once (the band's restarts from other weights do not apply), and is refused with a message
    when full fine-tuning would not fit the device."""
    each = None if progress is None else (lambda done, losses: progress(done, losses[0]))
    return sft_policies(task, tokenizer, model_preset, [seed], demo_noise, steps, device, cache_dir, each)[0]


def sft_policies(
    task: ToyTask,
    tokenizer: PreTrainedTokenizerBase,
    model_preset: str,
    seeds: Sequence[int],
    demo_noise: float,
    steps: int,
    device: torch.device,
    cache_dir: Path | None = None,
    progress: Callable[[int, list[float]], None] | None = None,
) -> list[tuple[GPT2LMHeadModel, dict]]:
    """`sft_policy` of each seed, in order: the checkpoints the cache lacks are trained as one group (`train_sft`
    over the seeds; `progress(done, losses)` after each step, `(0, NaNs)` while another thread of this process
    trains one of them). The task must be prepared (for any of the seeds: a success is the task's own check)."""
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds lists a seed twice: {list(seeds)}; a group trains each warm start once")
    cache_dir = Path(cache_dir or default_cache_dir())
    if not is_preset(model_preset) and steps:  # no steps: nothing trains, the pretrained weights are the warm start
        check_fits(model_preset, device, critic=False)
    folders = [checkpoint_folder(cache_dir, task, tokenizer, model_preset, s, demo_noise, steps) for s in seeds]
    # In one order for every thread, so that two threads that want some of the same checkpoints never deadlock.
    locks = [_checkpoint_lock(folder) for folder in sorted({f.resolve() for f in folders})]
    held = []
    try:
        for lock in locks:
            while not lock.acquire(timeout=0.25):
                if progress is not None:
                    progress(0, [math.nan] * len(seeds))  # still waiting: the caller may stop here
            held.append(lock)
        return _load_or_train(folders, task, tokenizer, model_preset, seeds, demo_noise, steps, device, progress)
    finally:
        for lock in held:
            lock.release()


@torch.no_grad()
def sft_success_rate(policy: GPT2LMHeadModel, tokenizer, task: ToyTask) -> float:
    """Success of one sample per prompt on SFT_EVAL_PROMPTS fixed prompts (temperature 1, a fixed generator)."""
    prompts = task.sample_prompts(SFT_EVAL_PROMPTS, random.Random(SFT_EVAL_SEED))
    generator = torch.Generator(device=next(policy.parameters()).device).manual_seed(SFT_EVAL_SEED)
    rollout = sample(policy, tokenizer, prompts, task.max_new_tokens, 1.0, generator)
    return sum(task.score(rollout.prompts, rollout.responses, rollout.truncated.tolist()).successes) / len(prompts)


def _load_or_train(folders, task, tokenizer, model_preset, seeds, demo_noise, steps, device, progress):
    """Each seed's checkpoint from its folder if it is readable, else trained (the missing ones as one group) and
    written there (a staging folder, then a rename)."""
    found = {seed: _cached(folder, model_preset, device) for seed, folder in zip(seeds, folders)}
    missing = [seed for seed in seeds if found[seed] is None]
    if missing:
        trained = _train_in_band(task, tokenizer, model_preset, missing, demo_noise, steps, device, progress)
        for seed, folder in zip(seeds, folders):
            if seed in trained:
                found[seed] = _publish(folder, *trained[seed], tokenizer, device)
    return [found[seed] for seed in seeds]


def _cached(folder: Path, model_preset: str, device) -> tuple[GPT2LMHeadModel, dict] | None:
    """The checkpoint in `folder` and its report, or None when there is none. An unreadable checkpoint (a truncated
    or emptied weights file, say) is reported and removed, and so is one whose LM head was saved apart from the
    embeddings: that policy was built untied (see `models.MODEL_CONSTRUCTION`), and loading would tie the head to
    the embeddings and so change the model."""
    if folder.parent.exists():
        remove_stale_staging(folder.parent, cache=True)  # left by a process killed while it saved a checkpoint
    if not folder.exists():
        return None
    try:
        with safe_open(folder / "model.safetensors", "pt") as weights:
            if is_preset(model_preset) and "lm_head.weight" in weights.keys():  # noqa: SIM118 - safe_open is no mapping: `in` needs the list
                raise ValueError("its LM head was trained untied from the embeddings")
        return load_policy(folder).to(device), json.loads((folder / "sft.json").read_text())
    except Exception as error:  # noqa: BLE001 - safetensors, JSON and OS errors alike mean "rebuild it"
        discard_damaged(folder, "SFT checkpoint", error)
        return None


def _train_in_band(task, tokenizer, model_preset, seeds, demo_noise, steps, device, progress) -> dict:
    """Seed → (trained policy, report), the seeds trained as one group. A seed whose warm start lands outside its
    band goes on into another round, with the other such seeds as a smaller group, up to SFT_ATTEMPTS rounds."""
    designed = is_preset(model_preset) and demo_noise == task.default_demo_noise and steps == DEFAULT_SFT_STEPS
    band = task.sft_success_band if designed else None
    tried: dict[int, list[float]] = {seed: [] for seed in seeds}
    policies: dict[int, GPT2LMHeadModel] = {}
    training = list(seeds)
    for attempt in range(SFT_ATTEMPTS if band else 1):
        for seed in training:
            if seed not in policies or tried[seed][-1] > band[1]:
                # The initial weights come from the seed (and the attempt) alone; the global RNG is left as it was.
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(seed + 1000 * attempt)
                    policies[seed] = initial_policy(model_preset, tokenizer).to(device)
        # Below the band the same weights train on (another `steps`, on fresh demonstrations): they are short of the
        # skill. Above it, learning more cannot help, so the next attempt starts from other weights.
        train_sft(
            [policies[seed] for seed in training],
            tokenizer,
            task,
            steps,
            demo_noise,
            [seed + 1000 * attempt for seed in training],
            learning_rate=sft_learning_rate(model_preset),
            progress=progress,
        )
        for seed in training:
            policies[seed].eval()
            tried[seed].append(sft_success_rate(policies[seed], tokenizer, task))
        training = [seed for seed in training if band is not None and not band[0] <= tried[seed][-1] <= band[1]]
        if not training:
            break
    return {seed: (policies[seed], _report(task, seed, steps, tried[seed], band)) for seed in seeds}


def _report(task: ToyTask, seed: int, steps: int, tried: list[float], band) -> dict:
    """What `sft.json` says of a warm start that succeeded at the rates `tried`, round by round; a note (also
    logged as a warning) where it took more than one round or stayed outside its band."""
    success = tried[-1]
    report = {"success_rate": success, "attempts": len(tried), "band": band}
    if len(tried) > 1 or (band and not band[0] <= success <= band[1]):
        outcome = "in the band" if band[0] <= success <= band[1] else "still outside it"
        report["note"] = (
            f"SFT warm start of {task.name} (seed {seed}) succeeded {', '.join(f'{s:.2f}' for s in tried)} after "
            f"{len(tried)} rounds of {steps} steps (below the band it trains on, above it restarts from fresh "
            f"weights), against the band {band[0]:.2f}–{band[1]:.2f}: {outcome}"
        )
        log.warning(report["note"])
    return report


def _publish(folder: Path, policy, report: dict, tokenizer, device) -> tuple[GPT2LMHeadModel, dict]:
    """Write the checkpoint and its report to `folder` (a staging folder, then a rename) and load it from there."""
    staging = staging_folder(folder, cache=True)
    policy.save_pretrained(staging)  # safetensors: written from device tensors directly
    tokenizer.save_pretrained(staging)
    (staging / "sft.json").write_text(json.dumps(report))
    publish(staging, folder)  # False: another process finished the same checkpoint first
    # Every run starts from the checkpoint as loaded, also the run that trained it: the freshly trained module
    # holds the same values, yet its passes round differently at the last bit (seen as RL curves that agreed
    # for 8–14 steps and then parted), so a run's records would depend on whether its SFT was cached.
    return load_policy(folder).to(device), json.loads((folder / "sft.json").read_text())
