"""The length bias of per-response normalisation: seq-mean-token-mean divides each response's loss by its
length, so a long wrong answer's tokens are punished less than a short one's and long wrong answers survive.

On `digit_sum_long` the SFT policy rambles past the length limit on about one response in eight; every arm pushes
those ramblers out within a few dozen steps, and the aggregation decides how fast. Sixteen prompts per step keep
a batch's share of ramblers from being mostly noise.

The third design, this one, halves the learning rate to 5e-4, the rest unchanged. At 1e-3 the rambler share could
jump within two or three steps (0.17 → 0.72, 0.16 → 0.96) under any aggregation, and whichever arm jumped decided
the seed's sign; at 5e-4 every arm moves more slowly and the aggregation's push decides. It was designed on the sets
the second design had already used: seeds 0–7, +0.85, +0.43, +1.02, +0.45, +0.60, +0.45, +0.36, +0.78 (8 of 8,
+0.62 [+0.42, +0.82]); 1100–1107 7 of 8, +0.62 [+0.11, +1.13]; 1200–1207 8 of 8, +0.90 [+0.59, +1.22]. Checked
unchanged on four sets it had not seen: 1300–1307, +1.04, +0.79, +0.32, +0.65, +1.03, +0.80, +0.51, −0.29 (7 of
8, +0.60 [+0.24, +0.97], shown); 1400–1407, +0.70, −0.70, +0.31, −0.04, +1.31, +1.61, +0.78, +1.03 (6 of 8, +0.63
[+0.001, +1.25], weak); 1500–1507, −0.12, +0.88, +1.60, +0.66, +1.28, +0.49, +0.56, +0.50 (7 of 8, +0.73 [+0.29,
+1.17], shown); 1600–1607, +1.11, −0.25, +0.36, +0.65, +0.80, +0.74, −0.59, +0.85 (6 of 8, +0.46 [−0.03, +0.95],
weak). Better than the second design, not on every set: shown on five of seven. Once warm starts trained as groups
(each seed's SFT policy differs from one trained alone in the last bits), an eighth set it had not seen, 2600–2607:
+0.29, +0.97, +2.05, −0.46, +0.66, −0.09, +1.00, +1.58 (6 of 8, +0.75 [+0.05, +1.45], weak), so five of eight.
The seeds against the claim come in three kinds. On some every arm's ramblers fall to a few per cent within two
steps and what is left is noise (1601).
On some seq-mean-token-mean's fall faster from the first update on, whose batch the arms share (1401: 0.05 of the
responses at step 2 against 0.16 and 0.15; 1106); per-response normalisation also pushes short correct answers
harder, a likely reason this lab has not measured. On others one of the two other arms' ramblers multiply for a few
steps (1606: seq-mean-token-sum-norm's reached 0.47), and the effect takes the larger of the two. Set by set that is
about one seed in eight: 7 of 8 tolerates one such seed, not two. Taking the mean of the other two arms, or
token-mean alone, in place of the larger was read on these seven sets afterwards and is not adopted: chosen after
seeing the sets that failed, it would be tuned to them.

The second design, learning rate 1e-3 over 10 steps, was shown on seeds 0–7 at design time (7 of 8, [+0.09, +1.90])
and on 1100–1107 (8 of 8, +0.74 [+0.077, +1.40]), and weak on 100–107, 300–307, 900–907 (6 of 8, +1.05 [+0.043,
+2.05]), 1000–1007 (6 of 8, +0.26 [−0.26, +0.77]), 1200–1207 (6 of 8, +0.62 [−0.089, +1.33]) and on seeds 0–7 run
again on a machine whose floating point differs in the last bits (7 of 8, +0.73 [−0.21, +1.68]). Its history:

Designed on seeds 0–7 over 20 steps. As a difference of shares it was weak there (7 of 8 positive, interval [−0.03,
+0.30]: two seeds where the ramblers multiplied outweighed the rest), so the effect became their ratio: 7 of 8 and
[+0.11, +1.98]. Checked unchanged on seeds 100–107: +1.40, −0.07, −0.14, +0.74, +0.02, +0.54, −0.03, +1.62, 5 of 8,
weak. Cut to 10 steps so that its 24 runs train in about 30 s (the ratio over the first 10 steps on seeds 0–7: 7 of
8, [+0.09, +1.90]), then checked on seeds 300–307: +1.00, −0.91, +0.97, +0.43, +1.07, +0.06, +0.95, +1.36, 7 of 8,
[−0.001, +1.23], weak by a hair. On some seeds per-response normalisation lets the ramblers multiply; on the others
all three aggregations push them out alike at this scale, and the claim says so rather than being tuned further.

A second design read the mechanism instead, on the first step, whose batch the three arms share: the ratio
π_θ/π_old of the cut-off responses' tokens with A < 0 over the step's updates, seq-mean-token-mean minus the
larger of the others. Shown on seeds 0–7 (7 of 8, [+0.007, +0.051]) and 400–407 (7 of 8, [+0.007, +0.083]); weak
on 500–507 (8 of 8 positive, but one seed at +0.37 where the others were below +0.08 put the interval at [−0.03,
+0.17]) and on 600–607 (6 of 8): on some seeds no aggregation moves the ramblers' tokens much in one step. Not
more reliable than the outcome, it was not kept."""

