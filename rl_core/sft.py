"""Supervised warm start: fit the policy to a task's (imperfect) demonstrations; the result is π_ref.

Checkpoints are cached on disk per (task, model preset, seed, noise, steps), written to a temporary folder
and renamed into place, so an interrupted run never leaves a half-written checkpoint behind.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import os
import random
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import platformdirs
import torch
from transformers import GPT2LMHeadModel, PreTrainedTokenizerBase

from rl_core.models import MODEL_PRESETS, build_policy, load_policy, model_config
from rl_core.rollout import encode_pairs, response_logits, token_logprobs
from toy_tasks.base import ToyTask


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
) -> GPT2LMHeadModel:
    """The SFT policy for this (task, preset, seed, noise, steps), trained once and then loaded from the cache."""
    cache_dir = Path(cache_dir or default_cache_dir())
    # The architecture, its SFT learning rate and the task's code are part of the key, so a changed preset or a
    # task whose demonstrations changed never loads a stale checkpoint.
    learning_rate = MODEL_PRESETS[model_preset].sft_learning_rate
    fingerprint = (
        model_config(model_preset, tokenizer).to_json_string()
        + f"lr={learning_rate}"
        + inspect.getsource(inspect.getmodule(type(task)))
    )
    version = hashlib.sha1(fingerprint.encode()).hexdigest()[:10]
    name = f"{task.name}-{model_preset}-{version}-seed{seed}-noise{demo_noise:g}-steps{steps}"
    folder = cache_dir / "sft" / name
    lock = _checkpoint_lock(folder.resolve())
    while not lock.acquire(timeout=0.25):
        if progress is not None:
            progress(0, math.nan)  # still waiting: the caller may stop here
    try:
        return _load_or_train(folder, task, tokenizer, model_preset, seed, demo_noise, steps, learning_rate, device, progress)
    finally:
        lock.release()


def _load_or_train(folder, task, tokenizer, model_preset, seed, demo_noise, steps, learning_rate, device, progress):
    """The checkpoint in `folder` if it is readable, else a newly trained one written there (temporary folder, then
    a rename)."""
    if (folder / "config.json").exists():
        try:
            return load_policy(folder).to(device)
        except (OSError, ValueError):
            shutil.rmtree(folder, ignore_errors=True)  # unreadable: train it again
    # The initial weights come from the seed alone; the process's global RNG is left as it was found.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        policy = build_policy(model_preset, tokenizer).to(device)
    train_sft(policy, tokenizer, task, steps, demo_noise, seed, learning_rate=learning_rate, progress=progress)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    policy.save_pretrained(staging)  # safetensors: written from device tensors directly
    tokenizer.save_pretrained(staging)
    try:
        staging.rename(folder)
    except OSError:  # another process finished the same checkpoint first
        shutil.rmtree(staging, ignore_errors=True)
    # Every run starts from the checkpoint as loaded, also the run that trained it: the freshly trained module
    # holds the same values, yet its passes round differently at the last bit (seen as RL curves that agreed
    # for 8–14 steps and then parted), so a run's records would depend on whether its SFT was cached.
    return load_policy(folder).to(device)
