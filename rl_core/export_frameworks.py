"""A lab configuration carried to scale: TRL's `GRPOConfig` (Python source) and verl's command-line overrides.

`KNOB_MAP[knob][framework]` is a rule that reads the whole configuration (knobs depend on one another: TRL's
`loss_type` encodes both the policy loss and the aggregation, verl's `clip_ratio_low` means ε for PPO but δ for
DPPO) and returns what that knob contributes: `Set(field, value, note)` lines and comment strings. Every knob of
the configuration produces at least one line, so a knob that does not map is never silently dropped; a knob the
table does not know (added to `AlgoConfig` later) becomes a "does not map" comment by itself.

Field names: TRL 1.16's `GRPOConfig`; verl's Hydra keys as in its `ppo_trainer.yaml` (2026), with DAPO's
`filter_groups` and `overlong_buffer` from its DAPO recipe.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from rl_core.config import AlgoConfig
from rl_core.rewards import overlong_buffer_length
from toy_tasks import get_task

FRAMEWORKS = ("trl", "verl")
DESCRIPTIVE = ("name", "title", "summary")


@dataclass(frozen=True)
class Set:
    """One framework field set to one value; `note` says what to know about the correspondence."""

    field: str
    value: object
    note: str = ""


Line = Set | str  # a str is a comment
Rule = Callable[[dict, str], "Line | list[Line]"]  # (knobs, knob name) → lines


def no(reason: str) -> Rule:
    return lambda k, knob: f"does not map: {reason}"


def to(field: str, convert: Callable = lambda v: v, note: str = "") -> Rule:
    return lambda k, knob: Set(field, convert(k[knob]), note)


def off_or_no(off: str, reason: str, is_off: Callable = lambda v: not v) -> Rule:
    """A feature the framework lacks: a plain comment while the knob leaves it off, "does not map" when on."""
    return lambda k, knob: f"off here; {off}" if is_off(k[knob]) else f"does not map: {reason}"


def unused_unless(condition: Callable[[dict], bool], rule: Rule, why: str) -> Rule:
    return lambda k, knob: rule(k, knob) if condition(k) else f"unused here ({why})"


# ------------------------------------------------------------------------------------------------- TRL
GROUP_AGGREGATION_TRL = {"token-mean": "bnpo", "seq-mean-token-mean": "grpo", "seq-mean-token-sum-norm": "dr_grpo"}
# TRL's cispo and sapo losses fix their own aggregation.
LOSS_AGGREGATION_TRL = {"cispo": "token-mean", "sapo": "seq-mean-token-mean"}
CLIP_LOSSES = ("clip", "vanilla", "gspo", "gspo_token")


def _trl_batch(k: dict, knob: str) -> Line | list[Line]:
    completions = k["prompts_per_step"] * k["num_generations"]
    minibatches = k["num_minibatches"]
    if knob == "prompts_per_step":
        if completions % minibatches:
            return Set("per_device_train_batch_size", completions,
                       f"{completions} completions do not split into {minibatches} equal minibatches: one step each")
        return Set("per_device_train_batch_size", completions // minibatches,
                   f"{k['prompts_per_step']} prompts × {k['num_generations']} completions in {minibatches} "
                   "optimiser steps (one process)")
    if completions % minibatches:
        return f"does not map: TRL's minibatches are equal, {completions} completions do not split into {minibatches}"
    return Set("steps_per_generation", minibatches, "optimiser steps per generated batch")


def _trl_advantages(k: dict, knob: str) -> Line:
    estimator = k[knob]
    if estimator == "grpo" and "adv_norm_std" in k:
        return "TRL's group-normalised advantage; its mean and scaling are set by adv_norm_mean, adv_norm_std"
    if estimator in ("grpo", "dr_grpo"):
        return Set("scale_rewards", "group" if estimator == "grpo" else "none",
                   "(R − group mean) / group std" if estimator == "grpo" else "R − group mean, no std (Dr. GRPO)")
    if estimator == "rloo":
        return "does not map: TRL trains RLOO with its RLOOTrainer, not GRPOConfig"
    return f"does not map: GRPOConfig's advantage is group-relative; it has no {estimator} estimator"


def _trl_policy_loss(k: dict, knob: str) -> Line | list[Line]:
    loss = k[knob]
    if loss in ("cispo", "sapo"):
        return Set("loss_type", loss)
    if loss in ("gspo", "gspo_token"):
        note = "GSPO's sequence ratio" + ("; GSPO-token's gradients agree when a response has one advantage"
                                          if loss == "gspo_token" else "")
        return Set("importance_sampling_level", "sequence", note)
    if loss == "clip":
        return Set("importance_sampling_level", "token", "PPO's token-level clipped surrogate")
    if loss == "vanilla":
        return [Set("importance_sampling_level", "token"),
                "TRL has no plain policy-gradient loss; with one update per batch its surrogate has ρ = 1 and "
                "the same gradient"]
    return f"does not map: TRL has no {loss} loss"


def _trl_aggregation(k: dict, knob: str) -> Line:
    mode, loss = k[knob], k["policy_loss"]
    if loss in LOSS_AGGREGATION_TRL:
        fixed = LOSS_AGGREGATION_TRL[loss]
        if mode == fixed:
            return f"TRL's {loss} loss aggregates with {fixed} itself"
        return f"does not map: TRL's {loss} loss always aggregates with {fixed}"
    if mode not in GROUP_AGGREGATION_TRL:
        return f"does not map: TRL has no {mode} aggregation"
    notes = {"bnpo": "token-mean over the minibatch ('dapo' divides by the generation batch's tokens per step)",
             "dr_grpo": "divides by B × max_completion_length"}
    return Set("loss_type", GROUP_AGGREGATION_TRL[mode], notes.get(GROUP_AGGREGATION_TRL[mode], ""))


def _trl_epsilon(k: dict, knob: str) -> Line:
    loss = k["policy_loss"]
    if knob == "epsilon_high" and loss == "cispo":
        return Set("epsilon_high", k[knob], "CISPO's cap ε_max on the detached IS weight")
    if loss in CLIP_LOSSES:
        return Set(knob, k[knob])
    return f"unused by {loss} in TRL"


def _trl_dual_clip(k: dict, knob: str) -> Line:
    if k["policy_loss"] not in CLIP_LOSSES:
        return f"unused by {k['policy_loss']}"
    if k[knob] is None:
        return Set("delta", None, "no dual clip")
    return Set("delta", k[knob], "TRL caps ρ at δ: the dual clip for A < 0 (for A > 0 the ε_high clip binds first)")


def _trl_beta(k: dict, knob: str) -> Line | list[Line]:
    if k["kl_in"] == "loss":
        return Set("beta", k[knob])
    return [Set("beta", 0.0), f"does not map: β = {k[knob]} with KL in the reward; TRL puts KL only in the loss"]


def _trl_kl_estimator(k: dict, knob: str) -> Line | list[Line]:
    lines: list[Line] = []
    if "kl_gradient" not in k:  # without that knob the lab's KL gradient is the plain estimator's
        lines.append(Set("use_bias_correction_kl", False, "TRL's default True would weight k3 by the ratio"))
    if k["kl_in"] != "loss":
        return [*lines, "does not map: TRL has no KL in the reward"]
    return [*lines, "TRL's KL term is k3" if k[knob] == "k3" else "does not map: TRL's KL term is always k3"]


def _trl_kl_gradient(k: dict, knob: str) -> Line | list[Line]:
    mode = k[knob]
    if mode == "is_corrected":
        return Set("use_bias_correction_kl", True, "k3 multiplied by the importance ratio (DeepSeek-V3.2)")
    lines: list[Line] = [Set("use_bias_correction_kl", False, "TRL's default is True")]
    if mode != "plain":
        lines.append(f"does not map: TRL has no {mode} KL gradient (verl: the k3+ estimator)")
    return lines


def _trl_entropy(k: dict, knob: str) -> Line:
    note = "" if k["loss_agg_mode"] == "token-mean" else (
        f"TRL's bonus is the token-mean entropy; the lab aggregates it with {k['loss_agg_mode']}")
    return Set("entropy_coef", k[knob], note)


def _overlong_length(k: dict) -> int | None:
    """DAPO's buffer in tokens (as the trainer computes it), or None when the soft punishment is off."""
    if not k["overlong_punishment"]:
        return None
    return overlong_buffer_length(k["max_new_tokens"], k["overlong_buffer"], k["overlong_buffer_fraction"])


