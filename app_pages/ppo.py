import streamlit as st

from rl_core.formulas.advantages import gae
from rl_core.formulas.losses import clipped_surrogate_loss, clipped_value_loss
from rl_core.formulas.rewards import kl_penalized_token_rewards
from ui.experiments_panel import see_it_happen
from ui.lab import live_lab
from ui.predict import Prediction, ever_above
from ui.story import formula, ratio_is_one

st.title("PPO: Proximal Policy Optimization")
live_lab(
    "ppo",
    {"PPO": "ppo"},
    lesson=("ppo_epochs", "num_minibatches", "epsilon", "lam"),
    knobs=(
        "lam",
        "gamma",
        "whiten_advantages",
        "epsilon",
        "epsilon_high",
        "dual_clip",
        "beta",
        "kl_estimator",
        "target_kl",
        "ppo_epochs",
        "num_minibatches",
        "learning_rate",
        "critic_learning_rate",
        "cliprange_value",
        "vf_coef",
        "prompts_per_step",
        "temperature",
        "entropy_coef",
        "loss_agg_mode",
        "adam_epsilon",
        "skip_no_signal_updates",
    ),
    focus=("Clip fraction (tokens)", "Explained variance"),
    prediction=Prediction(
        "Will the clip act at all (clip fraction above 0 at some step)?",
        ("yes", "no"),
        ever_above("clip_frac", "clip fraction (low and high sides together)", 0.0),
    ),
)
see_it_happen("ppo")
st.subheader("The problem")
st.markdown(
    "The policy gradient uses each expensive batch of samples for a single step, takes that step blindly "
    "(a large one can wreck the policy), and hands every token of a response the same credit."
)
st.subheader("The idea")
st.markdown(
    "- **Reuse the batch with importance sampling.** A batch drawn from π_old can estimate the gradient for a "
    "slightly different π_θ if each token is weighted by the ratio ρ_t = π_θ(a_t|s_t) / π_old(a_t|s_t). That "
    "allows several epochs of minibatch updates per batch.\n"
    "- **Stay close to π_old by clipping.** Once a token's ratio leaves [1 − ε, 1 + ε] *in the direction its "
    "advantage pushes*, its gradient is switched off. Taking the `min` of the plain and the clipped term makes "
    "the objective a pessimistic bound: clipping can only remove an incentive, never add one. It does not bound "
    "the step itself: Adam moves every weight by about the learning rate per update, whatever the gradient's "
    "size, so with 4 × 4 updates per batch the lab's PPO runs at a quarter of GRPO's learning rate (watch the "
    "approx KL per step).\n"
    "- **Per-token credit from a critic.** A value model V(s_t) predicts the return still to come from each "
    "prefix. The TD error δ_t says how much better the step went than predicted; GAE sums them with decay γλ. "
    "λ = 0 trusts the critic completely (low variance, biased if it is wrong), λ = 1 uses the real return "
    "(unbiased, noisy).\n"
    "- **KL in the reward.** In RLHF every token pays −β·KL to the reference, and the reward model's score is "
    "added on the last token.\n"
    "- **Whitened advantages.** A ← (A − mean)/std over the batch. When every reward in the batch is the same "
    "(a solved batch of 0/1 rewards) the std is that of the critic's error and the KL penalty, and whitening "
    "would blow that noise up to full size: such a batch trains the critic only, and the policy's optimiser "
    "step is skipped (`skipped updates`)."
)
formula(
    "Per-token rewards",
    [
        r"r_t = -\beta\,k_1(t) + \mathbb{1}[t = T]\;\mathrm{clip}(R, -c_R, c_R)",
        r"k_1(t) = \log \pi_{\text{old}}(a_t\mid s_t) - \log \pi_{\text{ref}}(a_t\mid s_t)",
    ],
    kl_penalized_token_rewards,
)
formula(
    "Generalised advantage estimation",
    [
        r"\delta_t = r_t + \gamma V(s_{t+1}) - V(s_t), \qquad V(s_{T+1}) = 0",
        r"A_t = \delta_t + \gamma\lambda\, A_{t+1}, \qquad R_t = A_t + V(s_t)",
    ],
    gae,
    "Computed backwards from the last token. The returns R_t are the critic's regression targets.",
)
formula(
    "The clipped surrogate",
    [
        r"\mathcal{L}_t = -\min\big(\rho_t A_t,\; \mathrm{clip}(\rho_t, "
        r"1-\varepsilon_{\text{low}}, 1+\varepsilon_{\text{high}})\, A_t\big)",
        r"\rho_t = \frac{\pi_\theta(a_t\mid s_t)}{\pi_{\text{old}}(a_t\mid s_t)}",
    ],
    clipped_surrogate_loss,
)
st.markdown(
    """
Where the gradient survives (the six cases of the clipped objective):

| | ρ < 1 − ε | 1 − ε ≤ ρ ≤ 1 + ε | ρ > 1 + ε |
| --- | --- | --- | --- |
| **A > 0** (good token) | gradient: raise it back | gradient | **0**: already raised enough |
| **A < 0** (bad token) | **0**: already lowered enough | gradient | gradient: push it down (dual clip caps the loss at −c·A once ρ > c) |
"""  # noqa: E501 - a markdown table row cannot be wrapped
)
formula(
    "The critic's loss, with value clipping",
    [
        r"\mathcal{L}_V = \tfrac12 \max\Big(\big(V - R_t\big)^2,\; \big(V^{\text{clip}} - R_t\big)^2\Big)",
        r"V^{\text{clip}} = \mathrm{clip}\big(V,\; V_{\text{old}} "
        r"- \varepsilon_v,\; V_{\text{old}} + \varepsilon_v\big)",
    ],
    clipped_value_loss,
)
ratio_is_one()
st.subheader("What it leaves open")
st.markdown(
    "Four models in memory: actor, critic, reference and reward model, with a critic as large as the policy "
    "that has to be trained alongside it, and advantages that are only as good as that critic. On long "
    "responses with one sparse reward, the critic is the weak link. GRPO removes it."
)
st.markdown(
    "**Try:** set epochs and minibatches to 1 and watch the clip fraction stay at 0; then raise the learning "
    "rate and watch the high-side clip fraction and the policy change per step jump. Move λ between 0 and 1."
)
st.page_link("app_pages/grpo.py", label="Next: GRPO drops the critic", icon="➡️")
