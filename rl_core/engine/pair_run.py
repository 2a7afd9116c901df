"""What the run kinds fitted to a task's preference pairs share (DPO and IPO, `preference_optimisation.DPOTrainer`;
the reward model, `reward_model_run.RewardModelTrainer`): `rl_core.engine.trainer.Trainer`'s interface, so the CLI, a
sweep, the run store and reuse take them like any run, with no sampling request in a step."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from rl_core.config import PairRunConfig, RunConfig
from rl_core.engine.models import select_device, use_preset_threads
from rl_core.engine.pretrained import model_tokenizer
from rl_core.engine.reward_model import PreferencePair
from rl_core.engine.sft import default_cache_dir
from toy_tasks import get_task


def pair_group_plan(run: RunConfig) -> tuple:
    """What runs fitted to preference pairs must share to train as one group, as their configs say: the kind, model,
    device and task, the minibatch size, the held-out share and the evaluation prompts. Seeds, learning rates, β and
    DPO's loss type may differ."""
    algo = run.algo
    return (
        type(algo).__name__,
        run.model,
        run.device,
        run.task,
        algo.per_device_train_batch_size,
        algo.holdout_fraction,
        getattr(algo, "n_eval_prompts", None),
    )


class PairRunTrainer:
    """A run whose `algo` is a `kind` (a `PairRunConfig`): validated, on its device with its preset's threads, its
    task and tokenizer at hand. A subclass prepares its `training` (`prepare`), takes one step (`step`) and
    evaluates the result (`evaluate`)."""

    kind: type[PairRunConfig] = PairRunConfig

    def __init__(self, run: RunConfig, cache_dir: Path | None = None, stop_event: threading.Event | None = None):
        run.validate()
        if not isinstance(run.algo, self.kind):
            raise ValueError(f"algo={run.algo.name!r} is not a {self.kind.__name__}; {type(self).__name__} trains one")
        self.run, self.algo = run, run.algo
        self.cache_dir = Path(cache_dir or default_cache_dir())
        self.stop_event = stop_event or threading.Event()
        self.device = select_device(run.device, run.model)
        use_preset_threads(run.model, self.device)
        self.task = get_task(run.task)
        self.demo_noise = self.task.default_demo_noise if run.demo_noise is None else run.demo_noise
        self.tokenizer = model_tokenizer(run.model)
        self.step_index = 0
        self.training = None

    def task_pairs(self) -> list[PreferencePair]:
        """The task's own preference pairs for the run's seed, the very pairs its reward model is fitted to."""
        task = self.task
        return task.preference_pairs(task.n_pairs, random.Random(self.run.seed), task.label_noise)

    def steps(self) -> Iterator[dict]:
        """Train for `run.steps` steps (or until stopped), yielding one record per step."""
        if self.training is None:
            self.prepare()
        while self.step_index < self.run.steps and not self.stop_event.is_set():
            yield self.step()

    def group_key(self) -> tuple:
        """Runs with equal keys train as one group (`pair_group_plan` of their configs)."""
        return pair_group_plan(self.run)

    def prepare(self, progress=None) -> dict:
        raise NotImplementedError

    def step(self) -> dict:
        """One step alone: a group of one run (`step_group`)."""
        return self.step_group([self])[0]

    @classmethod
    def step_group(cls, trainers: Sequence[PairRunTrainer]) -> list[dict]:
        """One step of each prepared trainer of one `group_key`, as one program; their records, in order."""
        raise NotImplementedError

    def evaluate(self) -> dict:
        raise NotImplementedError
