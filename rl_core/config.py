"""Typed configuration of an algorithm (a preset) and of a training run, with up-front validation.

Knob names follow TRL / verl where one exists, so a practitioner can carry a setting across:

| here | TRL | verl | spec |
| --- | --- | --- | --- |
| num_generations | num_generations | rollout.n | G |
| prompts_per_step | (batch size / G) | data.train_batch_size | prompts per batch |
| epsilon, epsilon_high | epsilon, epsilon_high | clip_ratio_low, clip_ratio_high | ε_low, ε_high |
| dual_clip | — | clip_ratio_c | c |
| beta, kl_estimator | beta, — | kl_loss_coef / kl_ctl, kl_loss_type | β, k1/k2/k3 |
| kl_in | (loss) | use_kl_loss / use_kl_in_reward | where KL enters |
| loss_agg_mode | loss_type | loss_agg_mode | aggregation |
| gamma, lam, lam_critic | — | gamma, lam | γ, λ_actor, λ_critic |
| ppo_epochs, num_minibatches | num_iterations, — | ppo_epochs, (ppo_mini_batch_size) | update count |
| cliprange_value, vf_coef | cliprange_value, vf_coef | cliprange_value, — | ε_v, c_v |
| entropy_coef | — | entropy_coeff | c_ent |
| positive_nll_coef | — | — | μ (VAPO) |
| adam_epsilon | adam_epsilon | — | Adam's ε |
| overlong_punishment | — | overlong_buffer_cfg.enable | soft overlong punishment on/off |
| overlong_buffer | — | overlong_buffer_cfg.len | L_cache |
| policy_loss = cispo / sapo / dppo_tv | loss_type = cispo / sapo | policy_loss.loss_mode = cispo / — / dppo_tv | |
| policy_loss = dro, dro_beta | — | policy_loss.loss_mode = dro, policy_loss.dro_beta | β of the log-ratio spring |
| epsilon_high (cispo) | epsilon_high (the cap) | clip_ratio_high (two-sided) | ε_max |
| sapo_tau_pos, sapo_tau_neg | (SAPO temperatures) | — | τ_pos, τ_neg |
| kl_gradient | use_bias_correction_kl (is_corrected) | kl_loss_type k3+ (k2_grad) | sg / straight-through |
| adv_norm_std | scale_rewards (group / batch / none) | norm_adv_by_std_in_grpo | std level |
| rollout_is_mode, rollout_is_level, rollout_is_threshold | vllm_importance_sampling_mode, _cap | rollout_correction.rollout_is, rollout_is_threshold | TIS / MIS, C |
| is_correction_gating, is_correction_threshold | — | — (OpenRLHF: algo.advantage.is_correction_gating, _threshold) | ratio / binary KL / TV gate, δ |
| rollout_dtype | — | rollout.dtype | μ's precision |
| rollout_staleness, rollout_temperature | — (the lab's own ways to make μ ≠ π_old) | — | k, μ's temperature |
| teacher_model, teacher_sft_steps | teacher_model (DistillationTrainer) | distillation.teacher_models.teacher_model.model_path | π_T |
| distillation_loss_mode | — | distillation.distillation_loss.loss_mode | k1 / k2 / k3 of KL(π_θ‖π_T) |
| use_policy_gradient, use_task_rewards | — | distillation.distillation_loss.use_policy_gradient, use_task_rewards | form, task reward kept |
| distillation_loss_coef | — | distillation.distillation_loss.distillation_loss_coef | c_distill |
| use_peft, lora_r, lora_alpha, lora_target_modules | ModelConfig: use_peft, lora_r, lora_alpha, lora_target_modules | actor_rollout_ref.model.lora_rank, lora_alpha, target_modules | LoRA: W + (α/r)·B·A |
"""  # noqa: E501 - a markdown table row cannot be wrapped

from __future__ import annotations

import dataclasses
import decimal
import difflib
import numbers
from dataclasses import dataclass
from typing import Literal, get_args, get_origin, get_type_hints

AdvantageEstimator = Literal[
    "reward_to_go", "gae", "grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "maxrl"
]
PolicyLoss = Literal["vanilla", "clip", "gspo", "gspo_token", "cispo", "sapo", "dppo_tv", "dro"]
LossAggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm", "seq-mean-token-sum"]
KLEstimator = Literal["k1", "k2", "k3"]
KLPlacement = Literal["reward", "loss"]
CovMode = Literal["none", "clip_cov", "kl_cov"]
KLGradient = Literal["plain", "is_corrected", "k2_grad"]
AdvNormMean = Literal["group", "leave_one_out", "batch", "none"]
AdvNormStd = Literal["group", "batch", "none"]
RolloutISMode = Literal["none", "truncate", "mask"]
RolloutISLevel = Literal["token", "sequence", "geometric"]
ISCorrectionGating = Literal["ratio", "binary_kl", "tv"]
RolloutDtype = Literal["float32", "bfloat16"]
Baseline = Literal["batch_mean", "running_mean"]
CriticInit = Literal["policy", "reward_model"]
# GPT-2's layers that LoRA adapts, as peft's `target_modules` (comma-separated): `c_attn` alone is peft's default for
# GPT-2; `c_proj` names both the attention's output and the MLP's second layer (peft matches the name's end).
LoraTargetModules = Literal["c_attn", "c_attn,c_proj", "c_attn,c_proj,c_fc"]
TeacherModel = Literal["tiny", "small"]  # model presets a teacher is built from (rl_core.engine.models.MODEL_PRESETS)

