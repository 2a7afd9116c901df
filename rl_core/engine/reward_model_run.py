"""The reward model as a run kind: a `RunConfig` whose `algo` is a `RewardConfig` trains as an RL run does (the same
`prepare()`, `steps()`, `step()`, `step_index`, `evaluate()`; `pair_run.PairRunTrainer`), so the CLI, a
sweep, the run store and reuse take it like any run."""

from __future__ import annotations

from collections.abc import Sequence

from rl_core.config import RewardConfig
from rl_core.engine.pair_run import PairRunTrainer
from rl_core.engine.reward_model import RewardModelGroup, RewardModelTraining, preference_stats
from rl_core.engine.run_group import bound_group
from rl_core.engine.trainer import Progress


class RewardModelTrainer(PairRunTrainer):
    """A fresh Bradley–Terry reward model (`RewardModelTraining`) on the run's model preset, fitted to the task's
    preference pairs for the run's seed (the pairs its own reward model and DPO learn from), `run.steps` minibatches
    long.

    Step k's record: `loss`, `accuracy`, `margin` of its minibatch, and every `eval_steps` steps and at the last the
    same on the held-out pairs (`heldout_*`). The final evaluation is the held-out `heldout_loss`,
    `heldout_accuracy` and `heldout_margin` of the trained model. No policy, no warm start: nothing to prepare but
    the pairs."""

    kind = RewardConfig

    def prepare(self, progress: Progress | None = None) -> dict:
        """The pairs and a fresh model; returns how many pairs train and how many are held out."""
        algo = self.algo
        self.training = RewardModelTraining(
            self.task_pairs(),
            self.tokenizer,
            preset=self.run.model,
            steps=self.run.steps,
            batch_size=algo.per_device_train_batch_size,
            learning_rate=algo.learning_rate,
            seed=self.run.seed,
            device=self.device,
            holdout_fraction=algo.holdout_fraction,
            eval_every=algo.eval_steps,
        )
        return {"train_pairs": len(self.training.train), "held_out_pairs": len(self.training.held_out)}

    @classmethod
    def step_group(cls, trainers: Sequence[RewardModelTrainer]) -> list[dict]:
        """One step of each fit, as one `RewardModelGroup` (kept while its runs stay the same)."""
        trainings = [t.training for t in trainers]
        group = bound_group(trainings, lambda g: g.trainings)
        if group is None:
            group = RewardModelGroup(trainings)
        records = group.step()
        for trainer in trainers:
            trainer.step_index += 1
        return records

    def evaluate(self) -> dict:
        """The trained model's loss, accuracy and margin on the held-out pairs."""
        stats = preference_stats(self.training.model, self.tokenizer, self.training.held_out)
        return {f"heldout_{key}": value for key, value in stats.items()}
