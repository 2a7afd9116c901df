"""Count from 1 up to N: `"5>"` → `"12345"` — a task where the response length is the whole story.

A sloppy demonstration does not stop at N: half of them overshoot by one to three digits and then stop, the
other half ramble on (digits cycle 1…9, 0, 1, …) past the generation limit, so the SFT policy often produces
responses that get truncated. Reward: 1 for exactly `"12…N"`, 0 for anything else, including every truncated
response — no partial credit, so an overshoot is as wrong as nonsense and only the stopping decision matters.
"""

from __future__ import annotations

import random
from typing import ClassVar

from toy_tasks.base import ExactAnswerTask

MAX_N = 9


def counting(length: int) -> str:
    """The first `length` digits of 1, 2, 3, … written by their last digit (…, 9, 0, 1, …)."""
    return "".join(str(i % 10) for i in range(1, length + 1))


class CountTask(ExactAnswerTask):
    name: ClassVar[str] = "count"
    description: ClassVar[str] = "count from 1 to N (5> → 12345); demonstrations often run past N and never stop"
    lesson: ClassVar[str] = (
        "Wrong answers are long and many hit the length limit. Sequence-mean aggregation spreads their penalty over "
        "many tokens (the length bias); overlong filtering masks truncated responses and soft overlong punishment "
        "charges for length directly."
    )
    max_new_tokens: ClassVar[int] = 12
    max_prompt_length: ClassVar[int] = 2
    default_demo_noise: ClassVar[float] = 0.5
    sft_success_band: ClassVar[tuple[float, float]] = (0.3, 0.7)

    def sample_prompts(self, n: int, rng: random.Random) -> list[str]:
        return [f"{rng.randint(1, MAX_N)}>" for _ in range(n)]

    def answer(self, prompt: str) -> str:
        return counting(int(prompt[:-1]))

    def demonstration(self, prompt: str, rng: random.Random, noise: float) -> str:
        n = int(prompt[:-1])
        if rng.random() >= noise:
            return counting(n)
        if rng.random() < 0.5:
            return counting(n + rng.randint(1, 3))
        # Longer than the generation limit, so a policy that imitates it is cut off before it would stop.
        return counting(self.max_new_tokens + 4)