import math

from rl_core.experiments import Arm, Experiment
from rl_core.experiments._measures import mean_over_steps

SHARED = dict(
    prompts_per_step=16,
    num_generations=8,
    temperature=1.0,
    advantage_estimator="grpo",
    beta=0.0,
    policy_loss="clip",
    epsilon=0.2,
    epsilon_high=0.2,
    learning_rate=5e-4,
    ppo_epochs=2,
    num_minibatches=2,
    dynamic_sampling=False,
    overlong_filter=False,
    overlong_buffer=None,
    entropy_coef=0.0,
)
SEQ_MEAN, TOKEN_MEAN, SUM_NORM = "seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"


# A share below about 1 % is a handful of responses in 10 steps: the floor keeps two such shares' ratio near 1.
SHARE_FLOOR = 0.01


def _effect(runs) -> float:
    """How many times more responses are cut off at the limit (the long wrong answers) under seq-mean-token-mean
    than under the larger of the other two aggregations, as a natural log: ln((s + 0.01) / (max(s') + 0.01)).

    A ratio, not a difference: from one seed to another the SFT policy starts with 3 % to 20 % ramblers, and where
    per-response normalisation lets them grow it does so by a factor (to 60 % on some seeds), which a difference
    turns into one seed outweighing the rest."""
    cut = {label: mean_over_steps(records, "truncated_frac") for label, records in runs.items()}
    return math.log((cut[SEQ_MEAN] + SHARE_FLOOR) / (max(cut[TOKEN_MEAN], cut[SUM_NORM]) + SHARE_FLOOR))


EXPERIMENT = Experiment(
    name="length_bias",
    title="Per-response normalisation lets long wrong answers linger",
    plain="Dividing each answer's loss by its length lets long wrong answers survive longer than the other two "
    "ways of averaging over tokens do.",
    claim="Under seq-mean-token-mean long wrong answers (ramblers cut off at the length limit) linger where "
    "token-mean and Dr. GRPO's constant normaliser (seq-mean-token-sum-norm) push them out faster, because "
    "each response's penalty is divided by its length. The effect is ln of how many times more responses are "
    "cut off under seq-mean-token-mean than under whichever of the other two keeps more. Seeds 0–7, 8 of 8, "
    "+0.62 [+0.42, +0.82]; 1100–1107, 7 of 8, +0.62 [+0.11, +1.13]; 1200–1207, 8 of 8, +0.90 [+0.59, +1.22]; "
    "held-out 1300–1307, 7 of 8, +0.60 [+0.24, +0.97]; held-out 1400–1407, 6 of 8, +0.63 [+0.001, +1.25], "
    "weak (the verdict needs 7 of 8 seeds and an interval above 0); held-out 1500–1507, 7 of 8, +0.73 "
    "[+0.29, +1.17]; held-out 1600–1607, 6 of 8, +0.46 [−0.03, +0.95], weak; held-out 2600–2607, 6 of 8, "
    "+0.75 [+0.05, +1.45], weak: shown on five of eight sets. On "
    "about one seed in eight every arm's ramblers vanish within two steps, or seq-mean-token-mean's fall "
    "faster from the first update on, or one of the other arms' ramblers multiply for a few steps. At twice "
    "the learning rate the rambler share could jump within a few steps under any aggregation, and the "
    "verdict passed on two of eight sets.",
    source="DAPO (Yu et al. 2025), token-level loss; Dr. GRPO (Liu et al. 2025)",
    arms=tuple(Arm(mode, "grpo", {**SHARED, "loss_agg_mode": mode}) for mode in (SEQ_MEAN, TOKEN_MEAN, SUM_NORM)),
    knobs=("loss_agg_mode",),
    task="digit_sum_long",
    steps=10,
    metric="ln of a ratio: the share of responses cut off at the limit over the first 10 steps under "
    "seq-mean-token-mean, divided by the larger share of the other two",
    effect=_effect,
    expected="positive",
    run_fields={"sft_steps": 500},
    pages=("grpo", "labs_aggregation"),
    charts=("truncated_frac", "response_length_incorrect", "response_length_correct", "success_rate"),
)
