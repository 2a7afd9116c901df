"""Clip lab: the clipped surrogate against the ratio, its six cases, the dual clip, and GSPO's sequence ratio."""

import pandas as pd
import streamlit as st

from rl_core.formulas.losses import clipped_surrogate_loss, gspo_sequence_ratio
from ui.labs import clip as labs
from ui.labs.figures import readable
from ui.story import formula
from ui.successor_sections import clip_lab_overlays

st.title("Clip lab: where the clipped surrogate stops pushing")
st.markdown(
    "PPO's clip is best read through its *six cases*: the sign of the advantage times "
    "whether the ratio ρ = π_θ/π_old sits below, inside or above the clip range. The `min` makes the clip "
    "one-sided: a token is held still only once it has already moved the way its advantage wants, while a "
    "token that moved the wrong way keeps its full gradient. The curves below are the loss that training "
    "minimises, and the lower row is its derivative obtained by autograd through that same loss, so the "
    "shaded flat regions are exactly where a training step leaves a token alone. DAPO's clip-higher is the "
    "case ε_high > ε_low; the dual clip bounds the loss of a bad token whose ratio has exploded."
)
formula(
    "The clipped surrogate",
    [
        r"L_t = -\min\big(\rho_t A_t,\ \mathrm{clip}(\rho_t, 1-\varepsilon_{low}, 1+\varepsilon_{high})\,A_t\big)",
        r"\text{dual clip } (A_t<0):\ L_t \leftarrow \min(L_t, -c\,A_t)",
    ],
    clipped_surrogate_loss,
)

left, right, toggle, constant = st.columns(4)
epsilon_low = left.slider("ε_low", 0.05, 0.5, 0.2, 0.01, key="clip_eps_low")
epsilon_high = right.slider("ε_high", 0.05, 0.5, 0.28, 0.01, key="clip_eps_high")
dual = toggle.toggle("dual clip", key="clip_dual")
c = constant.slider("c", 2.0, 5.0, 3.0, 0.1, key="clip_c", disabled=not dual)
dual_clip = c if dual else None

curves = labs.surrogate_curves(epsilon_low, epsilon_high, dual_clip)
cases = labs.clip_cases(epsilon_low, epsilon_high, dual_clip)
st.plotly_chart(labs.surrogate_figure(curves, cases, epsilon_low, epsilon_high, dual_clip), key="clip_chart")
# A static table wraps its cells, so each case's meaning is read whole, where a data grid would cut it. The short
# cells keep to one line (non-breaking spaces: "A > 0" broken after ">" reads badly), and adding 0 turns
# autograd's −0 into 0, which the table would otherwise print as "-0.00".
shown_cases = cases.assign(
    **{name: cases[name].str.replace(" ", "\u00a0") for name in ("sign", "ratio region", "gradient")},
    **{name: cases[name] + 0.0 for name in cases.select_dtypes("float").columns},
)
st.table(readable(shown_cases, ".2f").hide(axis="index"))
st.caption(
    "What to notice: "
    + labs.zero_gradient_summary(labs.zero_gradient_intervals(curves))
    + " Cases 1 and 6 are never clipped: there the unclipped term is the smaller one, so the `min` keeps it."
)
clip_lab_overlays(epsilon_low, epsilon_high, dual_clip)

st.header("GSPO: one ratio for the whole response")
st.markdown(
    "GSPO (Zheng et al. 2025) points at a granularity mismatch: the reward judges the whole "
    "response, yet the token clip judges each token's ratio on its own, so a few tokens that drifted far "
    "lose their gradient while the rest of the same response keeps it. GSPO replaces the token ratios with "
    "one length-normalised sequence ratio s, the geometric mean of the token ratios, and clips that, so a "
    "response is kept or dropped as a whole. Its clip range is tiny because a geometric mean moves little. "
    "The token clip here uses the ε sliders at the top of the page."
)
formula(
    "The sequence ratio",
    r"s_i = \exp\Big(\tfrac{1}{|y_i|}\textstyle\sum_t \log\tfrac{\pi_\theta(y_{i,t})}{\pi_{old}(y_{i,t})}\Big)",
    gspo_sequence_ratio,
)

source = st.radio("log-ratios ℓ_t", ["seeded random draw", "edit by hand"], horizontal=True, key="gspo_source")
if source == "seeded random draw":
    tokens, spread, seed = st.columns(3)
    log_ratios = labs.random_log_ratios(
        tokens.slider("tokens", 2, 32, 8, key="gspo_tokens"),
        spread.slider("spread σ of ℓ_t", 0.0, 0.6, 0.2, 0.01, key="gspo_spread"),
        seed.number_input("seed", 0, 10_000, 0, key="gspo_seed"),
    )
else:
    edited = st.data_editor(
        pd.DataFrame({"log-ratio ℓ_t": labs.EXAMPLE_LOG_RATIOS}), num_rows="dynamic", key="gspo_editor"
    )
    log_ratios = edited["log-ratio ℓ_t"].dropna().tolist()

sign, low, high = st.columns(3)
advantage = labs.ADVANTAGE_SIGNS[sign.radio("sequence advantage", list(labs.ADVANTAGE_SIGNS), key="gspo_sign")]
seq_low = low.number_input("sequence ε_low", 0.0, 0.5, 3e-4, 1e-4, format="%.4f", key="gspo_eps_low")
seq_high = high.number_input("sequence ε_high", 0.0, 0.5, 4e-4, 1e-4, format="%.4f", key="gspo_eps_high")

if log_ratios:
    table, s = labs.gspo_token_table(log_ratios, advantage, epsilon_low, epsilon_high, seq_low, seq_high)
    st.plotly_chart(labs.gspo_figure(table, s, epsilon_low, epsilon_high), key="gspo_chart")
    st.dataframe(readable(table), hide_index=True, key="gspo_table")
    st.caption("What to notice: " + labs.gspo_summary(table, s, seq_low, seq_high))
else:
    st.info("Add at least one token to the table.")
