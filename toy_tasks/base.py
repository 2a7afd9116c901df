"""The contract every toy task fulfils, and the registry that finds tasks by name.

A task is one file in `toy_tasks/` holding one `ToyTask` subclass; defining the class registers it,
so adding a task needs no change anywhere else. `ExactAnswerTask` is the shared base of verifier tasks
whose prompts each have a single right answer.
"""

from __future__ import annotations

import abc
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch

TASKS: dict[str, type[ToyTask]] = {}


@dataclass(frozen=True)
class Scores:
    """What a task says about a batch of responses: the reward the RL algorithm optimises and whether each
    response truly solves the prompt (for verifier tasks the two agree; for a learned reward model they can
    diverge, which is how reward hacking becomes visible)."""

    rewards: list[float]
    successes: list[bool]


class ToyTask(abc.ABC):
    name: ClassVar[str]
    description: ClassVar[str]  # one line, shown in pickers and `python -m rl_core tasks`
    max_new_tokens: ClassVar[int]  # generation limit; a response that hits it is truncated
    # The longest prompt in tokens (BOS not counted), so a run's response provably fits in the model's context.
    max_prompt_length: ClassVar[int] = 16
    # Positions of the models the task's reward reads (a reward model); a policy's own context is checked besides.
    max_positions: ClassVar[int] = 1 << 30
    default_demo_noise: ClassVar[float]  # fraction of imperfect SFT demonstrations by default
    lesson: ClassVar[str] = ""  # what this task teaches, a sentence or two for the pages
    # The success rate, one sample per prompt, that the SFT policy is designed to have with the default demonstration
    # noise and SFT steps: low enough that RL has work to do, high enough that the policy has learnt the format.
    # None: not checked (tests/test_stability.py asks every task for one).
    sft_success_band: ClassVar[tuple[float, float] | None] = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # ABCMeta fills in `__abstractmethods__` only after this hook has run, so look for abstract methods
        # directly: an intermediate base such as `ExactAnswerTask` must not be registered.
        if not any(getattr(getattr(cls, attr, None), "__isabstractmethod__", False) for attr in dir(cls)):
            TASKS[cls.name] = cls

    def prepare(self, cache_dir: Path, device: torch.device, seed: int) -> None:
        """Build whatever the reward needs (e.g. train a reward model); cached under `cache_dir`."""
        return None  # the default: the reward needs nothing built

    def prepare_seeds(self, cache_dir: Path, device: torch.device, seeds: Sequence[int]) -> None:
        """`prepare` of each seed, the last one's left in place (a task that trains something per seed may train
        the seeds' at once)."""
        for seed in seeds:
            self.prepare(cache_dir, device, seed)

    @abc.abstractmethod
    def sample_prompts(self, n: int, rng: random.Random) -> list[str]:
        """`n` prompts drawn from the task's prompt distribution."""

    @abc.abstractmethod
    def demonstration(self, prompt: str, rng: random.Random, noise: float) -> str:
        """One SFT demonstration for `prompt` (without EOS); imperfect with probability `noise`."""

    @abc.abstractmethod
    def score(self, prompts: list[str], responses: list[str], truncated: list[bool]) -> Scores:
        """Rewards and successes of `responses` (decoded text without EOS)."""


class ExactAnswerTask(ToyTask):
    """A verifier task: every prompt has one right answer, rewarded 1 when matched exactly and 0 otherwise.

    A truncated response earns 0 even if its text happens to match, because it never ended: the policy did not
    commit to that answer."""

    @abc.abstractmethod
    def answer(self, prompt: str) -> str:
        """The one correct response to `prompt`."""

    def score(self, prompts: list[str], responses: list[str], truncated: list[bool]) -> Scores:
        successes = [
            not cut and response == self.answer(prompt) for prompt, response, cut in zip(prompts, responses, truncated)
        ]
        return Scores(rewards=[float(s) for s in successes], successes=successes)
