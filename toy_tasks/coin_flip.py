"""`digit_sum` scored by a fair coin: the reward ignores the response, and success still says whether its digits add
up to N.

A control for the clip. With a reward that carries no information, an unclipped policy gradient has zero
expectation and the policy only wanders; whatever drifts one way is the loss's own doing. PPO's clip does: the
high side caps how far a rewarded token may rise, the low side how far a punished one may fall, and with
ε_low = ε_high = 0.2 the high cap binds first on the unlikely tokens that would spread the distribution, and the
entropy drains (Park et al. 2025, "Clip-low increases entropy and clip-high decreases entropy"; at this lab's scale
the drift is about as large as the policy's wandering, and the `clip_higher` experiment measures the clip's share
of silenced tokens instead). Both arms of an experiment see the same reward statistics, so the reward they
optimise is matched by construction.

The coins are a pseudo-random function of the run's seed and the whole batch: the same batch always gets the same
coins (a run is reproducible whether or not its warm start came from the cache), and a response cannot earn a
better coin by being written differently, since any change to it redraws every coin of the batch.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import ClassVar

import torch

from toy_tasks.base import Scores
from toy_tasks.digit_sum import DigitSumTask


class CoinFlipTask(DigitSumTask):
    name: ClassVar[str] = "coin_flip"
    description: ClassVar[str] = "digit_sum prompts with a fair coin for a reward: any drift in entropy is the clip's"
    lesson: ClassVar[str] = (
        "The reward is a coin flip, so there is nothing to learn: with no clip the policy would only wander. What "
        "happens to the entropy beyond that is the loss's own doing. DAPO reports that with ε_high = 0.28 it stays "
        "higher than with a symmetric clip; at this scale the policy's wandering is about as large as that drift."
    )
    seed: int = 0

    def prepare(self, cache_dir: Path, device: torch.device, seed: int) -> None:
        self.seed = seed

    def score(self, prompts: list[str], responses: list[str], truncated: list[bool]) -> Scores:
        digits = super().score(prompts, responses, truncated)
        batch = repr((self.seed, prompts, responses, truncated)).encode()
        coins = random.Random(hashlib.blake2b(batch, digest_size=8).digest())
        return Scores(rewards=[float(coins.random() < 0.5) for _ in responses], successes=digits.successes)
