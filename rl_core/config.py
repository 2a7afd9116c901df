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
| overlong_punishment | — | overlong_buffer.enable | soft overlong punishment on/off |
| overlong_buffer | — | overlong_buffer.len | L_cache |
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, get_args, get_type_hints

AdvantageEstimator = Literal["reward_to_go", "gae", "grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline"]
PolicyLoss = Literal["vanilla", "clip", "gspo", "gspo_token"]
LossAggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm", "seq-mean-token-sum"]
KLEstimator = Literal["k1", "k2", "k3"]
KLPlacement = Literal["reward", "loss"]
CovMode = Literal["none", "clip_cov", "kl_cov"]

GROUP_ESTIMATORS = ("grpo", "dr_grpo", "rloo", "reinforce_pp_baseline")


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
    use_baseline: bool = True  # reward_to_go only: subtract the batch-mean return
    gamma: float = 1.0
    lam: float = 0.95
    lam_critic: float | None = None  # decoupled GAE (VC-PPO): critic targets with their own λ
    length_adaptive_alpha: float | None = None  # VAPO: λ_actor = 1 − 1/(α·|y|)
    whiten_advantages: bool = False
    # KL to the reference
    beta: float = 0.0
    kl_estimator: KLEstimator = "k3"
    kl_in: KLPlacement = "loss"
    target_kl: float | None = None  # adaptive β (PPO-penalty) when set
    reward_clip: float | None = 5.0
    # policy loss
    policy_loss: PolicyLoss = "clip"
    epsilon: float = 0.2
    epsilon_high: float = 0.2
    dual_clip: float | None = None
    loss_agg_mode: LossAggMode = "token-mean"
    entropy_coef: float = 0.0
    ppo_epochs: int = 2
    num_minibatches: int = 2
    learning_rate: float = 1e-3
    max_grad_norm: float = 1.0
    adam_epsilon: float = 1e-8  # the policy optimiser's ε: gradients far below it per coordinate barely move it
    # critic
    use_critic: bool = False
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

    def replace(self, **overrides) -> "AlgoConfig":
        """A copy with some knobs changed, validated; unknown knob names are refused."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"unknown knob(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}")
        config = dataclasses.replace(self, **overrides)
        config.validate()
        return config

    def validate(self) -> None:
        """Raise ValueError naming the first knob outside its allowed range."""
        for name, hint in get_type_hints(AlgoConfig).items():
            allowed = get_args(hint)
            value = getattr(self, name)
            if allowed and all(isinstance(a, str) for a in allowed) and value not in allowed:
                raise ValueError(f"{name}={value!r} is not allowed; choose one of: {', '.join(allowed)}")
        _require(self.prompts_per_step >= 1, "prompts_per_step", self.prompts_per_step, "an integer ≥ 1")
        _require(self.num_generations >= 1, "num_generations", self.num_generations, "an integer ≥ 1")
        if self.advantage_estimator in GROUP_ESTIMATORS:
            _require(
                self.num_generations >= 2,
                "num_generations",
                self.num_generations,
                f"≥ 2 with advantage_estimator={self.advantage_estimator} (a group baseline needs a group)",
            )
        _require(self.temperature > 0, "temperature", self.temperature, "> 0")
        if self.max_new_tokens is not None:
            _require(self.max_new_tokens >= 1, "max_new_tokens", self.max_new_tokens, "an integer ≥ 1")
        _require(0 <= self.gamma <= 1, "gamma", self.gamma, "0 ≤ γ ≤ 1")
        _require(0 <= self.lam <= 1, "lam", self.lam, "0 ≤ λ ≤ 1")
        if self.lam_critic is not None:
            _require(0 <= self.lam_critic <= 1, "lam_critic", self.lam_critic, "0 ≤ λ ≤ 1")
        if self.length_adaptive_alpha is not None:
            _require(self.length_adaptive_alpha > 0, "length_adaptive_alpha", self.length_adaptive_alpha, "> 0")
        _require(self.beta >= 0, "beta", self.beta, "β ≥ 0")
        if self.target_kl is not None:
            _require(self.target_kl > 0, "target_kl", self.target_kl, "> 0")
        if self.reward_clip is not None:
            _require(self.reward_clip > 0, "reward_clip", self.reward_clip, "> 0")
        _require(0 < self.epsilon < 1, "epsilon", self.epsilon, "0 < ε_low < 1")
        _require(self.epsilon_high > 0, "epsilon_high", self.epsilon_high, "ε_high > 0")
        if self.dual_clip is not None:
            _require(self.dual_clip > 1, "dual_clip", self.dual_clip, "c > 1")
        _require(self.entropy_coef >= 0, "entropy_coef", self.entropy_coef, "≥ 0")
        _require(self.ppo_epochs >= 1, "ppo_epochs", self.ppo_epochs, "an integer ≥ 1")
        _require(self.num_minibatches >= 1, "num_minibatches", self.num_minibatches, "an integer ≥ 1")
        batch = self.prompts_per_step * self.num_generations
        _require(
            self.num_minibatches <= batch,
            "num_minibatches",
            self.num_minibatches,
            f"at most the batch size prompts_per_step × num_generations = {batch}",
        )
        _require(self.learning_rate > 0, "learning_rate", self.learning_rate, "lr > 0")
        _require(self.max_grad_norm > 0, "max_grad_norm", self.max_grad_norm, "> 0")
        _require(self.adam_epsilon > 0, "adam_epsilon", self.adam_epsilon, "> 0")
        _require(self.critic_learning_rate > 0, "critic_learning_rate", self.critic_learning_rate, "> 0")
        _require(self.cliprange_value > 0, "cliprange_value", self.cliprange_value, "> 0")
        _require(self.vf_coef >= 0, "vf_coef", self.vf_coef, "≥ 0")
        _require(self.value_pretrain_steps >= 0, "value_pretrain_steps", self.value_pretrain_steps, "an integer ≥ 0")
        _require(self.positive_nll_coef >= 0, "positive_nll_coef", self.positive_nll_coef, "≥ 0")
        _require(self.max_resample_rounds >= 0, "max_resample_rounds", self.max_resample_rounds, "an integer ≥ 0")
        if self.overlong_buffer is not None:
            _require(self.overlong_buffer >= 1, "overlong_buffer", self.overlong_buffer, "an integer ≥ 1")
        _require(
            0 < self.overlong_buffer_fraction <= 1, "overlong_buffer_fraction", self.overlong_buffer_fraction,
            "0 < fraction ≤ 1 (of the task's length limit)",
        )
        _require(0 < self.cov_fraction <= 1, "cov_fraction", self.cov_fraction, "0 < fraction ≤ 1")
        _require(self.kl_cov_coef >= 0, "kl_cov_coef", self.kl_cov_coef, "≥ 0")
        if self.advantage_estimator == "gae" or self.value_pretrain_steps:
            _require(self.use_critic, "use_critic", self.use_critic, "True when GAE or value pretraining is used")
        if self.dynamic_sampling:
            _require(
                self.num_generations >= 2, "num_generations", self.num_generations, "≥ 2 with dynamic_sampling"
            )


def _require(ok: bool, knob: str, value, allowed: str) -> None:
    if not ok:
        raise ValueError(f"{knob}={value!r} is out of range; allowed: {allowed}")


@dataclass(frozen=True)
class RunConfig:
    """What to train on, for how long, where: everything a run needs besides the algorithm."""

    algo: AlgoConfig
    task: str
    model: str = "tiny"
    steps: int = 100
    seed: int = 0
    device: str = "auto"
    demo_noise: float | None = None  # None: the task's default
    sft_steps: int = 200
    samples_per_record: int = 4

    def validate(self) -> None:
        self.algo.validate()
        _require(self.steps >= 1, "steps", self.steps, "an integer ≥ 1")
        _require(self.sft_steps >= 0, "sft_steps", self.sft_steps, "an integer ≥ 0")
        if self.demo_noise is not None:
            _require(0 <= self.demo_noise <= 1, "demo_noise", self.demo_noise, "0 ≤ noise ≤ 1")
        _require(self.samples_per_record >= 0, "samples_per_record", self.samples_per_record, "an integer ≥ 0")


def parse_overrides(assignments: list[str]) -> dict:
    """`["beta=0.1", "dual_clip=none", "loss_agg_mode=token-mean"]` → typed knob values for `AlgoConfig.replace`."""
    hints = get_type_hints(AlgoConfig)
    overrides = {}
    for assignment in assignments:
        name, sep, text = assignment.partition("=")
        name, text = name.strip(), text.strip()
        if not sep or not name:
            raise ValueError(f"--set {assignment!r} is not of the form knob=value")
        if name not in hints:
            raise ValueError(f"unknown knob {name!r}; allowed: {', '.join(sorted(hints))}")
        overrides[name] = _parse_value(name, text, hints[name])
    return overrides


def _parse_value(name: str, text: str, hint):
    options = get_args(hint)
    if text.lower() in ("none", "null") and type(None) in options:
        return None
    kinds = [o for o in options if o is not type(None)] or [hint]
    if all(isinstance(o, str) for o in kinds):  # a Literal of names
        return text
    kind = kinds[0]
    if kind is bool:
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{name}={text!r} is not a boolean; allowed: true or false")
    if kind is str:
        return text
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a valid {kind.__name__}") from None
