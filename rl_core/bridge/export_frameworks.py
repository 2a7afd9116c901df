"""A lab configuration carried to scale: TRL's `GRPOConfig` (Python source), verl's command-line overrides and
OpenRLHF's command line.

`KNOB_MAP[knob][framework]` is a rule that reads the whole configuration (knobs depend on one another: TRL's
`loss_type` encodes both the policy loss and the aggregation, verl's `clip_ratio_low` means ε for PPO but δ for
DPPO) and returns what that knob contributes: `Set(field, value, note)` lines and comment strings. Every knob of
the configuration produces at least one line, so a knob that does not map is never silently dropped; a knob the
table does not know (added to `AlgoConfig` later) becomes a "does not map" comment by itself.

Field names, each checked in the tests against the released package: TRL 1.16's `GRPOConfig`; verl 0.9.1's Hydra keys
(its generated `_generated_ppo_trainer.yaml`; a key the config lacks is written `+key` under one it has, as the
DAPO reward manager's `reward.reward_kwargs`); OpenRLHF 0.11.2's `train_ppo_ray.py` flags.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from rl_core.config import GROUP_ESTIMATORS, AlgoConfig
from rl_core.formulas.rewards import overlong_buffer_length
from toy_tasks import get_task

FRAMEWORKS = ("trl", "verl", "openrlhf")
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
            return Set(
                "per_device_train_batch_size",
                completions,
                f"{completions} completions do not split into {minibatches} equal minibatches: one step each",
            )
        return Set(
            "per_device_train_batch_size",
            completions // minibatches,
            f"{k['prompts_per_step']} prompts × {k['num_generations']} completions in {minibatches} "
            "optimiser steps (one process)",
        )
    if completions % minibatches:
        return f"does not map: TRL's minibatches are equal, {completions} completions do not split into {minibatches}"
    return Set("steps_per_generation", minibatches, "optimiser steps per generated batch")


def _trl_advantages(k: dict, knob: str) -> Line:
    estimator = k[knob]
    if estimator == "grpo" and "adv_norm_std" in k:
        return "TRL's group-normalised advantage; its mean and scaling are set by adv_norm_mean, adv_norm_std"
    if estimator in ("grpo", "dr_grpo"):
        return Set(
            "scale_rewards",
            "group" if estimator == "grpo" else "none",
            "(R − group mean) / group std" if estimator == "grpo" else "R − group mean, no std (Dr. GRPO)",
        )
    if estimator == "rloo":
        return "does not map: TRL trains RLOO with its RLOOTrainer, not GRPOConfig"
    return f"does not map: GRPOConfig's advantage is group-relative; it has no {estimator} estimator"


def _trl_policy_loss(k: dict, knob: str) -> Line | list[Line]:
    loss = k[knob]
    if loss in ("cispo", "sapo"):
        return Set("loss_type", loss)
    if loss in ("gspo", "gspo_token"):
        note = "GSPO's sequence ratio" + (
            "; GSPO-token's gradients agree when a response has one advantage" if loss == "gspo_token" else ""
        )
        return Set("importance_sampling_level", "sequence", note)
    if loss == "clip":
        return Set("importance_sampling_level", "token", "PPO's token-level clipped surrogate")
    if loss == "vanilla":
        return [
            Set("importance_sampling_level", "token"),
            "TRL has no plain policy-gradient loss; with one update per batch its surrogate has ρ = 1 and "
            "the same gradient",
        ]
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
    notes = {
        "bnpo": "token-mean over the minibatch ('dapo' divides by the generation batch's tokens per step)",
        "dr_grpo": "divides by B × max_completion_length",
    }
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
    lines: list[Line] = [
        Set(
            "use_bias_correction_kl",
            False,
            "the lab's k3 gradient as it is; TRL 1.16's default True would weight k3 by ρ "
            "(gradient ρ·k1, the lab's kl_gradient=is_corrected)",
        )
    ]
    if mode != "plain":
        lines.append(f"does not map: TRL has no {mode} KL gradient (verl: the k3+ estimator)")
    return lines


def _trl_entropy(k: dict, knob: str) -> Line:
    note = (
        ""
        if k["loss_agg_mode"] == "token-mean"
        else (f"TRL's bonus is the token-mean entropy; the lab aggregates it with {k['loss_agg_mode']}")
    )
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
    return (
        "does not map as a field: add trl.rewards.get_soft_overlong_punishment("
        f"max_completion_len={k['max_new_tokens']}, soft_punish_cache={length}) to the trainer's reward_funcs"
    )


def _trl_rollout_is(k: dict, knob: str) -> Line | list[Line]:
    mode, level = k[knob], k.get("rollout_is_level", "token")
    if mode == "none":
        return Set("vllm_importance_sampling_correction", False)
    if level == "geometric":
        return "does not map: TRL's sampler correction has no geometric-mean level"
    return [
        Set("vllm_importance_sampling_correction", True, "TRL corrects the vLLM sampler's mismatch (use_vllm=True)"),
        Set("vllm_importance_sampling_mode", f"{level}_{mode}"),
    ]


def _divergence_gated(k: dict) -> bool:
    """Whether the lab's correction gates on a divergence between μ and π_old (OpenRLHF 0.11's binary_kl / tv)."""
    return k.get("rollout_is_mode", "none") != "none" and k.get("is_correction_gating", "ratio") != "ratio"


def _gating_elsewhere(framework: str) -> Rule:
    """is_correction_gating where the framework gates on the weight only."""
    return lambda k, knob: (
        (
            f"does not map: {framework} gates its sampler correction on the importance weight, not "
            f"on the {k[knob]} of the sampled token"
        )
        if _divergence_gated(k)
        else (f"off here; {framework} gates on the weight too")
    )


def _gate_bound(rule: Rule) -> Rule:
    return unused_unless(_divergence_gated, rule, "no divergence gate")


def _dtype(framework: str) -> Rule:
    return off_or_no(
        f"{framework}'s trainer and sampler here share float32 kernels",
        f"{framework} sets its sampler's precision outside this configuration",
        lambda v: v == "float32",
    )


def _reward_to_go_only(rule: Rule) -> Rule:
    return unused_unless(lambda k: k["advantage_estimator"] == "reward_to_go", rule, "no reward-to-go")


def _gae_only(rule: Rule) -> Rule:
    return unused_unless(lambda k: k["advantage_estimator"] == "gae", rule, "no GAE")


def _dppo_only(rule: Rule) -> Rule:
    return unused_unless(lambda k: k["policy_loss"] == "dppo_tv", rule, "policy_loss is not dppo_tv")


def _dro_only(rule: Rule) -> Rule:
    return unused_unless(lambda k: k["policy_loss"] == "dro", rule, "policy_loss is not dro")


def _grpo_only(rule: Rule) -> Rule:
    """The normalisation selector acts on the `grpo` estimator only; the others fix their own."""
    return unused_unless(lambda k: k["advantage_estimator"] == "grpo", rule, "advantage_estimator is not grpo")


def _critic_only(reason: str) -> Rule:
    return unused_unless(lambda k: k["use_critic"], no(reason), "no critic")


def _resampling_only(rule: Rule) -> Rule:
    return unused_unless(lambda k: k["dynamic_sampling"], rule, "no dynamic sampling")


def _cov_only(rule: Rule, modes: tuple[str, ...] = ("clip_cov", "kl_cov")) -> Rule:
    return unused_unless(lambda k: k["cov_mode"] in modes, rule, f"cov_mode is not {' or '.join(modes)}")


def _lora(framework: str, rank: Rule, alpha: Rule, targets: Rule, on: str) -> dict[str, Rule]:
    """LoRA's knobs (`use_peft` and the adapters' shape): `on` says where the framework switches it on; the shape's
    rules apply with use_peft, the rest is full fine-tuning, every framework's default."""
    peft = lambda k: k["use_peft"]  # noqa: E731 - a predicate read by every rule below
    return {
        "use_peft": lambda k, knob: on if k[knob] else f"off here; full fine-tuning, as {framework}'s default",
        "lora_r": unused_unless(peft, rank, "use_peft is off"),
        "lora_alpha": unused_unless(peft, alpha, "use_peft is off"),
        "lora_target_modules": unused_unless(peft, targets, "use_peft is off"),
    }


