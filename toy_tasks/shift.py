"""Shift four letters one step along the alphabet: `"bdfa>"` → `"cegb"` — a sparse 0/1 reward.

A sloppy demonstration forgets to shift some letters and copies them instead (`"bdfa>"` → `"cdfb"`). Each letter
is forgotten independently with probability q, chosen so that a whole demonstration is wrong with probability
`noise`: q = 1 − (1 − noise)^(1/4). The SFT policy learns those per-letter coin flips, so it gets all four right
only about 1 − noise of the time; at the default noise most groups of samples score all zeros.
"""

from __future__ import annotations

import random
from typing import ClassVar

from toy_tasks.base import ExactAnswerTask

ALPHABET = "abcdefgh"
LENGTH = 4


class ShiftTask(ExactAnswerTask):
    name: ClassVar[str] = "shift"
    description: ClassVar[str] = "shift four letters by one (bdfa> → cegb); sparse reward: 1 only if all four are right"
    lesson: ClassVar[str] = (
        "With a success rate near 10 %, most groups get the same reward for every sample, so their group advantage "
        "is zero and they teach nothing: dynamic sampling drops them and draws new prompts."
    )
    max_new_tokens: ClassVar[int] = 8
    max_prompt_length: ClassVar[int] = 5
    default_demo_noise: ClassVar[float] = 0.9
    sft_success_band: ClassVar[tuple[float, float]] = (0.03, 0.25)

    def sample_prompts(self, n: int, rng: random.Random) -> list[str]:
        return ["".join(rng.choices(ALPHABET, k=LENGTH)) + ">" for _ in range(n)]

    def answer(self, prompt: str) -> str:
        return "".join(chr(ord(c) + 1) for c in prompt[:LENGTH])

    def demonstration(self, prompt: str, rng: random.Random, noise: float) -> str:
        slip = 1.0 - (1.0 - noise) ** (1.0 / LENGTH)
        shifted = self.answer(prompt)
        # The plausible slip: leave a letter where it was.
        return "".join(c if rng.random() < slip else s for c, s in zip(prompt[:LENGTH], shifted))