def _overlong(lead: Callable[[dict, int], Line | list[Line]]) -> Rule:
    """The overlong knobs (`overlong_punishment`, `overlong_buffer`, `overlong_buffer_fraction`) describe one
    setting: `overlong_punishment` speaks, the others refer to it."""

    def rule(k: dict, knob: str) -> Line | list[Line]:
        first = "overlong_punishment"
        if knob != first:
            return f"set with {first}"
        length = _overlong_length(k)
        return "off here (no soft overlong punishment)" if length is None else lead(k, length)

    return rule


def _trl_overlong(k: dict, length: int) -> Line:
    return ("does not map as a field: add trl.rewards.get_soft_overlong_punishment("
            f"max_completion_len={k['max_new_tokens']}, soft_punish_cache={length}) to the trainer's reward_funcs")


def _trl_rollout_is(k: dict, knob: str) -> Line | list[Line]:
    mode, level = k[knob], k.get("rollout_is_level", "token")
    if mode == "none":
        return Set("vllm_importance_sampling_correction", False)
    if level == "geometric":
        return "does not map: TRL's sampler correction has no geometric-mean level"
    return [Set("vllm_importance_sampling_correction", True, "TRL corrects the vLLM sampler's mismatch (use_vllm=True)"),
            Set("vllm_importance_sampling_mode", f"{level}_{mode}")]


