"""`digit_sum` with rambling slips: `"17>"` → `"98"` is right, and a sloppy demonstration may lose count and write
small digits on past the length limit (`"17>"` → `"2121122112…"`, cut off at 32).

Wrong answers here come in two lengths — a few digits that miss N, and ramblers of the full 32 tokens — and the
reward never mentions length, so how the loss spreads a response's penalty over its tokens decides whether the
ramblers are pushed out or linger: under seq-mean-token-mean a 32-token rambler's tokens carry a 32nd of its
penalty each, a short miss's tokens a few times more.
"""

from __future__ import annotations

import random
from typing import ClassVar

from toy_tasks.digit_sum import DigitSumTask, digits_summing_to


class RamblingDigitSumTask(DigitSumTask):
    name: ClassVar[str] = "digit_sum_long"
    description: ClassVar[str] = "digit_sum whose sloppy demonstrations may ramble past the 32-token limit"
    lesson: ClassVar[str] = (
        "Wrong answers are either short misses or 32-token ramblers cut off at the limit. With per-response "
        "normalisation (seq-mean-token-mean) the ramblers' tokens are barely punished and they linger; with "
        "token-mean or a constant normaliser every token pays and they die out."
    )
    default_demo_noise: ClassVar[float] = 0.5
    sft_success_band: ClassVar[tuple[float, float]] = (0.01, 0.12)  # 200-step warm start, seeds 0–4: 0.03–0.07
    ramble_fraction: ClassVar[float] = 0.5  # of the sloppy demonstrations: the rest miss N by one to three

    def demonstration(self, prompt: str, rng: random.Random, noise: float) -> str:
        if rng.random() >= noise:
            return super().demonstration(prompt, rng, 0.0)
        if rng.random() < self.ramble_fraction:
            # Lose count: small digits well past the limit, so a policy that imitates this is cut off.
            return digits_summing_to(3 * self.max_new_tokens, 2, rng)[: self.max_new_tokens + 4]
        return super().demonstration(prompt, rng, 1.0)  # a near miss
