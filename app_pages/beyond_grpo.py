import streamlit as st

from rl_core.formulas.advantages import maxrl_advantages, normalized_advantages
from rl_core.formulas.kl import kl_k3_is_corrected, kl_k3_with_k2_grad
from rl_core.formulas.losses import cispo_loss, dppo_loss, dro_loss, sapo_loss
from rl_core.formulas.rollout_correction import (
    binary_kl,
    binary_tv,
    effective_sample_size,
    gated_is,
    masked_is,
    mismatch_k3_kl,
    sequence_is_weights,
    truncated_is,
)
from ui.experiments_panel import see_it_happen
from ui.lab import live_lab
from ui.predict import Prediction, ever_above
from ui.story import formula

st.title("Beyond GRPO (2025–26)")
live_lab(
    "beyond_grpo",
    {"GRPO": "grpo", "CISPO": "cispo", "SAPO": "sapo", "DPPO": "dppo", "Lite PPO": "lite_ppo", "MaxRL": "maxrl"},
    lesson=("epsilon_high", "rollout_staleness", "rollout_dtype", "rollout_is_mode", "ppo_epochs"),
    knobs=(
        "policy_loss",
        "epsilon",
        "epsilon_high",
        "cispo_two_sided",
        "sapo_tau_pos",
        "sapo_tau_neg",
        "dppo_delta_low",
        "dppo_delta_high",
        "dro_beta",
        "adv_norm_mean",
        "adv_norm_std",
        "loss_agg_mode",
        "beta",
        "kl_gradient",
        "rollout_staleness",
        "rollout_dtype",
        "rollout_is_mode",
        "rollout_is_level",
        "rollout_is_threshold",
        "is_correction_gating",
        "is_correction_threshold",
        "num_generations",
        "ppo_epochs",
        "num_minibatches",
        "learning_rate",
    ),
    focus=("Reward and success rate", "Clip fraction (tokens)"),
    prediction=Prediction(
        "Will any token's gradient be silenced during the run (A ≠ 0, yet zero gradient)? Try GRPO, then CISPO.",
        ("yes", "no"),
        ever_above("silenced_frac", "share of tokens whose gradient was silenced", 0.0),
    ),
)
see_it_happen("beyond_grpo")
st.markdown(
    "GRPO and DAPO settled how to get an advantage without a critic. The methods that followed in 2025–26 — now in "
    "most RL frameworks — change three other things: **how a token's step is bounded** (CISPO, SAPO, DPPO, dro), "
    "**which policy the data really came from** (rollout correction) and **whether the KL term's gradient is the "
    "gradient of the KL** (IS-corrected KL); a fourth line of work asks what the advantage should be divided by "
    "(the normalisation selector, Lite PPO, MaxRL). Each section below is a problem, an idea, and the function the "
    "trainer runs; the Clip and KL labs draw their curves."
)

st.header("CISPO: clip the weight, not the gradient")
st.markdown(
    "**Problem.** PPO's clip switches a token's gradient off once its ratio leaves [1 − ε, 1 + ε] in the direction "
    "its advantage pushes. The tokens that leave first are rare ones — *However*, *Wait*, *Recheck* at p = 0.01 "
    "reach the bound after a tiny absolute change — so the forks a reasoning model needs stop learning after the "
    "first update on a batch.\n\n"
    "**Idea (MiniMax-M1).** Keep REINFORCE's −A·log π on every token and clip only the importance weight in front "
    "of it, detached: the weight is bounded, the gradient never vanishes."
)
formula(
    "CISPO",
    r"L_t = -\,\mathrm{sg}\big[\min(\rho_t, \varepsilon_{max})\big]\,A_t\,\log\pi_\theta(a_t|s_t)",
    cispo_loss,
    'ε_max = 5 (TRL\'s `epsilon_high` with `loss_type="cispo"`); verl clamps to [1 − ε_low, 1 + ε_high].',
)

st.header("SAPO: a soft gate instead of a hard cut")
st.markdown(
    "**Problem.** A hard clip is all or nothing: a token just inside the range gets its full gradient, one just "
    "outside gets none, and the sequence-level alternative (GSPO) silences whole responses for a few stray tokens.\n\n"
    "**Idea.** Replace the clip by a smooth gate of the ratio whose slope is exactly 1 on-policy and decays as the "
    "ratio leaves 1, with a temperature per sign of the advantage (negative tokens are damped a little sooner)."
)
formula(
    "SAPO",
    [
        r"L_t = -A_t\, g_\tau(\rho_t),\qquad g_\tau(\rho) = \tfrac{4}{\tau}\sigma\big(\tau(\rho-1)\big)",
        r"\tau = \tau_{pos}\ (A_t > 0),\ \tau_{neg}\ (A_t < 0)",
    ],
    sapo_loss,
)

