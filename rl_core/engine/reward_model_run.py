"""The reward model as a run kind: a `RunConfig` whose `algo` is a `RewardConfig` trains as an RL run does (the
same `prepare()`, `steps()`, `step_phases()`, `step_index`, `evaluate()`), so the CLI, a sweep, the run store and
reuse take it like any run."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from pathlib import Path

from rl_core.config import RewardConfig, RunConfig
from rl_core.engine.models import select_device, use_preset_threads
from rl_core.engine.reward_model import RewardModelTraining, preference_stats
from rl_core.engine.sft import default_cache_dir
from rl_core.engine.tokenizer import build_char_tokenizer
from rl_core.engine.trainer import Progress
from toy_tasks import get_task


class RewardModelTrainer:
    """A fresh Bradley–Terry reward model (`RewardModelTraining`) on the run's model preset, fitted to the task's
    preference pairs for the run's seed (`task.preference_pairs(task.n_pairs, Random(seed), task.label_noise)`, the
    pairs its own reward model and DPO learn from), `run.steps` minibatches long.

    Step k's record: `loss`, `accuracy`, `margin` of its minibatch, and every `eval_steps` steps and at the last the
    same on the held-out pairs (`heldout_*`). The final evaluation is the held-out `heldout_loss`,
    `heldout_accuracy` and `heldout_margin` of the trained model. No policy, no warm start: nothing to prepare but
    the pairs."""

    def __init__(self, run: RunConfig, cache_dir: Path | None = None, stop_event: threading.Event | None = None):
        run.validate()
        if not isinstance(run.algo, RewardConfig):
            raise ValueError(f"algo={run.algo.name!r} is not reward_model; RewardModelTrainer fits a RewardConfig")
        self.run, self.algo = run, run.algo
        self.cache_dir = Path(cache_dir or default_cache_dir())
        self.stop_event = stop_event or threading.Event()
        self.device = select_device(run.device, run.model)
        use_preset_threads(run.model, self.device)
        self.task = get_task(run.task)
        self.demo_noise = self.task.default_demo_noise if run.demo_noise is None else run.demo_noise
        self.tokenizer = build_char_tokenizer()
        self.step_index = 0
        self.training: RewardModelTraining | None = None
        self._records: Iterator[dict] | None = None

    def prepare(self, progress: Progress | None = None) -> dict:
        """The pairs and a fresh model; returns how many pairs train and how many are held out."""
        task, algo = self.task, self.algo
        pairs = task.preference_pairs(task.n_pairs, random.Random(self.run.seed), task.label_noise)
        self.training = RewardModelTraining(
            pairs, self.tokenizer, preset=self.run.model, steps=self.run.steps,
            batch_size=algo.per_device_train_batch_size, learning_rate=algo.learning_rate, seed=self.run.seed,
            device=self.device, holdout_fraction=algo.holdout_fraction, eval_every=algo.eval_steps,
        )
        self._records = self.training.steps()
        return {"train_pairs": len(self.training.train), "held_out_pairs": len(self.training.held_out)}

    def steps(self) -> Iterator[dict]:
        """Train for `run.steps` steps (or until stopped), yielding one record per step."""
        if self.training is None:
            self.prepare()
        while self.step_index < self.run.steps and not self.stop_event.is_set():
            yield self.step()

    def step_phases(self):
        """One step as `Trainer.step_phases` runs it (`rl_core.engine.run_batch`), asking for no sample. Returns the
        record and no token count (no sampled tokens are trained on)."""
        return self.step(), None
        yield  # a coroutine with no requests

    def step(self) -> dict:
        record = next(self._records)
        self.step_index += 1
        return record

    def evaluate(self) -> dict:
        """The trained model's loss, accuracy and margin on the held-out pairs."""
        stats = preference_stats(self.training.model, self.tokenizer, self.training.held_out)
        return {f"heldout_{key}": value for key, value in stats.items()}