def _trl_lora(k: dict, knob: str) -> str:
    return f"in peft's LoRA configuration passed to GRPOTrainer (TRL's ModelConfig: --{knob} {k[knob]})"


def _distillation(missing: str) -> dict[str, Rule]:
    """On-policy distillation's knobs, which none of these PPO/GRPO trainer exports carries (`missing` says where
    the framework distils instead): a plain comment while no teacher is set, "does not map" with one."""
    teacher = lambda k: k["teacher_model"] is not None  # noqa: E731 - a predicate read by every rule below
    rules: dict[str, Rule] = {"teacher_model": off_or_no("no teacher", missing, is_off=lambda v: v is None)}
    for knob in (
        "teacher_sft_steps",
        "distillation_loss_mode",
        "use_policy_gradient",
        "use_task_rewards",
        "distillation_loss_coef",
    ):
        rules[knob] = unused_unless(teacher, no(missing), "no teacher")
    return rules


TRL_RULES: dict[str, Rule] = {
    "prompts_per_step": _trl_batch,
    "num_generations": to("num_generations"),
    "num_minibatches": _trl_batch,
    "temperature": to("temperature"),
    "max_new_tokens": to("max_completion_length"),
    "advantage_estimator": _trl_advantages,
    "use_baseline": _reward_to_go_only(no("GRPOConfig has no reward-to-go estimator")),
    "gamma": lambda k, knob: (
        "TRL's reward is one undiscounted number per completion (γ = 1)"
        if k[knob] == 1
        else "does not map: TRL's reward is undiscounted"
    ),
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
    "use_critic": off_or_no(
        "GRPOConfig trains without a critic",
        "TRL 1.16 has no trainer with a critic; verl (critic.enable) and OpenRLHF (the gae estimator) train one",
    ),
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
    "cispo_two_sided": off_or_no(
        "TRL's cispo caps the weight from above only", "TRL's cispo caps the weight from above only"
    ),
    "dppo_delta_low": _dppo_only(no("TRL has no DPPO loss")),
    "dppo_delta_high": _dppo_only(no("TRL has no DPPO loss")),
    "dppo_ratio_cap": _dppo_only(no("TRL has no DPPO loss")),
    "dro_beta": _dro_only(no("TRL has no dro loss")),
    "kl_gradient": _trl_kl_gradient,
    "rollout_staleness": off_or_no(
        "TRL samples with the current policy", "TRL has no lagged sampler", lambda v: v == 0
    ),
    "rollout_temperature": off_or_no(
        "TRL samples at the trainer's temperature", "TRL samples at the temperature it trains with", lambda v: v is None
    ),
    "rollout_is_mode": _trl_rollout_is,
    "rollout_is_level": lambda k, knob: "set with rollout_is_mode",
    "rollout_is_threshold": to("vllm_importance_sampling_clip_max"),
    "is_correction_gating": _gating_elsewhere("TRL"),
    "is_correction_threshold": _gate_bound(no("TRL has no divergence gate")),
    "rollout_dtype": _dtype("TRL"),
    "adv_norm_mean": _grpo_only(
        lambda k, knob: (
            "TRL's baseline is the group mean"
            if k[knob] == "group"
            else f"does not map: TRL's baseline is always the group mean, not {k[knob]}"
        )
    ),
    "adv_norm_std": _grpo_only(to("scale_rewards")),
    "skip_no_signal_updates": off_or_no(
        "TRL steps the optimiser on every batch too", "TRL steps the optimiser on every batch"
    ),
    "baseline": _reward_to_go_only(no("GRPOConfig has no reward-to-go estimator")),
    **_lora(
        "TRL",
        _trl_lora,
        _trl_lora,
        _trl_lora,
        "GRPOConfig has no LoRA field: pass GRPOTrainer a peft_config, peft's LoRA configuration (r=…, "
        "lora_alpha=…, target_modules=[…]), which TRL's scripts build from ModelConfig's --use_peft",
    ),
    **_distillation(
        "GRPOConfig has no teacher; TRL 1.16's DistillationConfig (DistillationTrainer) is no "
        "counterpart either: it fits the student to the teacher's whole next-token distributions with a "
        "generalized JSD (its beta = 1: reverse KL), where the lab's signal is the sampled token's "
        "log π_T − log π_θ as an advantage; verl 0.9.1's distillation.* keys carry it"
    ),
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
VERL_ESTIMATORS = {
    "grpo": "grpo",
    "dr_grpo": "grpo",
    "rloo": "rloo",
    "gae": "gae",
    "reinforce_pp": "reinforce_plus_plus",
    "reinforce_pp_baseline": "reinforce_plus_plus_baseline",
}
VERL_LOSSES = {
    "clip": "vanilla",
    "vanilla": "gpg",
    "gspo": "gspo",
    "gspo_token": "gspo",
    "cispo": "cispo",
    "sapo": "sapo",
    "dppo_tv": "dppo_tv",
    "dro": "dro",
}
VERL_KL_LOSS = {"k1": "k1", "k2": "k2", "k3": "k3"}
VERL_KL_PENALTY = {"k1": "kl", "k2": "mse", "k3": "low_var_kl"}
VERL_RS_LEVELS = {"token": "token_k1", "sequence": "seq_sum_k1", "geometric": "seq_mean_k1"}
# verl's gspo and sapo fix their own aggregation.
LOSS_AGGREGATION_VERL = {
    "gspo": "seq-mean-token-mean",
    "gspo_token": "seq-mean-token-mean",
    "sapo": "seq-mean-token-mean",
}


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
        return [
            Set(f"{ACTOR}.use_kl_loss", beta > 0),
            Set(f"{ACTOR}.kl_loss_coef", beta),
            Set("algorithm.use_kl_in_reward", False),
        ]
    return [
        Set("algorithm.use_kl_in_reward", beta > 0),
        Set("algorithm.kl_ctrl.kl_coef", beta),
        Set(f"{ACTOR}.use_kl_loss", False),
    ]


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
    return [
        Set("algorithm.kl_ctrl.type", "adaptive"),
        Set(
            "algorithm.kl_ctrl.target_kl",
            k[knob],
            "verl's controller is proportional (kl_ctrl.horizon), not the lab's ×2 / ÷2 rule",
        ),
    ]


def _verl_policy_loss(k: dict, knob: str) -> Line | list[Line]:
    loss = k[knob]
    if loss not in VERL_LOSSES:
        return f"does not map: verl has no {loss} loss"
    if k.get("cov_mode", "none") != "none" and loss == "clip":
        return "set with cov_mode (verl's clip_cov / kl_cov losses are the clipped surrogate plus the selection)"
    notes = {
        "gspo": "verl's gspo is written in GSPO-token form; with one advantage per response it is GSPO",
        "vanilla": "verl's gpg loss is −A·log π",
    }
    return Set(f"{ACTOR}.policy_loss.loss_mode", VERL_LOSSES[loss], notes.get(loss, ""))


def _verl_clip_range(k: dict, knob: str) -> Line:
    """ε_low / ε_high → clip_ratio_low / clip_ratio_high, whose meaning depends on the loss."""
    loss, side = k["policy_loss"], "low" if knob == "epsilon" else "high"
    if loss in ("clip", "gspo", "gspo_token") or (loss == "cispo" and k.get("cispo_two_sided")):
        return Set(f"{ACTOR}.clip_ratio_{side}", k[knob])
    if loss == "cispo" and side == "high":
        return Set(
            f"{ACTOR}.clip_ratio_high",
            k[knob] - 1,
            "verl clamps the weight to [1 − clip_ratio_low, 1 + clip_ratio_high]: cap ε_max = 1 + this",
        )
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
        return [
            Set(f"{loss}.loss_mode", "clip_cov"),
            Set(f"{loss}.clip_cov_ratio", k["cov_fraction"]),
            Set(f"{loss}.clip_cov_lb", 1.0),
            Set(f"{loss}.clip_cov_ub", 5.0),
        ]
    return [
        Set(f"{loss}.loss_mode", "kl_cov"),
        Set(f"{loss}.kl_cov_ratio", k["cov_fraction"]),
        Set(f"{loss}.ppo_kl_coef", k["kl_cov_coef"]),
    ]


def _verl_overlong(k: dict, length: int) -> list[Line]:
    """verl 0.9's DAPO reward manager reads its buffer from `reward.reward_kwargs`, a group the config lacks."""
    kwargs = "+reward.reward_kwargs"
    return [
        Set("reward.reward_manager.name", "dapo", "verl's DAPO reward manager adds the punishment"),
        Set(f"{kwargs}.overlong_buffer_cfg.enable", True),
        Set(f"{kwargs}.overlong_buffer_cfg.len", length, "|y| counts the EOS (valid_response_length), as in the lab"),
        Set(f"{kwargs}.overlong_buffer_cfg.penalty_factor", 1.0),
        Set(f"{kwargs}.overlong_buffer_cfg.log", False),
        Set(f"{kwargs}.max_resp_len", k["max_new_tokens"]),
    ]


def _verl_rollout_is(k: dict, knob: str) -> Line | list[Line]:
    mode, level = k[knob], k.get("rollout_is_level", "token")
    base = "algorithm.rollout_correction"
    if mode == "none":
        return Set(f"{base}.rollout_is", None)
    if mode == "truncate":
        if level == "geometric":
            return "does not map: verl truncates token or sequence weights, not their geometric mean"
        return Set(f"{base}.rollout_is", level, "TIS: the weight capped at the threshold")
    weights = (
        Set(f"{base}.rollout_is", level)
        if level != "geometric"
        else ("the geometric-mean weight itself does not map (verl weights tokens or sequences)")
    )
    return [weights, Set(f"{base}.rollout_rs", VERL_RS_LEVELS[level], "MIS: reject (mask) beyond the threshold")]


def _verl_rollout_threshold(k: dict, knob: str) -> Line | list[Line]:
    lines: list[Line] = [Set("algorithm.rollout_correction.rollout_is_threshold", k[knob])]
    if k.get("rollout_is_mode") == "mask":
        lines.append(
            Set(
                "algorithm.rollout_correction.rollout_rs_threshold",
                k[knob],
                "one number: verl also rejects weights below its reciprocal, which the lab does not",
            )
        )
    return lines


def _verl_adv_norm(k: dict, knob: str) -> Line:
    mean, std = k.get("adv_norm_mean", "group"), k.get("adv_norm_std", "group")
    if (mean, std) == ("leave_one_out", "none"):
        return "set with advantage_estimator (verl's rloo)"
    if knob == "adv_norm_mean":
        return (
            "verl's grpo baseline is the group mean"
            if mean == "group"
            else (f"does not map: verl's grpo baseline is the group mean, not {mean}")
        )
    if std == "batch":
        return "does not map: verl's grpo divides by the group's std or by nothing"
    return Set("algorithm.norm_adv_by_std_in_grpo", std == "group")


def _critic(rule: Rule) -> Rule:
    return unused_unless(lambda k: k["use_critic"], rule, "no critic")


def _verl_distillation() -> dict[str, Rule]:
    """On-policy distillation's knobs as verl 0.9.1's `distillation.*` keys (its trainer scores the student's
    samples with a teacher it loads); comments while no teacher is set."""
    teacher = lambda k: k["teacher_model"] is not None  # noqa: E731 - a predicate read by every rule below
    loss = "distillation.distillation_loss"

    def teacher_rule(k: dict, knob: str) -> Line | list[Line]:
        if k[knob] is None:
            return "off here; no teacher"
        return [
            Set("distillation.enabled", True),
            f"set distillation.teacher_models.teacher_model.model_path to the teacher's checkpoint (the lab's "
            f"teacher is an SFT policy of its {k[knob]} preset)",
        ]

    return {
        "teacher_model": teacher_rule,
        "teacher_sft_steps": unused_unless(
            teacher,
            lambda k, knob: (
                f"how the lab makes its teacher ({k[knob]} SFT "
                "steps on noise-free demonstrations); verl loads a trained one"
            ),
            "no teacher",
        ),
        "distillation_loss_mode": unused_unless(
            teacher, to(f"{loss}.loss_mode", note="the estimator of KL(π_θ‖π_T) at each sampled token"), "no teacher"
        ),
        "use_policy_gradient": unused_unless(teacher, to(f"{loss}.use_policy_gradient"), "no teacher"),
        "use_task_rewards": unused_unless(teacher, to(f"{loss}.use_task_rewards"), "no teacher"),
        "distillation_loss_coef": unused_unless(teacher, to(f"{loss}.distillation_loss_coef"), "no teacher"),
    }


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
    "lam_critic": off_or_no(
        "verl uses one λ for advantages and critic targets",
        "verl uses one λ for advantages and critic targets",
        lambda v: v is None,
    ),
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
    "max_grad_norm": lambda k, knob: (
        [Set(f"{ACTOR}.grad_clip", k[knob])] + ([Set("critic.grad_clip", k[knob])] if k["use_critic"] else [])
    ),
    "use_critic": to("critic.enable"),
    "critic_learning_rate": _critic(to("critic.optim.lr")),
    "cliprange_value": _critic(to("critic.cliprange_value")),
    "vf_coef": _critic(no("verl's critic has its own optimiser and an unweighted loss")),
    "value_pretrain_steps": _critic(to("trainer.critic_warmup", note="steps that train only the critic")),
    "critic_init": _critic(
        lambda k, knob: (
            "point critic.model.path at the "
            + ("reward model's checkpoint" if k[knob] == "reward_model" else "policy's checkpoint")
        )
    ),
    "positive_nll_coef": off_or_no("verl has no positive-sample NLL term", "verl has no positive-sample NLL term"),
    "dynamic_sampling": lambda k, knob: (
        [
            Set("algorithm.filter_groups.enable", True, "verl 0.9's trainer refills the batch itself"),
            Set("algorithm.filter_groups.metric", "reward", "the reward before KL, overlong punishment included"),
        ]
        if k[knob]
        else "off here (verl: algorithm.filter_groups.enable)"
    ),
    "max_resample_rounds": _resampling_only(
        no("verl 0.9's replay buffer refills until the batch is full and ignores filter_groups.max_num_gen_batches")
    ),
    "overlong_filter": off_or_no(
        "verl keeps truncated responses in the loss",
        "verl has no switch that masks truncated responses out of the loss",
    ),
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
    "dro_beta": _dro_only(to(f"{ACTOR}.policy_loss.dro_beta")),
    "kl_gradient": _verl_kl_gradient,
    "rollout_staleness": off_or_no(
        "verl samples with the current policy",
        "verl has no fixed sampling lag (its fully-async trainer bounds staleness)",
        lambda v: v == 0,
    ),
    "rollout_temperature": off_or_no(
        "verl samples at the trainer's temperature",
        "verl samples at rollout.temperature, the temperature it trains with",
        lambda v: v is None,
    ),
    "rollout_is_mode": _verl_rollout_is,
    "rollout_is_level": lambda k, knob: "set with rollout_is_mode",
    "rollout_is_threshold": _verl_rollout_threshold,
    "is_correction_gating": _gating_elsewhere("verl"),
    "is_correction_threshold": _gate_bound(
        no("verl rejects on k1 / k2 / k3 of the log-weight, not on a binary KL or TV")
    ),
    "rollout_dtype": to("actor_rollout_ref.rollout.dtype", note="the sampler's precision; the trainer stays float32"),
    "adv_norm_mean": _grpo_only(_verl_adv_norm),
    "adv_norm_std": _grpo_only(_verl_adv_norm),
    "skip_no_signal_updates": off_or_no(
        "verl steps the optimiser on every batch too", "verl steps the optimiser on every batch"
    ),
    "baseline": _reward_to_go_only(no("verl has no reward-to-go estimator")),
    **_lora(
        "verl",
        to("actor_rollout_ref.model.lora_rank"),
        to("actor_rollout_ref.model.lora_alpha"),
        to("actor_rollout_ref.model.target_modules", lambda v: f"[{v}]"),
        "set by a lora_rank above 0 (below)",
    ),
    **_verl_distillation(),
}
VERL_ENGINE = (Set(f"{ACTOR}.optim.weight_decay", 0.0, "the lab's AdamW has no weight decay"),)
VERL_ENTRY = "verl.trainer.main_ppo"  # verl 0.9's trainer runs DAPO's group filter and reward manager itself