GROUP_ESTIMATORS = ("grpo", "dr_grpo", "rloo", "reinforce_pp_baseline", "maxrl")
MAX_ROLLOUT_STALENESS = 8


@dataclass(frozen=True)
class AlgoConfig:
    """Every knob of one policy-optimisation algorithm; a preset is an instance with the spec's defaults."""

    name: str
    title: str
    summary: str
    # sampling
    prompts_per_step: int = 8
    num_generations: int = 8
    temperature: float = 1.0
    max_new_tokens: int | None = None  # None: the task's own limit
    # advantages
    advantage_estimator: AdvantageEstimator = "grpo"
    use_baseline: bool = True  # reward_to_go only: subtract a baseline return
    baseline: Baseline = "batch_mean"  # which one: this batch's mean, or b ← 0.9·b + 0.1·mean(R) across steps
    gamma: float = 1.0
    lam: float = 0.95
    lam_critic: float | None = None  # decoupled GAE (VC-PPO): critic targets with their own λ
    length_adaptive_alpha: float | None = None  # VAPO: λ_actor = 1 − 1/(α·|y|)
    whiten_advantages: bool = False
    # the normalisation of the group-normalised estimator `grpo` (mean, std): GRPO (group, group),
    # Lite PPO (group, batch)
    adv_norm_mean: AdvNormMean = "group"
    adv_norm_std: AdvNormStd = "group"
    # KL to the reference
    beta: float = 0.0
    kl_estimator: KLEstimator = "k3"
    kl_in: KLPlacement = "loss"
    target_kl: float | None = None  # adaptive β (PPO-penalty) when set
    reward_clip: float | None = 5.0
    kl_gradient: KLGradient = "plain"  # the KL term in the loss: k3, ρ·k3 (importance-corrected), k3 with k2's gradient
    # policy loss
    policy_loss: PolicyLoss = "clip"
    epsilon: float = 0.2
    epsilon_high: float = 0.2
    dual_clip: float | None = None
    cispo_two_sided: bool = False  # CISPO's weight clamped to [1−ε, 1+ε_high] (verl) instead of capped at ε_high (TRL)
    sapo_tau_pos: float = 1.0
    sapo_tau_neg: float = 1.05
    dppo_delta_low: float = 0.15
    dppo_delta_high: float = 0.15
    dppo_ratio_cap: float = 20.0
    dro_beta: float = 1.0  # verl's dro: the spring (β/2)(log π_θ − log π_old)² that holds a token near π_old
    loss_agg_mode: LossAggMode = "token-mean"
    entropy_coef: float = 0.0
    ppo_epochs: int = 2
    num_minibatches: int = 2
    learning_rate: float = 1e-3
    max_grad_norm: float = 1.0
    adam_epsilon: float = 1e-8  # the policy optimiser's ε: gradients far below it per coordinate barely move it
    # critic
    use_critic: bool = False
    critic_init: CriticInit = "policy"  # "reward_model": VC-PPO's failure case, on tasks with a learned reward model
    critic_learning_rate: float = 3e-3
    cliprange_value: float = 0.2
    vf_coef: float = 0.5
    value_pretrain_steps: int = 0
    positive_nll_coef: float = 0.0
    # DAPO sampling and shaping
    dynamic_sampling: bool = False
    max_resample_rounds: int = 3
    overlong_filter: bool = False
    overlong_punishment: bool = False
    overlong_buffer: int | None = None  # L_cache in tokens; None: overlong_buffer_fraction × the task's limit
    overlong_buffer_fraction: float = 0.2  # DAPO: 4k of a 20k limit
    # Adam keeps moving the policy on a zero gradient (its momentum); skip the step when nothing pushes.
    skip_no_signal_updates: bool = True
    # entropy-collapse control (Clip-Cov / KL-Cov)
    cov_mode: CovMode = "none"
    cov_fraction: float = 2e-4
    kl_cov_coef: float = 1.0
    # behaviour-policy correction: sample with the policy of k steps ago, reweight by π_old/μ (TIS caps, MIS drops)
    rollout_staleness: int = 0
    rollout_temperature: float | None = None  # a sampler that differs from the trainer: μ samples at this temperature
    rollout_is_mode: RolloutISMode = "none"
    rollout_is_level: RolloutISLevel = "token"
    rollout_is_threshold: float = 2.0
    # OpenRLHF 0.11: gate on the weight (ratio) or on a divergence between μ and π_old at the sampled token, ≤ δ
    is_correction_gating: ISCorrectionGating = "ratio"
    is_correction_threshold: float = 5e-3  # δ of a divergence gate (FlashREINFORCE's binary-KL bound)
    # The sampler's precision (verl's rollout.dtype): bfloat16 is another kernel than the trainer's float32, so
    # μ ≠ π_old even with the same weights; float32 samples with the trainer's own kernels, μ ≡ π_old.
    rollout_dtype: RolloutDtype = "float32"
    # on-policy distillation: a teacher π_T scores every sampled token (rl_core.formulas.distillation);
    # None: no teacher
    teacher_model: TeacherModel | None = None
    teacher_sft_steps: int = 600  # the teacher: SFT on noise-free demonstrations, 3× the default warm start
    distillation_loss_mode: KLEstimator = "k1"  # the estimator of KL(π_θ‖π_T) per token
    use_policy_gradient: bool = True  # its negation as a detached advantage (True) or a loss term (False)
    use_task_rewards: bool = True  # keep the task's (verifier's) advantages beside the teacher's signal
    distillation_loss_coef: float = 1.0  # c_distill: the teacher's advantages or loss term are multiplied by it
    # LoRA (TRL's ModelConfig names, peft's LoraConfig underneath): the policy's weights stay frozen and low-rank
    # adapters train, W + (lora_alpha / lora_r)·B·A on the lora_target_modules; π_ref is the base, adapters off
    use_peft: bool = False
    lora_r: int = 16
    lora_alpha: int = 32
    lora_target_modules: LoraTargetModules = "c_attn"

    def __post_init__(self):
        _to_builtins(self)

    def replace(self, **overrides) -> AlgoConfig:
        """A copy with some fields changed, validated; unknown names are refused.

        Presets derive from their parent with this (identity fields included); a learner's overrides go through
        `with_knobs`, which refuses the identity fields."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"unknown knob(s) {', '.join(map(shown, unknown))}; {_knob_hint(unknown)}")
        config = dataclasses.replace(self, **overrides)
        config.validate()
        return config

    def with_knobs(self, **overrides) -> AlgoConfig:
        """This preset with knobs overridden (the API, CLI and pages); ValueError names the refused knob."""
        identity = sorted(set(overrides) & set(IDENTITY_FIELDS))
        if identity:
            raise ValueError(
                f"{', '.join(identity)} names the preset and is not a knob; pick another preset instead "
                f"(knobs: {', '.join(KNOB_NAMES)})"
            )
        return self.replace(**overrides)

    def validate(self) -> None:
        """Raise ValueError naming the first knob outside its allowed values: each knob's type and range from
        `KNOB_RANGES`, then the rules that tie knobs together."""
        _check_fields(self, AlgoConfig, KNOB_RANGES, skip=IDENTITY_FIELDS)
        if self.advantage_estimator in GROUP_ESTIMATORS:
            _require(
                self.num_generations >= 2,
                "num_generations",
                self.num_generations,
                f"≥ 2 with advantage_estimator={self.advantage_estimator} (a group baseline needs a group)",
            )
        if self.dynamic_sampling:
            _require(self.num_generations >= 2, "num_generations", self.num_generations, "≥ 2 with dynamic_sampling")
        batch = self.prompts_per_step * self.num_generations
        _require(
            batch <= MAX_BATCH,
            "prompts_per_step",
            self.prompts_per_step,
            f"prompts_per_step × num_generations ≤ {MAX_BATCH} responses per batch "
            f"(num_generations={self.num_generations})",
        )
        _require(
            self.num_minibatches <= batch,
            "num_minibatches",
            self.num_minibatches,
            f"at most the batch size prompts_per_step × num_generations = {batch}",
        )
        updates = self.ppo_epochs * self.num_minibatches
        _require(
            updates <= MAX_UPDATES_PER_BATCH,
            "ppo_epochs",
            self.ppo_epochs,
            f"ppo_epochs × num_minibatches ≤ {MAX_UPDATES_PER_BATCH} updates per batch "
            f"(num_minibatches={self.num_minibatches})",
        )
        if self.advantage_estimator == "gae" or self.value_pretrain_steps:
            _require(self.use_critic, "use_critic", self.use_critic, "True when GAE or value pretraining is used")
        if self.critic_init != "policy":
            _require(self.use_critic, "use_critic", self.use_critic, f"True with critic_init={self.critic_init}")
        if self.use_critic:
            # The critic's only use is GAE's bootstrap; with another estimator its values would be thrown away.
            _require(
                self.advantage_estimator == "gae",
                "use_critic",
                self.use_critic,
                f"False with advantage_estimator={self.advantage_estimator} (a critic needs advantage_estimator=gae)",
            )
        if self.policy_loss == "cispo" and not self.cispo_two_sided:
            _require(
                self.epsilon_high >= 1, "epsilon_high", self.epsilon_high, "the CISPO weight cap ε_max ≥ 1 (e.g. 5)"
            )
        if self.kl_gradient != "plain":
            _require(
                self.kl_in == "loss" and self.kl_estimator == "k3",
                "kl_gradient",
                self.kl_gradient,
                "plain unless the KL is k3 in the loss (kl_in=loss, kl_estimator=k3)",
            )
        if self.is_correction_gating != "ratio" and self.rollout_is_mode != "none":
            # A divergence is no weight to cap: it can only filter (OpenRLHF refuses clip with it too).
            _require(
                self.rollout_is_mode == "mask",
                "rollout_is_mode",
                self.rollout_is_mode,
                f"mask or none with is_correction_gating={self.is_correction_gating} (a divergence gate only "
                "drops; truncate caps a ratio)",
            )
            _require(
                self.rollout_is_level != "geometric",
                "rollout_is_level",
                self.rollout_is_level,
                f"token or sequence with is_correction_gating={self.is_correction_gating} (a response's "
                "divergence is its tokens' mean; the geometric mean belongs to the ratio)",
            )
        if (self.adv_norm_mean, self.adv_norm_std) != ("group", "group"):
            _require(
                self.advantage_estimator == "grpo",
                "advantage_estimator",
                self.advantage_estimator,
                "grpo when adv_norm_mean / adv_norm_std are changed (Dr. GRPO is grpo with adv_norm_std=none, "
                "RLOO grpo with adv_norm_mean=leave_one_out, adv_norm_std=none)",
            )
        if not self.use_task_rewards:
            _require(
                self.teacher_model is not None,
                "use_task_rewards",
                self.use_task_rewards,
                "True unless a teacher gives the signal (set teacher_model, e.g. tiny)",
            )


KNOB_LIST_CHARACTERS = 600  # a refusal stays readable on a page, however many knobs there are


def _knob_hint(unknown) -> str:
    """What a refusal of unknown knob names offers: the nearest knob names, then as many of all the names as fit."""
    close = dict.fromkeys(
        match for name in unknown if isinstance(name, str) for match in difflib.get_close_matches(name, KNOB_NAMES, n=3)
    )
    listing = ", ".join(KNOB_NAMES)
    if len(listing) > KNOB_LIST_CHARACTERS:
        kept = listing[:KNOB_LIST_CHARACTERS].rsplit(", ", 1)[0]
        listing = f"{kept}, … ({len(KNOB_NAMES)} knobs in all: the fields of AlgoConfig)"
    return (f"did you mean {', '.join(close)}? " if close else "") + f"allowed: {listing}"


def _require(ok: bool, knob: str, value, allowed: str) -> None:
    if not ok:
        raise ValueError(f"{knob}={shown(value)} is out of range; allowed: {allowed}")


def shown(value) -> str:
    """The value as a message quotes it: its repr, cut short when huge (an integer of 400 digits, say)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:24]}… ({len(text)} characters)"


