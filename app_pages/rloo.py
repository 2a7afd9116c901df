import streamlit as st

from rl_core.formulas.advantages import rloo_advantages
from rl_core.formulas.losses import vanilla_pg_loss
from ui.experiments_panel import see_it_happen
from ui.lab import live_lab
from ui.predict import Prediction, last_at_least
from ui.story import formula

st.title("RLOO: REINFORCE Leave-One-Out")
live_lab(
    "rloo",
    {"RLOO": "rloo"},
    lesson=("num_generations", "prompts_per_step", "beta"),
    knobs=(
        "num_generations",
        "prompts_per_step",
        "beta",
        "kl_estimator",
        "policy_loss",
        "loss_agg_mode",
        "learning_rate",
        "temperature",
        "entropy_coef",
        "ppo_epochs",
        "num_minibatches",
        "epsilon",
        "epsilon_high",
    ),
    focus=("Batch composition", "Reward and success rate"),
    prediction=Prediction(
        "At the last step, will half the groups or more have identical rewards (no signal)?",
        ("yes", "no"),
        last_at_least("zero_adv_group_frac", "share of groups with identical rewards", 0.5),
    ),
)
see_it_happen("rloo")
st.subheader("The problem")
st.markdown(
    "PPO's machinery was built for control problems learnt from scratch, where variance is the enemy. A "
    "language model after SFT is already a good, low-variance policy. There, a critic's per-token estimates "
    "add more bias than they remove variance, the clip rarely fires, and modelling every token as an action "
    "is artificial when the reward exists only for the finished response."
)
st.subheader("The idea")
st.markdown(
    "Treat the **whole response as a single action** and run plain, on-policy REINFORCE on its "
    "log-probability log π(y|x) = Σ_t log π(y_t | x, y_<t). Reduce the variance with the group: each "
    "response's baseline is the mean reward of the *other* G − 1 responses to the same prompt. Because the "
    "baseline never includes the response itself, the estimate stays unbiased, and no critic, ratio or clip is "
    "needed. The KL penalty (k1, summed over the response) is folded into each reward before the baseline is "
    "taken."
)
formula(
    "The leave-one-out advantage",
    [
        r"\hat A_i = R_i - \frac{1}{G-1}\sum_{j\ne i} R_j",
        r"= \frac{G}{G-1}\Big(R_i - \frac1G \sum_j R_j\Big)",
        r"R_i = R(x, y_i) - \beta \sum_t \log\frac{\pi_\theta(y_{i,t}\mid\cdot)}{\pi_{\text{ref}}(y_{i,t}\mid\cdot)}",
    ],
    rloo_advantages,
    "The second form shows the kinship with GRPO and Dr. GRPO: the mean-centred reward, rescaled, and never "
    "divided by the group's standard deviation.",
)
formula(
    "REINFORCE on the whole response",
    [
        r"\mathcal{L} = -\frac{1}{B}\sum_i \hat A_i \,\log\pi_\theta(y_i\mid x)",
        r"= -\frac{1}{B}\sum_i \hat A_i \sum_t \log\pi_\theta(y_{i,t}\mid x, y_{i,<t})",
    ],
    vanilla_pg_loss,
    "Per token the loss is −Â·log π; summing it over each response (`seq-mean-token-sum`) makes it the "
    "log-probability of the whole sequence.",
)
st.subheader("What it leaves open")
st.markdown(
    "The baseline needs several samples of every prompt (G ≥ 2), and normalising prompt by prompt rewards "
    "beating one's siblings rather than being right: easy prompts still produce full-size advantages. "
    "REINFORCE++ normalises over the whole batch instead."
)
st.markdown(
    "**Try:** G = 2 (the baseline is simply the other response's reward) against G = 8; raise β and watch the "
    "KL flatten while the reward rises more slowly."
)
st.page_link("app_pages/reinforce_pp.py", label="Next: REINFORCE++ normalises over the batch", icon="➡️")