# --------------------------------------------------------------------------------------------- OpenRLHF
# OpenRLHF 0.11's `openrlhf.cli.train_ppo_ray` flags (dotted groups). A Set's value True is a bare store_true flag,
# a tuple is an nargs list.
OPENRLHF_ESTIMATORS = {
    "gae": "gae",
    "grpo": "group_norm",
    "dr_grpo": "dr_grpo",
    "rloo": "rloo",
    "reinforce_pp": "reinforce",
    "reinforce_pp_baseline": "reinforce_baseline",
}
OPENRLHF_AGGREGATION = ("token-mean", "seq-mean-token-mean")


def _openrlhf_batch(k: dict, knob: str) -> Line:
    completions = k["prompts_per_step"] * k["num_generations"]
    minibatches = k["num_minibatches"]
    if knob == "prompts_per_step":
        return Set("--rollout.batch_size", k[knob], "prompts per rollout (× n_samples_per_prompt completions)")
    if completions % minibatches:
        return (
            f"does not map: OpenRLHF's minibatches are equal, {completions} completions do not split into {minibatches}"
        )
    return Set("--train.batch_size", completions // minibatches, "completions per optimiser step")


def _openrlhf_advantages(k: dict, knob: str) -> Line | list[Line]:
    estimator = k[knob]
    if estimator == "grpo" and (k.get("adv_norm_mean"), k.get("adv_norm_std")) == ("leave_one_out", "none"):
        return Set("--algo.advantage.estimator", "rloo", "the selector's (leave-one-out, none) is RLOO")
    if estimator not in OPENRLHF_ESTIMATORS:
        closest = (
            "; the closest is flash_reinforce (R minus the batch's mean over responses, not tokens)"
            if estimator == "reward_to_go"
            else ""
        )
        return (
            f"does not map: OpenRLHF has no {estimator} estimator{closest}; without the flag it runs its default, "
            "gae, so pass --algo.advantage.estimator yourself"
        )
    return Set("--algo.advantage.estimator", OPENRLHF_ESTIMATORS[estimator])


def _openrlhf_adv_norm(k: dict, knob: str) -> Line:
    mean, std = k.get("adv_norm_mean", "group"), k.get("adv_norm_std", "group")
    if (mean, std) == ("leave_one_out", "none"):
        return "set with advantage_estimator (OpenRLHF's rloo)"
    if knob == "adv_norm_mean":
        return (
            "OpenRLHF's group_norm baseline is the group mean"
            if mean == "group"
            else (f"does not map: OpenRLHF's group_norm baseline is the group mean, not {mean}")
        )
    if std == "group":
        return "OpenRLHF's group_norm divides by the group's std"
    if std == "none":
        return "does not map: use advantage_estimator=dr_grpo (OpenRLHF's dr_grpo: group mean, no std)"
    return "does not map: OpenRLHF's group_norm divides by the group's std, never the batch's"


def _openrlhf_whiten(k: dict, knob: str) -> Line:
    whitens = k["advantage_estimator"] in ("gae", "reinforce_pp", "reinforce_pp_baseline")
    if k[knob] == whitens:
        return f"OpenRLHF's {k['advantage_estimator']} estimator {'whitens' if whitens else 'does not whiten'} itself"
    if whitens:
        return Set("--algo.advantage.no_std_norm", True, "centred over the batch but not divided by its std")
    return f"does not map: OpenRLHF's {k['advantage_estimator']} estimator never whitens"


def _openrlhf_beta(k: dict, knob: str) -> list[Line]:
    lines: list[Line] = [Set("--algo.kl.init_coef", k[knob])]
    if k["kl_in"] == "loss":
        lines.append(Set("--algo.kl.use_loss", True, "β·KL in the loss (else OpenRLHF puts it in the reward)"))
    return lines


def _openrlhf_kl_gradient(k: dict, knob: str) -> Line:
    mode = k[knob]
    if k["kl_in"] != "loss":
        return "unused with KL in the reward"
    if mode == "plain":
        return "OpenRLHF's default: the estimator's own gradient"
    if mode == "is_corrected":
        return Set(
            "--algo.kl.unbiased_gradient",
            True,
            "the gradient ρ·k1 of the lab's ρ·k3 (ρ detached and capped there); the value stays k3's",
        )
    return "does not map: OpenRLHF has no k2-gradient form (its unbiased_gradient is the IS-corrected one)"


def _openrlhf_target_kl(k: dict, knob: str) -> Line | list[Line]:
    if k[knob] is None:
        return "off here; OpenRLHF's β is fixed without --algo.kl.target"
    return Set(
        "--algo.kl.target",
        k[knob],
        "OpenRLHF's controller is proportional (--algo.kl.horizon), not the lab's ×2 / ÷2 rule",
    )


def _openrlhf_reward_clip(k: dict, knob: str) -> Line:
    if k["advantage_estimator"] in GROUP_ESTIMATORS or k[knob] is None:
        return (
            "OpenRLHF always clips the reward to --reward.clip_range (default −10 10); the lab leaves it "
            "unclipped here, the same while rewards stay within ±10"
        )
    return Set("--reward.clip_range", (-k[knob], k[knob]))


def _openrlhf_policy_loss(k: dict, knob: str) -> Line | list[Line]:
    loss = k[knob]
    if loss == "clip":
        return Set("--actor.policy_loss_type", "ppo")
    if loss == "gspo":
        return Set("--actor.policy_loss_type", "gspo", "sequence ratio; OpenRLHF aggregates it per sequence")
    if loss == "vanilla":
        return [
            Set("--actor.policy_loss_type", "ppo"),
            "OpenRLHF has no plain policy-gradient loss; with one update per batch its surrogate has ρ = 1 and "
            "the same gradient",
        ]
    return f"does not map: OpenRLHF 0.11's policy losses are ppo and gspo, not {loss}"


def _openrlhf_epsilon(k: dict, knob: str) -> Line:
    if k["policy_loss"] not in CLIP_LOSSES or k["policy_loss"] == "gspo_token":
        return f"unused by {k['policy_loss']} in OpenRLHF"
    if knob == "epsilon_high":
        return "set with epsilon (one flag takes both)"
    return Set("--actor.eps_clip_low_high", (k["epsilon"], k["epsilon_high"]), "ε_low ε_high")


def _openrlhf_dual_clip(k: dict, knob: str) -> Line:
    if k["policy_loss"] not in ("clip", "vanilla"):
        return f"unused by {k['policy_loss']}"
    if k[knob] is None:
        return "off here; OpenRLHF applies no dual clip without --actor.dual_clip"
    return Set("--actor.dual_clip", k[knob])


def _openrlhf_aggregation(k: dict, knob: str) -> Line:
    mode = k[knob]
    if k["policy_loss"] == "gspo":
        return "OpenRLHF's gspo loss aggregates per sequence itself"
    if mode not in OPENRLHF_AGGREGATION:
        return f"does not map: OpenRLHF aggregates with token-mean or seq-mean-token-mean, not {mode}"
    return Set("--actor.loss_agg_mode", mode)


def _openrlhf_dynamic_sampling(k: dict, knob: str) -> Line | list[Line]:
    if not k[knob]:
        return "off here (OpenRLHF: --algo.dynamic_filtering_enable)"
    return [
        Set("--algo.dynamic_filtering_enable", True),
        Set(
            "--algo.dynamic_filtering_range",
            (0.0, 1.0),
            "keeps a group whose mean reward lies strictly inside: the lab's rule for 0/1 rewards",
        ),
    ]


def _openrlhf_overlong(k: dict, length: int) -> list[Line]:
    return [
        Set("--reward.overlong_buffer_len", length, "|y| counts the EOS, as in the lab"),
        Set("--reward.overlong_penalty_factor", 1.0),
    ]


def _openrlhf_rollout_is(k: dict, knob: str) -> Line | list[Line]:
    mode, level = k[knob], k.get("rollout_is_level", "token")
    if mode == "none":
        return "off here (OpenRLHF: --algo.advantage.is_correction_level off, its default)"
    if k["policy_loss"] not in ("clip", "vanilla"):
        return f"does not map: OpenRLHF corrects the sampler's mismatch for its ppo loss only, not {k['policy_loss']}"
    if _divergence_gated(k):  # a trust region: the kept tokens carry their per-token weight, as in the lab
        return [
            Set("--algo.advantage.is_correction_level", "token" if level == "token" else "seq"),
            Set("--algo.advantage.is_correction_mode", "mask"),
            Set("--algo.advantage.is_correction_gating", k["is_correction_gating"]),
        ]
    if level == "sequence":
        return "does not map: OpenRLHF's sequence level gates the geometric mean of the ratio, not the product"
    if level == "geometric" and mode == "truncate":
        return "does not map: OpenRLHF's sequence level only masks (a rejection filter), it never truncates"
    lines: list[Line] = [
        Set("--algo.advantage.is_correction_level", "token" if level == "token" else "seq"),
        Set("--algo.advantage.is_correction_mode", "clip" if mode == "truncate" else "mask"),
        Set("--algo.advantage.is_correction_gating", "ratio"),
    ]
    if level == "geometric":
        lines.append(
            "a kept response keeps OpenRLHF's per-token weights, where the lab weighs it by the geometric mean"
        )
    return lines


def _openrlhf_rollout_threshold(k: dict, knob: str) -> Line:
    if k.get("rollout_is_mode", "none") == "none":
        return "unused here (no rollout correction)"
    if _divergence_gated(k):
        return "unused here (the divergence gate reads is_correction_threshold)"
    return Set("--algo.advantage.is_correction_threshold", (k[knob],), "one number: an upper bound only (0 below)")


OPENRLHF_RULES: dict[str, Rule] = {
    "prompts_per_step": _openrlhf_batch,
    "num_generations": to("--rollout.n_samples_per_prompt"),
    "num_minibatches": _openrlhf_batch,
    "temperature": to("--rollout.temperature"),
    "max_new_tokens": to("--rollout.max_new_tokens"),
    "advantage_estimator": _openrlhf_advantages,
    "use_baseline": _reward_to_go_only(no("OpenRLHF has no reward-to-go estimator")),
    "gamma": lambda k, knob: (
        Set("--algo.advantage.gamma", k[knob])
        if k["advantage_estimator"] in ("gae", "reinforce_pp")
        else "OpenRLHF's group estimators use γ = 1"
        if k[knob] == 1
        else "does not map: OpenRLHF's group estimators use γ = 1"
    ),
    "lam": _gae_only(to("--algo.advantage.lambd")),
    "lam_critic": off_or_no(
        "OpenRLHF uses one λ for advantages and critic targets",
        "OpenRLHF uses one λ for advantages and critic targets",
        lambda v: v is None,
    ),
    "length_adaptive_alpha": off_or_no(
        "OpenRLHF's λ is fixed", "OpenRLHF has no length-adaptive λ", lambda v: v is None
    ),
    "whiten_advantages": _openrlhf_whiten,
    "beta": _openrlhf_beta,
    "kl_estimator": to("--algo.kl.estimator"),
    "kl_in": lambda k, knob: "set with beta",
    "target_kl": _openrlhf_target_kl,
    "reward_clip": _openrlhf_reward_clip,
    "policy_loss": _openrlhf_policy_loss,
    "epsilon": _openrlhf_epsilon,
    "epsilon_high": _openrlhf_epsilon,
    "dual_clip": _openrlhf_dual_clip,
    "loss_agg_mode": _openrlhf_aggregation,
    "entropy_coef": to("--actor.entropy_coef", note="token-mean entropy, whatever the aggregation"),
    "ppo_epochs": to("--train.max_epochs", note="updates per generated batch"),
    "learning_rate": to("--actor.adam.lr"),
    "max_grad_norm": lambda k, knob: (
        [Set("--actor.max_norm", k[knob])] + ([Set("--critic.max_norm", k[knob])] if k["use_critic"] else [])
    ),
    "adam_epsilon": to("--actor.adam.eps"),
    "use_critic": lambda k, knob: (
        "OpenRLHF trains a critic exactly with the gae estimator"
        if k[knob] == (k["advantage_estimator"] == "gae")
        else "does not map: OpenRLHF's critic comes with the gae estimator"
    ),
    "critic_learning_rate": _critic(to("--critic.adam.lr")),
    "cliprange_value": _critic(to("--critic.value_clip")),
    "vf_coef": _critic(no("OpenRLHF's critic has its own optimiser and an unweighted loss")),
    "value_pretrain_steps": _critic(to("--critic.freezing_steps", note="steps that train only the critic")),
    "critic_init": _critic(
        lambda k, knob: (
            "point --critic.model_name_or_path at the "
            + ("reward model's checkpoint (OpenRLHF's default)" if k[knob] == "reward_model" else "policy's checkpoint")
        )
    ),
    "positive_nll_coef": off_or_no(
        "OpenRLHF has no positive-sample NLL term", "OpenRLHF has no positive-sample NLL term"
    ),
    "dynamic_sampling": _openrlhf_dynamic_sampling,
    "max_resample_rounds": _resampling_only(no("OpenRLHF refills filtered prompts until the batch is full, unbounded")),
    "overlong_filter": off_or_no(
        "OpenRLHF keeps truncated responses in the loss",
        "OpenRLHF has no switch that masks truncated responses out of the loss "
        "(--reward.stop_properly_penalty_coef rescales their reward instead)",
    ),
    "overlong_punishment": _overlong(_openrlhf_overlong),
    "overlong_buffer": _overlong(_openrlhf_overlong),
    "overlong_buffer_fraction": _overlong(_openrlhf_overlong),
    "cov_mode": off_or_no(
        "OpenRLHF has no Clip-Cov / KL-Cov", "OpenRLHF has no Clip-Cov / KL-Cov", lambda v: v == "none"
    ),
    "cov_fraction": _cov_only(no("OpenRLHF has no Clip-Cov / KL-Cov")),
    "kl_cov_coef": _cov_only(no("OpenRLHF has no KL-Cov"), ("kl_cov",)),
    "sapo_tau_pos": unused_unless(
        lambda k: k["policy_loss"] == "sapo", no("OpenRLHF has no SAPO loss"), "policy_loss is not sapo"
    ),
    "sapo_tau_neg": unused_unless(
        lambda k: k["policy_loss"] == "sapo", no("OpenRLHF has no SAPO loss"), "policy_loss is not sapo"
    ),
    "cispo_two_sided": unused_unless(
        lambda k: k["policy_loss"] == "cispo", no("OpenRLHF has no CISPO loss"), "policy_loss is not cispo"
    ),
    "dppo_delta_low": _dppo_only(no("OpenRLHF has no DPPO loss")),
    "dppo_delta_high": _dppo_only(no("OpenRLHF has no DPPO loss")),
    "dppo_ratio_cap": _dppo_only(no("OpenRLHF has no DPPO loss")),
    "dro_beta": _dro_only(no("OpenRLHF has no dro loss")),
    "kl_gradient": _openrlhf_kl_gradient,
    "rollout_staleness": off_or_no(
        "OpenRLHF samples with the current policy",
        "OpenRLHF has no fixed sampling lag (--train.async_enable with "
        "--train.async_queue_size bounds how stale a batch may be)",
        lambda v: v == 0,
    ),
    "rollout_temperature": off_or_no(
        "OpenRLHF samples at the trainer's temperature",
        "OpenRLHF samples at --rollout.temperature, the temperature it trains with",
        lambda v: v is None,
    ),
    "rollout_is_mode": _openrlhf_rollout_is,
    "rollout_is_level": lambda k, knob: "set with rollout_is_mode",
    "rollout_is_threshold": _openrlhf_rollout_threshold,
    "is_correction_gating": lambda k, knob: (
        "set with rollout_is_mode" if _divergence_gated(k) else ("off here; OpenRLHF's default gate is the ratio too")
    ),
    "is_correction_threshold": _gate_bound(
        lambda k, knob: Set("--algo.advantage.is_correction_threshold", (k[knob],), "one number: an upper bound δ only")
    ),
    "rollout_dtype": _dtype("OpenRLHF"),
    "adv_norm_mean": _grpo_only(_openrlhf_adv_norm),
    "adv_norm_std": _grpo_only(_openrlhf_adv_norm),
    "skip_no_signal_updates": off_or_no(
        "OpenRLHF steps the optimiser on every batch too", "OpenRLHF steps the optimiser on every batch"
    ),
    "baseline": _reward_to_go_only(no("OpenRLHF has no reward-to-go estimator")),
    **_lora(
        "OpenRLHF",
        to("--ds.lora.rank"),
        to("--ds.lora.alpha"),
        to("--ds.lora.target_modules", lambda v: tuple(v.split(","))),
        "set by a --ds.lora.rank above 0 (below)",
    ),
    **_distillation("OpenRLHF's PPO trainer has no teacher to distil from"),
}
# The lab's optimiser: AdamW with torch's betas, no weight decay, a constant learning rate.
OPENRLHF_ENGINE = (
    Set("--actor.adam.betas", (0.9, 0.999), "torch's AdamW defaults, as the lab's"),
    Set("--actor.adam.weight_decay", 0.0, "the lab's AdamW has no weight decay"),
    Set("--actor.lr_scheduler", "constant", "the lab's AdamW keeps its learning rate"),
    Set("--actor.lr_warmup_ratio", 0.0),
)
OPENRLHF_ENTRY = "openrlhf.cli.train_ppo_ray"

RULES = {"trl": TRL_RULES, "verl": VERL_RULES, "openrlhf": OPENRLHF_RULES}
ENGINES = {"trl": TRL_ENGINE, "verl": VERL_ENGINE, "openrlhf": OPENRLHF_ENGINE}


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
        raise ValueError(
            f"num_generations={generations} does not map to TRL's GRPOConfig, which needs a group of "
            "at least 2 completions per prompt; TRL 1.16's online trainers (GRPOTrainer, RLOOTrainer) "
            "all sample groups, so raise num_generations, or export to verl or OpenRLHF, whose "
            "REINFORCE++ and GAE estimators take one completion per prompt"
        )


def settings(algo: AlgoConfig | dict, framework: str, task: str | None = None) -> dict[str, object]:
    """Every field the export sets, engine settings included; a field set twice with two values is a bug."""
    check_exportable(algo, framework)
    engine = ENGINES[framework]
    chosen: dict[str, object] = {}
    for line in [*engine, *(x for _, xs in knob_lines(algo, framework, task) for x in xs)]:
        if isinstance(line, Set):
            if line.field in chosen and chosen[line.field] != line.value:
                raise AssertionError(f"{line.field} set to {chosen[line.field]!r} and {line.value!r}")
            chosen[line.field] = line.value
    return chosen


def export_config(algo: AlgoConfig | dict, framework: str, task: str | None = None, command: str = "") -> str:
    """The configuration as TRL Python source (`trl`), or a bash script of verl overrides (`verl`) or of OpenRLHF
    flags (`openrlhf`)."""
    lines = knob_lines(algo, framework, task)
    settings(algo, framework, task)  # refuses an export that sets one field twice
    values = algo if isinstance(algo, dict) else dataclasses.asdict(algo)
    title = f"the lab's {values['title']} (preset {values['name']}" + (f", task {task})" if task else ")")
    made = [f"# Made by: {command}"] if command else []
    if framework == "trl":
        return "\n".join(
            [
                f"# TRL GRPOConfig for {title}.",
                "# Every lab knob appears once below: "
                "as a GRPOConfig field, or as a comment saying why it does not map.",
                *made,
                "from trl import GRPOConfig",
                "",
                "config = GRPOConfig(",
                "    # the lab's optimiser and model (no knob names them)",
                *(trl_line(line, None) for line in TRL_ENGINE),
                *(
                    trl_line(line, f"{knob}={algo_value}")
                    for knob, xs, algo_value in _with_values(lines, algo, task)
                    for line in xs
                ),
                ")",
                "",
            ]
        )
    knob_rows = _with_values(lines, algo, task)
    if framework == "verl":
        return "\n".join(
            [
                f"# verl 0.9 command-line overrides for {title}.",
                "# Every lab knob appears once below: as an override, or as a comment saying why it does not map.",
                "# Add your model and data: actor_rollout_ref.model.path=… data.train_files=… data.val_files=…",
                *made,
                "overrides=(",
                "    # the lab's optimiser (no knob names it)",
                *(_verl_line(line, None) for line in VERL_ENGINE),
                *(_verl_line(line, f"{knob}={value}") for knob, xs, value in knob_rows for line in xs),
                ")",
                f'python3 -m {VERL_ENTRY} "${{overrides[@]}}" "$@"',
                "",
            ]
        )
    return "\n".join(
        [
            f"# OpenRLHF 0.11 command line for {title}.",
            "# Every lab knob appears once below: as a flag, or as a comment saying why it does not map.",
            "# Add your model, data and GPUs: "
            "--actor.model_name_or_path … --data.prompt_dataset … --ref.num_gpus_per_node …",
            *made,
            "flags=(",
            "    # the lab's optimiser (no knob names it)",
            *(openrlhf_line(line, None) for line in OPENRLHF_ENGINE),
            *(openrlhf_line(line, f"{knob}={value}") for knob, xs, value in knob_rows for line in xs),
            ")",
            f'python3 -m {OPENRLHF_ENTRY} "${{flags[@]}}" "$@"',
            "",
        ]
    )


def _with_values(lines, algo: AlgoConfig | dict, task: str | None):
    values = knob_values(algo, task)
    return [(knob, xs, values[knob]) for knob, xs in lines]


def _comment(source: str | None, note: str) -> str:
    return "  # " + ": ".join(x for x in (source, note) if x) if source or note else ""


def trl_line(line: Line, source: str | None) -> str:
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


def openrlhf_value(value) -> str:
    """A value as OpenRLHF's argparse reads it: a list for nargs, the flag alone for a store_true flag."""
    if isinstance(value, tuple):
        return " ".join(str(v) for v in value)
    return str(value)


def openrlhf_line(line: Line, source: str | None) -> str:
    if isinstance(line, Set):
        flag = line.field if line.value is True else f"{line.field} {openrlhf_value(line.value)}"
        return f"    {flag}{_comment(source, line.note)}"
    return f"    # {source}: {line}"
