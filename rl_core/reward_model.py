"""The Bradley-Terry reward model of RLHF: a scalar score for (prompt, response), learned from preference pairs.

Bradley-Terry models the probability that a labeller prefers response y_c to y_r for prompt x as

    P(y_c ≻ y_r | x) = σ(r(x, y_c) − r(x, y_r)),

so fitting r by maximum likelihood minimises −mean log σ(r_c − r_r) over the labelled pairs. Only differences
of scores matter: the model learns a ranking, and its scale and offset are arbitrary.

The model is a `ValueModel` (GPT-2 backbone + scalar head) read at the last real token of
`bos + prompt + response + eos`; with left padding that token is the last column of every row.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import PreTrainedTokenizerBase

from rl_core.models import ValueModel, build_value_model


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


@torch.no_grad()
def preference_accuracy(model: ValueModel, tokenizer: PreTrainedTokenizerBase, pairs: list[PreferencePair]) -> float:
    """The fraction of pairs whose chosen response scores strictly higher than the rejected one."""
    was_training = model.training
    model.eval()
    chosen, rejected = pair_scores(model, tokenizer, pairs)
    model.train(was_training)
    return (chosen > rejected).float().mean().item()


def train_reward_model(
    pairs: list[PreferencePair],
    tokenizer: PreTrainedTokenizerBase,
    preset: str = "tiny",
    steps: int = 100,
    batch_size: int = 32,
    learning_rate: float = 3e-3,
    seed: int = 0,
    device: torch.device | str = "cpu",
    holdout_fraction: float = 0.2,
) -> tuple[ValueModel, float]:
    """Fit a fresh reward model to `pairs` with the Bradley-Terry loss (AdamW, minibatches drawn with replacement).

    A `holdout_fraction` of the pairs is kept out of training; returns the model (in eval mode) and its
    preference accuracy on those held-out pairs."""
    if len(pairs) < 2:
        raise ValueError(f"pairs has {len(pairs)} entries; allowed: at least 2 (some are held out)")
    if not 0 < holdout_fraction < 1:
        raise ValueError(f"holdout_fraction={holdout_fraction!r} is out of range; allowed: 0 < fraction < 1")
    rng = random.Random(seed)
    shuffled = rng.sample(pairs, len(pairs))
    n_holdout = min(len(pairs) - 1, max(1, round(holdout_fraction * len(pairs))))
    held_out, train = shuffled[:n_holdout], shuffled[n_holdout:]
    torch.manual_seed(seed)
    model = build_value_model(preset, tokenizer).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    model.train()
    for _ in range(steps):
        chosen, rejected = pair_scores(model, tokenizer, rng.choices(train, k=batch_size))
        loss = bradley_terry_loss(chosen, rejected)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        # A reward model can saturate early (every score the same, no signal left); clipping keeps steps small.
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    model.eval()
    return model, preference_accuracy(model, tokenizer, held_out)
