"""Encode a word with a Caesar shift of one: `"cab>"` → `"dbc"` — the default task.

The sloppy demonstrations forget to encode the last letter (`"cab>"` → `"dbb"`). The first two letters are always
shifted, so SFT learns the skill within a couple of hundred steps, and the policy it yields flips a biased coin at
the last letter: it succeeds about 1 − noise of the time. RL only has to move that one decision, which it does
within seconds, and the per-token view shows the whole advantage riding on the last letter.
"""

from __future__ import annotations

import random
from typing import ClassVar

from toy_tasks.base import ExactAnswerTask

ALPHABET = "abcdefgh"
LENGTH = 3


class CaesarTask(ExactAnswerTask):
    name: ClassVar[str] = "caesar"
    description: ClassVar[str] = "shift each of three letters by one (cab> → dbc); reward 1 for the exact answer"
    lesson: ClassVar[str] = (
        "The SFT policy encodes the first two letters and then hesitates at the last: shift it or copy it. Watch the "
        "success rate climb from about a third to nearly all and the entropy of the last letter collapse."
    )
    max_new_tokens: ClassVar[int] = 8
    max_prompt_length: ClassVar[int] = 4
    default_demo_noise: ClassVar[float] = 0.65
    sft_success_band: ClassVar[tuple[float, float]] = (0.2, 0.5)

    def sample_prompts(self, n: int, rng: random.Random) -> list[str]:
        return ["".join(rng.choices(ALPHABET, k=LENGTH)) + ">" for _ in range(n)]

    def answer(self, prompt: str) -> str:
        return "".join(chr(ord(c) + 1) for c in prompt[:LENGTH])

    def demonstration(self, prompt: str, rng: random.Random, noise: float) -> str:
        answer = self.answer(prompt)
        if rng.random() < noise:
            return answer[:-1] + prompt[LENGTH - 1]  # the plausible slip: forget to encode the last letter
        return answer
