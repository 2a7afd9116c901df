"""GAE lab: TD errors, advantages and critic targets on one response; decoupled and length-adaptive λ."""

import pandas as pd
import streamlit as st

from rl_core.formulas.advantages import gae, length_adaptive_lambda
from ui.labs import gae as labs
from ui.labs.figures import readable
from ui.story import formula

st.title("GAE lab: how a reward at the end reaches the first token")
st.markdown(
    "In RLHF the reward model scores a response once, on its last token, so every earlier token learns of "
    "it only through GAE. VC-PPO (Yuan et al. 2025) calls this the reward-signal decay: the final reward reaches "
    "token t with weight (γλ)^(T−t), which for λ < 1 and a long response is nearly nothing. The same paper "
    "shows what a critic initialised from the reward model does: it scores unfinished text low and rises "
    "along the response, so every TD error is positive and the earliest tokens collect the largest "
    "advantages, the bias the paper blames for responses collapsing in length. Its remedy, used again by "
    "VAPO, is to decouple λ (a λ near 1 for the critic's targets, a smaller one for the actor's advantages) "
    "and, in VAPO, to make the actor's λ grow with the response length."
)
formula(
    "Generalised advantage estimation",
    [
        r"\delta_t = r_t + \gamma V(s_{t+1}) - V(s_t),\qquad A_t = \delta_t + \gamma\lambda A_{t+1}",
        r"\text{critic target}_t = A_t + V(s_t)",
    ],
    gae,
)

length, critic = st.columns([1, 2])
T = length.slider("response length T", 2, 40, 12, key="gae_length")
critic_name = critic.radio("critic", labs.CRITICS, index=2, horizontal=True, key="gae_critic")
gamma_col, actor_col, critic_col = st.columns(3)
gamma = gamma_col.slider("γ", 0.8, 1.0, 1.0, 0.01, key="gae_gamma")
lam_actor = actor_col.slider("λ_actor (advantages)", 0.0, 1.0, 0.95, 0.01, key="gae_lam_actor")
lam_critic = critic_col.slider("λ_critic (critic targets)", 0.0, 1.0, 1.0, 0.01, key="gae_lam_critic")

with st.expander("per-token rewards r_t (edit them)"):
    # One editor per length: a new T starts from a fresh sparse reward rather than a stale table.
    rewards = (
        st.data_editor(
            pd.DataFrame({"reward r_t": [0.0] * (T - 1) + [1.0]}, index=pd.RangeIndex(1, T + 1, name="token")),
            key=f"gae_rewards_{T}",
        )["reward r_t"]
        .fillna(0.0)
        .tolist()
    )

table = labs.gae_table(rewards, critic_name, gamma, lam_actor, lam_critic)
st.plotly_chart(labs.gae_figure(table), key="gae_chart")
st.caption("What to notice: " + labs.gae_summary(table, gamma, lam_actor))

st.subheader("The reward-signal decay")
st.plotly_chart(labs.decay_figure(table), key="gae_decay_chart")
st.caption(
    "What to notice: "
    + labs.decay_summary(table, lam_actor, lam_critic)
    + " The chart is the reward's direct weight: with λ_critic < 1 a target early in a long response takes the "
    "rest from the critic's own estimate V(s_{t+1}), which learns of the reward only gradually, as updates carry it "
    "back, so the start of the response hears of it late and faintly. λ_critic = 1 with γ = 1 passes "
    "it on whole, in one update."
)
with st.expander("all numbers"):
    st.dataframe(readable(table), hide_index=True, key="gae_table")

st.header("VAPO's length-adaptive λ")
st.markdown(
    "A fixed λ suits one length only: short responses get noisy advantages, long ones an almost vanishing "
    "reward. VAPO sets the actor's λ per response so that the sum of GAE's weights, 1/(1 − λ), equals α·|y|: "
    "the horizon GAE looks over grows in proportion to the response."
)
formula("Length-adaptive λ", r"\lambda_{actor} = 1 - \frac{1}{\alpha\,|y|}", length_adaptive_lambda)
alpha = st.slider("α", 0.1, 2.0, 0.5, 0.05, key="gae_alpha")
# The table runs GAE over responses of up to 1024 tokens and depends on α alone, so it is computed once per α.
length_adaptive_table = st.cache_data(labs.length_adaptive_table, show_spinner=False)
adaptive = length_adaptive_table(alpha)
st.plotly_chart(labs.length_adaptive_figure(alpha), key="gae_adaptive_chart")
# Weights span 1 to 1e-23: three significant digits, not fixed decimals that print 1.6e-23 as 0.000…0001.
st.dataframe(
    readable(adaptive, ".3g", [name for name in adaptive.columns if name.startswith("weight")]),
    hide_index=True,
    key="gae_adaptive_table",
)
st.caption("What to notice: " + labs.length_adaptive_summary(adaptive))