st.header("DPPO: a trust region in probability")
st.markdown(
    "**Problem.** A ratio bound treats tokens unequally: a token at p_old = 0.01 that rises to 0.05 has ratio 5 and "
    "is clipped, though its probability barely moved; one at 0.9 may move by 0.18 inside the same bound.\n\n"
    "**Idea (Binary-TV).** Mask a token only when its *probability* moved more than δ in the direction its advantage "
    "pushes; keep the others with a capped, detached ratio weight. Rare tokens keep learning; big absolute moves "
    "stop."
)
formula(
    "DPPO-Binary-TV",
    [
        r"m_t = \mathbb{1}[p - p_{old} \le \delta_{high}]\quad (A_t>0)",  # a line each: one is
        r"m_t = \mathbb{1}[p - p_{old} \ge -\delta_{low}]\quad (A_t \le 0)",  # too wide at 1024 px
        r"L_t = -\,m_t\,A_t\,\mathrm{sg}\big[\min(\rho_t, c)\big]\log\pi_\theta(a_t)",
    ],
    dppo_loss,
    "Its clip metric is the masked share mean(1 − m) over all valid tokens (verl's pg_clipfrac), which counts "
    "the masked tokens of zero-advantage groups too; the run's DPPO chart draws it beside the share of A ≠ 0 "
    "tokens silenced.",
)

st.header("dro: a spring instead of a clip")
st.markdown(
    "**Problem.** Every bound above acts on the ratio or the probability, and switches a gradient off or bends it "
    "past a threshold. A threshold is a cliff: a token just inside moves freely, one just outside not at all.\n\n"
    "**Idea (verl's `dro`).** No ratio and no clip: keep −A·log π_θ and add a quadratic penalty on how far the "
    "token's log-probability has moved from the policy that sampled it. The gradient is "
    "−(A − β (log π_θ − log π_old)) ∇log π_θ: the plain policy gradient on the first update, fading smoothly as "
    "the token moves, and zero once it has moved by A/β. Choose `policy_loss = dro` in the lab, train, and pick "
    "one of a response's tokens in the Tokens tab: its term of the loss shows the advantage and the spring's pull "
    "with that token's numbers."
)
formula(
    "dro",
    r"L_t = -\Big[A_t\log\pi_\theta(a_t) - \frac{\beta}{2}\big(\log\pi_\theta(a_t) - "
    r"\log\pi_{old}(a_t)\big)^2\Big]",
    dro_loss,
    "verl: `policy_loss.loss_mode = dro` with `policy_loss.dro_beta` = β > 0 (the lab's `dro_beta`).",
)

st.header("Rollout correction: the sampler is not the trainer")
st.markdown(
    "**Problem.** Large systems sample with an inference engine (other kernels, lower precision) and often with a "
    "policy a few steps old (asynchronous training). The ratio ρ = π_θ/π_old then compares against a policy that "
    "did not produce the data, and the update is biased — enough to destabilise long runs.\n\n"
    "**Idea.** Weigh each token (or response) by w = π_old/μ, the trainer's snapshot over the sampler μ, and bound "
    "the weight: cap it at C (TIS) or drop what exceeds C (MIS). `rollout_staleness = k` in the lab samples with the "
    "policy of k steps ago to create the mismatch."
)
formula(
    "Sequence-level importance weight",
    r"w_i = \exp\Big(\sum_t m_{i,t} \log\frac{\pi_{old}(a_t)}{\mu(a_t)}\Big)"
    r"\quad\text{(geometric: divided by } |y_i|\text{)}",
    sequence_is_weights,
)
formula("TIS: truncate", r"\mathrm{sg}\big[\min(w, C)\big]", truncated_is)
formula("MIS: mask", r"\mathrm{sg}\big[w\cdot\mathbb{1}[w \le C]\big]", masked_is)
st.markdown(
    "**Gate on a divergence, not on the weight (OpenRLHF 0.11).** A weight of 3 means little on a token μ gave "
    "0.001 and much on one it gave 0.3. `is_correction_gating` = `binary_kl` or `tv` reads how far the two "
    'policies disagree about the sampled token itself — fold the vocabulary into "this token" and "any other" '
    "and compare the two coins — and drops the token (or, with `rollout_is_level = sequence`, the whole response "
    "by its tokens' mean) beyond δ = `is_correction_threshold`; the tokens kept carry their weight π_old/μ. "
    "FlashREINFORCE gates each response's mean binary KL at δ = 0.005. A divergence is no weight to cap, so the "
    "gate only masks."
)
formula(
    "Binary KL at the sampled token",
    [r"p = \mu(a_t),\quad q = \pi_{old}(a_t)", r"D_t = p\log\frac{p}{q} + (1-p)\log\frac{1-p}{1-q}"],
    binary_kl,
    "Both probabilities are clamped into [10⁻⁶, 1 − 10⁻⁶], as OpenRLHF does, so a certain token keeps the "
    "logarithms finite.",
)
formula("Total variation at the sampled token", r"D_t = |\mu(a_t) - \pi_{old}(a_t)|", binary_tv)
formula(
    "The gate",
    [
        r"\mathrm{sg}\big[w_t\,\mathbb{1}[D_t \le \delta]\big]\ \text{(token)},\qquad "
        r"\mathrm{sg}\big[w_t\,\mathbb{1}[\mathrm{mean}_t D_t \le \delta]\big]\ \text{(sequence)}"
    ],
    gated_is,
)
st.markdown(
    "**What the run records, under verl's names.** `rollout_corr/kl` is k1 of KL(μ‖π_old) on μ's tokens, "
    "mean(log μ − log π_old); `rollout_corr/k3_kl` its k3, never negative; "
    "`rollout_corr/rollout_is_eff_sample_size` how much of the sample the weights still carry; "
    "`rollout_corr/rollout_rs_masked_fraction` the share of tokens the correction drops. The charts "
    "*Sampler–trainer mismatch* and *Rollout correction* draw them."
)
formula(
    "k3 of the mismatch",
    r"\mathrm{mean}_t\,(w_t - 1 - \log w_t),\quad w_t = \frac{\pi_{old}(a_t)}{\mu(a_t)}",
    mismatch_k3_kl,
)
formula(
    "Effective sample size",
    r"\mathrm{ESS}/N = \frac{(\mathrm{mean}\,w)^2}{\mathrm{mean}\,(w^2)}",
    effective_sample_size,
    "verl measures it on the weights capped at C; 1 when every weight is equal, 1/N when one carries everything.",
)

