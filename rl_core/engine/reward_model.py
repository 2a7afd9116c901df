"""The Bradley-Terry reward model of RLHF: a scalar score for (prompt, response), learned from preference pairs.

Bradley-Terry models the probability that a labeller prefers response y_c to y_r for prompt x as

    P(y_c ≻ y_r | x) = σ(r(x, y_c) − r(x, y_r)),

so fitting r by maximum likelihood minimises −mean log σ(r_c − r_r) over the labelled pairs. Only differences
of scores matter: the model learns a ranking, and its scale and offset are arbitrary.

The model is a `ValueModel` (GPT-2 backbone + scalar head) read at the last real token of
`bos + prompt + response + eos`; with left padding that token is the last column of every row.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import PreTrainedTokenizerBase

from rl_core.engine.models import ValueModel, build_value_model, position_ids_from_mask
from rl_core.engine.run_group import Records
from rl_core.engine.stacked_adamw import MAX_GRAD_NORM, StackedAdamW, clip_grad_norms
from rl_core.engine.stacked_runs import Stack, StackedGPT2, own_storage, teacher_forced


@dataclass(frozen=True)
class PreferencePair:
    """Two responses to one prompt, `chosen` preferred to `rejected` by the labeller."""

    prompt: str
    chosen: str
    rejected: str


def pair_responses(pairs: list[PreferencePair]) -> list[str]:
    """The pairs' chosen responses, then their rejected ones: the order every pass over both sides of the pairs
    takes (their prompts are `[p.prompt for p in pairs] * 2`)."""
    return [p.chosen for p in pairs] + [p.rejected for p in pairs]


def bradley_terry_loss(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor) -> torch.Tensor:
    """L = −mean_i log σ(r_c,i − r_r,i): the negative log-likelihood of the labels under Bradley-Terry.

    Equal scores cost log 2 per pair; the gradient raises r_c and lowers r_r, each by σ(r_r − r_c) / n_pairs."""
    return -F.logsigmoid(chosen_rewards - rejected_rewards).mean()


def encode_for_reward(
    tokenizer: PreTrainedTokenizerBase, prompts: list[str], responses: list[str], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """`bos + prompt + response + eos` per pair, left padded: `(input_ids, attention_mask)`."""
    rows = [
        [tokenizer.bos_token_id] + tokenizer.encode(prompt + response) + [tokenizer.eos_token_id]
        for prompt, response in zip(prompts, responses)
    ]
    batch = tokenizer.pad({"input_ids": rows}, padding=True, return_tensors="pt")
    return batch["input_ids"].to(device), batch["attention_mask"].to(device)


def reward_scores(
    model: ValueModel, tokenizer: PreTrainedTokenizerBase, prompts: list[str], responses: list[str]
) -> torch.Tensor:
    """Scores `[B]` of the pairs: the value head read at the final EOS (differentiable; wrap in no_grad to score)."""
    device = next(model.parameters()).device
    input_ids, attention_mask = encode_for_reward(tokenizer, prompts, responses, device)
    return model(input_ids, attention_mask)[:, -1]


def pair_scores(
    model: ValueModel, tokenizer: PreTrainedTokenizerBase, pairs: list[PreferencePair]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores of the chosen and of the rejected responses, computed in one forward pass."""
    scores = reward_scores(model, tokenizer, [p.prompt for p in pairs] * 2, pair_responses(pairs))
    return scores[: len(pairs)], scores[len(pairs) :]


def reward_margin(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor) -> torch.Tensor:
    """m = mean_i (r_c,i − r_r,i): how far the model puts the chosen response above the rejected one.

    Bradley-Terry reads it as log-odds: a margin m means P(chosen ≻ rejected) = σ(m) under the model."""
    return (chosen_rewards - rejected_rewards).mean()


def pairwise_accuracy(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor) -> torch.Tensor:
    """acc = mean_i 1[r_c,i > r_r,i]: the fraction of pairs the model orders as the labels do (a tie counts wrong)."""
    return (chosen_rewards > rejected_rewards).float().mean()


@torch.no_grad()
def preference_accuracy(model: ValueModel, tokenizer: PreTrainedTokenizerBase, pairs: list[PreferencePair]) -> float:
    """The fraction of pairs whose chosen response scores strictly higher than the rejected one."""
    return preference_stats(model, tokenizer, pairs)["accuracy"]


def pair_statistics(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor) -> dict[str, torch.Tensor]:
    """The Bradley-Terry `loss`, the pairwise `accuracy` and the mean `margin` of the pairs' scores `[N]`, as 0-dim
    tensors (read from the host once per step, with every run's of a group)."""
    return {
        "loss": bradley_terry_loss(chosen_rewards, rejected_rewards),
        "accuracy": pairwise_accuracy(chosen_rewards, rejected_rewards),
        "margin": reward_margin(chosen_rewards, rejected_rewards),
    }


