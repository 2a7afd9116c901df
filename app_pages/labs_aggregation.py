"""Aggregation lab: the weight of every token under each way of averaging the loss."""

import streamlit as st

from rl_core.formulas.aggregation import aggregate_loss
from ui.experiments_panel import see_it_happen
from ui.labs import aggregation as labs
from ui.labs.figures import readable
from ui.story import formula

st.title("Aggregation lab: how much one token weighs")
st.markdown(
    "A per-token loss becomes one number by averaging, and the choice of average decides how hard each "
    "token is pushed. DAPO (Yu et al. 2025), Dr. GRPO (Liu et al. 2025) and VAPO trace a length bias to "
    "GRPO's per-response average: a short response's few tokens share its weight, a long response's many "
    "tokens split the same weight into crumbs, so a long wrong answer is barely punished per token and the "
    "policy drifts towards long, rambling output. DAPO and VAPO average over all tokens instead; Dr. GRPO "
    "divides the sum by a constant; RLOO, which treats a whole response as one action, sums its tokens. Each "
    "weight below is ∂loss/∂L_t, taken by autograd through the engine's aggregation."
)
formula(
    "The four aggregations",
    [
        r"\text{token-mean: } \frac{\sum_{i,t} m\,L}{\sum_{i,t} m}",
        r"\text{seq-mean-token-mean: } \frac1B\sum_i \frac{\sum_t m\,L}{|y_i|}",
        r"\text{seq-mean-token-sum-norm: } \frac{\sum_{i,t} m\,L}{B\,T_{max}}",
        r"\text{seq-mean-token-sum: } \frac1B\sum_{i,t} m\,L",
    ],
    aggregate_loss,
)


def verdict(advantage: float) -> str:
    return "correct (A = +1)" if advantage > 0 else "wrong (A = −1)"


# By default a short correct answer meets a long wrong one: the case the length bias gets wrong.
lengths, advantages = [], []
for column, number, length, signs in zip(st.columns(2), (1, 2), (10, 1000), ([1.0, -1.0], [-1.0, 1.0])):
    with column:
        lengths.append(
            st.slider(f"length of response {number}", 1, labs.MAX_NEW_TOKENS, length, key=f"agg_length_{number}")
        )
        advantages.append(
            st.radio(f"response {number} is", signs, format_func=verdict, horizontal=True, key=f"agg_sign_{number}")
        )

table = labs.aggregation_table(lengths, advantages)
st.plotly_chart(labs.aggregation_figure(table), key="agg_chart")
st.dataframe(readable(table), hide_index=True, key="agg_table")
st.caption(
    f"T_max is the generation limit, {labs.MAX_NEW_TOKENS} tokens (the longest a response may be): "
    "a constant, whatever the batch holds. The push is −∂loss/∂log π summed over a response's tokens: "
    "how far one gradient step, per unit of learning rate, moves the response's log-probability. "
    "What to notice: " + labs.aggregation_summary(table)
)
see_it_happen("labs_aggregation")
