"""Checkpoints written whole or not at all: stale staging folders of dead processes are removed, live ones kept;
a damaged cached SFT checkpoint (or one saved with an untied LM head) or reward model is reported and rebuilt;
trainer state loads without pickle."""

import logging
import os
import pickle
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from rl_core.algorithms import get_preset
from rl_core.config import RunConfig
from rl_core.engine.trainer import Trainer, TrainingError
from rl_core.runs.staging import MARK, remove_stale_staging, staging_folder
from toy_tasks import get_task


def dead_pid() -> int:
    """The id of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_staging_folders_of_dead_processes_go_and_live_ones_stay(tmp_path):
    stale = tmp_path / f"ckpt{MARK}{dead_pid()}-abc"
    (stale / "policy").mkdir(parents=True)
    (stale / "policy" / "model.safetensors").write_bytes(b"\0" * 1000)
    live = tmp_path / f"ckpt{MARK}{os.getpid()}-def"
    live.mkdir()
    unrelated = tmp_path / "ckpt"
    unrelated.mkdir()
    assert remove_stale_staging(tmp_path) == [stale]
    assert not stale.exists() and live.exists() and unrelated.exists()
    fresh = staging_folder(tmp_path / "other")
    assert fresh.name.startswith(f"other{MARK}{os.getpid()}-") and fresh.is_dir()


def test_unmarked_staging_folders_go_from_the_cache_once_an_hour_old(tmp_path):
    old, young = tmp_path / "caesar-tiny-seed0-noise0.65-steps200.k3j_x9q2", tmp_path / "reverse-tiny.ab12cd34"
    kept = tmp_path / "caesar-tiny-0a1b2c3d4e-seed0-noise0.65-steps200"  # a finished checkpoint
    for folder in (old, young, kept):
        folder.mkdir()
    hours_ago = time.time() - 7200
    os.utime(old, (hours_ago, hours_ago))
    os.utime(kept, (hours_ago, hours_ago))
    assert remove_stale_staging(tmp_path) == []  # outside the cache a name of that shape may be the user's
    assert remove_stale_staging(tmp_path, cache=True) == [old]
    assert young.exists() and kept.exists()


def tiny_run(task: str = "caesar", **knobs) -> RunConfig:
    algo = get_preset("grpo", prompts_per_step=2, num_generations=2, ppo_epochs=1, num_minibatches=1, **knobs)
    return RunConfig(algo=algo, task=task, steps=1, sft_steps=2, seed=0)


def sft_folder(cache):
    (folder,) = (cache / "sft").iterdir()
    return folder


@pytest.mark.parametrize("damage", ["truncate", "empty", "delete", "untied"])
def test_a_damaged_sft_checkpoint_is_reported_and_trained_again(tmp_path, caplog, damage):
    Trainer(tiny_run(), cache_dir=tmp_path).prepare()
    weights = sft_folder(tmp_path) / "model.safetensors"
    if damage == "truncate":
        weights.write_bytes(weights.read_bytes()[:100])
    elif damage == "empty":
        weights.write_bytes(b"")
    elif damage == "untied":  # as saved by a policy built while another thread loaded one
        tensors = load_file(weights)
        save_file({**tensors, "lm_head.weight": tensors["transformer.wte.weight"] + 1.0}, weights, {"format": "pt"})
    else:
        weights.unlink()
    with caplog.at_level(logging.WARNING):
        trainer = Trainer(tiny_run(), cache_dir=tmp_path)
        trainer.prepare()
    assert "cached SFT checkpoint" in caplog.text and "training it again" in caplog.text
    assert "lm_head.weight" not in load_file(weights)
    assert len(list(trainer.steps())) == 1
    assert weights.stat().st_size > 1000  # rebuilt in place: the next run loads it
    caplog.clear()
    Trainer(tiny_run(), cache_dir=tmp_path).prepare()
    assert "unreadable" not in caplog.text


def test_a_damaged_reward_model_is_reported_and_trained_again(tmp_path, caplog, monkeypatch):
    task = get_task("preference")
    monkeypatch.setattr(type(task), "rm_steps", 2)
    monkeypatch.setattr(type(task), "n_pairs", 50)
    task.prepare(tmp_path, torch.device("cpu"), 0)
    (folder,) = (tmp_path / "reward_models").iterdir()
    (folder / "value_model.pt").write_bytes(b"truncated")
    with caplog.at_level(logging.WARNING):
        again = get_task("preference")
        again.prepare(tmp_path, torch.device("cpu"), 0)
    assert "cached reward model" in caplog.text and "training it again" in caplog.text
    assert again.reward_model is not None and len(again.score(["max>"], ["Max!"], [False]).rewards) == 1


class Payload:
    """Stands for code an attacker would run: unpickling it calls os.system."""

    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_trainer_state_is_loaded_without_unpickling_code(tmp_path):
    trainer = Trainer(tiny_run(), cache_dir=tmp_path)
    trainer.prepare()
    folder = trainer.save_checkpoint(tmp_path / "ckpt")
    state = torch.load(folder / "trainer_state.pt", weights_only=True)  # plain tensors and containers only
    assert set(state) == {"optimizer", "critic_optimizer", "generator", "behaviour_snapshots"}
    torch.save({**state, "optimizer": Payload()}, folder / "trainer_state.pt")
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        trainer.load_checkpoint(folder)


def torch_load_calls(text: str) -> list[str]:
    """The argument text of every `torch.load(...)` call in `text`, parentheses balanced."""
    calls = []
    for match in re.finditer(r"torch\.load\(", text):
        depth, end = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            end += 1
        calls.append(text[match.end() : end - 1])
    return calls


def test_every_torch_load_in_the_lab_is_weights_only():
    root = Path(__file__).resolve().parents[1]
    calls = {
        f"{path.relative_to(root)}: {call}"
        for folder in ("rl_core", "toy_tasks", "ui", "app_pages", "bench")
        for path in (root / folder).rglob("*.py")
        for call in torch_load_calls(path.read_text())
    }
    assert len(calls) >= 2, "the lab loads trainer state and critics with torch.load: the scan is broken"
    assert all("weights_only=True" in call for call in calls), sorted(calls)


def test_a_diverging_critic_is_named_not_the_policy(tmp_path):
    trainer = Trainer(
        RunConfig(
            algo=get_preset("ppo", prompts_per_step=4, ppo_epochs=1, num_minibatches=1),
            task="caesar",
            steps=2,
            sft_steps=2,
        ),
        cache_dir=tmp_path,
    )
    trainer.prepare()
    with torch.no_grad():
        trainer.critic.value_head.weight.fill_(float("inf"))  # what a huge critic step leaves behind
    with pytest.raises(TrainingError, match=r"step 1: the critic diverged .*lower critic_learning_rate"):
        next(trainer.steps())
