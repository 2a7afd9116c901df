"""Talking to a reward model: its score of a typed response, which of two responses it prefers and how surely, and
how it ranks what a policy writes for one prompt.

A reward model answers no prompt; it scores (prompt, response). Under Bradley-Terry the difference of two scores is
the log-odds of a preference, so a pair is shown as the preferred response, its margin r_w − r_l and σ(r_w − r_l).
The prompt is held to the task's prompts by `chat.check_prompt`; a response by `check_response` to what the
tokenizer reads and the task's length limit.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch
from transformers import GPT2LMHeadModel, PreTrainedTokenizerBase

from rl_core.engine.models import ValueModel
from rl_core.engine.reward_model import reward_scores
from rl_core.engine.rollout import sample
from rl_core.engine.tokenizer import CHARACTERS
from toy_tasks import get_task

N_SAMPLES = 8  # responses drawn from the policy per prompt for the ranking


def preference_probability(chosen_reward: float, rejected_reward: float) -> float:
    """P(y_w ≻ y_l | x) = σ(r(x, y_w) − r(x, y_l)): the Bradley-Terry probability that a labeller prefers y_w."""
    return 1.0 / (1.0 + math.exp(rejected_reward - chosen_reward))


def check_response(task_name: str, text: str) -> str:
    """The response to score, as typed (it is scored verbatim, EOS appended; an empty response is EOS alone, an
    answer a policy can give). ValueError naming `response` and what is allowed: characters the tokenizer cannot
    read, or more of them than the task lets a policy write (`max_new_tokens`)."""
    task = get_task(task_name)
    example = task.demonstration(task.sample_prompts(1, random.Random(0))[0], random.Random(0), 0.0)
    allowed = (
        f"printable ASCII characters (letters, digits, punctuation, space), at most {task.max_new_tokens} "
        f"of them (task {task_name}'s length limit), e.g. {example!r}"
    )
    if others := "".join(sorted(set(text) - set(CHARACTERS))):
        plural = "s" if len(others) > 1 else ""
        raise ValueError(
            f"response {text!r} cannot be scored: the tokenizer reads no character{plural} "
            f"{', '.join(map(repr, others))}; allowed: {allowed}"
        )
    if len(text) > task.max_new_tokens:
        raise ValueError(f"response {text!r} is {len(text)} characters long; allowed: {allowed}")
    return text


@torch.no_grad()
def score_responses(
    model: ValueModel, tokenizer: PreTrainedTokenizerBase, prompt: str, responses: list[str]
) -> list[float]:
    """r(x, y) of each response to one prompt: `reward_model.reward_scores`, in eval mode, without autograd."""
    was_training = model.training
    model.eval()
    try:
        return reward_scores(model, tokenizer, [prompt] * len(responses), responses).tolist()
    finally:
        model.train(was_training)


@dataclass(frozen=True)
class PairJudgement:
    """A reward model's verdict on two responses to one prompt."""

    prompt: str
    responses: tuple[str, str]
    scores: tuple[float, float]

    @property
    def preferred(self) -> int | None:
        """0 or 1, the response with the higher score; None on a tie (Bradley-Terry: a coin toss)."""
        first, second = self.scores
        return None if first == second else 0 if first > second else 1

    @property
    def margin(self) -> float:
        """r_w − r_l ≥ 0, w the preferred response: the log-odds of the preference."""
        return abs(self.scores[0] - self.scores[1])

    @property
    def probability(self) -> float:
        """σ(r_w − r_l): how surely the model prefers its preferred response (0.5 on a tie)."""
        return preference_probability(max(self.scores), min(self.scores))


def judge_pair(
    model: ValueModel, tokenizer: PreTrainedTokenizerBase, prompt: str, first: str, second: str
) -> PairJudgement:
    """Both responses scored in one pass (check them first: `chat.check_prompt`, `check_response`)."""
    scores = score_responses(model, tokenizer, prompt, [first, second])
    return PairJudgement(prompt, (first, second), (scores[0], scores[1]))


@dataclass(frozen=True)
class RankedSample:
    """One distinct response among a policy's samples, with the reward model's score."""

    response: str
    score: float
    count: int  # how many of the samples were this response
    truncated: bool  # cut at the length limit, without EOS


def rank_policy_samples(
    reward_model: ValueModel,
    policy: GPT2LMHeadModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt: str,
    max_new_tokens: int,
    seed: int,
    n: int = N_SAMPLES,
    temperature: float = 1.0,
) -> list[RankedSample]:
    """`n` responses of `policy` to `prompt`, sampled as the trainer samples (`rollout.sample`, the generator
    seeded with `seed`), each distinct one scored by the reward model once; best first (ties in order drawn)."""
    generator = torch.Generator(device=next(policy.parameters()).device).manual_seed(seed)
    rollout = sample(policy, tokenizer, [prompt] * n, max_new_tokens, temperature, generator)
    counts: dict[str, int] = {}
    truncated: dict[str, bool] = {}
    for response, cut in zip(rollout.responses, rollout.truncated.tolist()):
        counts[response] = counts.get(response, 0) + 1
        truncated[response] = cut
    scores = score_responses(reward_model, tokenizer, prompt, list(counts))
    ranked = [
        RankedSample(response, score, counts[response], truncated[response]) for response, score in zip(counts, scores)
    ]
    return sorted(ranked, key=lambda sample_: -sample_.score)