def _reward_to_go_only(rule: Rule) -> Rule:
    return unused_unless(lambda k: k["advantage_estimator"] == "reward_to_go", rule, "no reward-to-go")


def _gae_only(rule: Rule) -> Rule:
    return unused_unless(lambda k: k["advantage_estimator"] == "gae", rule, "no GAE")


def _dppo_only(rule: Rule) -> Rule:
    return unused_unless(lambda k: k["policy_loss"] == "dppo_tv", rule, "policy_loss is not dppo_tv")


def _grpo_only(rule: Rule) -> Rule:
    """The normalisation selector acts on the `grpo` estimator only; the others fix their own."""
    return unused_unless(lambda k: k["advantage_estimator"] == "grpo", rule, "advantage_estimator is not grpo")


def _critic_only(reason: str) -> Rule:
    return unused_unless(lambda k: k["use_critic"], no(reason), "no critic")


def _resampling_only(rule: Rule) -> Rule:
    return unused_unless(lambda k: k["dynamic_sampling"], rule, "no dynamic sampling")


def _cov_only(rule: Rule, modes: tuple[str, ...] = ("clip_cov", "kl_cov")) -> Rule:
    return unused_unless(lambda k: k["cov_mode"] in modes, rule, f"cov_mode is not {' or '.join(modes)}")


TRL_RULES: dict[str, Rule] = {
    "prompts_per_step": _trl_batch,
    "num_generations": to("num_generations"),
    "num_minibatches": _trl_batch,
    "temperature": to("temperature"),
    "max_new_tokens": to("max_completion_length"),
    "advantage_estimator": _trl_advantages,
    "use_baseline": _reward_to_go_only(no("GRPOConfig has no reward-to-go estimator")),
    "gamma": lambda k, knob: "TRL's reward is one undiscounted number per completion (γ = 1)" if k[knob] == 1
    else "does not map: TRL's reward is undiscounted",
    "lam": _gae_only(no("GRPOConfig has no GAE")),
    "lam_critic": _gae_only(no("GRPOConfig has no GAE")),
    "length_adaptive_alpha": off_or_no("GRPOConfig has no GAE", "GRPOConfig has no GAE", lambda v: v is None),
    "whiten_advantages": off_or_no("TRL does not whiten advantages", "TRL does not whiten advantages"),
    "beta": _trl_beta,
    "kl_estimator": _trl_kl_estimator,
    "kl_in": lambda k, knob: "TRL adds β·KL to the loss" if k[knob] == "loss" else "does not map: see beta",
    "target_kl": off_or_no("TRL's β is fixed", "TRL has no adaptive β", lambda v: v is None),
    "reward_clip": no("TRL does not clip rewards (the lab clips only with KL in the reward)"),
    "policy_loss": _trl_policy_loss,
    "epsilon": _trl_epsilon,
    "epsilon_high": _trl_epsilon,
    "dual_clip": _trl_dual_clip,
    "loss_agg_mode": _trl_aggregation,
    "entropy_coef": _trl_entropy,
    "ppo_epochs": to("num_iterations", note="updates per generated batch (μ)"),
    "learning_rate": to("learning_rate"),
    "max_grad_norm": to("max_grad_norm"),
    "use_critic": off_or_no("GRPOConfig trains without a critic", "GRPOConfig has no critic (TRL's PPOTrainer has)"),
    "critic_learning_rate": _critic_only("GRPOConfig has no critic"),
    "cliprange_value": _critic_only("GRPOConfig has no critic"),
    "vf_coef": _critic_only("GRPOConfig has no critic"),
    "value_pretrain_steps": _critic_only("GRPOConfig has no critic"),
    "critic_init": _critic_only("GRPOConfig has no critic"),
    "positive_nll_coef": off_or_no("TRL has no positive-sample NLL term", "TRL has no positive-sample NLL term"),
    "dynamic_sampling": off_or_no("TRL keeps every group", "TRL keeps groups with equal rewards (advantage 0)"),
    "max_resample_rounds": _resampling_only(no("TRL never resamples a batch")),
    "overlong_filter": to("mask_truncated_completions"),
    "overlong_punishment": _overlong(_trl_overlong),
    "overlong_buffer": _overlong(_trl_overlong),
    "overlong_buffer_fraction": _overlong(_trl_overlong),
    "cov_mode": off_or_no("TRL has no Clip-Cov / KL-Cov", "TRL has no Clip-Cov / KL-Cov", lambda v: v == "none"),
    "cov_fraction": _cov_only(no("TRL has no Clip-Cov / KL-Cov")),
    "kl_cov_coef": _cov_only(no("TRL has no KL-Cov"), ("kl_cov",)),
    "sapo_tau_pos": to("sapo_temperature_pos"),
    "sapo_tau_neg": to("sapo_temperature_neg"),
    "cispo_two_sided": off_or_no("TRL's cispo caps the weight from above only",
                                 "TRL's cispo caps the weight from above only"),
    "dppo_delta_low": _dppo_only(no("TRL has no DPPO loss")),
    "dppo_delta_high": _dppo_only(no("TRL has no DPPO loss")),
    "dppo_ratio_cap": _dppo_only(no("TRL has no DPPO loss")),
    "kl_gradient": _trl_kl_gradient,
    "rollout_staleness": off_or_no("TRL samples with the current policy", "TRL has no lagged sampler",
                                   lambda v: v == 0),
    "rollout_temperature": off_or_no("TRL samples at the trainer's temperature",
                                     "TRL samples at the temperature it trains with", lambda v: v is None),
    "rollout_is_mode": _trl_rollout_is,
    "rollout_is_level": lambda k, knob: "set with rollout_is_mode",
    "rollout_is_threshold": to("vllm_importance_sampling_clip_max"),
    "adv_norm_mean": _grpo_only(lambda k, knob: "TRL's baseline is the group mean" if k[knob] == "group"
                                else f"does not map: TRL's baseline is always the group mean, not {k[knob]}"),
    "adv_norm_std": _grpo_only(to("scale_rewards")),
    "skip_no_signal_updates": off_or_no("TRL steps the optimiser on every batch too",
                                        "TRL steps the optimiser on every batch"),
    "baseline": _reward_to_go_only(no("GRPOConfig has no reward-to-go estimator")),
}
# The lab's optimiser and model, which no knob names but a faithful copy needs.
TRL_ENGINE = (
    Set("gradient_accumulation_steps", 1, "one minibatch per optimiser step"),
    Set("lr_scheduler_type", "constant", "the lab's AdamW keeps its learning rate"),
    Set("weight_decay", 0.0, "the lab's AdamW has no weight decay"),
    Set("disable_dropout", True, "the lab's policy has no dropout during RL"),
)