# ------------------------------------------------------------------------------------------------ the knob table
@dataclass(frozen=True)
class Range:
    """The values a numeric knob (or run field) may take: `low ≤ x ≤ high`, strict at an open end.

    Every range is finite, so a run stays finite and within memory, and NaN or ±inf never passes."""

    low: float
    high: float
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def describe(self, integer: bool) -> str:
        if integer:
            return f"an integer from {self.low} to {self.high}"
        low = f"{self.low:g} {'<' if self.low_open else '≤'} x"
        return f"a number with {low} {'<' if self.high_open else '≤'} {self.high:g}"


# The identity of a preset: set by its file, never by a learner.
IDENTITY_FIELDS = ("name", "title", "summary")
MAX_BATCH = 1024  # responses per step (prompts_per_step × num_generations)
MAX_UPDATES_PER_BATCH = 256  # optimiser steps per batch (ppo_epochs × num_minibatches)
# The evaluation after a run's last step samples one response to each of this many of its task's prompts: the engine
# samples them (`rl_core.engine.evaluation`), and the server's estimate of a run's seconds counts them
# (`rl_core.runs.limits`), which must not import the engine.
EVALUATION_PROMPTS = 256

# Every numeric knob of AlgoConfig has an entry here (tests/test_config.py checks it). Its type (int, float, bool,
# a Literal of names, optional or not) comes from the field's annotation; booleans and names need no entry.
KNOB_RANGES: dict[str, Range] = {
    "prompts_per_step": Range(1, 256),
    "num_generations": Range(1, 64),
    "temperature": Range(0.05, 10.0),  # below, logits / T overflow in float32
    "max_new_tokens": Range(1, 1024),  # and within the model's context: RunConfig.validate
    "gamma": Range(0.0, 1.0),
    "lam": Range(0.0, 1.0),
    "lam_critic": Range(0.0, 1.0),
    "length_adaptive_alpha": Range(0.0, 100.0, low_open=True),
    "beta": Range(0.0, 100.0),
    "target_kl": Range(0.0, 100.0, low_open=True),
    "reward_clip": Range(0.0, 1000.0, low_open=True),
    "epsilon": Range(0.0, 1.0, low_open=True, high_open=True),
    "epsilon_high": Range(0.0, 10.0, low_open=True),
    "dual_clip": Range(1.0, 100.0, low_open=True),
    "entropy_coef": Range(0.0, 10.0),
    "ppo_epochs": Range(1, 64),
    "num_minibatches": Range(1, 256),
    "learning_rate": Range(0.0, 1.0, low_open=True),
    "max_grad_norm": Range(0.0, 1000.0, low_open=True),
    "critic_learning_rate": Range(0.0, 1.0, low_open=True),
    "cliprange_value": Range(0.0, 100.0, low_open=True),
    "vf_coef": Range(0.0, 100.0),
    "value_pretrain_steps": Range(0, 200),
    "positive_nll_coef": Range(0.0, 100.0),
    "max_resample_rounds": Range(0, 16),
    "overlong_buffer": Range(1, 1023),  # and below the task's length limit: RunConfig.validate
    "cov_fraction": Range(0.0, 1.0, low_open=True),
    "kl_cov_coef": Range(0.0, 100.0),
    "adam_epsilon": Range(1e-30, 1.0),  # the model trains in float32, where a smaller ε is 0 and 0 / 0 is NaN
    "overlong_buffer_fraction": Range(0.0, 1.0, low_open=True),  # of the task's length limit
    # the gate (4/τ)·σ(τ(ρ−1)): below 1e-3 its float32 offset 2/τ drowns the ratio's term (at 0: ∞ − ∞)
    "sapo_tau_pos": Range(1e-3, 100.0),
    "sapo_tau_neg": Range(1e-3, 100.0),
    "dppo_delta_low": Range(0.0, 1.0, low_open=True, high_open=True),  # a change of probability
    "dppo_delta_high": Range(0.0, 1.0, low_open=True, high_open=True),
    "dppo_ratio_cap": Range(1.0, 1000.0),
    "dro_beta": Range(0.0, 100.0, low_open=True),  # verl refuses β ≤ 0: without the spring dro is vanilla PG
    "rollout_staleness": Range(0, MAX_ROLLOUT_STALENESS),  # steps between the sampler's policy and the trainer's
    "rollout_temperature": Range(0.05, 10.0),  # as temperature
    "rollout_is_threshold": Range(0.0, 1000.0, low_open=True),
    "is_correction_threshold": Range(0.0, 1.0, low_open=True, high_open=True),  # TV ≤ 1; a binary KL δ is small
    "teacher_sft_steps": Range(1, 1000),  # trained before the first step: 1000 steps of the tiny model ≈ 15 s on a core
    "distillation_loss_coef": Range(0.0, 100.0),
    "lora_r": Range(1, 1024),  # and at most the model's width: RunConfig.validate
    "lora_alpha": Range(1, 4096),
}

