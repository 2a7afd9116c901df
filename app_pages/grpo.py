import streamlit as st

from rl_core.formulas.advantages import dr_grpo_advantages, grpo_advantages
from rl_core.formulas.aggregation import aggregate_loss
from rl_core.formulas.kl import kl_k3
from rl_core.formulas.losses import clip_cov_detach_mask
from rl_core.formulas.rewards import soft_overlong_punishment
from rl_core.formulas.sampling import dynamic_sampling_keep
from ui.experiments_panel import see_it_happen
from ui.lab import live_lab
from ui.predict import Prediction, end_versus_start
from ui.story import formula, ratio_is_one

st.title("GRPO, with DAPO and Dr. GRPO")
live_lab(
    "grpo",
    {"GRPO": "grpo", "DAPO": "dapo", "Dr. GRPO": "dr_grpo"},
    lesson=("epsilon_high", "beta", "num_generations", "loss_agg_mode"),
    knobs=(
        "num_generations",
        "prompts_per_step",
        "epsilon",
        "epsilon_high",
        "beta",
        "kl_estimator",
        "loss_agg_mode",
        "dynamic_sampling",
        "overlong_filter",
        "overlong_punishment",
        "overlong_buffer",
        "overlong_buffer_fraction",
        "cov_mode",
        "cov_fraction",
        "entropy_coef",
        "adam_epsilon",
        "skip_no_signal_updates",
        "ppo_epochs",
        "num_minibatches",
        "learning_rate",
        "temperature",
    ),
    focus=("Token entropy", "Clip fraction (tokens)"),
    prediction=Prediction(
        "Will token entropy end higher or lower than it starts?",
        ("higher", "lower"),
        end_versus_start("entropy", "token entropy", " nats"),
    ),
)
see_it_happen("grpo")
st.subheader("The problem")
st.markdown(
    "PPO's critic is a second network the size of the policy, trained alongside it, and its per-token "
    "values are estimates that every advantage inherits. With a verifiable 0/1 reward at the end of each "
    "answer, the question worth asking is simpler: *was this answer better than the model's other answers to "
    "the same question?*"
)
st.subheader("The idea")
st.markdown(
    "Sample a **group** of G responses per prompt and let the group be the baseline: standardise each "
    "reward by the group's mean and standard deviation, and give that number to every token of the response. "
    "No critic, no GAE. The KL penalty moves out of the reward and into the loss, estimated per token with k3, "
    "and the loss averages tokens within each response, then responses."
)
formula(
    "Group-relative advantage",
    r"\hat A_{i,t} = \hat A_i = \frac{R_i - \mathrm{mean}(R_1,\dots,R_G)}{\mathrm{std}(R_1,\dots,R_G) + \epsilon}",
    grpo_advantages,
    "A group whose rewards are all equal (all right, or all wrong) gets advantage 0 everywhere: no gradient. So "
    "does any group whose std is below 10⁻⁶: it is equal rewards up to rounding, never a division by ε alone.",
)
formula(
    "k3: the KL estimator in the loss",
    [
        r"k_3 = \frac{\pi_{\text{ref}}}{\pi_\theta} - 1 - \log\frac{\pi_{\text{ref}}}{\pi_\theta} \;\ge 0",
        r"\mathbb{E}_{a\sim\pi_\theta}[k_3] = \mathrm{KL}(\pi_\theta\,\|\,\pi_{\text{ref}})",
    ],
    kl_k3,
)
formula(
    "The objective and how it is averaged",
    [
        r"\mathcal{L} = \frac{1}{G}\sum_i \frac{1}{|y_i|}\sum_t \big(\ell_{i,t} + \beta\, k_{3,i,t}\big)",
        r"\ell_{i,t} = -\min\big(\rho_{i,t}\hat A_i,\ \mathrm{clip}(\rho_{i,t}, "
        r"1-\varepsilon, 1+\varepsilon)\,\hat A_i\big)",
        r"\text{token-mean: } \frac{\sum_{i,t} m_{i,t}\,\mathcal{L}_{i,t}}{\sum_{i,t} m_{i,t}}",
        r"\text{seq-mean-token-sum-norm: } \frac{\sum_{i,t} m_{i,t}\,\mathcal{L}_{i,t}}{B\, T_{\max}}",
    ],
    aggregate_loss,
    "The clip is PPO's. The 1/|y_i| inside is `seq-mean-token-mean`; the two alternatives are DAPO's and Dr. GRPO's.",
)
ratio_is_one()

