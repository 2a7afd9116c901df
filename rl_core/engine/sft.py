"""Supervised warm start: fit the policy to a task's (imperfect) demonstrations; the result is π_ref.

Checkpoints are cached on disk per (task, model, seed, noise, steps), written to a temporary folder
and renamed into place, so an interrupted run never leaves a half-written checkpoint behind.

With the task's default demonstrations and step count, the SFT policy should succeed at the rate the task is
designed around (`ToyTask.sft_success_band`): RL has something to fix, and the policy is not garbage. A warm start
outside the band (a tiny model is sometimes short of the skill after the default steps) trains on for another
round when it falls short, and starts again from other initial weights when it overshoots, up to SFT_ATTEMPTS
rounds; the checkpoint's `sft.json` says what happened, and so does a warning.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import os
import random
import re
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import platformdirs
import torch
from safetensors import safe_open
from transformers import GPT2LMHeadModel, PreTrainedTokenizerBase

from rl_core.engine.models import load_policy
from rl_core.engine.pretrained import check_fits, initial_policy, is_preset, model_identity, sft_learning_rate
from rl_core.engine.rollout import encode_pairs, response_logits, sample, token_logprobs
from rl_core.runs.reuse import fingerprint
from rl_core.runs.staging import publish, remove_stale_staging, staging_folder
from toy_tasks.base import ToyTask

log = logging.getLogger(__name__)

DEFAULT_SFT_STEPS = 200  # the step count the tasks' success bands are designed for (RunConfig.sft_steps)
SFT_ATTEMPTS = 3
SFT_EVAL_PROMPTS = 256
SFT_EVAL_SEED = 12345


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


def sft_loss(policy: GPT2LMHeadModel, tokenizer, prompts: list[str], responses: list[str]) -> torch.Tensor:
    """Token-mean negative log-likelihood of the demonstrated responses (EOS included) given their prompts."""
    batch = encode_pairs(tokenizer, prompts, responses, next(policy.parameters()).device)
    logp = token_logprobs(response_logits(policy, batch), batch.response_ids)
    return -(logp * batch.response_mask).sum() / batch.response_mask.sum()


def train_sft(
    policy: GPT2LMHeadModel,
    tokenizer: PreTrainedTokenizerBase,
    task: ToyTask,
    steps: int,
    demo_noise: float,
    seed: int,
    learning_rate: float,
    batch_size: int = 64,
    progress: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Adam on the demonstration NLL with a linear warm-down; returns the loss of every step."""
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=learning_rate, weight_decay=0.0, fused=True)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 - step / max(steps, 1))
    policy.train()
    losses = []
    for step in range(steps):
        prompts = task.sample_prompts(batch_size, rng)
        responses = [task.demonstration(p, rng, demo_noise) for p in prompts]
        loss = sft_loss(policy, tokenizer, prompts, responses)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if progress is not None:
            progress(step + 1, losses[-1])
    return losses


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
    warm start had to be retrained or stayed outside its band. The task must be prepared (its reward ready).

    `model_preset` is a preset's name, or a loaded model's (`rl_core.engine.pretrained`): its SFT starts from its
    pretrained weights, once (the band's restarts from other weights do not apply), and is refused with a message
    when full fine-tuning would not fit the device."""
    cache_dir = Path(cache_dir or default_cache_dir())
    if not is_preset(model_preset) and steps:  # no steps: nothing trains, the pretrained weights are the warm start
        check_fits(model_preset, device, critic=False)
    # The architecture (a loaded model's files), its SFT learning rate and the task's code are part of the key, so
    # a changed preset, a folder saved again or a task whose demonstrations changed never loads a stale checkpoint.
    learning_rate = sft_learning_rate(model_preset)
    sources = (
        model_identity(model_preset, tokenizer)
        + f"lr={learning_rate}"
        + inspect.getsource(inspect.getmodule(type(task)))
        + f"band={task.sft_success_band}"
    )
    version = fingerprint(sources, 10)
    model_name = model_preset if is_preset(model_preset) else re.sub(r"[^\w.-]+", "_", model_preset)[-40:].strip("_")
    name = f"{task.name}-{model_name}-{version}-seed{seed}-noise{demo_noise:g}-steps{steps}"
    folder = cache_dir / "sft" / name
    lock = _checkpoint_lock(folder.resolve())
    while not lock.acquire(timeout=0.25):
        if progress is not None:
            progress(0, math.nan)  # still waiting: the caller may stop here
    try:
        return _load_or_train(
            folder, task, tokenizer, model_preset, seed, demo_noise, steps, learning_rate, device, progress
        )
    finally:
        lock.release()


@torch.no_grad()
def sft_success_rate(policy: GPT2LMHeadModel, tokenizer, task: ToyTask) -> float:
    """Success of one sample per prompt on SFT_EVAL_PROMPTS fixed prompts (temperature 1, a fixed generator)."""
    prompts = task.sample_prompts(SFT_EVAL_PROMPTS, random.Random(SFT_EVAL_SEED))
    generator = torch.Generator(device=next(policy.parameters()).device).manual_seed(SFT_EVAL_SEED)
    rollout = sample(policy, tokenizer, prompts, task.max_new_tokens, 1.0, generator)
    return sum(task.score(rollout.prompts, rollout.responses, rollout.truncated.tolist()).successes) / len(prompts)


def _load_or_train(folder, task, tokenizer, model_preset, seed, demo_noise, steps, learning_rate, device, progress):
    """The checkpoint in `folder` if it is readable, else a newly trained one written there (staging folder, then
    a rename). An unreadable checkpoint (a truncated or emptied weights file, say) is reported and trained again, and
    so is one whose LM head was saved apart from the embeddings: that policy was built untied (see
    `models.MODEL_CONSTRUCTION`), and loading would tie the head to the embeddings and so change the model."""
    if folder.parent.exists():
        remove_stale_staging(folder.parent, cache=True)  # left by a process killed while it saved a checkpoint
    if folder.exists():
        try:
            with safe_open(folder / "model.safetensors", "pt") as weights:
                if is_preset(model_preset) and "lm_head.weight" in weights.keys():  # noqa: SIM118 - safe_open is no mapping: `in` needs the list
                    raise ValueError("its LM head was trained untied from the embeddings")
            return load_policy(folder).to(device), json.loads((folder / "sft.json").read_text())
        except Exception as error:  # noqa: BLE001 - safetensors, JSON and OS errors alike mean "rebuild it"
            log.warning(
                "the cached SFT checkpoint %s is unreadable (%s: %s); training it again",
                folder.name,
                type(error).__name__,
                error,
            )
            shutil.rmtree(folder, ignore_errors=True)
    designed = is_preset(model_preset) and demo_noise == task.default_demo_noise and steps == DEFAULT_SFT_STEPS
    band = task.sft_success_band if designed else None
    tried = []
    policy = None
    for attempt in range(SFT_ATTEMPTS if band else 1):
        if policy is None or tried[-1] > band[1]:
            # The initial weights come from the seed (and the attempt) alone; the global RNG is left as it was found.
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed + 1000 * attempt)
                policy = initial_policy(model_preset, tokenizer).to(device)
        # Below the band the same weights train on (another `steps`, on fresh demonstrations): they are short of the
        # skill. Above it, learning more cannot help, so the next attempt starts from other weights.
        train_sft(
            policy,
            tokenizer,
            task,
            steps,
            demo_noise,
            seed + 1000 * attempt,
            learning_rate=learning_rate,
            progress=progress,
        )
        policy.eval()
        tried.append(sft_success_rate(policy, tokenizer, task))
        if band is None or band[0] <= tried[-1] <= band[1]:
            break
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
    staging = staging_folder(folder, cache=True)
    policy.save_pretrained(staging)  # safetensors: written from device tensors directly
    tokenizer.save_pretrained(staging)
    (staging / "sft.json").write_text(json.dumps(report))
    publish(staging, folder)  # False: another process finished the same checkpoint first
    # Every run starts from the checkpoint as loaded, also the run that trained it: the freshly trained module
    # holds the same values, yet its passes round differently at the last bit (seen as RL curves that agreed
    # for 8–14 steps and then parted), so a run's records would depend on whether its SFT was cached.
    return load_policy(folder).to(device), json.loads((folder / "sft.json").read_text())