RUN_RANGES: dict[str, Range] = {
    "steps": Range(1, 1_000_000),
    "seed": Range(0, 2**32 - 1),
    "demo_noise": Range(0.0, 1.0),
    "sft_steps": Range(0, 20_000),
    "samples_per_record": Range(0, 64),
}


def _check_fields(config, cls, ranges: dict[str, Range], skip=()) -> None:
    for name, hint in _type_hints(cls).items():
        if name not in skip:
            check_value(name, getattr(config, name), hint, ranges.get(name))


def _field_kind(hint) -> tuple[type, tuple, bool]:
    """A field's annotation as (kind, its Literal choices or (), whether None is allowed)."""
    options = get_args(hint) if get_origin(hint) is not Literal else (hint,)
    kind = ([o for o in options if o is not type(None)] or [hint])[0]
    return kind, get_args(kind) if get_origin(kind) is Literal else (), type(None) in options


def _as_builtin(value, kind):
    """`value` as its field's builtin type where that is exact: a numpy integer, float, bool or string, a
    Fraction or Decimal that a float holds exactly. Anything else is returned as it
    is, for `check_value` to refuse by name: a knob's value reaches torch and JSON, which know only builtins."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, str):
        return str(value)
    if kind is bool and getattr(getattr(value, "dtype", None), "kind", None) == "b":
        return bool(value)
    if kind is int and isinstance(value, numbers.Integral):
        return int(value)
    if kind is float and isinstance(value, REAL_TYPES):
        try:
            converted = float(value)
        except (OverflowError, ValueError):
            return value
        return converted if converted == value else value
    return value


def _to_builtins(config) -> None:
    """Convert every field of a (frozen) config to its builtin type where that is exact (`_as_builtin`)."""
    for name, hint in _type_hints(type(config)).items():
        value = getattr(config, name)
        converted = _as_builtin(value, _field_kind(hint)[0])
        if converted is not value:
            object.__setattr__(config, name, converted)


REAL_TYPES = (numbers.Real, decimal.Decimal)  # Decimal is no numbers.Real, yet equals the floats it holds
_HINTS: dict[type, dict] = {}


def _type_hints(cls) -> dict:
    if cls not in _HINTS:
        _HINTS[cls] = get_type_hints(cls)
    return _HINTS[cls]


def check_value(name: str, value, hint, allowed: Range | None) -> None:
    """Raise ValueError unless `value` has the field's builtin type (a bool is not a number, an integer knob takes
    no float; a number of another type, e.g. a Fraction no float holds exactly, is refused) and lies in its range;
    the message names the knob and says what is allowed."""
    kind, choices, optional = _field_kind(hint)
    describe = _describe(kind, choices, allowed) + (" (or none)" if optional else "")
    if value is None:
        if not optional:
            raise ValueError(f"{name}=None is not allowed; allowed: {describe}")
        return
    if choices:
        if not isinstance(value, str) or value not in choices:
            raise ValueError(f"{name}={shown(value)} is not allowed; choose one of: {', '.join(choices)}")
    elif kind is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{name}={shown(value)} is not a boolean; allowed: true or false")
    elif kind is int:
        if type(value) is not int:
            raise ValueError(f"{name}={shown(value)} is not an integer; allowed: {describe}")
    elif kind is float:
        if type(value) not in (int, float):
            inexact = isinstance(value, REAL_TYPES) and not isinstance(value, bool)
            raise ValueError(
                f"{name}={shown(value)} is not a number"
                + (" a float holds exactly" if inexact else "")
                + f"; allowed: {describe}"
            )
        if value != value:  # NaN; math.isnan would overflow on a huge integer
            raise ValueError(f"{name}=nan is not a number; allowed: {describe}")
    elif kind is str and type(value) is not str:
        raise ValueError(f"{name}={shown(value)} is not text; allowed: {describe}")
    if allowed is not None and value not in allowed:
        raise ValueError(f"{name}={shown(value)} is out of range; allowed: {describe}")


def _describe(kind, choices: tuple, allowed: Range | None) -> str:
    if choices:
        return f"one of: {', '.join(choices)}"
    if kind is bool:
        return "true or false"
    if allowed is not None:
        return allowed.describe(integer=kind is int)
    return {int: "an integer", float: "a finite number", str: "text"}.get(kind, str(kind))


KNOB_NAMES = tuple(f.name for f in dataclasses.fields(AlgoConfig) if f.name not in IDENTITY_FIELDS)

PreferenceLossType = Literal["sigmoid", "ipo"]  # TRL's `loss_type`: DPO's −log σ(βh), IPO's (h − 1/(2β))²
DPO_RANGES: dict[str, Range] = {
    # At β = 10 a log-ratio difference of 0.3 nats already gives σ(βh) = 0.95: a larger β only shrinks the moves.
    "beta": Range(0.0, 10.0, low_open=True),
    "learning_rate": KNOB_RANGES["learning_rate"],
    "per_device_train_batch_size": Range(1, MAX_BATCH),
    "holdout_fraction": Range(0.0, 1.0, low_open=True, high_open=True),
    "n_eval_prompts": Range(1, MAX_BATCH),
    "eval_steps": Range(1, 1_000_000),
}


class PairRunConfig:
    """What the run kinds fitted to the task's preference pairs share (`DPOConfig`, `RewardConfig`): knobs overridden
    by name and checked against the kind's `RANGES`."""

    RANGES = {}  # knob → Range (unannotated: a class constant, not a field)

    def __post_init__(self):
        _to_builtins(self)

    def with_knobs(self, **overrides):
        """This configuration with knobs overridden, validated; ValueError names an unknown or refused knob."""
        known = [f.name for f in dataclasses.fields(self) if f.name not in IDENTITY_FIELDS]
        unknown = sorted(set(overrides) - set(known))
        if unknown:
            raise ValueError(
                f"unknown knob(s) {', '.join(map(shown, unknown))} of {self.name}; allowed: {', '.join(known)}"
            )
        config = dataclasses.replace(self, **overrides)
        config.validate()
        return config

    def validate(self) -> None:
        _check_fields(self, type(self), self.RANGES, skip=IDENTITY_FIELDS)


