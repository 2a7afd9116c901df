import streamlit as st

from rl_core.formulas.advantages import reinforce_pp_advantages, reinforce_pp_baseline_advantages
from rl_core.formulas.kl import kl_k2
from rl_core.formulas.masking import masked_whiten
from ui.experiments_panel import see_it_happen
from ui.lab import live_lab
from ui.predict import Prediction, mean_near_zero
from ui.story import formula, ratio_is_one

st.title("REINFORCE++")
live_lab(
    "reinforce_pp",
    {"REINFORCE++": "reinforce_pp", "REINFORCE++-baseline": "reinforce_pp_baseline"},
    lesson=("beta", "kl_in", "gamma"),
    knobs=(
        "num_generations",
        "prompts_per_step",
        "gamma",
        "beta",
        "kl_estimator",
        "kl_in",
        "epsilon",
        "epsilon_high",
        "ppo_epochs",
        "num_minibatches",
        "learning_rate",
        "temperature",
        "entropy_coef",
        "loss_agg_mode",
    ),
    focus=("KL to the reference", "Advantages"),
    prediction=Prediction(
        "Will this run's token advantages average about 0?",
        ("about 0", "clearly positive", "clearly negative"),
        mean_near_zero("advantage_mean", "token advantage", 0.01),
    ),
)
see_it_happen("reinforce_pp")
st.subheader("The problem")
st.markdown(
    "Group baselines (GRPO, RLOO) need several samples of every prompt and normalise each prompt on its own. "
    "A prompt the model nearly always solves still yields advantages of full size, so the policy is rewarded "
    "for beating its siblings rather than for being right: easy prompts get over-fitted, hard ones stall, and "
    "the division by a per-group standard deviation biases the estimate. PPO avoids this, but only by paying "
    "for a critic."
)
st.subheader("The idea")
st.markdown(
    "Keep REINFORCE's simplicity and borrow PPO's stabilisers. Each token pays its KL to the reference in "
    "the reward (k1), the return-to-go is accumulated as in REINFORCE, and then all returns are normalised "
    "**over the whole batch** (global whitening): one shared scale, no groups, so a single sample per prompt "
    "(G = 1) is enough. PPO's clipped ratio keeps the multi-epoch updates safe.\n\n"
    "**REINFORCE++-baseline** is the variant for G > 1: subtract the group's mean reward first (a local "
    "baseline), then whiten globally, and put the KL into the loss with the low-variance k2 estimator."
)
formula(
    "REINFORCE++: return-to-go, then global whitening",
    [
        r"r_{i,t} = -\beta\,k_1(i,t) + \mathbb{1}[t = T_i]\,R_i",
        r"G_{i,t} = \sum_{t'\ge t} \gamma^{\,t'-t} r_{i,t'}",
        r"A_{i,t} = \frac{G_{i,t} - \mathrm{mean}_{\text{batch}}(G)}{\mathrm{std}_{\text{batch}}(G) + \epsilon}",
    ],
    reinforce_pp_advantages,
)
formula(
    "Whitening over every valid token of the batch",
    r"\mathrm{whiten}(x) = \frac{x - \bar x}{\sigma_x + \epsilon}",
    masked_whiten,
    "The mean and standard deviation run over every valid token (i, t) of the batch, whatever its prompt.",
)
formula(
    "REINFORCE++-baseline: a group baseline, then the same global whitening",
    r"A_{i,t} = \mathrm{whiten}\big(R_i - \mathrm{mean}_{\text{group}}(R)\big)",
    reinforce_pp_baseline_advantages,
)
formula(
    "k2: the KL estimator in the baseline variant's loss",
    r"k_2 = \tfrac12\Big(\log\frac{\pi_{\text{ref}}}{\pi_\theta}\Big)^2",
    kl_k2,
    "Biased (it is not the KL in expectation) but never negative and low in variance.",
)
ratio_is_one()
st.subheader("What it leaves open")
st.markdown(
    "Every critic-free method gives all tokens of a response nearly the same credit. A working critic would "
    "say which tokens mattered, if it could be trained reliably on long responses. VAPO repairs the critic."
)
st.markdown(
    "**Try:** G = 1 (impossible for GRPO or RLOO) and watch it still learn; switch to the baseline variant and "
    "compare the advantage band and the KL."
)
st.page_link("app_pages/vapo.py", label="Next: VAPO and VC-PPO repair the critic", icon="➡️")
