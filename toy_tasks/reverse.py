"""Reverse a three-character code: `"b2D>"` → `"D2b"`.

A code is a lowercase letter, a digit and an uppercase letter. The sloppy demonstrations copy the code instead of
reversing it (`"b2D>"` → `"b2D"`). The two modes agree on the middle character and part at the first one, so the
SFT policy commits to a mode with its first token: the per-token advantages show that the first and last
characters carry the decision while the middle one is free. Each position has its own kind of character so that a
tiny model can find "the uppercase letter" by what it is rather than by where it is, and learns the task by SFT
within a few hundred steps.
"""

from __future__ import annotations

import random
from typing import ClassVar

from toy_tasks.base import ExactAnswerTask

CHARACTER_CLASSES = ("abcd", "1234", "ABCD")  # first, middle and last character of a code


class ReverseTask(ExactAnswerTask):
    name: ClassVar[str] = "reverse"
    description: ClassVar[str] = "reverse a three-character code (b2D> → D2b); reward 1 for the exact reversal"
    lesson: ClassVar[str] = (
        "The SFT policy mixes a right mode (reverse) and a wrong one (copy) and picks between them with its first "
        "character; RL shifts that single choice, so watch the advantages concentrate on the first and last tokens."
    )
    max_new_tokens: ClassVar[int] = 8
    max_prompt_length: ClassVar[int] = 4
    default_demo_noise: ClassVar[float] = 0.6
    # By design about 1 − noise = 0.4; after the default 200 SFT steps the tiny model measures 0.09–0.18 (seeds 0–4):
    # it copies more often than the demonstrations do. Another 200–400 steps bring seeds 0 and 2 to 0.34–0.36, but
    # not seed 1 (0.12), so the band is what the default warm start reliably gives.
    sft_success_band: ClassVar[tuple[float, float]] = (0.05, 0.55)

    def sample_prompts(self, n: int, rng: random.Random) -> list[str]:
        # Three different kinds of character make copying always wrong, so a demonstration's noise is its error rate.
        return ["".join(rng.choice(kind) for kind in CHARACTER_CLASSES) + ">" for _ in range(n)]

    def answer(self, prompt: str) -> str:
        return prompt[: len(CHARACTER_CLASSES)][::-1]

    def demonstration(self, prompt: str, rng: random.Random, noise: float) -> str:
        if rng.random() < noise:
            return prompt[: len(CHARACTER_CLASSES)]  # the plausible slip: copy the code in its original order
        return self.answer(prompt)
