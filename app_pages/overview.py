import streamlit as st

from rl_core.engine.models import MODEL_PRESETS, ValueModel, frozen_reference
from rl_core.engine.reward_model import bradley_terry_loss
from rl_core.engine.sft import sft_loss
from rl_core.formulas.rewards import kl_penalized_token_rewards
from toy_tasks import TASKS
from ui.limits import limits_panel
from ui.session import bookmark_link
from ui.story import formula

st.title("RLHF policy optimisation, one algorithm at a time")
st.markdown(
    "A pretrained language model continues text; nothing in next-token prediction tells it which of many "
    "plausible continuations people actually want. RLHF turns *what we want* into a number and then changes the "
    "model so that it earns more of it. This walk-through follows the family of algorithms that do the changing, "
    "from the plain policy gradient to today's critic-free and critic-repaired methods. Every algorithm page "
    "tells the same four-part story: the problem the previous method left open, the idea that addresses it, the "
    "formula next to the exact code that computes it, and a lab in which a real (tiny) GPT-2 learns a toy task live."
)
# The first screen's call to action: where to press Train, before the background below.
start, grpo = st.columns(2)
start.page_link("app_pages/policy_gradient.py", label="Start at the beginning: the policy gradient", icon="➡️")
grpo.page_link("app_pages/grpo.py", label="Or train GRPO now: press Train at the top of its page", icon="▶️")

st.header("The pipeline: SFT → reward model → RL")
st.graphviz_chart(
    """
    digraph {
      rankdir=LR; node [shape=box, style="rounded,filled", fillcolor="#eef3fb", fontname="sans-serif"];
      pre [label="pretrained\\nmodel"]; sft [label="1. SFT\\nimitate demonstrations"];
      rm [label="2. reward model\\nlearn preferences"]; rl [label="3. RL\\nPG · PPO · GRPO · …"];
      out [label="aligned policy"];
      pre -> sft -> rl -> out; sft -> rm [label="its answers\\nget ranked"]; rm -> rl [label="scores"];
    }
    """
)
st.markdown(
    "**1. Supervised fine-tuning** teaches the form of a good answer by imitation: maximise the likelihood of "
    "demonstrated responses. Its output is both the starting policy for RL and the frozen reference that RL is "
    "kept close to. In the lab every task writes its own demonstrations, a share of them deliberately wrong "
    "(the *demonstration noise*), so the SFT model is decent but leaves RL something to fix.\n\n"
    "**2. The reward model** stands in for people, who are too slow and expensive to score every sample. "
    "Labellers only compare two answers to the same prompt; a model with a scalar head learns to score so that "
    "the preferred answer wins (Bradley–Terry). Where correctness can be checked by a program (maths, code, "
    "our reversing and counting tasks) a verifier replaces it: *RL with verifiable rewards*. The lab's "
    "`preference` task trains a real Bradley–Terry model, flaws included.\n\n"
    "**3. Reinforcement learning** samples responses, scores them and shifts probability towards the "
    "better ones, while a KL penalty keeps the policy near the reference so it cannot wander into text the "
    "reward model has never seen and scores wrongly.\n\n"
    "DPO and IPO (their own page) fold steps 2 and 3 into one: the policy learns from the preference pairs "
    "directly, with no reward model and no sampling."
)
formula(
    "SFT: the demonstrations' negative log-likelihood",
    r"\mathcal{L}_{\text{SFT}} = -\frac{1}{\sum_i |y_i|}\sum_i \sum_t \log \pi_\theta(y_{i,t} \mid x_i, y_{i,<t})",
    sft_loss,
)
formula(
    "Reward model: Bradley–Terry on preference pairs",
    [
        r"P(y_c \succ y_r \mid x) = \sigma\big(r_\psi(x, y_c) - r_\psi(x, y_r)\big)",
        r"\mathcal{L}_{\text{RM}} = -\,\mathbb{E}\,\log \sigma\big(r_\psi(x, y_c) - r_\psi(x, y_r)\big)",
    ],
    bradley_terry_loss,
    "Only score differences are learnt: the model ranks, and its offset and scale mean nothing.",
)
formula(
    "RL: the reward, with a KL leash to the reference",
    [
        r"\max_\theta\; \mathbb{E}_{y\sim\pi_\theta}\big[R(x,y)\big] - "
        r"\beta\, \mathrm{KL}\big(\pi_\theta \,\|\, \pi_{\text{ref}}\big)",
        r"r_t = -\beta\, k(t) \quad (t < T)",
        r"r_T = \mathrm{clip}(R, -c_R, c_R) - \beta\, k(T)",
    ],
    kl_penalized_token_rewards,
    "In PPO-style training the penalty is paid token by token (k(t) a per-token KL estimate) and the reward "
    "model's score arrives only on the last token: the reward is sparse, which is what advantages must fix.",
)

st.header("The four models")
st.markdown(
    """
| model | what it does | trained during RL? | initialised from |
| --- | --- | --- | --- |
| **actor** (policy π_θ) | writes the responses; the model being improved | yes | the SFT checkpoint |
| **reference** π_ref | anchors the KL penalty | no, frozen | the same SFT checkpoint |
| **critic** V_φ | predicts, at every prefix, the return still to come; turns one final reward into per-token advantages | yes | the policy's transformer with a fresh scalar head (often the reward model, which biases it: see VAPO) |
| **reward model** r_ψ | scores complete responses | no, frozen | trained separately on preference pairs; unrelated weights |

PPO keeps all four in memory. GRPO, RLOO and REINFORCE++ drop the critic and get their baseline from other
samples; DAPO and GSPO also set β = 0 and so need no reference; VAPO keeps the critic but repairs how it starts.
"""  # noqa: E501 - a markdown table row cannot be wrapped
)
formula(
    "Reference: a frozen copy of the SFT policy",
    r"\pi_{\text{ref}} \equiv \pi_{\theta_{\text{SFT}}}, \qquad \nabla \pi_{\text{ref}} = 0",
    frozen_reference,
)
formula(
    "Critic: the policy's body with a value head",
    r"V_\phi(s_t) = w^\top h_{\phi}(x, y_{<t}) + b, \qquad h_\phi \leftarrow h_{\theta_{\text{SFT}}}",
    ValueModel.from_policy,
)

st.header("The lab's tasks and models")
for task in TASKS.values():
    st.markdown(f"- **{task.name}**: {task.description}. {task.lesson}")
st.markdown("\n".join(f"- **{p.name}**: {p.description}" for p in MODEL_PRESETS.values()))
st.markdown(
    "Each algorithm page opens with its lab: pick a task and model, move the knobs (hover the question mark "
    "beside a knob for what it does), press **Train** and watch reward, entropy, KL, clipping, advantages and the "
    "sampled tokens update every second, with the page's story below. A finished run stays on screen; earlier "
    "runs can be overlaid and downloaded."
)
st.page_link("app_pages/policy_gradient.py", label="Start with the policy gradient", icon="➡️")

with st.expander("This server: what one learner and one run may use"):
    limits_panel()
with st.expander("Your runs, in another browser"):
    st.markdown(
        "Your runs on the algorithm pages, your comparisons and your experiments belong to a key kept in this "
        "browser: a reload or a second tab shows them again (after a restart of the server, the Compare page "
        "lists them), and no other learner sees them. The reward-model and DPO fits, which run while you watch, "
        "are not kept. To open your runs in another browser, use this link there (keep it to yourself: it is "
        "your key):"
    )
    st.code(bookmark_link(), language=None, wrap_lines=True)