@dataclass(frozen=True)
class DPOConfig(PairRunConfig):
    """Offline preference optimisation as a run kind (`rl_core.engine.preference_optimisation.DPOTrainer`): DPO or
    IPO on the task's own preference pairs (the pairs its reward model learns from), from the run's SFT warm start, one
    minibatch of pairs per step and no sampling for the update. Knob names as TRL's `DPOConfig`.

    Each step also samples `n_eval_prompts` fixed prompts once, for what the RL runs record of their own samples
    (gold `success_rate`, `reward_mean`, `kl_exact` to the reference); every `eval_steps` it scores the held-out
    pairs."""

    name: str = "dpo"
    title: str = "DPO"
    summary: str = "Direct preference optimisation: the policy fitted to preference pairs, no reward model, no RL"
    loss_type: PreferenceLossType = "sigmoid"
    beta: float = 0.1
    learning_rate: float = 5e-4
    per_device_train_batch_size: int = 32
    holdout_fraction: float = 0.2  # pairs kept out of training, for the held-out `eval_*` metrics
    eval_steps: int = 10  # steps between two evaluations on the held-out pairs (the samples are every step's)
    n_eval_prompts: int = 64

    RANGES = DPO_RANGES


REWARD_RANGES: dict[str, Range] = {
    "learning_rate": KNOB_RANGES["learning_rate"],
    "per_device_train_batch_size": Range(1, MAX_BATCH),
    "holdout_fraction": DPO_RANGES["holdout_fraction"],
    "eval_steps": DPO_RANGES["eval_steps"],
}


