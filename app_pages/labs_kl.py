"""KL lab: the k1, k2, k3 estimators against the exact KL on a six-token vocabulary."""

import streamlit as st

from rl_core.formulas.kl import clamped_kl, kl_exact, kl_k1, kl_k2, kl_k3
from ui.experiments_panel import see_it_happen
from ui.labs import kl as labs
from ui.labs.figures import readable
from ui.story import formula
from ui.successor_sections import kl_gradient_view

st.title("KL lab: three estimators of one KL")
st.markdown(
    "Training never computes KL(π_θ ‖ π_ref) over the whole vocabulary; it estimates it from the one token "
    "that was sampled. Schulman's note 'Approximating KL divergence' (2020) compares three estimators "
    "built from the log-ratio log r = log π_ref − log π_θ of that token: k1 = −log r is unbiased but swings "
    "both ways, k2 = ½(log r)² is never negative but biased, and k3 = r − 1 − log r adds a zero-mean term to "
    "k1 that makes every sample non-negative while keeping it unbiased (GRPO's choice). k3's spread is smaller "
    "than k1's only near the reference: far from it (log r large) k3 = r − 1 − log r grows like r and its spread "
    "exceeds k1's. Here the vocabulary has six tokens, so the exact KL is known and each estimator can be checked "
    "against it."
)
for title, latex, implementation in (
    (
        "k1: unbiased, can be negative",
        r"k_1 = -\log r,\qquad r = \frac{\pi_{ref}(a)}{\pi_\theta(a)},\ a \sim \pi_\theta",
        kl_k1,
    ),
    ("k2: never negative, biased", r"k_2 = \tfrac12(\log r)^2", kl_k2),
    ("k3: never negative and unbiased", r"k_3 = r - 1 - \log r", kl_k3),
    (
        "The exact KL they estimate",
        r"\mathrm{KL} = \sum_v \pi_\theta(v)\big(\log\pi_\theta(v) - \log\pi_{ref}(v)\big)",
        kl_exact,
    ),
):
    formula(title, latex, implementation)
formula(
    "The guard on the KL term in the loss",
    r"\tilde k_t = \min(k_t, 10)\ \text{ where } \pi_\theta(a_t) < \pi_{ref}(a_t)",
    clamped_kl,
    "Far below the reference, k3's gradient 1 − r grows like r: one token the policy has ruled out could outweigh "
    "the batch. Beyond 10 the term passes no gradient (verl clamps at ±10); each run records the share of tokens "
    "capped, kl_capped_frac, drawn in its KL guard chart.",
)

policy, reference = st.columns(2)
with policy:
    st.markdown("**π_θ (the policy being trained)**")
    theta_temperature = st.slider("temperature of π_θ", 0.3, 3.0, 1.5, 0.05, key="kl_theta_temperature")
    favourite = st.selectbox("token π_θ has learned to favour", labs.VOCABULARY, index=5, key="kl_favourite")
    boost = st.slider("boost of that token's logit", 0.0, 5.0, 2.5, 0.1, key="kl_boost")
with reference:
    st.markdown("**π_ref (the frozen reference)**")
    ref_temperature = st.slider("temperature of π_ref", 0.3, 3.0, 1.0, 0.05, key="kl_ref_temperature")
    samples_col, seed_col = st.columns(2)
    n = samples_col.slider("samples N", 10, 5000, 500, 10, key="kl_samples")
    seed = seed_col.number_input("seed", 0, 10_000, 0, key="kl_seed")

logits = labs.shaped_logits(theta_temperature, boost, favourite)
ref_logits = labs.shaped_logits(ref_temperature)
exact = labs.exact_kl(logits, ref_logits)
st.plotly_chart(labs.distributions_figure(logits, ref_logits), key="kl_distributions")
st.metric("exact KL(π_θ ‖ π_ref)", f"{exact:.4f}")

samples = labs.kl_samples(logits, ref_logits, n, seed)
st.plotly_chart(labs.kl_histograms(samples, exact), key="kl_histograms")
st.caption("Solid line: the exact KL. Dashed line: the mean of this draw.")


# The table averages hundreds of thousands of draws and depends only on the two distributions, so moving
# N or the seed reuses it instead of recomputing it.
@st.cache_data(show_spinner=False, max_entries=64)
def bias_variance(theta_temperature: float, boost: float, favourite: str, ref_temperature: float):
    return labs.estimator_bias_variance(
        labs.shaped_logits(theta_temperature, boost, favourite), labs.shaped_logits(ref_temperature)
    )


st.subheader("Bias and variance of each estimator's N-sample mean (200 draws each)")
st.markdown(
    "κ scales the gap between the two sets of logits: κ = 1 is the pair pictured above, κ = 0.5 halfway "
    "towards π_ref, κ = 2 twice as far."
)
table = bias_variance(theta_temperature, boost, favourite, ref_temperature)
st.dataframe(
    readable(table, ".3g", [column for column in table.columns if column.endswith(("bias", "variance"))]),
    hide_index=True,
    key="kl_table",
)
st.caption("What to notice: " + labs.kl_summary(samples, exact, table))
kl_gradient_view(logits, ref_logits)
see_it_happen("labs_kl")