# ------------------------------------------------------------------------------------------------ verl
ACTOR = "actor_rollout_ref.actor"
VERL_ESTIMATORS = {"grpo": "grpo", "dr_grpo": "grpo", "rloo": "rloo", "gae": "gae",
                   "reinforce_pp": "reinforce_plus_plus", "reinforce_pp_baseline": "reinforce_plus_plus_baseline"}
VERL_LOSSES = {"clip": "vanilla", "vanilla": "gpg", "gspo": "gspo", "gspo_token": "gspo", "cispo": "cispo",
               "sapo": "sapo", "dppo_tv": "dppo_tv"}
VERL_KL_LOSS = {"k1": "k1", "k2": "k2", "k3": "k3"}
VERL_KL_PENALTY = {"k1": "kl", "k2": "mse", "k3": "low_var_kl"}
VERL_RS_LEVELS = {"token": "token_k1", "sequence": "seq_sum_k1", "geometric": "seq_mean_k1"}
# verl's gspo and sapo fix their own aggregation.
LOSS_AGGREGATION_VERL = {"gspo": "seq-mean-token-mean", "gspo_token": "seq-mean-token-mean",
                         "sapo": "seq-mean-token-mean"}


def _verl_advantages(k: dict, knob: str) -> Line | list[Line]:
    estimator = k[knob]
    if estimator not in VERL_ESTIMATORS:
        return f"does not map: verl has no {estimator} estimator"
    if estimator == "grpo" and (k.get("adv_norm_mean"), k.get("adv_norm_std")) == ("leave_one_out", "none"):
        return Set("algorithm.adv_estimator", "rloo", "the selector's (leave-one-out, none) is RLOO")
    lines: list[Line] = [Set("algorithm.adv_estimator", VERL_ESTIMATORS[estimator])]
    if estimator == "dr_grpo" or (estimator == "grpo" and "adv_norm_std" not in k):
        lines.append(Set("algorithm.norm_adv_by_std_in_grpo", estimator == "grpo"))
    return lines


def _verl_whiten(k: dict, knob: str) -> Line:
    whitens = k["advantage_estimator"] in ("gae", "reinforce_pp", "reinforce_pp_baseline")
    if k[knob] == whitens:
        return f"verl's {k['advantage_estimator']} estimator {'whitens' if whitens else 'does not whiten'} itself"
    return f"does not map: verl's {k['advantage_estimator']} estimator {'always' if whitens else 'never'} whitens"


def _verl_beta(k: dict, knob: str) -> list[Line]:
    beta = k[knob]
    if k["kl_in"] == "loss":
        return [Set(f"{ACTOR}.use_kl_loss", beta > 0), Set(f"{ACTOR}.kl_loss_coef", beta),
                Set("algorithm.use_kl_in_reward", False)]
    return [Set("algorithm.use_kl_in_reward", beta > 0), Set("algorithm.kl_ctrl.kl_coef", beta),
            Set(f"{ACTOR}.use_kl_loss", False)]