st.header("DAPO: four repairs for long training runs")
st.markdown(
    "- **Entropy collapse → clip-higher.** With ε = 0.2 a token at probability 0.01 can only reach 0.012 in "
    "one update, while one at 0.9 can rise to certainty without the clip ever binding (1.2 × 0.9 > 1): the "
    "upper bound throttles exactly the rare tokens that "
    "exploration needs, and DAPO reports that the entropy drains away. DAPO raises only ε_high (0.28) and keeps "
    "ε_low at 0.2, so good surprises can grow fast while bad tokens are still not crushed to zero. *See it happen* "
    "isolates the clip on the coin-flip task, whose reward is a fair coin whatever the answer, so both arms get the "
    "same reward and what differs is the clip's own doing: with ε_high = 0.28 the high side silences about a "
    "quarter fewer rewarded tokens (lower on every seed of three sets of eight). The entropy DAPO reports, the "
    "lab does not show reliably at this scale: averaged over 150 steps the random walk of a policy with nothing to "
    "learn was about as large as the clip's drift (higher with ε_high = 0.28 on 23 of 32 seeds, but only one of "
    "four sets of eight passed the verdict rule); on digit_sum, whose real reward does collapse the entropy (from "
    "about 1.5 to 0.5 nats in 100 steps), ε_high = 0.28 left it higher on average but on only 6 of 8 held-out seeds; "
    "and over the button's 15 steps the wider bound's entropy is, if "
    "anything, lower: early on it lets common rewarded tokens rise further too.\n"
    "- **Groups with no signal → dynamic sampling.** As the policy improves, more groups are all correct "
    "(or, on hard prompts, all wrong); their advantages are 0 and the useful batch shrinks. DAPO drops them and "
    "samples more prompts until the batch is full. *See it happen*, on a sparse task where about three groups in "
    "four a step samples are all wrong: the policy succeeds more often per training step on every seed of five "
    "sets of eight, drawing about three times the samples a step; per sample drawn the lab's earlier design "
    "showed no reliable gain, and the lab does not claim one.\n"
    "- **Length bias → token-level loss.** Averaging within each response first gives a long response the "
    "same total weight as a short one, so each of its tokens counts less, and long rambling failures are "
    "under-punished. `token-mean` weighs every token alike.\n"
    "- **Truncation noise → overlong shaping.** A response cut at the length limit may have been on the right "
    "track; scoring it as wrong is noise. DAPO can mask such responses out of the loss, and adds a soft penalty "
    "that ramps from 0 to −1 as a response nears the limit.\n\n"
    "DAPO also sets β = 0: for reasoning with verifiable rewards, moving away from the SFT model is the point."
)
formula(
    "Dynamic sampling: keep only groups that carry a signal",
    r"\text{keep group } g \iff \max_j R_{g,j} - \min_j R_{g,j} > 0",
    dynamic_sampling_keep,
    "For 0/1 rewards: keep the groups whose mean lies strictly between 0 and 1.",
)
formula(
    "Soft overlong punishment",
    r"R_{\text{len}}(y) = \mathrm{clip}\Big(\frac{(L_{\max} - "
    r"L_{\text{cache}}) - |y|}{L_{\text{cache}}},\; -1,\; 0\Big)",
    soft_overlong_punishment,
    "0 while the response (its closing EOS counted in |y|) stays L_cache tokens short of the limit L_max, then a "
    "linear ramp down to −1 at the limit; it is added to the reward.",
)
formula(
    "A targeted alternative against entropy collapse: Clip-Cov",
    r"\mathrm{Cov}_t = \big(\log\pi_\theta(a_t) - \overline{\log\pi_\theta}\big)\,\big(A_t - \bar A\big)",
    clip_cov_detach_mask,
    "Entropy falls mostly through a handful of tokens that are both likely and strongly advantaged. Detaching "
    "the gradient of a small random share of the highest-covariance tokens slows the collapse without the "
    "global, hard-to-tune push of an entropy bonus (`cov_mode` in the lab).",
)

st.header("Dr. GRPO: remove two normalisers")
st.markdown(
    "GRPO divides twice where it should not. Dividing by the group's standard deviation inflates prompts on "
    "which nearly every answer agrees, i.e. ones that are too easy or too hard: in a group where one answer of "
    "eight is right, that answer gets Â ≈ 2.5 instead of 0.875. On one group the advantage lab shows the exact "
    "weights. *See it happen* measures it on a training run's own batches: the mean |Â| of a response in a skewed "
    "group (at most a quarter, or at least three quarters, right) divided by that of a response in an evenly split "
    "group comes out higher under GRPO than under Dr. GRPO on every seed, by 0.15 on average (0.09–0.24 per seed "
    "over 25 steps, seeds 0–7 and 300–307). By hand, at one right of "
    "eight, that ratio is 0.66 with the std division and 0.44 without: a skewed group still weighs less than a "
    "balanced one, and the std division narrows the gap. Dividing each "
    "response's loss by its own length makes a "
    "wrong answer's per-token penalty smaller the longer it is, so long wrong answers are pushed out more slowly "
    "than short ones. Dr. GRPO keeps the mean-centred reward and divides the summed loss by a constant."
)
formula(
    "Advantage without the standard deviation", r"\hat A_i = R_i - \mathrm{mean}(R_1,\dots,R_G)", dr_grpo_advantages
)
st.subheader("What it leaves open")
st.markdown(
    "One advantage per response, but one importance ratio per token: a sequence-level judgement is applied "
    "through token-level corrections. GSPO makes the two agree."
)
st.markdown(
    "**Try:** set G = 2 and watch the share of groups with identical rewards; switch to DAPO and compare the "
    "clip fraction's high side; compare response length under the three loss aggregations. DAPO differs from GRPO "
    "in β, the loss aggregation, dynamic sampling and overlong punishment as well as ε_high, so its entropy does "
    "not isolate clip-higher: *See it happen* changes ε_high alone."
)
st.page_link("app_pages/gspo.py", label="Next: GSPO moves the ratio to the sequence", icon="➡️")
