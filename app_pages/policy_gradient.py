import streamlit as st

from rl_core.formulas.advantages import batch_mean_baseline, reward_to_go
from rl_core.formulas.losses import vanilla_pg_loss
from ui.experiments_panel import see_it_happen
from ui.lab import live_lab
from ui.predict import Prediction, mean_near_zero
from ui.story import formula

st.title("Policy Gradient (REINFORCE)")
live_lab(
    "policy_gradient",
    {"REINFORCE": "pg"},
    lesson=("use_baseline", "learning_rate", "prompts_per_step"),
    knobs=(
        "use_baseline",
        "baseline",
        "prompts_per_step",
        "learning_rate",
        "temperature",
        "gamma",
        "beta",
        "kl_estimator",
        "loss_agg_mode",
        "entropy_coef",
        "ppo_epochs",
        "num_minibatches",
    ),
    focus=("Reward and success rate", "Advantages"),
    prediction=Prediction(
        "Will this run's token advantages average about 0?",
        ("about 0", "clearly positive", "clearly negative"),
        mean_near_zero("advantage_mean", "token advantage", 0.05),
    ),
)
see_it_happen("policy_gradient")
st.subheader("The problem")
st.markdown(
    "After SFT we have a model and a way to score its finished answers, and we want answers with higher "
    "scores. But the score only exists once the whole response is written, and sampling a token is not a "
    "differentiable operation: there is no path for backpropagation from the reward to the weights. What *is* "
    "differentiable is the log-probability the model gave to each token it actually sampled."
)
st.subheader("The idea")
st.markdown(
    "Make the sampled tokens more likely in proportion to how good the outcome was. The log-derivative "
    "trick, ∇π = π ∇log π, rewrites the gradient of the expected reward as an expectation over the model's own "
    "samples, which a batch can estimate. Two refinements come straight after:\n\n"
    "- **Reward-to-go.** A token cannot influence rewards that came before it, so weight it only by the "
    "rewards from its position on.\n"
    "- **A baseline.** Subtracting any b that does not depend on the sampled token keeps the estimate unbiased "
    "(E[∇log π] = 0) and changes only its variance: a response is now pushed up only if it did *better than "
    "usual*. The variance falls for b near E[R‖∇log π‖²]/E[‖∇log π‖²], which is not always the mean reward "
    "(the See it happen panel above shows a case where it is far from it)."
)
formula(
    "The policy gradient and the loss that produces it",
    [
        r"\nabla_\theta J = \mathbb{E}_{y\sim\pi_\theta}\Big[\sum_t "
        r"\nabla_\theta \log \pi_\theta(a_t \mid s_t)\,\big(G_t - b\big)\Big]",
        r"\mathcal{L}_t = -A_t \,\log \pi_\theta(a_t \mid s_t), \qquad A_t = G_t - b",
    ],
    vanilla_pg_loss,
    "Minimising this loss follows exactly that gradient. Its *value* is not the objective: it moves with the "
    "log-probabilities and the advantages' sign, which is why the lab plots its parts and the reward instead.",
)
formula(
    "Reward-to-go",
    r"G_t = \sum_{t' \ge t} \gamma^{\,t'-t}\, r_{t'}",
    reward_to_go,
    "With one score at the end and γ = 1, every token of a response gets the same return: its reward.",
)
formula(
    "The batch-mean baseline",
    r"A_t = G_t - b, \qquad b = \frac{\sum_{i,t} m_{i,t}\, G_{i,t}}{\sum_{i,t} m_{i,t}}",
    batch_mean_baseline,
)
st.subheader("What it leaves open")
st.markdown(
    "Each batch pays for one gradient step and is then thrown away; nothing limits how far that step moves "
    "the policy, so an unlucky batch can undo a lot; and every token of a response shares one number, so "
    "there is no per-token credit. PPO answers all three."
)
st.markdown(
    "**Try:** switch the baseline off and compare the advantage band and the reward curve; raise the epochs "
    "to reuse each batch with no correction for the policy having moved."
)
st.page_link("app_pages/ppo.py", label="Next: PPO reuses each batch safely", icon="➡️")
