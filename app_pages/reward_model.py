import random

import streamlit as st

from rl_core.engine.reward_model import bradley_terry_loss, pairwise_accuracy, reward_margin
from ui.experiments_panel import see_it_happen
from ui.reward_chat import talk_to_reward_model
from ui.reward_model import overoptimisation_curves, ranking_table, reward_model_lab
from ui.story import formula

st.title("The reward model: Bradley-Terry on preference pairs")
fit = reward_model_lab("reward_model")
st.subheader("How it ranks what a policy will write")
st.caption(
    "Responses of the kinds an RL policy produces on the `preference` task, ranked by the model you "
    "trained above, beside the hidden gold judge's score (4 for the right name, +1 per mark up to 3, "
    "0 for shouting)."
)
if fit is None:
    st.info("Train a reward model above to rank responses with it.", icon=":material/leaderboard:")
else:
    name = st.selectbox("Prompt", ["max>", "anna>", "oscar>", "ivy>"], key="reward_model:prompt")
    table = ranking_table(fit, name, random.Random(0))
    st.dataframe(table, hide_index=True, key="reward_model:ranking")
    best = table["gold quality"].idxmax()  # rows are in the model's order, so an earlier row is ranked above
    above = table.loc[: best - 1]
    st.caption(
        f"This model ranks {len(above)} response(s) above the gold judge's favourite "
        f"({table.loc[best, 'response']}), {int((above['gold quality'] == 0).sum())} of them scored 0 by the "
        "judge. The pairs never show more than three marks, and within them every extra mark wins; where a "
        'model carries "more is better" on past three, it rewards shouting, the slope an RL policy '
        "climbs. The experiment below shows it happen."
    )
talk_to_reward_model("reward_model", fit)

st.subheader("The problem")
st.markdown(
    "RL needs a reward for every response, but what people want cannot be written as a rule. They can, "
    "however, say which of two responses they prefer. RLHF turns those comparisons into a scalar reward model: "
    "the same language-model backbone with a value head read at the last token, trained once, before RL, and "
    "then asked about every response the policy samples."
)
st.subheader("The idea")
st.markdown(
    "Bradley-Terry (1952), as InstructGPT uses it: the labeller prefers response y_w to y_l with probability "
    "σ(r(x, y_w) − r(x, y_l)). Fitting r by maximum likelihood minimises the loss below; only differences of "
    "scores matter, so the model learns a ranking whose scale and offset are arbitrary (the `preference` task "
    "standardises its scores over the SFT policy's responses before RL sees them)."
)
formula(
    "The Bradley-Terry loss (Ouyang et al. 2022, eq. 1)",
    r"\mathcal{L}_{\text{RM}} = -\frac{1}{N}\sum_i \log\sigma\big(r_\phi(x_i, y_{w,i}) - r_\phi(x_i, y_{l,i})\big)",
    bradley_terry_loss,
    "Equal scores cost log 2 ≈ 0.693 per pair, where a model that cannot tell the two apart sits (the chart's first "
    "point is one minibatch's loss after the first step, so it scatters around that). Flipped labels (label noise) "
    "put a floor under it: no model can agree with a coin toss.",
)
formula(
    "The reward margin",
    # Two lines: on one, the formula is wider than its column on a 1024-pixel screen.
    [r"m = \frac{1}{N}\sum_i \big(r_\phi(x_i, y_{w,i}) - r_\phi(x_i, y_{l,i})\big)", r"P(y_w \succ y_l) = \sigma(m)"],
    reward_margin,
    "The margin is the model's confidence in log-odds. On the training pairs it keeps growing after the held-out "
    "accuracy has levelled off: the model grows sure, not right. Train with `max_steps` 300 to see it (seeds 0–2: "
    "the held-out accuracy stayed between 0.70 and 0.82 after step 90 while the training margin climbed from "
    "1.0–1.7 to 1.8–3.1).",
)
formula(
    "Pairwise accuracy on held-out pairs",
    r"\text{acc} = \frac{1}{N}\sum_i \mathbb{1}\big[r_\phi(x_i, y_{w,i}) > r_\phi(x_i, y_{l,i})\big]",
    pairwise_accuracy,
    "Measured on pairs the model never trained on. With 10 % of the labels flipped, a perfect judge of the gold "
    "preference scores about 0.9 against the noisy labels.",
)
st.subheader("What it leaves open")
st.markdown(
    "A reward model is right only where its pairs were. RL moves the policy away from there, and the further it "
    "goes (measured by the KL from the reference), the more it finds what the model over-rates: the proxy "
    "reward keeps rising while the true quality falls. Gao et al. (2023) measure the gold reward first rising, "
    "then falling as √KL grows; the experiment below shows the fall. The KL penalty of PPO and "
    "GRPO is the usual leash; DPO skips the reward model altogether."
)
see_it_happen("reward_model")
overoptimisation_curves("reward_model")
