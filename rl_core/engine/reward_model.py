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
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import PreTrainedTokenizerBase

from rl_core.engine.models import ValueModel, build_value_model


@dataclass(frozen=True)
class PreferencePair:
    """Two responses to one prompt, `chosen` preferred to `rejected` by the labeller."""

    prompt: str
    chosen: str
    rejected: str


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
    prompts = [p.prompt for p in pairs] * 2
    responses = [p.chosen for p in pairs] + [p.rejected for p in pairs]
    scores = reward_scores(model, tokenizer, prompts, responses)
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


@torch.no_grad()
def preference_stats(
    model: ValueModel, tokenizer: PreTrainedTokenizerBase, pairs: list[PreferencePair]
) -> dict[str, float]:
    """The model's Bradley-Terry loss, pairwise accuracy and mean margin on `pairs`, scored in eval mode."""
    was_training = model.training
    model.eval()
    chosen, rejected = pair_scores(model, tokenizer, pairs)
    model.train(was_training)
    return {
        "loss": bradley_terry_loss(chosen, rejected).item(),
        "accuracy": pairwise_accuracy(chosen, rejected).item(),
        "margin": reward_margin(chosen, rejected).item(),
    }


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


class RewardModelTraining:
    """A fresh reward model fitted to `pairs` with the Bradley-Terry loss (AdamW, minibatches drawn with
    replacement), one step at a time: `steps()` yields a record per optimiser step, so a page can draw the fit live.

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
        self.rng = random.Random(seed)
        self.held_out, self.train = split_pairs(pairs, holdout_fraction, self.rng)
        torch.manual_seed(seed)
        self.model = build_value_model(preset, tokenizer).to(device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=learning_rate, weight_decay=0.0)

    def steps(self) -> Iterator[dict[str, float]]:
        """Train; one record per step (`step`, `loss`, `accuracy`, `margin` on its minibatch, and `heldout_*`
        where evaluated). The model is left in eval mode when the generator ends or is closed."""
        self.model.train()
        try:
            for step in range(1, self.total_steps + 1):
                chosen, rejected = pair_scores(
                    self.model, self.tokenizer, self.rng.choices(self.train, k=self.batch_size)
                )
                loss = bradley_terry_loss(chosen, rejected)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                # A reward model can saturate early (every score the same, no signal left); clipping keeps steps
                # small.
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
                self.optimizer.step()
                record = {
                    "step": step,
                    "loss": loss.item(),
                    "accuracy": pairwise_accuracy(chosen.detach(), rejected.detach()).item(),
                    "margin": reward_margin(chosen.detach(), rejected.detach()).item(),
                }
                if self.eval_every and (step % self.eval_every == 0 or step == self.total_steps):
                    stats = preference_stats(self.model, self.tokenizer, self.held_out)
                    record |= {f"heldout_{key}": value for key, value in stats.items()}
                yield record
        finally:
            self.model.eval()


def train_reward_model(
    pairs: list[PreferencePair], tokenizer: PreTrainedTokenizerBase, **options
) -> tuple[ValueModel, float]:
    """Fit a fresh reward model to `pairs` (`RewardModelTraining` with these `options`, run to its end); returns the
    model (in eval mode) and its preference accuracy on the held-out pairs."""
    training = RewardModelTraining(pairs, tokenizer, **options)
    for _ in training.steps():
        pass
    return training.model, preference_accuracy(training.model, tokenizer, training.held_out)
