import streamlit as st

from rl_core.formulas.distillation import distillation_loss, reverse_kl_advantages
from ui.experiments_panel import see_it_happen
from ui.lab import live_lab
from ui.predict import Prediction, last_at_least
from ui.story import formula

st.title("On-policy distillation: a teacher scores every token")
live_lab(
    "distillation",
    {"OPD": "opd", "GRPO": "grpo"},
    lesson=("teacher_model", "use_policy_gradient", "distillation_loss_mode", "use_task_rewards"),
    knobs=(
        "teacher_sft_steps",
        "distillation_loss_coef",
        "beta",
        "num_generations",
        "prompts_per_step",
        "epsilon",
        "epsilon_high",
        "loss_agg_mode",
        "ppo_epochs",
        "num_minibatches",
        "learning_rate",
        "temperature",
    ),
    focus=("Reward and success rate", "KL to the teacher"),
    prediction=Prediction(
        "Never shown the verifier's reward, only the teacher's opinion of each token: will the student's batch "
        "success reach 0.9 by the last step?",
        ("yes", "no"),
        last_at_least("success_rate", "batch success rate", 0.9),
    ),
)
see_it_happen("distillation")

st.subheader("The problem")
st.markdown(
    "A verifier's reward is sparse: one bit per response, whatever its length, and nothing at all from a group "
    "whose responses all pass or all fail (GRPO's advantage is then 0). The policy has to find out by trial which "
    "of its tokens made the difference. Ordinary distillation is dense — the student imitates a teacher's "
    "answers token by token — but it trains on the *teacher's* sequences: at test time the student walks into "
    "states of its own making, which it never saw a teacher handle (exposure bias)."
)
st.subheader("The idea")
st.markdown(
    "Let the **student sample**, as in RL, and have a **teacher score every sampled token**: the student learns "
    "what the teacher would do in exactly the states it visits itself (Agarwal et al. 2024, *GKD*; Thinking "
    "Machines 2025, *On-Policy Distillation*). The per-token reverse KL KL(π_θ‖π_T) measures the gap; verl's "
    "`use_policy_gradient` picks one of two ways to close it.\n\n"
    "- **Policy-gradient form** (on): the negated KL estimate of each token, detached, is that token's advantage. "
    "With k1 it is log π_T − log π_θ: a dense reward, positive where the teacher likes the sampled token more than "
    "the student does. The run's policy loss (PPO's clip here) is unchanged; with `use_task_rewards` on, the "
    "verifier's advantage is added to it.\n"
    "- **Supervised form** (off): the estimate k(log π_θ, log π_T) is a loss term and is differentiated through "
    "log π_θ, as GKD trains. Only k2 and k3 give a gradient that vanishes where the student already agrees with the "
    "teacher; k1's gradient is 1 on every token, 0 only in expectation over the student's samples."
)
formula(
    "Policy-gradient form",
    r"A_t = \mathrm{sg}\big[\log\pi_T(y_t|s_t) - \log\pi_\theta(y_t|s_t)\big]"
    r"\quad (-\mathrm{sg}[k]\ \text{for k2, k3})",
    reverse_kl_advantages,
    "Scored when the batch is sampled, as a reward is (verl scores with the updating policy and adds a second "
    "clipped loss; both agree inside the clip range).",
)
formula(
    "Supervised form",
    r"\ell_t = k\big(\log\pi_\theta(y_t|s_t),\ \log\pi_T(y_t|s_t)\big),\quad "
    r"k \in \{k_1, k_2, k_3\}",
    distillation_loss,
    "Guarded like the KL term: beyond 10 nats where π_θ < π_T the term is capped and passes no gradient.",
)
st.subheader("The teacher here")
st.markdown(
    "Nothing is downloaded: the teacher is the task's own SFT recipe trained on **flawless** demonstrations for "
    "`teacher_sft_steps` (600 by default, three times the student's warm start), on the `tiny` shape or the "
    "larger `small` one, from the run's seed, and cached like the warm start. On the default task it answers "
    "correctly about 99 % of the time, where the student's warm start, trained on deliberately noisy "
    "demonstrations, manages 20–50 %. A shorter teacher training gives a weaker teacher, whose mistakes the "
    "student then learns as faithfully as its skill.\n\n"
    "**Try:** train OPD, then GRPO with the same seed, and compare the success curves per step — both draw 64 "
    "samples a step. Then switch the policy-gradient form off and pick k3; then keep the verifier's reward on "
    "beside the teacher."
)
