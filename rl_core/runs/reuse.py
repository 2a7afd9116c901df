"""Reuse of finished runs: a run is identified by its key, a hash of its whole `RunConfig` and of the engine that
trains it, so an identical request is answered from the run store instead of being trained again.

The key covers every field of the run (the algorithm's knobs, task, model, steps, seed, warm start, samples kept),
the kind of device it trains on (cpu, cuda, mps: floats round differently on each), the torch version (its kernels
may round differently) and the engine's version: a hash of the Python sources of `rl_core` and `toy_tasks`, so an
edited formula, trainer or task never answers from runs it would not reproduce.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import time
from collections.abc import Iterable
from pathlib import Path

from rl_core.config import RunConfig

ENGINE_PACKAGES = ("rl_core", "toy_tasks")
ROOT = Path(__file__).resolve().parents[2]  # the repository: this file is rl_core/runs/reuse.py


def fingerprint(text: str, length: int = 16) -> str:
    """A short hex digest of `text` (SHA-1), for cache and run keys: stable across processes and machines."""
    return hashlib.sha1(text.encode()).hexdigest()[:length]


@functools.cache
def engine_version() -> str:
    """The hash of every .py source under rl_core/ and toy_tasks/ (paths and contents), computed once per process."""
    digest = hashlib.sha1()
    for package in ENGINE_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def run_key(run: RunConfig) -> str:
    """The run's identity: its whole config with the device resolved to its kind, the torch version and the engine
    version, and for a loaded model its files (a folder saved again is another model). Equal keys train to equal
    records; any other knob, seed, source or weights gives another key."""
    import torch  # here, not at the top: the run store reads keys without loading torch

    from rl_core.engine.models import select_device
    from rl_core.engine.pretrained import is_preset, model_identity

    config = {**dataclasses.asdict(run), "device": select_device(run.device, run.model).type}
    identity = {"run": config, "torch": torch.__version__, "engine": engine_version()}
    if not is_preset(run.model):  # a preset's key stays what it was, so stored runs are still reused
        identity["weights"] = model_identity(run.model, None)
    text = json.dumps(identity, sort_keys=True)
    return fingerprint(text, 32)


def every_run_reusable(store, runs: Iterable[RunConfig]) -> bool:
    """Whether `store` (a `RunStore`) holds or trains every one of `runs` already, so that a request for them trains
    nothing."""
    keys = {run_key(run) for run in runs}
    return store.reusable(keys) == keys


def recorded_when(timestamps: Iterable[float]) -> str:
    """When stored runs were recorded, in this machine's local time: one minute, or the first and the last."""
    stamps = sorted(timestamps)
    if not stamps:
        raise ValueError("recorded_when needs at least one timestamp")
    first, last = (time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) for t in (stamps[0], stamps[-1]))
    return first if first == last else f"{first} to {last}"


def reuse_line(runs) -> str:
    """ "reused K of N runs (recorded <when>)" for a sweep's stored runs (`StoredRun`s)."""
    reused = [run for run in runs if run.reused and run.status == "finished"]
    when = f" (recorded {recorded_when(run.finished_at for run in reused)})" if reused else ""
    return f"reused {len(reused)} of {len(runs)} runs{when}"
