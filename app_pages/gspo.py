import streamlit as st

from rl_core.formulas.losses import gspo_loss, gspo_sequence_ratio, gspo_token_loss
from ui.experiments_panel import see_it_happen
from ui.lab import live_lab
from ui.predict import Prediction, ever_above
from ui.story import formula, ratio_is_one

st.title("GSPO: Group Sequence Policy Optimization")
live_lab(
    "gspo",
    {"GSPO": "gspo"},
    lesson=("policy_loss", "epsilon", "epsilon_high"),
    knobs=(
        "policy_loss",
        "epsilon",
        "epsilon_high",
        "num_generations",
        "prompts_per_step",
        "beta",
        "kl_estimator",
        "ppo_epochs",
        "num_minibatches",
        "learning_rate",
        "temperature",
        "entropy_coef",
    ),
    focus=("Clip fraction (responses)", "Clip fraction (tokens)", "Reward and success rate"),
    prediction=Prediction(
        "Will the clip fraction exceed 10 % at some step?",
        ("yes", "no"),
        ever_above("clip_frac", "clip fraction (low and high sides together)", 0.1),
    ),
)
see_it_happen("gspo")
st.subheader("The problem")
st.markdown(
    "GRPO judges a whole response (one advantage per sequence) but corrects for off-policy data token by "
    "token. A single token's ratio is a one-sample estimate of how far the policy has moved; multiplied by the "
    "full sequence advantage, its noise is amplified and accumulates over the length of the response. The "
    "clip then removes individual tokens mid-response for reasons that have nothing to do with whether the "
    "response was good. The unit that is rewarded and the unit that is optimised disagree."
)
st.subheader("The idea")
st.markdown(
    "Use **one importance ratio per response**: the sequence likelihood ratio, normalised by length (the "
    "geometric mean of the token ratios), and clip it as a whole. Reward, ratio and clipping now all live at "
    "the sequence level; a response that has drifted too far off-policy is left out entirely rather than "
    "token by token. Without the 1/|y| the product of many token ratios would explode or vanish with length; "
    "with it, responses of every length share one scale, which is why GSPO's clip range is tiny "
    "(3e-4 and 4e-4 instead of 0.2)."
)
formula(
    "The length-normalised sequence ratio",
    [
        r"s_i(\theta) = \Big(\frac{\pi_\theta(y_i\mid x)}{\pi_{\text{old}}(y_i\mid x)}\Big)^{1/|y_i|}",
        r"= \exp\Big(\frac{1}{|y_i|}\sum_t \log\frac{\pi_\theta(y_{i,t}\mid "
        r"x, y_{i,<t})}{\pi_{\text{old}}(y_{i,t}\mid x, y_{i,<t})}\Big)",
    ],
    gspo_sequence_ratio,
)
formula(
    "The sequence-level clipped objective",
    r"\mathcal{L} = -\frac{1}{G}\sum_i \min\big(s_i \hat A_i,\ \mathrm{clip}(s_i, "
    r"1-\varepsilon_{\text{low}}, 1+\varepsilon_{\text{high}})\,\hat A_i\big)",
    gspo_loss,
    "Â_i is GRPO's group-normalised advantage.",
)
formula(
    "GSPO-token: the same value, a gradient per token",
    r"s_{i,t} = \mathrm{sg}[s_i]\cdot \frac{\pi_\theta(y_{i,t}\mid\cdot)}{\mathrm{sg}[\pi_\theta(y_{i,t}\mid\cdot)]}",
    gspo_token_loss,
    "sg is stop-gradient. With one advantage per response it trains exactly like GSPO; it exists for "
    "settings where tokens carry their own advantages.",
)
ratio_is_one()
st.markdown(
    "For GSPO this matters twice over: on the first update every s_i is 1 too, so with a single update per "
    "batch GSPO *is* GRPO. Its clip chart counts responses, which GSPO clips whole; with `policy_loss` set to "
    "`clip` (GRPO) the same chart counts tokens."
)
st.subheader("What it leaves open")
st.markdown(
    "GSPO still keeps PPO's importance-sampling scaffolding. If updates stay on-policy, none of it is "
    "needed: RLOO goes back to plain REINFORCE with a better baseline."
)
st.markdown(
    "**Try:** widen ε to 0.2 and watch the per-sequence clip fraction vanish; switch `policy_loss` to `clip` "
    "to turn this page into GRPO and compare the clip fractions."
)
st.page_link("app_pages/rloo.py", label="Next: RLOO drops importance sampling", icon="➡️")