@dataclass(frozen=True)
class RewardConfig(PairRunConfig):
    """The Bradley–Terry reward model as a run kind (`rl_core.engine.reward_model_run.RewardModelTrainer`): a fresh
    reward model of the run's model preset fitted to the task's preference pairs for the run's seed (the pairs the
    task's own reward model and DPO learn from), one minibatch per step. Knob names as TRL's `RewardConfig`; the
    defaults are the `preference` task's own reward model's."""

    name: str = "reward_model"
    title: str = "Reward model"
    summary: str = "The Bradley–Terry reward model fitted to the preference pairs"
    learning_rate: float = 3e-3
    per_device_train_batch_size: int = 64
    holdout_fraction: float = 0.2  # pairs kept out of training, for the held-out `heldout_*` metrics
    eval_steps: int = 10  # steps between two evaluations on the held-out pairs (and the last step)

    RANGES = REWARD_RANGES


DPO_KNOB_NAMES = tuple(f.name for f in dataclasses.fields(DPOConfig) if f.name not in IDENTITY_FIELDS)

# The run kinds fitted to the preference pairs, by name: DPO; IPO as DPO with TRL's `loss_type="ipo"` (the same
# knobs, so `--algo ipo` and `--algo dpo --set loss_type=ipo` train alike); the Bradley–Terry reward model.
PREFERENCE_PRESETS = {
    "dpo": DPOConfig(),
    "ipo": DPOConfig(
        name="ipo",
        title="IPO",
        loss_type="ipo",
        summary="Identity preference optimisation: DPO's log-ratio difference regressed onto 1/(2β)",
    ),
    "reward_model": RewardConfig(),
}


