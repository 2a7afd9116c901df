"""The one table of knobs every lab draws from: label, the values a slider offers, and what the knob does.

Names are `AlgoConfig` / `RunConfig` field names (TRL / verl names where those exist), so what a learner sets
here carries over to those libraries. Numeric knobs use a value grid (a select slider) rather than a linear
range: learning rates and clip ranges span orders of magnitude (GSPO's ε is 3e-4, PPO's 0.2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

import streamlit as st

from rl_core.config import (
    AdvNormMean,
    AdvNormStd,
    CovMode,
    ISCorrectionGating,
    KLEstimator,
    KLGradient,
    KLPlacement,
    LoraTargetModules,
    LossAggMode,
    PolicyLoss,
    RolloutDtype,
    RolloutISLevel,
    RolloutISMode,
    RunConfig,
    TeacherModel,
)

RUN_FIELDS = frozenset(RunConfig.__dataclass_fields__) - {"algo"}


@dataclass(frozen=True)
class Knob:
    label: str
    help: str
    options: tuple = ()  # numbers: a select slider over these; names: a select box; empty: an on/off toggle
    none_label: str = "off"  # how a None option reads

    @property
    def kind(self) -> str:
        if not self.options:
            return "toggle"
        # names, perhaps with None (a teacher or none): a select box
        return "choice" if all(isinstance(o, str) for o in self.options if o is not None) else "slider"

    def format(self, value) -> str:
        if value is None:
            return self.none_label
        return f"{value:g}" if isinstance(value, float) else str(value)


EPSILONS = (1e-4, 2e-4, 3e-4, 4e-4, 5e-4, 1e-3, 2e-3, 5e-3, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5)
LEARNING_RATES = (1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 3e-3, 5e-3, 1e-2)

KNOBS: dict[str, Knob] = {
    # ---------------------------------------------------------------- the run
    "steps": Knob(
        "training steps",
        "RL steps to run. Each step samples a fresh batch from the current policy, scores it, and updates "
        "the policy on it (several times if epochs × minibatches > 1).",
        # Every run length the pages and the experiments name (15, 25, 40, 60) is on the slider, not only in a link.
        (2, 5, 10, 15, 20, 25, 30, 40, 50, 60, 75, 100, 150, 200, 300, 500),
    ),
    "seed": Knob(
        "seed",
        "Seeds the SFT warm start, the prompts and the sampling. Runs with the same seed differ only by "
        "the knobs you changed, which makes them comparable.",
        tuple(range(10)),
    ),
    "sft_steps": Knob(
        "SFT steps",
        "Supervised steps on the task's demonstrations before RL starts; the result is the reference model "
        "and the policy's starting point, cached per task, model and seed. 0 starts RL from a random model.",
        (0, 50, 100, 200, 400, 800),
    ),
    "demo_noise": Knob(
        "demonstration noise",
        "Share of deliberately imperfect SFT demonstrations. More noise gives a weaker starting policy that RL "
        "has more to fix; 'task default' uses the value each task was designed with.",
        (None, 0.0, 0.2, 0.4, 0.5, 0.65, 0.8, 1.0),
        none_label="task default",
    ),
    # ---------------------------------------------------------------- sampling
    "prompts_per_step": Knob(
        "prompts per step",
        "How many prompts each step samples. The batch is prompts × G responses; a bigger batch gives less "
        "noisy gradients and slower steps.",
        (1, 2, 4, 8, 16, 32, 64),
    ),
    "num_generations": Knob(
        "group size G · num_generations",
        "Responses sampled per prompt. Group methods (GRPO, RLOO, REINFORCE++-baseline) use the group's other "
        "rewards as the baseline, so they need G ≥ 2; a larger group gives a steadier baseline.",
        (1, 2, 3, 4, 6, 8, 12, 16),
    ),
    "temperature": Knob(
        "temperature",
        "Divides the logits before sampling (and when computing log-probabilities for the loss). Above 1 "
        "explores more, below 1 sticks to the likeliest tokens.",
        (0.3, 0.5, 0.7, 0.8, 1.0, 1.2, 1.5, 2.0),
    ),
    # ---------------------------------------------------------------- advantages
    "use_baseline": Knob(
        "subtract a baseline",
        "Subtract the batch-mean return from every token's reward-to-go. It leaves the gradient unbiased and "
        "cuts its variance; switch it off to watch the advantages (and the learning) get noisier.",
    ),
    "baseline": Knob(
        "baseline kind · baseline",
        "batch_mean: the mean return of this batch. running_mean: b ← 0.9·b + 0.1·mean(R), a baseline that lags "
        "the policy and so does not depend on the batch it is subtracted from.",
        ("batch_mean", "running_mean"),
    ),
    "gamma": Knob(
        "discount γ · gamma",
        "How much a reward t steps later counts now (γ^t). With a single reward at the end, γ < 1 makes early "
        "tokens see a weaker signal; LLM recipes use γ = 1.",
        (0.8, 0.9, 0.95, 0.97, 0.99, 1.0),
    ),
    "lam": Knob(
        "GAE λ · lam",
        "Bias–variance dial of GAE for the actor. λ = 0 uses one TD step (low variance, trusts the critic); "
        "λ = 1 uses the full Monte-Carlo return (unbiased, noisy). The final reward reaches token t with "
        "weight (γλ)^(T−t).",
        (0.0, 0.5, 0.8, 0.9, 0.95, 0.99, 1.0),
    ),
    "lam_critic": Knob(
        "critic λ · lam_critic",
        "Decoupled GAE: the critic's targets use their own λ. λ_critic = 1 trains the critic on undecayed "
        "Monte-Carlo returns while the actor keeps a lower-variance λ. 'off' uses the actor's λ for both.",
        (None, 0.9, 0.95, 0.99, 1.0),
    ),
    "length_adaptive_alpha": Knob(
        "length-adaptive α · length_adaptive_alpha",
        "Length-adaptive GAE: each response gets λ = 1 − 1/(α·|y|), so long responses look further ahead and "
        "short ones keep variance low. 'off' uses the fixed λ.",
        (None, 0.1, 0.25, 0.5, 1.0, 2.0),
    ),
    "whiten_advantages": Knob(
        "whiten advantages",
        "Normalise the advantages to mean 0 and standard deviation 1 over the batch's tokens before the update.",
    ),
    # ---------------------------------------------------------------- KL to the reference
    "beta": Knob(
        "KL coefficient β · beta",
        "Weight of the KL penalty that keeps the policy near the reference (SFT) model. 0 lets it drift freely; "
        "large values freeze it. Against a learned reward model, too small a β invites reward hacking.",
        (0.0, 0.001, 0.005, 0.01, 0.02, 0.04, 0.05, 0.1, 0.2, 0.5, 1.0),
    ),
    "kl_estimator": Knob(
        "KL estimator",
        "How the per-token KL is estimated from the sampled token: k1 = −log r (unbiased, noisy, can be "
        "negative), k2 = ½(log r)² (biased, low variance), "
        "k3 = r − 1 − log r (unbiased, ≥ 0, low variance near the reference).",
        get_args(KLEstimator),
    ),
    "kl_in": Knob(
        "KL enters the",
        "'reward': −β·KL is added to every token's reward (PPO, RLOO, REINFORCE++). 'loss': β·KL is added to the "
        "loss and differentiated directly (GRPO).",
        get_args(KLPlacement),
    ),
    "target_kl": Knob(
        "adaptive β target · target_kl",
        "PPO-penalty: after each step β doubles if the measured KL (per response) exceeds 1.5 × target and halves "
        "if it is below target / 1.5. 'off' keeps β fixed.",
        (None, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0),
    ),
    # ---------------------------------------------------------------- policy loss
    "policy_loss": Knob(
        "policy loss",
        "vanilla: −A·log π (no ratio, meant for one on-policy update); clip: PPO's clipped token ratio; gspo: "
        "one clipped, length-normalised ratio per response; gspo_token: GSPO's ratio with per-token gradients; "
        "cispo: a clipped, detached weight on −A·log π; sapo: a soft gate instead of the clip; dppo_tv: a trust "
        "region in probability; dro: −A·log π with a quadratic spring on log π_θ − log π_old (verl).",
        get_args(PolicyLoss),
    ),
    "epsilon": Knob(
        "ε_low · epsilon",
        "Lower clip range: once the ratio falls below 1 − ε_low on a token with A < 0, that token stops pushing "
        "its probability down this update.",
        EPSILONS,
    ),
    "epsilon_high": Knob(
        "ε_high · epsilon_high",
        "Upper clip range: once the ratio exceeds 1 + ε_high on a token with A > 0, that token stops pushing its "
        "probability up. Raising it (clip-higher) lets rare good tokens grow faster; "
        "DAPO reports it keeps the entropy up.",
        EPSILONS,
    ),
    "dual_clip": Knob(
        "dual clip c · dual_clip",
        "For A < 0, caps the loss at −c·A, so a token whose ratio has exploded cannot produce an unbounded "
        "penalty. 'off' disables it.",
        (None, 1.5, 2.0, 3.0, 5.0, 10.0),
    ),
    "loss_agg_mode": Knob(
        "loss aggregation · loss_agg_mode",
        "How per-token losses become one number. token-mean: every token weighs the same. seq-mean-token-mean: "
        "average within each response, then over responses (a long response's tokens count less). "
        "seq-mean-token-sum-norm: sum, divided by a constant. seq-mean-token-sum: each response's summed loss.",
        get_args(LossAggMode),
    ),
    "entropy_coef": Knob(
        "entropy bonus · entropy_coef",
        "Adds −c·entropy to the loss to keep the policy exploring. Small values do little; large ones make the "
        "entropy explode into random text.",
        (0.0, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05),
    ),
    "ppo_epochs": Knob(
        "epochs · ppo_epochs",
        "Passes over each batch. With one pass and one minibatch the policy never moves before the loss is "
        "computed, so every ratio is exactly 1 and clipping never acts.",
        (1, 2, 3, 4, 6, 8),
    ),
    "num_minibatches": Knob(
        "minibatches · num_minibatches",
        "Optimiser steps per pass over a batch. From the second minibatch on the policy has moved, so ratios "
        "differ from 1 and the clip can fire.",
        (1, 2, 4, 8, 16),
    ),
    "learning_rate": Knob(
        "learning rate",
        "AdamW step size for the policy. Too high and the ratios leave the clip range after one minibatch (watch "
        "the clip fraction); too low and nothing moves.",
        LEARNING_RATES,
    ),
    "adam_epsilon": Knob(
        "Adam ε · adam_epsilon",
        "The policy optimiser's ε (TRL's name). Once a task is solved the gradients are tiny and Adam divides by "
        "their tiny running scale: a larger ε keeps the next push from becoming a full learning-rate step.",
        (1e-8, 1e-7, 1e-6, 1e-5, 1e-4),
    ),
    "skip_no_signal_updates": Knob(
        "skip steps without signal · skip_no_signal_updates",
        "No optimiser step on a minibatch whose gradient is exactly 0 (every advantage 0, no other loss term), or "
        "on a whitened batch in which no reward differs: Adam's momentum would otherwise keep moving the policy.",
    ),
    "cov_mode": Knob(
        "entropy control · cov_mode",
        "clip_cov: detach the gradient of a small random share of the tokens whose log-prob and advantage "
        "covary most (they drive entropy collapse); kl_cov: give those tokens an extra KL penalty instead.",
        get_args(CovMode),
    ),
    "cov_fraction": Knob(
        "covariance token share · cov_fraction",
        "Share of the valid tokens that Clip-Cov / KL-Cov acts on.",
        (1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 0.01, 0.02, 0.05),
    ),
    # ---------------------------------------------------------------- critic
    "critic_init": Knob(
        "critic initialised from · critic_init",
        "policy: the SFT policy's transformer with a zero value head. reward_model: a copy of the task's learned "
        "reward model (VC-PPO's failure case: it only ever scored finished answers, so early states look bad).",
        ("policy", "reward_model"),
    ),
    "critic_learning_rate": Knob(
        "critic learning rate",
        "AdamW step size for the critic. It must keep up with the policy, or the advantages it produces are stale.",
        LEARNING_RATES,
    ),
    "cliprange_value": Knob(
        "value clip ε_v · cliprange_value",
        "The critic's new prediction may move at most ε_v from its old one before the loss stops rewarding the move.",
        (0.05, 0.1, 0.2, 0.5, 1.0, 5.0),
    ),
    "vf_coef": Knob(
        "critic loss weight · vf_coef",
        "Scales the critic's loss (its own optimiser, so this acts like a critic learning-rate factor).",
        (0.1, 0.25, 0.5, 1.0, 2.0),
    ),
    "value_pretrain_steps": Knob(
        "value pretraining steps",
        "Before RL, train the critic alone on Monte-Carlo returns of the frozen SFT policy, so RL starts with a "
        "critic that already predicts the returns instead of one biased by its initialisation.",
        (0, 5, 10, 20, 50, 100),
    ),
    "positive_nll_coef": Knob(
        "positive-sample NLL μ · positive_nll_coef",
        "Adds μ × the negative log-likelihood of the batch's best-rewarded responses: imitate what worked.",
        (0.0, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0),
    ),
    # ---------------------------------------------------------------- DAPO's sampling and shaping
    "dynamic_sampling": Knob(
        "dynamic sampling",
        "Drop groups whose rewards are all equal (their advantages are 0: no gradient) and sample more prompts "
        "to refill the batch.",
    ),
    "overlong_filter": Knob(
        "overlong filtering",
        "Responses cut off by the length limit get no loss at all, instead of being punished for an answer they "
        "never finished.",
    ),
    "overlong_punishment": Knob(
        "soft overlong punishment · overlong_punishment",
        "DAPO's length penalty: within L_cache tokens of the limit the reward falls linearly to −1. |y| counts "
        "the closing EOS: an answer whose tokens, EOS included, end before the buffer is never punished.",
    ),
    "overlong_buffer": Knob(
        "overlong buffer L_cache · overlong_buffer",
        "The buffer in tokens (verl's overlong_buffer_cfg.len); 'a fraction' takes overlong_buffer_fraction of the "
        "task's length limit instead.",
        (None, 1, 2, 3, 4, 6),
        none_label="a fraction",
    ),
    "overlong_buffer_fraction": Knob(
        "overlong buffer as a fraction · overlong_buffer_fraction",
        "L_cache as a share of the length limit when overlong_buffer is not set (DAPO: 4k of 20k tokens = 0.2).",
        (0.1, 0.2, 0.25, 0.3, 0.5),
    ),
    # ---------------------------------------------------------------- 2025–26 successors
    "cispo_two_sided": Knob(
        "CISPO two-sided clamp",
        "Off: CISPO's weight is capped from above at ε_max = epsilon_high (MiniMax-M1, TRL). On: clamped to "
        "[1 − ε_low, 1 + ε_high] (verl). Either way the token keeps its gradient.",
    ),
    "sapo_tau_pos": Knob(
        "SAPO τ_pos · sapo_tau_pos",
        "Temperature of SAPO's soft gate for A > 0: larger τ makes the gate fall off faster as the ratio leaves 1.",
        (0.25, 0.5, 1.0, 1.05, 2.0, 4.0, 8.0),
    ),
    "sapo_tau_neg": Knob(
        "SAPO τ_neg · sapo_tau_neg",
        "Temperature of SAPO's soft gate for A < 0 (default a little above τ_pos: pushing a token down spreads "
        "probability over the whole vocabulary, so it is damped sooner).",
        (0.25, 0.5, 1.0, 1.05, 2.0, 4.0, 8.0),
    ),
    "dppo_delta_low": Knob(
        "DPPO δ_low · dppo_delta_low",
        "DPPO masks a token with A < 0 once its probability fell by more than δ_low (a change of probability, "
        "not of ratio).",
        (0.05, 0.1, 0.15, 0.2, 0.3, 0.5),
    ),
    "dppo_delta_high": Knob(
        "DPPO δ_high · dppo_delta_high",
        "DPPO masks a token with A > 0 once its probability rose by more than δ_high: a rare token can grow "
        "many-fold before that happens.",
        (0.05, 0.1, 0.15, 0.2, 0.3, 0.5),
    ),
    "dppo_ratio_cap": Knob(
        "DPPO ratio cap c · dppo_ratio_cap",
        "DPPO weighs a kept token by sg[min(ρ, c)]: the cap only guards against exploding ratios.",
        (2.0, 5.0, 10.0, 20.0, 50.0),
    ),
    "dro_beta": Knob(
        "dro spring β · dro_beta",
        "verl's dro adds (β/2)(log π_θ − log π_old)² to −A·log π: a token stops once its log-probability moved "
        "by A/β. Large β: small steps from the policy that sampled; small β: nearly plain policy gradient.",
        (0.1, 0.5, 1.0, 2.0, 5.0, 10.0),
    ),
    "kl_gradient": Knob(
        "KL gradient · kl_gradient",
        "plain: k3 as it is; is_corrected: ρ·k3, importance-weighted to the policy being trained (TRL "
        "use_bias_correction_kl); k2_grad: k3's value with k2's gradient (verl k3+).",
        get_args(KLGradient),
    ),
    "adv_norm_mean": Knob(
        "advantage baseline · adv_norm_mean",
        "What is subtracted from each reward: the group's mean, the mean of the other G−1 (leave-one-out, RLOO), "
        "the batch mean, or nothing.",
        get_args(AdvNormMean),
    ),
    "adv_norm_std": Knob(
        "advantage scale · adv_norm_std",
        "What the centred reward is divided by: the group's std (GRPO), the whole batch's std (Lite PPO), or "
        "nothing (Dr. GRPO).",
        get_args(AdvNormStd),
    ),
    "rollout_staleness": Knob(
        "sampler lag k · rollout_staleness",
        "Sample with the policy of k steps ago, as asynchronous trainers do: the ratio is then measured against "
        "the wrong policy unless the loss is corrected.",
        tuple(range(9)),
    ),
    "rollout_is_mode": Knob(
        "rollout correction · rollout_is_mode",
        "How π_old/μ (trainer over sampler) reweights the loss: none; truncate (TIS: cap the weight at C); "
        "mask (MIS: drop tokens or responses whose weight exceeds C).",
        get_args(RolloutISMode),
    ),
    "rollout_is_level": Knob(
        "correction level · rollout_is_level",
        "One weight per token, one per response (the product of its tokens'), or the response's geometric mean.",
        get_args(RolloutISLevel),
    ),
    "rollout_is_threshold": Knob(
        "correction threshold C · rollout_is_threshold",
        "The cap (TIS) or the cut-off (MIS) of the importance weight.",
        (1.2, 1.5, 2.0, 3.0, 5.0, 10.0),
    ),
    "is_correction_gating": Knob(
        "correction gate · is_correction_gating",
        "What the correction gates on (OpenRLHF): the weight π_old/μ itself (ratio), or a trust region around the "
        "sampler — the binary KL or the total variation between μ and π_old at the sampled token, per token or "
        "per response's mean; beyond δ the token or response is dropped (rollout_is_mode = mask).",
        get_args(ISCorrectionGating),
    ),
    "is_correction_threshold": Knob(
        "gate's bound δ · is_correction_threshold",
        "The largest binary KL or TV a kept token (or response, on average) may have.",
        (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2),
    ),
    "rollout_dtype": Knob(
        "sampler precision · rollout_dtype",
        "float32: the sampler runs the trainer's own kernels, so μ ≡ π_old and there is no mismatch to correct. "
        "bfloat16: the same weights through other kernels, as an inference engine samples; μ ≠ π_old.",
        get_args(RolloutDtype),
    ),
    "teacher_model": Knob(
        "teacher · teacher_model",
        "On-policy distillation: a teacher scores every token the student samples. tiny: the student's own shape "
        "trained longer on flawless demonstrations; small: the 4 × 128 model trained the same way; none: no "
        "teacher.",
        (None, *get_args(TeacherModel)),
        none_label="none",
    ),
    "teacher_sft_steps": Knob(
        "teacher's SFT steps · teacher_sft_steps",
        "How long the teacher trains on noise-free demonstrations (cached per task, model and seed). Fewer steps "
        "give a weaker teacher, whose mistakes the student then learns too.",
        (50, 100, 200, 400, 600, 1000),
    ),
    "distillation_loss_mode": Knob(
        "KL(π_θ‖π_T) estimator · distillation_loss_mode",
        "How the teacher's and the student's log-probabilities of a sampled token become the distillation signal "
        "(verl's loss_mode): k1 = log π_θ − log π_T (its negation the advantage), k2 = ½(log r)², k3 = r − 1 − log r.",
        get_args(KLEstimator),
    ),
    "use_policy_gradient": Knob(
        "policy-gradient form · use_policy_gradient",
        "On: −k per token is a detached advantage and the policy loss (the clip) does the rest. Off: k itself is a "
        "loss term, backpropagated through log π_θ (the supervised form of GKD).",
    ),
    "use_task_rewards": Knob(
        "keep the verifier's reward · use_task_rewards",
        "On: the task's reward still makes advantages, and the teacher's signal is added. Off: the teacher is the "
        "only signal (needs a teacher).",
    ),
    "distillation_loss_coef": Knob(
        "distillation weight c · distillation_loss_coef",
        "Multiplies the teacher's advantages (policy-gradient form) or its loss term (supervised form).",
        (0.1, 0.2, 0.5, 1.0, 2.0, 5.0),
    ),
    # ---------------------------------------------------------------- LoRA
    "use_peft": Knob(
        "LoRA · use_peft",
        "On: the policy's weights stay frozen and small low-rank adapters train (peft's LoRA), for a model whose "
        "full fine-tuning does not fit the device. π_ref is the frozen base itself.",
    ),
    "lora_r": Knob(
        "LoRA rank r · lora_r",
        "The rank of each adapter's update B·A: more directions the policy may move in, more parameters to train.",
        (1, 2, 4, 8, 16, 32, 64),
    ),
    "lora_alpha": Knob(
        "LoRA α · lora_alpha",
        "The update is scaled by α/r: a larger α moves the policy further per step, as a larger learning rate does.",
        (1, 2, 4, 8, 16, 32, 64, 128),
    ),
    "lora_target_modules": Knob(
        "adapted layers · lora_target_modules",
        "Which of GPT-2's layers get adapters: c_attn (the attention's query, key and value, peft's default), "
        "c_proj (the attention's output and the MLP's second layer), c_fc (the MLP's first layer).",
        get_args(LoraTargetModules),
    ),
}


def knob_text(name: str, value) -> str:
    """A value as the pages show it: in its knob's format (`0.04`, `off`) where the page has the knob, else as is
    (an unset knob, Python's None, as "off")."""
    if name in KNOBS:
        return KNOBS[name].format(value)
    return "off" if value is None else str(value)


def difference_text(name: str, was, now) -> str:
    """One knob's change, e.g. `beta` 0.04 → 0."""
    return f"`{name}` {knob_text(name, was)} → {knob_text(name, now)}"


def option_values(name: str, extra=()) -> list:
    """The values a knob offers: its grid plus `extra` (e.g. every preset default on the page), in order."""
    knob = KNOBS[name]
    if knob.kind != "slider":
        return list(knob.options)
    numbers = sorted({o for o in (*knob.options, *extra) if o is not None})
    return ([None] if None in knob.options or None in extra else []) + numbers


def render_knob(name: str, key: str, extra=(), disabled: bool = False, on_change=None, args=()) -> None:
    """Draw the widget for knob `name`; its value lives in `st.session_state[key]`, which the caller sets first.
    `extra` values join the grid (a preset default, a value from a shared link)."""
    knob = KNOBS[name]
    events = dict(on_change=on_change, args=args)
    if knob.kind == "toggle":
        st.toggle(knob.label, key=key, help=knob.help, disabled=disabled, **events)
    elif knob.kind == "choice":
        st.selectbox(
            knob.label,
            option_values(name),
            key=key,
            help=knob.help,
            disabled=disabled,
            format_func=knob.format,
            **events,
        )
    else:
        chosen = st.session_state.get(key)
        extra = (*extra, *([] if chosen is None else [chosen]))
        st.select_slider(
            knob.label,
            option_values(name, extra),
            key=key,
            help=knob.help,
            disabled=disabled,
            format_func=knob.format,
            **events,
        )