st.subheader("Or remove the mismatch")
st.markdown(
    "A correction pays for the mismatch with variance (a low ESS) or with dropped tokens. Where the mismatch comes "
    "from the kernels — a bfloat16 inference engine beside a float32 trainer, fused kernels, another reduction "
    "order — it can be removed instead: sample with the trainer's own kernels and precision, and keep the "
    "sampler's log-probabilities as π_old's. Then μ ≡ π_old by construction, every weight is exactly 1, and there "
    'is nothing left to correct (the batch-invariant and "same kernels for rollout and training" work of 2025–26 '
    "does this at scale, at some cost in sampling speed).\n\n"
    "**Try it.** Set the sampler precision `rollout_dtype` to bfloat16 with no lag: the same weights through "
    "other kernels, and the *Sampler–trainer mismatch* chart shows a KL above 0 from the first step. Back to "
    "float32: the lab's sampler runs the trainer's kernels and the trainer keeps its log-probabilities, so "
    "μ ≡ π_old — the run records no mismatch at all, because there is none. Only a lag (or another temperature) "
    "brings one back, and that mismatch no kernel removes: it needs the correction above."
)

st.header("IS-corrected KL: the gradient of the KL, not of its estimate")
st.markdown(
    "**Problem.** k3 is an unbiased estimate of KL(π_θ‖π_ref)'s *value* on tokens drawn from π_θ, but the loss "
    "needs its *gradient*, and the tokens were drawn from π_old. Differentiating k3 token by token does not give the "
    "gradient of the KL.\n\n"
    "**Idea.** Weigh k3 by the ratio ρ, which keeps its own gradient (DeepSeek-V3.2, TRL's "
    "`use_bias_correction_kl`), or keep k3's value and take k2's gradient (verl's `k3+`). The KL lab shows the "
    "expected gradients of all three against the true one."
)
formula("ρ · k3", r"\rho_t\,k_{3,t}", kl_k3_is_corrected)
formula("k3 with k2's gradient", r"k_3 + k_2 - \mathrm{sg}[k_2]", kl_k3_with_k2_grad)

st.header("The advantage's normaliser: a selector, Lite PPO and MaxRL")
st.markdown(
    "**Problem.** GRPO, Dr. GRPO and RLOO differ only in what they subtract from a reward and what they divide "
    "by, yet they are usually presented as three algorithms; and dividing by a group's std inflates prompts the "
    "model nearly always or nearly never solves.\n\n"
    "**Idea.** One selector: mean ∈ {group, leave-one-out, batch, none}, std ∈ {group, batch, none}. **Lite PPO** "
    "is group mean with the batch's std and a token-level loss. **MaxRL** divides by the group's success rate "
    "instead, so a prompt solved once in eight weighs most."
)
formula(
    "The normalisation selector",
    r"\hat A_i = \frac{R_i - \mathrm{mean}(R)}{\mathrm{std}(R) + \epsilon}",
    normalized_advantages,
    "A std below 10⁻⁶ (an all-equal group, or a batch std over equal rewards) gives advantage 0: with the batch's "
    "mean, an all-equal group's deviation divided by ε alone would reach 10⁵.",
)
formula(
    "MaxRL",
    r"\hat A_i = \frac{R_i - \mathrm{mean}_g(R)}{\mathrm{mean}_g(R)}\quad (0 \text{ when } "
    r"\mathrm{mean}_g(R) = 0)",
    maxrl_advantages,
)

st.markdown(
    "**Try:** with 4 epochs × 4 minibatches, compare the clip fraction of GRPO with CISPO's (CISPO never "
    "silences a token); set the sampler lag to 4 with no correction, then truncate; switch the KL gradient with "
    "β = 0.04."
)
