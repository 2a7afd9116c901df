"""Reverse three different letters: `"abc>"` → `"cba"`.

The sloppy demonstrations copy the letters instead of reversing them (`"abc>"` → `"abc"`). The two modes agree
on the middle letter and part at the first one, so the SFT policy commits to a mode with its first token: the
per-token advantages show that the first and last letters carry the decision while the middle one is free.
"""

from __future__ import annotations

import random
from typing import ClassVar

from toy_tasks.base import ExactAnswerTask

ALPHABET = "abcde"
LENGTH = 3


class ReverseTask(ExactAnswerTask):
    name: ClassVar[str] = "reverse"
    description: ClassVar[str] = "reverse three different letters (abc> → cba); reward 1 for the exact reversal"
    lesson: ClassVar[str] = (
        "The SFT policy mixes a right mode (reverse) and a wrong one (copy) and picks between them with its first "
        "letter; RL shifts that single choice, so watch the advantages concentrate on the first and last tokens."
    )
    max_new_tokens: ClassVar[int] = 8
    default_demo_noise: ClassVar[float] = 0.65

    def sample_prompts(self, n: int, rng: random.Random) -> list[str]:
        # Different letters guarantee that copying is always wrong, so a demonstration's noise is its error rate.
        return ["".join(rng.sample(ALPHABET, LENGTH)) + ">" for _ in range(n)]

    def answer(self, prompt: str) -> str:
        return prompt[:LENGTH][::-1]

    def demonstration(self, prompt: str, rng: random.Random, noise: float) -> str:
        if rng.random() < noise:
            return prompt[:LENGTH]  # the plausible slip: copy the letters in their original order
        return self.answer(prompt)
