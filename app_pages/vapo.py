import streamlit as st

from rl_core.formulas.advantages import gae, length_adaptive_lambda
from rl_core.formulas.losses import positive_nll_loss
from rl_core.formulas.metrics import explained_variance
from ui.experiments_panel import see_it_happen
from ui.lab import live_lab
from ui.predict import Prediction, first_at_least
from ui.story import formula, ratio_is_one

st.title("VAPO and VC-PPO: repairing the critic")
live_lab(
    "vapo",
    {"VAPO": "vapo"},
    lesson=("value_pretrain_steps", "lam_critic", "length_adaptive_alpha"),
    knobs=(
        "value_pretrain_steps",
        "critic_init",
        "lam",
        "lam_critic",
        "length_adaptive_alpha",
        "gamma",
        "epsilon",
        "epsilon_high",
        "positive_nll_coef",
        "num_generations",
        "prompts_per_step",
        "critic_learning_rate",
        "vf_coef",
        "cliprange_value",
        "ppo_epochs",
        "num_minibatches",
        "learning_rate",
        "temperature",
        "entropy_coef",
        "beta",
        "loss_agg_mode",
    ),
    focus=("Explained variance", "Critic loss"),
    prediction=Prediction(
        "Will the critic's explained variance at step 1 be 0.5 or more?",
        ("yes", "no"),
        first_at_least("explained_variance", "explained variance", 0.5),
    ),
)
see_it_happen("vapo")
st.subheader("The problem")
st.markdown(
    "Critic-free methods give every token of a response roughly the same credit; a good critic would say "
    "which tokens mattered. But PPO's critic tends to fail exactly on long responses, where PPO then "
    "collapses: responses get shorter and accuracy falls. VC-PPO traced this to two faults.\n\n"
    "- **A biased start.** The critic is usually initialised from the reward model, which only ever scored "
    "finished responses. On a half-written one it gives a low score that rises as the response grows, so "
    "V(s_{t+1}) > V(s_t) almost everywhere. With little KL and no reward before the end, every TD error is "
    "then positive, and GAE adds them up so that the *earliest* tokens get the largest advantages: stopping "
    "early looks good, and on long responses they shrink. On this lab's short toy responses the first part is "
    "what you can see: a critic copied from the reward model gives the first tokens larger advantages than the "
    "last, most on the first step, before its first update; the gap fades within about ten steps as the critic "
    "learns, and the responses do not measurably shorten.\n"
    "- **A decaying signal.** With λ < 1 the final reward reaches token t only with weight λ^(T−t); 0.95^100 ≈ "
    "0.006. On a long response the critic learns almost nothing from the real reward and bootstraps on its "
    "own guesses.\n\n"
    "VAPO adds two more: one fixed λ cannot suit both short and long responses, and a 0/1 reward at the end "
    "is sparse."
)
st.subheader("The ideas")
st.markdown(
    "- **Value pretraining.** Before RL, freeze the SFT policy, sample from it and regress the critic on "
    "Monte-Carlo returns (λ = 1) until its explained variance on a batch it has not trained on reaches 0.5, or "
    "the step budget runs out; the lab prints the value reached. On the default task it stays near 0 (seed "
    "0: +0.01 after the default 20 batches, −0.06 after 50, +0.01 after 150): "
    "three of a response's four tokens come before the letter that "
    "decides the reward, so even a perfect critic explains only about a quarter of the return variance.\n"
    "- **Decoupled GAE.** The critic's targets use λ_critic = 1, so the reward reaches every token undecayed; "
    "the actor's advantages keep λ_actor = 0.95 for lower variance. Critic and actor want different "
    "bias–variance trade-offs, so they get different λ.\n"
    "- **Length-adaptive GAE.** Choose λ per response so that the total weight Σλ^t = 1/(1 − λ) grows with its "
    "length: λ = 1 − 1/(α|y|).\n"
    "- From the rest of the family: the token-level loss, clip-higher, several samples per prompt, and a "
    "**positive-sample NLL** term that imitates the best answers of each batch.\n\n"
    "This lab's critic starts from the SFT policy's transformer with a value head of zeros (V = 0 everywhere): "
    "uninformed rather than biased by a reward model."
)
formula(
    "Decoupled GAE: one λ for the actor, another for the critic",
    [
        r"A_t = \sum_{l\ge0} (\gamma\lambda_{\text{actor}})^l\, \delta_{t+l}, \qquad \lambda_{\text{actor}} = 0.95",
        r"R_t = A^{(\lambda_{\text{critic}})}_t + V(s_t)",
        r"\lambda_{\text{critic}} = 1 \;\Rightarrow\; R_t = \sum_{t'\ge t} \gamma^{\,t'-t} r_{t'}",
    ],
    gae,
    "The same function, called twice: once with λ_actor for the advantages, once with λ_critic for the targets.",
)
formula(
    "Length-adaptive λ",
    [
        r"\sum_{t\ge0} \lambda^t = \frac{1}{1-\lambda} = \alpha\,|y|",
        r"\Longrightarrow\quad \lambda_{\text{actor}} = 1 - \frac{1}{\alpha\,|y|}",
    ],
    length_adaptive_lambda,
)
formula(
    "Explained variance: is the critic any good?",
    r"\mathrm{EV} = 1 - \frac{\mathrm{Var}(R - V)}{\mathrm{Var}(R)}",
    explained_variance,
    "1: the critic predicts the returns; 0: no better than their mean; below 0: its advantages are worse "
    "than using no critic at all. The lab reports it after value pretraining and at every step.",
)
formula(
    "Positive-sample NLL",
    [
        r"\mathcal{L}_{\text{NLL}} = -\frac{\sum_{i \in \mathcal{T}^+}\sum_t "
        r"\log\pi_\theta(y_{i,t}\mid x, y_{i,<t})}{\sum_{i \in \mathcal{T}^+} |y_i|}",
        r"\mathcal{L} = \mathcal{L}_{\text{PPO}} + \mu\,\mathcal{L}_{\text{NLL}}",
    ],
    positive_nll_loss,
    r"$\mathcal{T}^+$ holds the batch's responses with the highest reward.",
)
ratio_is_one()
st.markdown(
    "**Try:** set value pretraining to 0 and compare the explained-variance chart's first steps with the "
    "default (20): on these short answers both stay near 0, which is the lesson. Seed 0 on the default task "
    "reached 0.01 after 20 pretraining batches (printed above the charts), and its first 10 steps lay between "
    "−0.08 and +0.04 with pretraining and between −0.06 and +0.05 without: every token's return is its "
    "response's 0/1 reward, and the critic predicts about the batch's mean reward at every token, even once the "
    "last letter has decided it (the chart's caption gives the numbers). Turn `lam_critic` and "
    "`length_adaptive_alpha` off (plain PPO's critic) and watch the explained variance and the response length."
)
st.page_link("app_pages/overview.py", label="Back to the overview", icon="↩️")