@dataclass(frozen=True)
class RunConfig:
    """What to train on, for how long, where: everything a run needs besides the algorithm (an RL preset, or
    `DPOConfig` for an offline DPO run on the task's preference pairs)."""

    algo: AlgoConfig | DPOConfig | RewardConfig
    task: str
    model: str = "tiny"
    steps: int = 100
    seed: int = 0
    device: str = "auto"
    demo_noise: float | None = None  # None: the task's default
    sft_steps: int = 200
    samples_per_record: int = 4

    def __post_init__(self):
        _to_builtins(self)

    @classmethod
    def from_dict(cls, data: dict) -> RunConfig:
        """The run that `dataclasses.asdict` wrote as `data` (the run store's `config`)."""
        preset = PREFERENCE_PRESETS.get(data["algo"]["name"])
        algo = type(preset) if preset else AlgoConfig
        return cls(**{**data, "algo": algo(**data["algo"])})

    def validate(self) -> None:
        """The algorithm's knobs, this run's fields, and what depends on the task and model: the response
        must fit in the model's context after the task's longest prompt, and the overlong buffer below the limit."""
        if not isinstance(self.algo, (AlgoConfig, PairRunConfig)):
            raise ValueError(f"algo={self.algo!r} is not an algorithm preset; use get_preset(name, **knobs)")
        self.algo.validate()
        _check_fields(self, RunConfig, RUN_RANGES, skip=("algo",))
        # Imported here: the run store reads RunConfig without loading torch, which the tasks and models need.
        from rl_core.engine.pretrained import check_model, model_positions, model_width
        from toy_tasks import TASKS

        if self.task not in TASKS:
            raise ValueError(f"task {self.task!r} is unknown; allowed: {', '.join(TASKS)}")
        check_model(self.model)  # a preset, or a loadable causal LM (folder or Hub id)
        task = TASKS[self.task]
        dpo = isinstance(self.algo, PairRunConfig)
        if dpo:
            _require(
                hasattr(task, "preference_pairs"),
                "task",
                self.task,
                f"a task with preference pairs for algo={self.algo.name}, such as 'preference'",
            )
        # DPO samples (for its gold success and KL) within the task's own limit; a reward model reads such responses.
        limit = task.max_new_tokens if dpo else self.algo.max_new_tokens or task.max_new_tokens
        positions = min(model_positions(self.model), task.max_positions)
        # BOS + prompt + response, and one more position for the EOS a reward model reads after a cut response.
        room = positions - 2 - task.max_prompt_length
        _require(
            limit <= room,
            "max_new_tokens",
            limit,
            f"≤ {room} on model={self.model} with task={self.task}: its {positions} positions hold BOS, the "
            f"longest prompt ({task.max_prompt_length} tokens), the response and a closing EOS",
        )
        if dpo:
            return
        if self.algo.critic_init == "reward_model":
            _require(
                hasattr(task, "reward_model_preset"),
                "critic_init",
                self.algo.critic_init,
                f"'policy' on task={self.task}, which has no learned reward model to copy (reward_model needs a "
                "task such as 'preference')",
            )
        if self.algo.use_peft:
            width = model_width(self.model)
            _require(
                self.algo.lora_r <= width,
                "lora_r",
                self.algo.lora_r,
                f"at most the width of model={self.model} (n_embd = {width}): a rank above it adds no direction",
            )
        if self.algo.overlong_buffer is not None:
            _require(
                self.algo.overlong_buffer < limit,
                "overlong_buffer",
                self.algo.overlong_buffer,
                f"fewer tokens than the length limit ({limit} on task={self.task})",
            )


