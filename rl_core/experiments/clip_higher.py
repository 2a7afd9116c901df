"""Clip-higher: with a symmetric clip the high side caps how far a rewarded unlikely token may rise, so the entropy
drains; raising ε_high from 0.2 to 0.28 keeps it higher (DAPO).

Shown on the coin-flip task, whose reward ignores the answer: both arms see the same reward statistics, so the
reward they optimise is matched by construction and any drift in entropy is the clip's own. That is the clip's
entropy bias Park et al. (2025) measure on language models under random rewards. On digit_sum, where the reward
teaches, the same two arms did not separate: there learning, and at β = 0 the policy's wandering, move the entropy
by a nat or more, and the sign of the difference changed from seed to seed or setting to setting."""

from rl_core.experiments import Arm, Experiment
from rl_core.experiments._measures import mean_difference

# Every knob the outcome depends on is spelt out, so a retuned preset cannot move the result. Sixteen updates per
# batch (4 epochs × 4 minibatches) give the ratio room to leave [0.8, 1.2], where the two arms differ. β = 0 is
# DAPO's own setting and leaves nothing pulling the policy back. With a reward that carries no signal the policy
# takes a random walk besides the clip's drift; at 1e-3 the walk was larger than the drift (−0.88 / −0.02 / +0.42
# over seeds 0, 1, 2), at 5e-4 the drift won on seeds 0–5 (+0.11 / +0.22 / +0.58 / +0.35 / +1.15 / +0.24), and
# at 2.5e-4 on seeds 0–2 with a smaller seed 0 (+0.04 / +0.82 / +0.31). At eight seeds the walk wins too often:
# seeds 0–7 gave +0.02 / +0.44 / −0.25 / +0.29 / +0.12 / +0.56 / +0.39 / −0.65 (mean +0.12, 95 % interval
# [−0.22, +0.45], 6 of 8 positive), and the held-out seeds 100–107 gave +0.17 / +0.32 / −0.86 / +0.02 / −0.03 /
# +0.80 / −0.70 / +0.01 (mean −0.04, [−0.48, +0.41], 5 of 8): the claim says what the lab measures, not DAPO's.
# A third set, 300–307, unchanged: +0.13 / +0.69 / +0.44 / +0.08 / +0.58 / +0.27 / +0.06 / +0.93 (8 of 8, shown):
# one set of three passing is what a tendency buried in the walk looks like, so the claim says "not reliably". A
# fourth set, 1100–1107: +0.05 / −0.56 / −0.19 / −0.44 / +0.68 / +0.23 / +0.08 / −0.17 (4 of 8, not shown).
# A second design measured DAPO's mechanism instead, over 20 steps: the share of tokens that are rare (π_old < 0.1),
# rewarded and silenced by the clip, ε_high 0.2 minus 0.28. It was shown on seeds 0–7 (8 of 8, 95 % interval
# [+0.0015, +0.0066]) and not on the held-out seeds 200–207 (4 of 8, [−0.0035, +0.0057]): within 20 steps the two
# arms' policies part, and which rare tokens each samples and rewards differs as much as the clip's share does.
# A third design took the walk out: both arms trained on the same batches, drawn by the warm start (rollout
# staleness 8 over 9 steps), so they saw the same samples and the same coins and differed in the clip alone. On
# seeds 0–7 ε_high 0.28 then ended with the lower entropy on all 8 (−0.030, [−0.049, −0.012]); on the held-out
# seeds 400–407 on 6 of 8 ([−0.058, +0.005], weak). On identical data the wider bound lets rewarded tokens rise
# further, and most rewarded tokens are not rare: if DAPO's effect is there at this scale it needs the on-policy
# feedback of a long run, which is what the 150 steps give it.
# A fourth design read DAPO's argument itself: the mean ratio π_θ/π_old, over a step's updates, of the tokens that
# were rare (π_old < 0.1) and rewarded, ε_high 0.28 minus 0.2. Even on the first step, whose batch both arms share,
# it was higher on 11 of seeds 0–15 only (−0.035 to +0.096): past the clip the other tokens' updates keep moving
# a silenced token through the shared weights, by as much as the wider bound lets it move. Over 10 steps it was not
# shown on 0–7 (5 of 8). Nor did a faster walk to the drift pay: at learning rate 1e-3 and 2e-3 over 40 steps the
# entropy difference was positive on 6 and 5 of seeds 0–7.
# A fifth design measured what the wider bound is for, learning, where the right answers start rare: caesar after
# 100 SFT steps (first-step success 2–30 %), 30 steps, success averaged over them, 0.28 minus 0.2, the rest as
# above. Seeds 0–7: 7 of 8 positive, shown; held-out 1100–1107: +0.001 / −0.012 / −0.010 / +0.022 / +0.016 /
# −0.002 / +0.034 / −0.009, 4 of 8, weak. The high-side clip bound about 1 % of tokens there, and 0.28 cut that by
# half a point: too few tokens for the bound to change what is learned. Where it bound more, at learning rate 1e-3
# and 2e-3 (seeds 0–7), 4 and 5 of 8 were positive, and at 2e-3 whether a run collapsed depended on the seed.
SHARED = dict(
    prompts_per_step=8, num_generations=8, temperature=1.0, advantage_estimator="grpo", beta=0.0,
    kl_estimator="k3", kl_in="loss", policy_loss="clip", epsilon=0.2, loss_agg_mode="token-mean",
    learning_rate=5e-4, ppo_epochs=4, num_minibatches=4, dynamic_sampling=False, entropy_coef=0.0,
)

EXPERIMENT = Experiment(
    name="clip_higher",
    title="Does clip-higher keep entropy up? Not reliably at this scale",
    claim="DAPO reports that ε_high = 0.28 instead of a symmetric 0.2 keeps the token entropy higher over training, "
          "at the same β and the same reward. At this scale the policy's random walk under a reward without signal "
          "is about as large as the clip's drift, and the lab does not show it reliably: higher on 23 of 32 seeds, "
          "but only one set of eight in four passes the verdict rule. Seeds 0–7: 6 of 8, mean +0.12 nats, 95 % "
          "interval [−0.22, +0.45]; held-out 100–107: 5 of 8, mean −0.04, [−0.48, +0.41]; held-out 300–307: 8 of 8, "
          "mean +0.40, [+0.13, +0.66]; held-out 1100–1107: 4 of 8, mean −0.04, [−0.37, +0.29].",
    source="DAPO (Yu et al. 2025), clip-higher; Park et al. 2025, the clip's entropy bias under random rewards",
    arms=(
        Arm("ε_high 0.2", "grpo", {**SHARED, "epsilon_high": 0.2}),
        Arm("ε_high 0.28", "grpo", {**SHARED, "epsilon_high": 0.28}),
    ),
    knobs=("epsilon_high",),
    task="coin_flip",
    # 150 steps of 16 updates, about 3.5 min for 16 runs on 2 CPU cores: DAPO reports the entropy drift over hundreds
    # of steps. Over the first 15 (what 30 s would allow) the arms differed by −0.06 nats on average on seeds 0–7,
    # 2 of 8 positive, while each arm's entropy had already wandered by up to ±0.4: only the walk, no test.
    steps=150,
    metric="token entropy (nats) averaged over training, ε_high 0.28 minus 0.2",
    effect=mean_difference("entropy", "ε_high 0.28", "ε_high 0.2"),
    expected="positive",
    run_fields={"sft_steps": 500},
    pages=("grpo",),
    charts=("entropy", "clip_frac_high", "reward_mean"),
)
