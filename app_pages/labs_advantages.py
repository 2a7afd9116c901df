"""Advantage lab: GRPO, Dr. GRPO, RLOO and REINFORCE++-baseline on the same rewards."""

import pandas as pd
import streamlit as st

from rl_core.formulas import advantages
from ui.experiments_panel import see_it_happen
from ui.labs import advantages as labs
from ui.labs.figures import readable
from ui.story import formula

st.title("Advantage lab: one group of rewards, four baselines")
st.markdown(
    "Critic-free methods sample a group of responses to the same prompt and judge each one against the "
    "others. The variants differ in the baseline and the scale: GRPO subtracts the group mean and divides by "
    "the group's standard deviation; Dr. GRPO drops the division; RLOO compares each response with the mean of "
    "the *other* G − 1; REINFORCE++-baseline subtracts the group mean and then whitens over the whole batch "
    "instead of per group (here every response counts as one token, so it whitens over responses). DAPO "
    "(Yu et al. 2025) adds the catch they share: a group whose responses all get the same reward has nothing to "
    "compare, so every advantage in it is zero and it teaches nothing."
)
for title, latex, implementation in (
    ("GRPO", r"\hat A_i = \frac{R_i - \mathrm{mean}_j R_j}{\mathrm{std}_j R_j + \epsilon}", advantages.grpo_advantages),
    ("Dr. GRPO", r"\hat A_i = R_i - \mathrm{mean}_j R_j", advantages.dr_grpo_advantages),
    ("RLOO", r"\hat A_i = R_i - \frac{1}{G-1}\sum_{j\neq i} R_j", advantages.rloo_advantages),
    (
        "REINFORCE++-baseline",
        r"\hat A_{i,t} = \mathrm{whiten}_{batch}\big(R_i - \mathrm{mean}_{group} R\big)",
        advantages.reinforce_pp_baseline_advantages,
    ),
):
    formula(title, latex, implementation)

# Starting rewards for up to four prompts: one solved once, one always, one never, one half the time.
STARTING_GROUPS = {
    "group 1": [1.0, 0.0, 0.0, 0.0],
    "group 2": [1.0, 1.0, 1.0, 1.0],
    "group 3": [0.0, 0.0, 0.0, 0.0],
    "group 4": [1.0, 1.0, 0.0, 0.0],
}
groups = st.slider("groups (prompts) in the batch", 1, len(STARTING_GROUPS), 1, key="adv_groups")
columns = dict(list(STARTING_GROUPS.items())[:groups])
st.markdown("Rewards, one row per response (add or delete rows to change the group size G):")
# The key follows the number of groups, so a new group count starts from a fresh table of that width.
rewards = st.data_editor(pd.DataFrame(columns), num_rows="dynamic", key=f"adv_rewards_{groups}").fillna(0.0)

if len(rewards) < 2:
    st.info("A group needs at least two responses: RLOO's baseline is the mean of the others.")
else:
    table = labs.group_advantages([rewards[column].tolist() for column in rewards.columns])
    st.plotly_chart(labs.advantages_figure(table), key="adv_chart")
    st.dataframe(readable(table), hide_index=True, key="adv_table")
    for message in labs.zero_advantage_messages(table):
        st.warning(message)
    st.caption("What to notice: " + labs.advantage_summary(table))
see_it_happen("labs_advantages")