def knob_differences(a: AlgoConfig | RunConfig, b: AlgoConfig | RunConfig) -> dict[str, tuple[object, object]]:
    """The knobs whose values differ between two presets or two runs, name → (a's value, b's value), in the
    configs' field order: the algorithm's knobs, then for runs the run's own fields (task, model, steps, SFT, …).

    A run's seed is left out: runs that differ only in their seed are replicas of one setting, and a comparison
    that differs in more than the knob under study has a confound this names."""
    if isinstance(a, RunConfig) != isinstance(b, RunConfig):
        raise ValueError("knob_differences compares two presets or two runs, not one of each")
    differences = {
        name: (
            getattr(a.algo if isinstance(a, RunConfig) else a, name),
            getattr(b.algo if isinstance(b, RunConfig) else b, name),
        )
        for name in KNOB_NAMES
    }
    if isinstance(a, RunConfig):
        differences |= {
            f.name: (getattr(a, f.name), getattr(b, f.name))
            for f in dataclasses.fields(RunConfig)
            if f.name not in ("algo", "seed")
        }
    return {name: pair for name, pair in differences.items() if pair[0] != pair[1]}


def parse_overrides(assignments: list[str]) -> dict:
    """`["beta=0.1", "dual_clip=none", "loss_agg_mode=token-mean"]` → typed knob values for `get_preset`.

    Only the text is parsed here; `AlgoConfig.validate` then checks every value against `KNOB_RANGES` (and
    `DPOConfig.validate` a preference run's against `DPO_RANGES`: its knobs are parsed here too, and a knob of the
    other kind is refused by the preset's `with_knobs`, which names the preset)."""
    hints = get_type_hints(RewardConfig) | get_type_hints(DPOConfig) | get_type_hints(AlgoConfig)
    overrides = {}
    for assignment in assignments:
        name, sep, text = assignment.partition("=")
        name, text = name.strip(), text.strip()
        if not sep or not name:
            raise ValueError(f"--set {shown(assignment)} is not of the form knob=value")
        if name in IDENTITY_FIELDS:
            raise ValueError(f"{name} names the preset and is not a knob; pick another preset instead")
        if name not in hints or name in IDENTITY_FIELDS:
            raise ValueError(
                f"unknown knob {shown(name)}; allowed: {', '.join(KNOB_NAMES)} (dpo and ipo: "
                f"{', '.join(DPO_KNOB_NAMES)}; reward_model: {', '.join(REWARD_RANGES)})"
            )
        if name in overrides:
            raise ValueError(f"{name} is set twice; give it one value")
        overrides[name] = _parse_value(name, text, hints[name])
    return overrides


def _parse_value(name: str, text: str, hint):
    options = get_args(hint) if get_origin(hint) is not Literal else (hint,)
    if text.lower() in ("none", "null") and type(None) in options:
        return None
    kind = ([o for o in options if o is not type(None)] or [hint])[0]
    if get_origin(kind) is Literal or kind is str:  # names: validate checks them against the choices
        return text
    if kind is bool:
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{name}={shown(text)} is not a boolean; allowed: true or false")
    try:
        return kind(text)
    except ValueError:  # int("2.5"), float("abc"), an integer of more digits than Python converts
        allowed = KNOB_RANGES.get(name) or DPO_RANGES.get(name) or REWARD_RANGES.get(name)
        noun = "an integer" if kind is int else "a number"
        raise ValueError(
            f"{name}={shown(text)} is not {noun}; allowed: {allowed.describe(kind is int) if allowed else noun}"
        ) from None