@torch.no_grad()
def preference_stats(
    model: ValueModel, tokenizer: PreTrainedTokenizerBase, pairs: list[PreferencePair]
) -> dict[str, float]:
    """The model's Bradley-Terry loss, pairwise accuracy and mean margin on `pairs`, scored in eval mode."""
    was_training = model.training
    model.eval()
    chosen, rejected = pair_scores(model, tokenizer, pairs)
    model.train(was_training)
    return {name: value.item() for name, value in pair_statistics(chosen, rejected).items()}


def check_pair_training(
    pairs: list[PreferencePair], holdout_fraction: float, steps: int, batch_size: int, learning_rate: float
) -> None:
    """The knobs every fit to preference pairs shares (the reward model's, DPO's): a ValueError names the one out
    of range and what is allowed."""
    if len(pairs) < 2:
        raise ValueError(f"pairs has {len(pairs)} entries; allowed: at least 2 (some are held out)")
    if not 0 < holdout_fraction < 1:
        raise ValueError(f"holdout_fraction={holdout_fraction!r} is out of range; allowed: 0 < fraction < 1")
    for knob, value in (("steps", steps), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{knob}={value!r} is out of range; allowed: an integer ≥ 1")
    if (
        isinstance(learning_rate, bool)
        or not isinstance(learning_rate, (int, float))
        or not 0 < learning_rate < math.inf
    ):
        raise ValueError(f"learning_rate={learning_rate!r} is out of range; allowed: a number > 0")


def split_pairs(
    pairs: list[PreferencePair], holdout_fraction: float, rng: random.Random
) -> tuple[list[PreferencePair], list[PreferencePair]]:
    """`(held_out, train)`: the pairs shuffled by `rng`, a `holdout_fraction` of them (at least one, and never
    all) kept out of training."""
    shuffled = rng.sample(pairs, len(pairs))
    n_holdout = min(len(pairs) - 1, max(1, round(holdout_fraction * len(pairs))))
    return shuffled[:n_holdout], shuffled[n_holdout:]


def stacked_reward_scores(model: StackedGPT2, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Scores `[R, B]` of R runs' left-padded batches `[R, B, L]` (`encode_for_reward`'s, padded on the left to one
    width), run r's under its own weights: the value head read at the last column, as `reward_scores` reads it."""
    R, B, L = input_ids.shape
    device = input_ids.device
    # Causal over each row's real tokens; a padding query sees itself, so that no softmax row is empty.
    causal = torch.ones((L, L), dtype=torch.bool, device=device).tril()
    real = attention_mask.bool().reshape(R * B, 1, L)
    mask = ((causal & real) | torch.eye(L, dtype=torch.bool, device=device))[:, None]
    last = (torch.arange(B, device=device) * L + L - 1).expand(R, B)[..., None]
    positions = position_ids_from_mask(attention_mask).view(R, B * L)
    hidden = teacher_forced(model, (input_ids.view(R, B * L), positions, mask, last, None))
    return model.values(hidden[:, :, 0])


class RewardModelTraining:
    """A fresh reward model fitted to `pairs` with the Bradley-Terry loss (AdamW, minibatches drawn with
    replacement), one step at a time: `steps()` yields a record per optimiser step, so a page can draw the fit live.
    It steps as a group of one (`RewardModelGroup`); fits of many seeds step as one group.

    A `holdout_fraction` of the pairs is kept out of training (`held_out`); every `eval_every` steps, and at the
    last, a record also carries the loss, accuracy and margin on them (`heldout_*`)."""

    def __init__(
        self,
        pairs: list[PreferencePair],
        tokenizer: PreTrainedTokenizerBase,
        preset: str = "tiny",
        steps: int = 100,
        batch_size: int = 32,
        learning_rate: float = 3e-3,
        seed: int = 0,
        device: torch.device | str = "cpu",
        holdout_fraction: float = 0.2,
        eval_every: int = 0,
    ):
        check_pair_training(pairs, holdout_fraction, steps, batch_size, learning_rate)
        self.tokenizer = tokenizer
        self.total_steps = steps
        self.batch_size = batch_size
        self.eval_every = eval_every
        self.learning_rate = float(learning_rate)
        self.rng = random.Random(seed)
        self.held_out, self.train = split_pairs(pairs, holdout_fraction, self.rng)
        torch.manual_seed(seed)
        # No dropout in the presets: the mode changes nothing, and eval is how a finished model is used.
        self.model = build_value_model(preset, tokenizer).to(device).eval()
        self.step_index = 0
        self.adam_state: dict | None = None  # AdamW's moments and step count, views of its group's once it trains
        self.group: RewardModelGroup | None = None  # the group it last trained in

    def steps(self) -> Iterator[dict[str, float]]:
        """Train; one record per step (`step`, `loss`, `accuracy`, `margin` on its minibatch, and `heldout_*`
        where evaluated)."""
        while self.step_index < self.total_steps:
            if self.group is None or self.group.trainings != [self]:
                RewardModelGroup([self])
            yield self.group.step()[0]


class RewardModelGroup:
    """R `RewardModelTraining`s of one shape (model, minibatch size, held-out pairs) fitted as one program, as a group
    of runs is (docs/ARCHITECTURE.md, "A group of runs"): the models one `Stack` (each training's model a view of
    its row from now on), one pass over every run's minibatch, the same pure loss vmapped over the runs, one
    backward, each run's gradient clipped to its own norm, one `StackedAdamW` step with each run's learning rate.
    Each run draws its minibatches from its own `random.Random`, exactly as alone."""

    def __init__(self, trainings: Sequence[RewardModelTraining]):
        self.trainings = list(trainings)
        for knob, value in (("batch_size", lambda t: t.batch_size), ("held-out pairs", lambda t: len(t.held_out))):
            if len({value(t) for t in self.trainings}) > 1:
                raise ValueError(f"the fits differ in {knob}; a group holds fits of one shape")
        self.R, self.tokenizer = len(self.trainings), self.trainings[0].tokenizer
        self.stack = Stack([t.model for t in self.trainings], trainable=True)
        self.device = self.stack.buffer.device
        self.optimizer = StackedAdamW.at_torch_defaults(
            self.stack.buffer, [t.learning_rate for t in self.trainings], [t.adam_state for t in self.trainings]
        )
        # A reward model can saturate early (every score the same, no signal left); clipping keeps steps small.
        self.max_grad_norm = torch.full((self.R,), MAX_GRAD_NORM, device=self.device)
        for r, training in enumerate(self.trainings):
            training.group = self
            training.adam_state = self.optimizer.run_state(r)

    def scores(self, pairs: list[list[PreferencePair]], runs: torch.Tensor | None = None) -> torch.Tensor:
        """Scores `[R', 2N]` of each run's pairs (the chosen responses, then the rejected) under its model (the runs
        `runs`, every run when None): one pass of the stacked models."""
        encoded = [
            encode_for_reward(self.tokenizer, [p.prompt for p in run] * 2, pair_responses(run), self.device)
            for run in pairs
        ]
        width = max(ids.shape[1] for ids, _ in encoded)
        pad = self.tokenizer.pad_token_id
        ids = torch.stack([F.pad(ids, (width - ids.shape[1], 0), value=pad) for ids, _ in encoded])
        mask = torch.stack([F.pad(mask, (width - mask.shape[1], 0)) for _, mask in encoded])
        weights = self.stack.views(runs, grad=torch.is_grad_enabled())
        return stacked_reward_scores(StackedGPT2(self.trainings[0].model, weights), ids, mask)

    def step(self) -> list[dict[str, float]]:
        """One optimiser step of every fit, with its record (`RewardModelTraining.steps`)."""
        drawn = [t.rng.choices(t.train, k=t.batch_size) for t in self.trainings]
        scores = self.scores(drawn)
        n = scores.shape[1] // 2
        loss = torch.func.vmap(bradley_terry_loss)(scores[:, :n], scores[:, n:])
        self.stack.buffer.grad = None
        loss.sum().backward()  # each run's loss reaches its own row only: every row gets its own run's gradient
        clip_grad_norms(self.stack.buffer.grad, self.max_grad_norm)
        self.optimizer.step(torch.ones(self.R, dtype=torch.bool))
        records = Records(self.R)
        scores = scores.detach()
        records.add(None, torch.func.vmap(pair_statistics)(scores[:, :n], scores[:, n:]))
        for training in self.trainings:
            training.step_index += 1
        due = [
            r
            for r, t in enumerate(self.trainings)
            if t.eval_every and (t.step_index % t.eval_every == 0 or t.step_index == t.total_steps)
        ]
        if due:
            index = torch.tensor(due, device=self.device)
            with torch.no_grad():
                held = self.scores([self.trainings[r].held_out for r in due], index)
            n = held.shape[1] // 2
            stats = torch.func.vmap(pair_statistics)(held[:, :n], held[:, n:])
            records.add(index, {f"heldout_{name}": value for name, value in stats.items()})
        return [{"step": t.step_index} | record for t, record in zip(self.trainings, records.values())]


def train_reward_models(
    fits: Sequence[tuple[list[PreferencePair], int]], tokenizer: PreTrainedTokenizerBase, **options
) -> list[tuple[ValueModel, float]]:
    """Fit a fresh reward model to each `(pairs, seed)` of `fits` (`RewardModelTraining` with these `options`), all
    as one group (`RewardModelGroup`), run to their end; returns each model (in eval mode) and its preference
    accuracy on its held-out pairs."""
    trainings = [RewardModelTraining(pairs, tokenizer, seed=seed, **options) for pairs, seed in fits]
    group = RewardModelGroup(trainings)
    for _ in range(trainings[0].total_steps):
        group.step()
    own_storage([t.model for t in trainings])  # a saved model holds its tensors, not the group's buffer
    return [(t.model, preference_accuracy(t.model, tokenizer, t.held_out)) for t in trainings]


def train_reward_model(
    pairs: list[PreferencePair], tokenizer: PreTrainedTokenizerBase, seed: int = 0, **options
) -> tuple[ValueModel, float]:
    """Fit a fresh reward model to `pairs` (`train_reward_models` of one fit); returns the model (in eval mode) and
    its preference accuracy on the held-out pairs."""
    return train_reward_models([(pairs, seed)], tokenizer, **options)[0]