def _verl_kl_estimator(k: dict, knob: str) -> Line:
    estimator = k[knob]
    if k["kl_in"] == "reward":
        return Set("algorithm.kl_penalty", VERL_KL_PENALTY[estimator])
    straight_through = k.get("kl_gradient") == "k2_grad" and estimator != "k2"
    name = VERL_KL_LOSS[estimator] + ("+" if straight_through else "")
    note = "the value of k3 with k2's gradient (straight-through)" if straight_through else ""
    return Set(f"{ACTOR}.kl_loss_type", name, note)


def _verl_kl_gradient(k: dict, knob: str) -> Line:
    mode = k[knob]
    if mode == "plain":
        return "verl's default: the estimator's own gradient"
    if mode == "k2_grad":
        return "set with kl_estimator (the '+' suffix)" if k["kl_in"] == "loss" else "unused with KL in the reward"
    return "does not map: verl has no importance-weighted KL term"


def _verl_target_kl(k: dict, knob: str) -> Line | list[Line]:
    if k[knob] is None:
        return Set("algorithm.kl_ctrl.type", "fixed")
    if k["kl_in"] != "reward":
        return "does not map: verl adapts β only for KL in the reward"
    return [Set("algorithm.kl_ctrl.type", "adaptive"), Set("algorithm.kl_ctrl.target_kl", k[knob],
            "verl's controller is proportional (kl_ctrl.horizon), not the lab's ×2 / ÷2 rule")]


def _verl_policy_loss(k: dict, knob: str) -> Line | list[Line]:
    loss = k[knob]
    if loss not in VERL_LOSSES:
        return f"does not map: verl has no {loss} loss"
    if k.get("cov_mode", "none") != "none" and loss == "clip":
        return "set with cov_mode (verl's clip_cov / kl_cov losses are the clipped surrogate plus the selection)"
    notes = {"gspo": "verl's gspo is written in GSPO-token form; with one advantage per response it is GSPO",
             "vanilla": "verl's gpg loss is −A·log π"}
    return Set(f"{ACTOR}.policy_loss.loss_mode", VERL_LOSSES[loss], notes.get(loss, ""))


def _verl_clip_range(k: dict, knob: str) -> Line:
    """ε_low / ε_high → clip_ratio_low / clip_ratio_high, whose meaning depends on the loss."""
    loss, side = k["policy_loss"], "low" if knob == "epsilon" else "high"
    if loss in ("clip", "gspo", "gspo_token") or (loss == "cispo" and k.get("cispo_two_sided")):
        return Set(f"{ACTOR}.clip_ratio_{side}", k[knob])
    if loss == "cispo" and side == "high":
        return Set(f"{ACTOR}.clip_ratio_high", k[knob] - 1,
                   "verl clamps the weight to [1 − clip_ratio_low, 1 + clip_ratio_high]: cap ε_max = 1 + this")
    if loss == "cispo":
        return "unused by the one-sided cap (clip_ratio_low is set by cispo_two_sided)"
    if loss == "dppo_tv":
        return f"unused by DPPO: verl's clip_ratio_{side} is δ_{side} there (set by dppo_delta_{side})"
    return f"unused by {loss}"


def _verl_cispo_two_sided(k: dict, knob: str) -> Line:
    if k["policy_loss"] != "cispo":
        return "unused here (policy_loss is not cispo)"
    if k[knob]:
        return "verl's own form: the weight clamped to [1 − ε_low, 1 + ε_high] (set by epsilon, epsilon_high)"
    return Set(f"{ACTOR}.clip_ratio_low", 1.0, "lower bound 0: the cap from above only, as MiniMax-M1")


def _verl_dppo(field: str) -> Rule:
    return unused_unless(lambda k: k["policy_loss"] == "dppo_tv", to(f"{ACTOR}.{field}"), "policy_loss is not dppo_tv")


def _verl_dual_clip(k: dict, knob: str) -> Line:
    if k["policy_loss"] not in ("clip", "vanilla"):
        return f"unused by {k['policy_loss']}"
    if k[knob] is None:
        return "does not map: verl's clipped loss always applies a dual clip (clip_ratio_c, default 3)"
    return Set(f"{ACTOR}.clip_ratio_c", k[knob])


def _verl_aggregation(k: dict, knob: str) -> Line | list[Line]:
    lines: list[Line] = [Set(f"{ACTOR}.loss_agg_mode", k[knob])]
    fixed = LOSS_AGGREGATION_VERL.get(k["policy_loss"])
    if fixed and fixed != k[knob]:
        lines.append(f"does not map for {k['policy_loss']}: verl's {k['policy_loss']} loss always uses {fixed}")
    return lines


