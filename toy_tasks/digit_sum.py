"""Write digits that add up to N: `"17>"` → `"98"`, `"4553"`, `"2222333111"`, … — every such string is right.

A task built so that algorithms differ. Many responses are correct for every prompt, so keeping entropy is worth
something; the length is free (two digits to over twenty for the same target) and the reward never looks at it,
so the way a loss weighs long responses can move it; and the skill — keeping a running sum and stopping exactly
at N — is hard for the tiny model, so success starts low (many groups of all-wrong samples) and climbs slowly.

Each demonstration picks a style, the largest digit it uses (2 to 9), and draws digits up to that size until the
sum is reached; small styles give long responses, large ones short. A sloppy demonstration stops one to three
short of N or runs one to three past it. Reward: 1 when the digits sum to N exactly (and the response ended
before the length limit), 0 otherwise.
"""

from __future__ import annotations

import random
from typing import ClassVar

from toy_tasks.base import Scores, ToyTask

MIN_TARGET, MAX_TARGET = 6, 22
DIGITS = "123456789"


def digit_sum(response: str) -> int | None:
    """The sum of the response's digits, or None if it holds anything but the digits 1–9 (or nothing)."""
    if not response or any(c not in DIGITS for c in response):
        return None
    return sum(int(c) for c in response)


def digits_summing_to(total: int, largest: int, rng: random.Random) -> str:
    """Digits from 1 to `largest` drawn at random until their sum is `total` (the last one is cut to fit)."""
    digits = []
    while total > 0:
        digit = min(rng.randint(1, largest), total)
        digits.append(str(digit))
        total -= digit
    return "".join(digits)


class DigitSumTask(ToyTask):
    name: ClassVar[str] = "digit_sum"
    description: ClassVar[str] = "write digits that add up to N (17> → 98, 4553, …); many right answers of any length"
    lesson: ClassVar[str] = (
        "Many answers are right and the reward ignores their length, so entropy is worth keeping and the loss "
        "aggregation decides whether long wrong answers grow. Success starts low and climbs over hundreds of steps: "
        "the place to compare algorithms."
    )
    max_new_tokens: ClassVar[int] = 32
    default_demo_noise: ClassVar[float] = 0.3
    # After the default 200-step warm start (seeds 0–4: 0.05–0.14); the experiments warm up for 500 steps and
    # start near 0.2–0.3.
    sft_success_band: ClassVar[tuple[float, float]] = (0.03, 0.2)

    def sample_prompts(self, n: int, rng: random.Random) -> list[str]:
        return [f"{rng.randint(MIN_TARGET, MAX_TARGET)}>" for _ in range(n)]

    @staticmethod
    def target(prompt: str) -> int:
        return int(prompt[:-1])

    def demonstration(self, prompt: str, rng: random.Random, noise: float) -> str:
        total = self.target(prompt)
        if rng.random() < noise:  # the slip: lose count and stop a little early or late
            total += rng.choice((-3, -2, -1, 1, 2, 3))
        return digits_summing_to(total, rng.randint(2, 9), rng)

    def is_correct(self, prompt: str, response: str) -> bool:
        return digit_sum(response) == self.target(prompt)

    def score(self, prompts: list[str], responses: list[str], truncated: list[bool]) -> Scores:
        # A truncated response never committed to its answer, so it earns nothing even if its digits fit.
        successes = [not cut and self.is_correct(p, r) for p, r, cut in zip(prompts, responses, truncated)]
        return Scores(rewards=[float(s) for s in successes], successes=successes)