def _verl_minibatches(k: dict, knob: str) -> Line:
    prompts, minibatches = k["prompts_per_step"], k[knob]
    if prompts % minibatches:
        return f"does not map: verl's minibatches hold whole prompts; {prompts} do not split into {minibatches}"
    return Set(f"{ACTOR}.ppo_mini_batch_size", prompts // minibatches, "prompts per minibatch (× rollout.n)")


def _verl_cov(k: dict, knob: str) -> Line | list[Line]:
    mode = k[knob]
    if mode == "none":
        return "off here (no Clip-Cov / KL-Cov)"
    if k["policy_loss"] != "clip":
        return f"does not map: verl's {mode} replaces the clipped loss, not {k['policy_loss']}"
    loss = f"{ACTOR}.policy_loss"
    if mode == "clip_cov":
        return [Set(f"{loss}.loss_mode", "clip_cov"), Set(f"{loss}.clip_cov_ratio", k["cov_fraction"]),
                Set(f"{loss}.clip_cov_lb", 1.0), Set(f"{loss}.clip_cov_ub", 5.0)]
    return [Set(f"{loss}.loss_mode", "kl_cov"), Set(f"{loss}.kl_cov_ratio", k["cov_fraction"]),
            Set(f"{loss}.ppo_kl_coef", k["kl_cov_coef"])]


def _verl_overlong(k: dict, length: int) -> list[Line]:
    return [Set("reward_model.overlong_buffer.enable", True, "verl's DAPO recipe"),
            Set("reward_model.overlong_buffer.len", length), Set("reward_model.overlong_buffer.penalty_factor", 1.0)]


def _verl_rollout_is(k: dict, knob: str) -> Line | list[Line]:
    mode, level = k[knob], k.get("rollout_is_level", "token")
    base = "algorithm.rollout_correction"
    if mode == "none":
        return Set(f"{base}.rollout_is", None)
    if mode == "truncate":
        if level == "geometric":
            return "does not map: verl truncates token or sequence weights, not their geometric mean"
        return Set(f"{base}.rollout_is", level, "TIS: the weight capped at the threshold")
    weights = Set(f"{base}.rollout_is", level) if level != "geometric" else (
        "the geometric-mean weight itself does not map (verl weights tokens or sequences)")
    return [weights, Set(f"{base}.rollout_rs", VERL_RS_LEVELS[level], "MIS: reject (mask) beyond the threshold")]


def _verl_rollout_threshold(k: dict, knob: str) -> Line | list[Line]:
    lines: list[Line] = [Set("algorithm.rollout_correction.rollout_is_threshold", k[knob])]
    if k.get("rollout_is_mode") == "mask":
        lines.append(Set("algorithm.rollout_correction.rollout_rs_threshold", k[knob],
                         "one number: verl also rejects weights below its reciprocal, which the lab does not"))
    return lines


def _verl_adv_norm(k: dict, knob: str) -> Line:
    mean, std = k.get("adv_norm_mean", "group"), k.get("adv_norm_std", "group")
    if (mean, std) == ("leave_one_out", "none"):
        return "set with advantage_estimator (verl's rloo)"
    if knob == "adv_norm_mean":
        return "verl's grpo baseline is the group mean" if mean == "group" else (
            f"does not map: verl's grpo baseline is the group mean, not {mean}")
    if std == "batch":
        return "does not map: verl's grpo divides by the group's std or by nothing"
    return Set("algorithm.norm_adv_by_std_in_grpo", std == "group")


def _critic(rule: Rule) -> Rule:
    return unused_unless(lambda k: k["use_critic"], rule, "no critic")


VERL_RULES: dict[str, Rule] = {
    "prompts_per_step": to("data.train_batch_size", note="prompts per step"),
    "num_generations": to("actor_rollout_ref.rollout.n"),
    "num_minibatches": _verl_minibatches,
    "temperature": to("actor_rollout_ref.rollout.temperature"),
    "max_new_tokens": to("data.max_response_length"),
    "advantage_estimator": _verl_advantages,
    "use_baseline": _reward_to_go_only(no("verl has no reward-to-go estimator")),
    "gamma": to("algorithm.gamma"),
    "lam": to("algorithm.lam"),
    "lam_critic": off_or_no("verl uses one λ for advantages and critic targets",
                            "verl uses one λ for advantages and critic targets", lambda v: v is None),
    "length_adaptive_alpha": off_or_no("verl's λ is fixed", "verl has no length-adaptive λ", lambda v: v is None),
    "whiten_advantages": _verl_whiten,
    "beta": _verl_beta,
    "kl_estimator": _verl_kl_estimator,
    "kl_in": lambda k, knob: "set with beta",
    "target_kl": _verl_target_kl,
    "reward_clip": no("verl does not clip the task reward"),
    "policy_loss": _verl_policy_loss,
    "epsilon": _verl_clip_range,
    "epsilon_high": _verl_clip_range,
    "dual_clip": _verl_dual_clip,
    "loss_agg_mode": _verl_aggregation,
    "entropy_coef": to(f"{ACTOR}.entropy_coeff"),
    "ppo_epochs": to(f"{ACTOR}.ppo_epochs"),
    "learning_rate": to(f"{ACTOR}.optim.lr"),
    "max_grad_norm": lambda k, knob: [Set(f"{ACTOR}.grad_clip", k[knob])]
    + ([Set("critic.grad_clip", k[knob])] if k["use_critic"] else []),
    "use_critic": to("critic.enable"),
    "critic_learning_rate": _critic(to("critic.optim.lr")),
    "cliprange_value": _critic(to("critic.cliprange_value")),
    "vf_coef": _critic(no("verl's critic has its own optimiser and an unweighted loss")),
    "value_pretrain_steps": _critic(to("trainer.critic_warmup", note="steps that train only the critic")),
    "critic_init": _critic(lambda k, knob: "point critic.model.path at the " + (
        "reward model's checkpoint" if k[knob] == "reward_model" else "policy's checkpoint")),
    "positive_nll_coef": off_or_no("verl has no positive-sample NLL term", "verl has no positive-sample NLL term"),
    "dynamic_sampling": lambda k, knob: [
        Set("algorithm.filter_groups.enable", True, "verl's DAPO recipe"), Set("algorithm.filter_groups.metric", "acc")
    ] if k[knob] else "off here (verl's DAPO recipe: algorithm.filter_groups.enable)",
    "max_resample_rounds": _resampling_only(
        lambda k, knob: Set("algorithm.filter_groups.max_num_gen_batches", k[knob] + 1, "batches sampled at most")),
    "overlong_filter": off_or_no("verl keeps truncated responses in the loss",
                                 "verl has no switch that masks truncated responses out of the loss"),
    "overlong_punishment": _overlong(_verl_overlong),
    "overlong_buffer": _overlong(_verl_overlong),
    "overlong_buffer_fraction": _overlong(_verl_overlong),
    "cov_mode": _verl_cov,
    "cov_fraction": _cov_only(lambda k, knob: "set with cov_mode"),
    "kl_cov_coef": _cov_only(lambda k, knob: "set with cov_mode", ("kl_cov",)),
    "sapo_tau_pos": to(f"{ACTOR}.tau_pos"),
    "sapo_tau_neg": to(f"{ACTOR}.tau_neg"),
    "cispo_two_sided": _verl_cispo_two_sided,
    "dppo_delta_low": _verl_dppo("clip_ratio_low"),
    "dppo_delta_high": _verl_dppo("clip_ratio_high"),
    "dppo_ratio_cap": _verl_dppo("clip_ratio_c"),
    "kl_gradient": _verl_kl_gradient,
    "rollout_staleness": off_or_no("verl samples with the current policy",
                                   "verl has no fixed sampling lag (its fully-async trainer bounds staleness)",
                                   lambda v: v == 0),
    "rollout_temperature": off_or_no("verl samples at the trainer's temperature",
                                     "verl samples at rollout.temperature, the temperature it trains with",
                                     lambda v: v is None),
    "rollout_is_mode": _verl_rollout_is,
    "rollout_is_level": lambda k, knob: "set with rollout_is_mode",
    "rollout_is_threshold": _verl_rollout_threshold,
    "adv_norm_mean": _grpo_only(_verl_adv_norm),
    "adv_norm_std": _grpo_only(_verl_adv_norm),
    "skip_no_signal_updates": off_or_no("verl steps the optimiser on every batch too",
                                        "verl steps the optimiser on every batch"),
    "baseline": _reward_to_go_only(no("verl has no reward-to-go estimator")),
}
VERL_ENGINE = (Set(f"{ACTOR}.optim.weight_decay", 0.0, "the lab's AdamW has no weight decay"),)
# DAPO's dynamic sampling and overlong buffer are read by verl's DAPO recipe, not by its main PPO trainer.
VERL_RECIPE_KEYS = ("algorithm.filter_groups.", "reward_model.overlong_buffer.")
VERL_ENTRY, VERL_DAPO_ENTRY = "verl.trainer.main_ppo", "recipe.dapo.main_dapo"

RULES = {"trl": TRL_RULES, "verl": VERL_RULES}


# --------------------------------------------------------------------------------------------- export
def knob_values(algo: AlgoConfig | dict, task: str | None = None) -> dict:
    """The configuration as the rules read it: every knob, `max_new_tokens` resolved to the task's limit.
    A dict of knob values is read as it is (knobs this version of `AlgoConfig` lacks included)."""
    values = algo if isinstance(algo, dict) else dataclasses.asdict(algo)
    knobs = {k: v for k, v in values.items() if k not in DESCRIPTIVE}
    if knobs["max_new_tokens"] is None and task is not None:
        knobs["max_new_tokens"] = get_task(task).max_new_tokens
    return knobs


def knob_lines(algo: AlgoConfig | dict, framework: str, task: str | None = None) -> list[tuple[str, list[Line]]]:
    """Per knob, in the config's order, the lines it contributes to `framework`'s configuration."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"format={framework!r} is unknown; allowed: {', '.join(FRAMEWORKS)}")
    knobs = knob_values(algo, task)
    lines = []
    for knob in knobs:
        rule = RULES[framework].get(knob, no(f"no {framework} counterpart is recorded for this knob"))
        if knob == "max_new_tokens" and knobs[knob] is None:
            rule = lambda k, name: "the task's limit: name a task to set it"  # noqa: E731
        produced = rule(knobs, knob)
        lines.append((knob, produced if isinstance(produced, list) else [produced]))
    return lines


def check_exportable(algo: AlgoConfig | dict, framework: str) -> None:
    """Refuse a configuration the framework's trainer cannot take at all (ValueError naming the knob)."""
    generations = knob_values(algo)["num_generations"]
    if framework == "trl" and generations < 2:
        raise ValueError(f"num_generations={generations} does not map to TRL's GRPOConfig, which needs a group of "
                         "at least 2 completions per prompt (TRL trains single-sample PPO with its PPOTrainer)")


def settings(algo: AlgoConfig | dict, framework: str, task: str | None = None) -> dict[str, object]:
    """Every field the export sets, engine settings included; a field set twice with two values is a bug."""
    check_exportable(algo, framework)
    engine = TRL_ENGINE if framework == "trl" else VERL_ENGINE
    chosen: dict[str, object] = {}
    for line in [*engine, *(x for _, xs in knob_lines(algo, framework, task) for x in xs)]:
        if isinstance(line, Set):
            if line.field in chosen and chosen[line.field] != line.value:
                raise AssertionError(f"{line.field} set to {chosen[line.field]!r} and {line.value!r}")
            chosen[line.field] = line.value
    return chosen


def export_config(algo: AlgoConfig | dict, framework: str, task: str | None = None, command: str = "") -> str:
    """The configuration as TRL Python source (`trl`) or a bash script of verl overrides (`verl`)."""
    lines = knob_lines(algo, framework, task)
    settings(algo, framework, task)  # refuses an export that sets one field twice
    values = algo if isinstance(algo, dict) else dataclasses.asdict(algo)
    title = f"the lab's {values['title']} (preset {values['name']}" + (f", task {task})" if task else ")")
    made = [f"# Made by: {command}"] if command else []
    if framework == "trl":
        return "\n".join([
            f"# TRL GRPOConfig for {title}.",
            "# Every lab knob appears once below: as a GRPOConfig field, or as a comment saying why it does not map.",
            *made,
            "from trl import GRPOConfig",
            "",
            "config = GRPOConfig(",
            "    # the lab's optimiser and model (no knob names them)",
            *(_trl_line(line, None) for line in TRL_ENGINE),
            *(_trl_line(line, f"{knob}={algo_value}") for knob, xs, algo_value in _with_values(lines, algo, task)
              for line in xs),
            ")",
            "",
        ])
    dapo = any(str(field).startswith(VERL_RECIPE_KEYS) for field in settings(algo, framework, task))
    return "\n".join([
        f"# verl command-line overrides for {title}.",
        "# Every lab knob appears once below: as an override, or as a comment saying why it does not map.",
        "# Add your model and data: actor_rollout_ref.model.path=… data.train_files=… data.val_files=…",
        *made,
        "overrides=(",
        "    # the lab's optimiser (no knob names it)",
        *(_verl_line(line, None) for line in VERL_ENGINE),
        *(_verl_line(line, f"{knob}={algo_value}") for knob, xs, algo_value in _with_values(lines, algo, task)
          for line in xs),
        ")",
        *(["# dynamic sampling / the overlong buffer need verl's DAPO recipe (verl-recipe: recipe/dapo)"] if dapo else []),
        f'python3 -m {VERL_DAPO_ENTRY if dapo else VERL_ENTRY} "${{overrides[@]}}" "$@"',
        "",
    ])


def _with_values(lines, algo: AlgoConfig | dict, task: str | None):
    values = knob_values(algo, task)
    return [(knob, xs, values[knob]) for knob, xs in lines]


def _comment(source: str | None, note: str) -> str:
    return "  # " + ": ".join(x for x in (source, note) if x) if source or note else ""


def _trl_line(line: Line, source: str | None) -> str:
    if isinstance(line, Set):
        return f"    {line.field}={line.value!r},{_comment(source, line.note)}"
    return f"    # {source}: {line}"


def hydra_value(value) -> str:
    """A value as a Hydra override writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _verl_line(line: Line, source: str | None) -> str:
    if isinstance(line, Set):
        return f"    {line.field}={hydra_value(line.value)}{_comment(source, line.note)}"
    return f"    # {source}: {line}"
