"""One training loop for every preset: rollout → reward → advantages → K epochs × minibatches → metrics.

`Trainer.prepare()` builds the models (SFT warm start, reward model, value pretraining), `Trainer.steps()`
yields one plain-dict record per RL step. Nothing here draws anything: the CLI and the pages consume the records.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import random
import shutil
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import torch

from rl_core.config import RunConfig
from rl_core.engine.models import (
    ValueModel,
    frozen_reference,
    load_policy,
    select_device,
    use_preset_threads,
)
from rl_core.engine.pretrained import model_tokenizer
from rl_core.engine.rollout import (
    Rollout,
    SampleRequest,
    frozen_response_logits,
    response_logits,
    sample,
    token_logprobs,
)
from rl_core.engine.run_batch import run_alone, step_together
from rl_core.engine.sft import default_cache_dir, sft_policy
from rl_core.formulas import kl as kl_estimators
from rl_core.formulas.advantages import reward_to_go, running_mean_update
from rl_core.formulas.aggregation import aggregate_loss
from rl_core.formulas.distillation import TEACHER_DEMO_NOISE, reverse_kl_advantages
from rl_core.formulas.estimators import (
    AdvantageInputs,
    effective_reward_clip,
    estimate_advantages,
    policy_loss,
    whitens_noise_only,
)
from rl_core.formulas.kl_control import adaptive_beta
from rl_core.formulas.kl_stats import kl_estimator_stats
from rl_core.formulas.loss_terms import LossInputs, kl_capped_fraction, loss_parts, policy_per_token
from rl_core.formulas.losses import clip_cov_detach_mask, clipped_value_loss, entropy_from_logits, gspo_sequence_ratio
from rl_core.formulas.masking import masked_mean
from rl_core.formulas.metrics import (
    advantage_stats,
    approx_kl,
    clip_fractions,
    dppo_clip_fractions,
    equal_group_weight_share,
    explained_variance,
    first_last_token_advantages,
    silenced_tokens,
    skewed_group_weight_ratio,
    zero_advantage_group_fraction,
)
from rl_core.formulas.rewards import kl_penalized_token_rewards, overlong_buffer_length, soft_overlong_punishment
from rl_core.formulas.rollout_correction import correction_weights, rollout_mismatch_metrics
from rl_core.formulas.sampling import dynamic_sampling_keep, overlong_filter_mask
from rl_core.runs.staging import staging_folder
from toy_tasks import get_task

Progress = Callable[[str, int, int], None]  # (phase, done, total)
RARE_TOKEN_PROBABILITY = 0.1  # π_old(a_t) below this counts as a rare token in `silenced_rare_frac`

# Value pretraining stops once the critic explains this much of the return variance on a batch it has not seen.
VALUE_PRETRAIN_TARGET = 0.5


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. a loss became NaN); the message says what and where."""


class TrainingStopped(Exception):
    """The stop event was set while the models were being prepared."""


@dataclasses.dataclass(frozen=True)
class ScoredBatch:
    """A step's batch as scored before the update, without gradient (`[B, T]` unless said)."""

    ref_logits: torch.Tensor  # [B, T, V] the reference's logits at the response positions
    ref_logp: torch.Tensor  # log π_ref of the sampled tokens
    old_values: torch.Tensor | None  # the critic's V(s_t) before the update; None without a critic
    kl_in_reward: torch.Tensor  # the configured KL estimate per token (0 on padding), summed for adaptive β
    token_rewards: torch.Tensor  # r_t: the reward on the last token, −β·k folded in where kl_in = reward
    baseline: float | None  # the running-mean baseline this batch subtracts, where the config asks for one
    advantages: torch.Tensor  # what the policy loss sees (a teacher's reverse-KL advantages added in, if any)
    returns: torch.Tensor | None  # the critic's targets; None without a critic
    teacher_logp: torch.Tensor | None  # log π_T of the sampled tokens; None without a teacher
    teacher_stats: dict  # `teacher_kl`, `teacher_kl_exact`; empty without a teacher


CHECKPOINT_FILES = ("trainer_state.json", "trainer_state.pt", "policy")  # what save_checkpoint always writes
CHECKPOINT_OPTIONAL = ("critic",)  # and with a critic


def check_checkpoint_folder(folder: Path) -> None:
    """ValueError unless `folder` is free for a checkpoint: missing, empty, or a checkpoint of the lab (which a new
    one replaces). A folder with anything else in it, or a file, is the user's and is never replaced."""
    if not folder.exists() and not folder.is_symlink():
        return
    if not folder.is_dir() or folder.is_symlink():
        raise ValueError(f"--checkpoint {folder.name} is not a folder; give a new or empty folder, or a checkpoint")
    names = {child.name for child in folder.iterdir()}
    if names and not set(CHECKPOINT_FILES) <= names <= {*CHECKPOINT_FILES, *CHECKPOINT_OPTIONAL}:
        raise ValueError(f"--checkpoint {folder.name} holds files that are not a lab checkpoint; give a new or empty "
                         "folder (an existing checkpoint is replaced, nothing else)")


def stoppable(progress: Progress | None, stop_event: threading.Event) -> Progress:
    """`progress` (or nothing) that first raises TrainingStopped once `stop_event` is set: a setup phase's reports
    are where a stop request ends it."""
    report = progress or (lambda phase, done, total: None)

    def checked(phase: str, done: int, total: int) -> None:
        if stop_event.is_set():
            raise TrainingStopped(f"stopped during {phase}")
        report(phase, done, total)

    return checked


def prepare_warm_start(trainer, progress: Progress):
    """What every run kind starts from, for a trainer's `run`, `task`, `tokenizer`, `device`, `demo_noise` and
    `cache_dir`: the task prepared (its reward model trained or loaded) and the run's SFT policy; returns the policy
    in eval mode and the setup metrics (`sft_success_rate`, `sft_attempts`, `sft_note`)."""
    run = trainer.run
    progress("reward", 0, 1)
    trainer.task.prepare(trainer.cache_dir, trainer.device, run.seed)
    progress("reward", 1, 1)
    policy, sft_report = sft_policy(
        trainer.task, trainer.tokenizer, run.model, run.seed, trainer.demo_noise, run.sft_steps, trainer.device,
        trainer.cache_dir, progress=lambda done, loss: progress("sft", done, run.sft_steps),
    )
    # Eval mode for all of training: dropout stays off (the first update's ratios must be 1, as with TRL's
    # disable_dropout), and the sampler never has to switch modes around a rollout.
    policy.eval()
    setup = {"sft_success_rate": sft_report["success_rate"], "sft_attempts": sft_report["attempts"]}
    if "note" in sft_report:
        setup["sft_note"] = sft_report["note"]
    return policy, setup


@torch.no_grad()
def evaluate_policy(policy, tokenizer, task, max_new_tokens: int, temperature: float, n_prompts: int,
                    seed: int) -> dict:
    """Success rate and mean reward of `policy` on `n_prompts` fresh prompts drawn from `seed`, one sample each."""
    prompts = task.sample_prompts(n_prompts, random.Random(seed))
    generator = torch.Generator(device=next(policy.parameters()).device).manual_seed(seed)
    rollout = sample(policy, tokenizer, prompts, max_new_tokens, temperature, generator)
    scores = task.score(rollout.prompts, rollout.responses, rollout.truncated.tolist())
    return {
        "success_rate": sum(scores.successes) / n_prompts,
        "reward_mean": sum(scores.rewards) / n_prompts,
        "response_length": rollout.lengths.mean().item(),
    }


class Trainer:
    def __init__(self, run: RunConfig, cache_dir: Path | None = None, stop_event: threading.Event | None = None):
        run.validate()
        self.run = run
        self.algo = run.algo
        self.cache_dir = Path(cache_dir or default_cache_dir())
        self.stop_event = stop_event or threading.Event()
        self.device = select_device(run.device, run.model)
        use_preset_threads(run.model, self.device)
        self.task = get_task(run.task)
        self.max_new_tokens = self.algo.max_new_tokens or self.task.max_new_tokens
        self.overlong_buffer = overlong_buffer_length(
            self.max_new_tokens, self.algo.overlong_buffer, self.algo.overlong_buffer_fraction
        )
        if self.algo.overlong_punishment and self.overlong_buffer > self.max_new_tokens:
            raise ValueError(
                f"overlong_buffer={self.algo.overlong_buffer!r} is out of range; allowed: at most the length limit "
                f"{self.max_new_tokens} of task {run.task!r}"
            )
        self.reward_clip = effective_reward_clip(self.algo)
        self.demo_noise = self.task.default_demo_noise if run.demo_noise is None else run.demo_noise
        self.tokenizer = model_tokenizer(run.model)
        self.beta = self.algo.beta
        self.running_baseline: float | None = None  # PG's running-mean baseline b, set by the first batch
        self.step_index = 0
        self.prompt_rng = random.Random(run.seed)
        self.generator = torch.Generator(device=self.device).manual_seed(run.seed)
        self.policy = self.reference = self.critic = self.teacher = None
        self._noise_only_batch = False  # this step's batch carries no reward signal that whitening could scale
        self.optimizer = self.critic_optimizer = None
        self._sampler, self._snapshots, self._snapshot_step = None, None, None  # rollout_staleness > 0

    # ------------------------------------------------------------------ setup
    def prepare(self, progress: Progress | None = None) -> dict:
        """Reward model, SFT policy, reference, critic (value-pretrained if asked); returns setup metrics."""
        progress = stoppable(progress, self.stop_event)
        self.policy, setup = prepare_warm_start(self, progress)
        self.reference = frozen_reference(self.policy)
        self.optimizer = torch.optim.AdamW(
            self.policy.parameters(), lr=self.algo.learning_rate, eps=self.algo.adam_epsilon, weight_decay=0.0, fused=True
        )
        if self.algo.teacher_model is not None:
            setup |= self._prepare_teacher(progress)
        if self.algo.use_critic:
            self.critic = self._initial_critic().to(self.device).eval()
            self.critic_optimizer = torch.optim.AdamW(
                self.critic.parameters(), lr=self.algo.critic_learning_rate, weight_decay=0.0, fused=True
            )
            if self.algo.value_pretrain_steps:
                setup |= self._pretrain_value(progress)
        return setup

    def _prepare_teacher(self, progress: Progress) -> dict:
        """π_T for on-policy distillation: the task's SFT recipe on noise-free demonstrations, `teacher_sft_steps`
        long, on the `teacher_model` preset and the run's seed; cached like the warm start (the same function),
        frozen like the reference."""
        steps = self.algo.teacher_sft_steps
        teacher, report = sft_policy(
            self.task, self.tokenizer, self.algo.teacher_model, self.run.seed, TEACHER_DEMO_NOISE, steps,
            self.device, self.cache_dir, progress=lambda done, loss: progress("teacher", done, steps),
        )
        self.teacher = frozen_reference(teacher)
        return {"teacher_success_rate": report["success_rate"]}

    def _initial_critic(self) -> ValueModel:
        """A copy of the policy's transformer with a zero value head (the usual start: V ≡ 0, explained variance 0,
        until the critic has learnt something), or a copy of the task's reward model (VC-PPO: it scores finished
        responses, so its values at earlier states are biased low)."""
        if self.algo.critic_init == "reward_model":
            critic = copy.deepcopy(self.task.reward_model)
            critic.requires_grad_(True)
            return critic
        # No draw from the global RNG, which other code in the process shares: the head is zeroed right away.
        with torch.random.fork_rng(devices=[]):
            critic = ValueModel.from_policy(self.policy)
        with torch.no_grad():
            critic.value_head.weight.zero_()
            critic.value_head.bias.zero_()
        return critic

    def _pretrain_value(self, progress: Progress) -> dict:
        """VAPO: the policy stays frozen (= SFT); the critic regresses on Monte-Carlo returns (λ = 1), with the
        update schedule of RL (epochs × minibatches) on each fresh batch, until its explained variance on a batch
        it has not trained on reaches VALUE_PRETRAIN_TARGET or `value_pretrain_steps` batches are spent."""
        budget = self.algo.value_pretrain_steps
        for step in range(budget + 1):
            rollout, rewards, _ = run_alone(self._sample_batch(self.algo.prompts_per_step))
            mask = rollout.response_mask
            with torch.no_grad():
                values = self._critic_values(rollout)
                token_rewards = kl_penalized_token_rewards(rewards, torch.zeros_like(mask), mask, 0.0, self.reward_clip)
                returns = reward_to_go(token_rewards, mask, self.algo.gamma)
            held_out = explained_variance(values, returns, mask)  # measured before the critic sees this batch
            if held_out >= VALUE_PRETRAIN_TARGET or step == budget:
                break
            for _ in range(self.algo.ppo_epochs):
                order = torch.randperm(len(rollout.prompts), generator=self.generator, device=self.device)
                for rows in order.chunk(self.algo.num_minibatches):
                    self._critic_update(rollout.select(rows), values[rows], returns[rows])
            progress("value_pretrain", step + 1, budget)
        return {"value_pretrain_explained_variance": held_out, "value_pretrain_batches": step}

    # -------------------------------------------------------------- sampling
    def _sample_batch(self, n_prompts: int) -> Generator[SampleRequest, Rollout, tuple]:
        """`(rollout, rewards, successes)`: n_prompts prompts × G responses, with task rewards (plus DAPO's soft
        overlong punishment); the sampling is asked of whoever drives the step (`rl_core.engine.run_batch`)."""
        prompts = self.task.sample_prompts(n_prompts, self.prompt_rng)
        rollout = yield SampleRequest(
            self._behaviour_policy(), self.tokenizer, prompts, self.max_new_tokens, self._behaviour_temperature,
            self.generator, self.algo.num_generations, self.algo.rollout_dtype,
        )
        scores = self.task.score(rollout.prompts, rollout.responses, rollout.truncated.tolist())
        rewards = torch.tensor(scores.rewards, dtype=torch.float32, device=self.device)
        if self.algo.overlong_punishment:
            # |y| counts the closing EOS, as verl's `valid_response_length` does: an answer is safe when it ends
            # within L_max − L_cache tokens, EOS included (L_cache is what to choose, not what |y| counts).
            rewards = rewards + soft_overlong_punishment(rollout.lengths, self.max_new_tokens, self.overlong_buffer)
        return rollout, rewards, torch.tensor(scores.successes, dtype=torch.bool, device=self.device)

    def _collect(self) -> Generator[SampleRequest, Rollout, tuple]:
        """A training batch `(rollout, rewards, successes, stats)`; the stats describe the policy's fresh sample.

        With dynamic sampling, groups with identical rewards are dropped and refilled from new prompts."""
        rollout, rewards, successes = yield from self._sample_batch(self.algo.prompts_per_step)
        G = self.algo.num_generations
        stats = {
            "reward_mean": rewards.mean().item(),
            "reward_std": rewards.std(unbiased=False).item(),
            "success_rate": successes.float().mean().item(),
            "truncated_frac": rollout.truncated.float().mean().item(),
        }
        if G > 1:  # with one response per prompt there are no groups to be uninformative
            stats["zero_adv_group_frac"] = zero_advantage_group_fraction(rewards, G)
        lengths = rollout.lengths
        stats["response_length"] = lengths.mean().item()
        stats["response_length_correct"] = lengths[successes].mean().item() if successes.any() else math.nan
        stats["response_length_incorrect"] = lengths[~successes].mean().item() if (~successes).any() else math.nan
        if not self.algo.dynamic_sampling:
            return rollout, rewards, successes, stats
        sampled_groups, kept = 0, []
        batch = (rollout, rewards, successes)
        for round_index in range(self.algo.max_resample_rounds + 1):
            if round_index:
                batch = yield from self._sample_batch(self.algo.prompts_per_step)
            keep = dynamic_sampling_keep(batch[1], G)
            sampled_groups += keep.numel()
            rows = torch.nonzero(keep.repeat_interleave(G)).squeeze(-1)
            kept.append((batch[0].select(rows), batch[1][rows], batch[2][rows]))
            if sum(len(k[1]) for k in kept) >= self.algo.prompts_per_step * G:
                break
        kept_groups = sum(len(k[1]) for k in kept) // G
        stats["dynamic_sampling_dropped_frac"] = 1 - kept_groups / sampled_groups
        stats["dynamic_sampling_rounds"] = round_index + 1
        if kept_groups == 0:  # nothing informative: train on the first batch (its advantages are all zero)
            return rollout, rewards, successes, stats
        rows = torch.arange(min(kept_groups, self.algo.prompts_per_step) * G, device=self.device)
        merged = _concat_rollouts([k[0] for k in kept]).select(rows)
        return merged, torch.cat([k[1] for k in kept])[rows], torch.cat([k[2] for k in kept])[rows], stats

    def _behaviour_policy(self):
        """The sampler μ: the policy itself, or with `rollout_staleness = k` its copy from k steps ago (early on,
        the oldest kept), loaded from a queue of the last k + 1 steps' weights."""
        k = self.algo.rollout_staleness
        if k == 0:
            return self.policy
        if self._sampler is None:
            self._sampler = copy.deepcopy(self.policy)
            self._snapshots = deque(maxlen=k + 1)
        if self._snapshot_step != self.step_index:
            self._snapshots.append({name: t.detach().clone() for name, t in self.policy.state_dict().items()})
            self._sampler.load_state_dict(self._snapshots[0])
            self._snapshot_step = self.step_index
        return self._sampler

    @property
    def _behaviour_temperature(self) -> float:
        return self.algo.temperature if self.algo.rollout_temperature is None else self.algo.rollout_temperature

    @property
    def _behaviour_differs(self) -> bool:
        """Whether the sampler μ may differ from π_old: a stale copy, another sampling temperature, or another
        precision. Otherwise the sampler's own log-probabilities are π_old's: μ ≡ π_old, the mismatch removed."""
        return (self.algo.rollout_staleness > 0 or self._behaviour_temperature != self.algo.temperature
                or self.algo.rollout_dtype != "float32")

    def _with_trainer_logprobs(self, batch: Rollout) -> Rollout:
        """A batch sampled by μ (stale, or at another temperature), seen by the trainer: π_old's logits, log-probs
        and entropy from a teacher-forced pass of the current policy, μ's log-probs kept as `behaviour_logp`."""
        mask = batch.response_mask
        logits = frozen_response_logits(self.policy, batch, self.algo.temperature)
        trainer_batch = dataclasses.replace(
            batch,
            logits=logits,
            old_logp=token_logprobs(logits, batch.response_ids) * mask,
            entropy=entropy_from_logits(logits) * mask,
            behaviour_logp=batch.old_logp,
        )
        trainer_batch.__dict__["prefix_tree"] = batch.prefix_tree  # the same tokens: the packed layout serves
        return trainer_batch

    # ----------------------------------------------------------------- critic
    def _critic_values(self, batch: Rollout) -> torch.Tensor:
        """V(s_t) `[B, T]` at the state before each response token (read where its logits are read)."""
        values = self.critic(batch.sequences, batch.attention_mask)
        if not torch.isfinite(values).all():  # else the NaN reaches the advantages and looks like the policy's
            raise TrainingError(
                f"step {self.step_index + 1}: the critic diverged (its values are no longer finite); lower "
                f"critic_learning_rate (now {self.algo.critic_learning_rate:g}) or vf_coef (now {self.algo.vf_coef:g})"
            )
        start = batch.prompt_length - 1
        return values[:, start : start + batch.response_mask.shape[1]] * batch.response_mask

    def _critic_update(self, batch: Rollout, old_values: torch.Tensor, returns: torch.Tensor) -> dict:
        values = self._critic_values(batch)
        loss = aggregate_loss(
            clipped_value_loss(values, old_values, returns, self.algo.cliprange_value), batch.response_mask, "token-mean"
        )
        self.critic_optimizer.zero_grad(set_to_none=True)
        (self.algo.vf_coef * loss).backward()
        torch.nn.utils.clip_grad_norm_(self.critic.parameters(), self.algo.max_grad_norm)
        self.critic_optimizer.step()
        return {
            "critic_loss": loss.item(),
            "explained_variance": explained_variance(values.detach(), returns, batch.response_mask),
        }

    # ------------------------------------------------------------------- step
    def steps(self) -> Iterator[dict]:
        """Train for `run.steps` steps (or until stopped), yielding one record per step."""
        if self.policy is None:
            self.prepare()
        while self.step_index < self.run.steps and not self.stop_event.is_set():
            yield self.step()

    def step(self) -> dict:
        """One step alone: a batch of one run (`rl_core.engine.run_batch`)."""
        outcome = step_together([self])[0]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def step_phases(self) -> Generator[SampleRequest, Rollout, tuple[dict, int]]:
        """One RL step as a coroutine: it yields each sampling request and is sent the rollout; it returns the
        step's record and how many response tokens it trained on (the driver times the step).

        The phases, in the order of docs/ALGORITHMS.md: sample and reward (DAPO's filters included); where μ is not
        π_old, π_old's log-probabilities and the mismatch; score the batch (reference, critic, KL in the reward,
        advantages, a teacher's); the step's metrics; K epochs × minibatches of updates; adaptive β."""
        algo = self.algo
        batch, rewards, successes, stats = yield from self._collect()
        if self._behaviour_differs:
            batch = self._with_trainer_logprobs(batch)
            stats |= rollout_mismatch_metrics(
                batch.old_logp, batch.behaviour_logp, batch.response_mask, algo.rollout_is_level,
                algo.rollout_is_threshold, self._rollout_weights(batch, batch.old_logp, batch.response_mask),
            )
        mask = batch.response_mask
        loss_mask = overlong_filter_mask(mask, batch.truncated) if algo.overlong_filter else mask
        old_logp = batch.old_logp  # as sampled (or recomputed): on the first update the ratio is 1 up to rounding
        with torch.no_grad():
            scored = self._score(batch, rewards, old_logp)
            record = {"step": self.step_index + 1, **stats, **self._batch_metrics(batch, rewards, old_logp, scored)}
        # A teacher's signal is no noise: with one, equal task rewards never make a step noise only.
        self._noise_only_batch = (algo.skip_no_signal_updates and self.teacher is None
                                  and whitens_noise_only(algo, rewards, self.beta))
        record.update(self._update(
            batch, rewards, old_logp, scored.ref_logp, scored.advantages, scored.old_values, scored.returns, loss_mask,
            scored.teacher_logp,
        ))
        if algo.target_kl is not None:
            self.beta = adaptive_beta(self.beta, record["kl_sequence"], algo.target_kl)
        record["samples"] = self._sample_views(
            batch, rewards, successes, old_logp, scored.advantages, scored.ref_logp, scored.token_rewards,
            scored.old_values, scored.returns, scored.teacher_logp,
        )
        self.step_index += 1
        return record, int(mask.sum().item())

    def _score(self, batch: Rollout, rewards: torch.Tensor, old_logp: torch.Tensor) -> ScoredBatch:
        """The batch scored before any update: the reference's log-probabilities, the critic's values, the KL
        estimate folded into the per-token rewards (`kl_in = reward`), the advantages, and a teacher's scores."""
        algo, mask = self.algo, batch.response_mask
        ref_logits = frozen_response_logits(self.reference, batch, algo.temperature)
        ref_logp = token_logprobs(ref_logits, batch.response_ids)
        old_values = self._critic_values(batch) if self.critic is not None else None
        kl_in_reward = kl_estimators.KL_ESTIMATORS[algo.kl_estimator](old_logp, ref_logp) * mask
        beta_in_reward = self.beta if algo.kl_in == "reward" else 0.0
        token_rewards = kl_penalized_token_rewards(rewards, kl_in_reward, mask, beta_in_reward, self.reward_clip)
        baseline = self._running_baseline(token_rewards, mask) if algo.baseline == "running_mean" else None
        advantages, returns = estimate_advantages(
            algo, AdvantageInputs(token_rewards, mask, old_values, algo.num_generations, baseline)
        )
        teacher_logp, teacher_stats = None, {}
        if self.teacher is not None:
            teacher_logp, teacher_stats = self._teacher_scores(batch, old_logp)
            advantages = self._distillation_advantages(advantages, old_logp, teacher_logp, mask)
        return ScoredBatch(ref_logits, ref_logp, old_values, kl_in_reward, token_rewards, baseline, advantages, returns,
                           teacher_logp, teacher_stats)

    def _batch_metrics(
        self, batch: Rollout, rewards: torch.Tensor, old_logp: torch.Tensor, scored: ScoredBatch
    ) -> dict:
        """The step's metrics of the batch as sampled and scored: entropy, the exact KL and each estimator's,
        advantage statistics, β and the KL it adapts to, a teacher's KL, the group weights."""
        algo, mask = self.algo, batch.response_mask
        exact_kl = kl_estimators.kl_exact(batch.logits, scored.ref_logits)
        metrics = {
            "entropy": masked_mean(batch.entropy, mask).item(),
            "kl_exact": masked_mean(exact_kl, mask).item(),
            **kl_estimator_stats(old_logp, scored.ref_logp, exact_kl, mask),
            **{
                f"kl_{name}": masked_mean(fn(old_logp, scored.ref_logp), mask).item()
                for name, fn in kl_estimators.KL_ESTIMATORS.items()
            },
            **{f"advantage_{k}": v for k, v in advantage_stats(scored.advantages, mask).items()},
            **first_last_token_advantages(scored.advantages, mask),
            "beta": self.beta,
            # The measured KL that adaptive β compares with target_kl: the estimator summed over each response.
            "kl_sequence": scored.kl_in_reward.sum(-1).mean().item(),
            **scored.teacher_stats,
        }
        if scored.baseline is not None:
            metrics["baseline"] = scored.baseline
        if algo.num_generations > 1:
            seq_advantages = masked_mean(scored.advantages, mask, dim=-1)
            metrics["skewed_group_weight_ratio"] = skewed_group_weight_ratio(
                seq_advantages, rewards, algo.num_generations
            )
            metrics["equal_group_weight_share"] = equal_group_weight_share(
                seq_advantages, rewards, algo.num_generations
            )
        return metrics

    def _teacher_scores(self, batch: Rollout, old_logp: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """The teacher's log-probabilities of the sampled tokens `[B, T]`, and the records of how far the student is
        from it: `teacher_kl` (k1 of KL(π_θ‖π_T) per token, what the policy-gradient form's advantages average to,
        negated) and `teacher_kl_exact` (the exact per-state KL over the vocabulary)."""
        mask = batch.response_mask
        teacher_logits = frozen_response_logits(self.teacher, batch, self.algo.temperature)
        teacher_logp = token_logprobs(teacher_logits, batch.response_ids)
        return teacher_logp, {
            "teacher_kl": masked_mean(kl_estimators.kl_k1(old_logp, teacher_logp), mask).item(),
            "teacher_kl_exact": masked_mean(kl_estimators.kl_exact(batch.logits, teacher_logits), mask).item(),
        }

    def _distillation_advantages(self, task_advantages, old_logp, teacher_logp, mask) -> torch.Tensor:
        """The advantages the policy loss sees with a teacher: the task's (or none, `use_task_rewards=False`), plus
        in the policy-gradient form `c_distill · reverse_kl_advantages`, scored when the batch was sampled, as a
        reward is (the supervised form is a loss term instead: `rl_core.formulas.loss_terms`)."""
        algo = self.algo
        advantages = task_advantages if algo.use_task_rewards else torch.zeros_like(task_advantages)
        if algo.use_policy_gradient:
            advantages = advantages + algo.distillation_loss_coef * reverse_kl_advantages(
                old_logp, teacher_logp, mask, algo.distillation_loss_mode
            )
        return advantages

    def _running_baseline(self, token_rewards: torch.Tensor, mask: torch.Tensor) -> float:
        """The b this batch's advantages subtract — the running mean of the earlier batches' mean returns (the
        first batch's own mean) — then b ← 0.9·b + 0.1·mean(R) with this batch."""
        batch_mean = (token_rewards * mask).sum(-1).mean().item()
        used = batch_mean if self.running_baseline is None else self.running_baseline
        self.running_baseline = running_mean_update(used, batch_mean)
        return used

    def _update(
        self, batch, rewards, old_logp, ref_logp, advantages, old_values, returns, loss_mask, teacher_logp=None
    ) -> dict:
        """K epochs × minibatches of policy (and critic) updates on one batch of experience."""
        algo = self.algo
        size = len(batch.prompts)
        positive = None
        if algo.positive_nll_coef > 0:
            # VAPO imitates its best responses; when every reward is equal there is no best one to imitate.
            positive = (rewards >= rewards.max()) & (rewards.max() > rewards.min())
        sums: dict[str, float] = {}
        updates = skipped = 0
        for _ in range(algo.ppo_epochs):
            order = torch.randperm(size, generator=self.generator, device=self.device)
            for rows in order.chunk(algo.num_minibatches):
                part = batch.select(rows)
                metrics = self._policy_update(
                    part, old_logp[rows], ref_logp[rows], advantages[rows], loss_mask[rows],
                    None if positive is None else positive[rows],
                    None if teacher_logp is None else teacher_logp[rows],
                )
                skipped += metrics.pop("skipped_update")
                if self.critic is not None:
                    metrics |= self._critic_update(part, old_values[rows], returns[rows])
                for k, v in metrics.items():
                    sums[k] = sums.get(k, 0.0) + v
                updates += 1
        return {k: v / updates for k, v in sums.items()} | {"skipped_updates": skipped}

    def _policy_update(self, part, old_logp, ref_logp, advantages, mask, positive, teacher_logp=None) -> dict:
        algo = self.algo
        logits = response_logits(self.policy, part, algo.temperature)
        logp = token_logprobs(logits, part.response_ids)
        if algo.cov_mode == "clip_cov":
            detach = clip_cov_detach_mask(logp, advantages, mask, algo.cov_fraction, 1.0, 5.0, self.generator)
            logp = torch.where(detach, logp.detach(), logp)
        inputs = LossInputs(
            algo, logits, logp, old_logp, ref_logp, advantages, mask, self.beta, self.max_new_tokens, positive,
            self._rollout_weights(part, old_logp, mask), teacher_logp,
        )
        parts = loss_parts(inputs)
        total = sum(parts.values())
        parts = {k: v.item() for k, v in parts.items()}
        if not torch.isfinite(total):
            raise TrainingError(
                f"step {self.step_index + 1}: the loss became {total.item()} "
                f"({', '.join(f'{k}={v:.4g}' for k, v in parts.items())}); lower learning_rate or check the knobs"
            )
        silenced = self._silenced_fractions(inputs)
        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), algo.max_grad_norm).item()
        if not math.isfinite(grad_norm):
            raise TrainingError(f"step {self.step_index + 1}: the gradient norm became {grad_norm}; lower learning_rate")
        # Every advantage 0 and no other term (the gradient is exactly 0: Adam's momentum alone would move on), or
        # whitened noise (see whitens_noise_only): no optimiser step.
        skip = algo.skip_no_signal_updates and (grad_norm == 0.0 or self._noise_only_batch)
        if not skip:
            self.optimizer.step()
        with torch.no_grad():
            ratio = torch.exp(logp.detach() - old_logp)
            if self._clips_sequences:
                # GSPO clips whole responses, so its clip fractions count responses, not tokens.
                seq_ratio = gspo_sequence_ratio(logp.detach(), old_logp, mask)[:, None]
                seq_advantages = masked_mean(advantages, mask, dim=-1)[:, None]
                seq_mask = (mask.sum(-1, keepdim=True) > 0).float()
                clips = clip_fractions(seq_ratio, seq_advantages, seq_mask, algo.epsilon, algo.epsilon_high)
                # The GSPO paper and verl's pg_clipfrac count tokens: every token of a clipped response is clipped.
                clips["clip_frac_tokens"] = clip_fractions(
                    seq_ratio.expand_as(mask), seq_advantages.expand_as(mask), mask, algo.epsilon, algo.epsilon_high
                )["clip_frac"]
            elif algo.policy_loss == "dppo_tv":  # a trust region in probability: its clip is the mask
                clips = dppo_clip_fractions(
                    logp.detach(), old_logp, advantages, mask, algo.dppo_delta_low, algo.dppo_delta_high
                )
            else:
                clips = clip_fractions(ratio, advantages, mask, algo.epsilon, algo.epsilon_high, algo.dual_clip)
            # The share of tokens the clip (or DPPO's mask) silences, whatever the loss clips: one axis for all.
            clips.setdefault("clip_frac_tokens", clips["clip_frac"])
            if "kl_loss" in parts:
                clips["kl_capped_frac"] = kl_capped_fraction(inputs)
            return {
                **parts,
                "total_loss": total.item(),
                "approx_kl": approx_kl(logp.detach(), old_logp, mask),
                "grad_norm": grad_norm,
                "skipped_update": int(skip),
                "ratio_mean": masked_mean(ratio, mask).item(),
                **clips,
                **silenced,
            }

    def _rollout_weights(self, part, old_logp, mask) -> torch.Tensor | None:
        """TIS / MIS or divergence-gated weights `sg[w]` of the policy loss (`[B, T]` per token, `[B, 1]` per
        response), or None when π_old sampled the batch itself or no correction is asked for."""
        if part.behaviour_logp is None:
            return None
        algo = self.algo
        return correction_weights(old_logp, part.behaviour_logp, mask, algo.rollout_is_mode, algo.rollout_is_level,
                                  algo.rollout_is_threshold, algo.is_correction_gating, algo.is_correction_threshold)

    def _silenced_fractions(self, x: LossInputs) -> dict:
        """Where the policy loss's gradient w.r.t. log π_θ is exactly 0 although A ≠ 0 (PPO's active clip,
        DPPO's mask, MIS's dropped samples; never CISPO or SAPO): `silenced_frac` of the valid tokens, and
        `silenced_rare_frac`, the share of valid tokens that are rare (π_old(a_t) < 0.1) and silenced."""
        silenced = silenced_tokens(policy_per_token(x), x.logp, x.advantages)
        rare = x.old_logp < math.log(RARE_TOKEN_PROBABILITY)
        return {
            "silenced_frac": masked_mean(silenced.float(), x.mask).item(),
            "silenced_rare_frac": masked_mean((silenced & rare).float(), x.mask).item(),
        }

    @torch.no_grad()
    def _sample_views(
        self, batch, rewards, successes, old_logp, advantages, ref_logp, token_rewards, values, returns,
        teacher_logp=None,
    ) -> list[dict]:
        """A few responses token by token: advantage, ratio after this step's updates, clipped or not, entropy;
        and what a run export needs: log-probabilities (now, as sampled, reference, and the teacher's when there is
        one), token rewards, the critic's values and targets (when there are any), the KL estimate and the objective
        `−L_t` per token."""
        n = min(self.run.samples_per_record, len(batch.prompts))
        if n == 0:
            return []
        rows = torch.arange(n, device=self.device)
        part = batch.select(rows)
        logits = response_logits(self.policy, part, self.algo.temperature)
        logp = token_logprobs(logits, part.response_ids)
        ratio = torch.exp(logp - old_logp[rows])
        adv = advantages[rows]
        # A token is clipped when its clip is active given the sign of A; for GSPO its response's ratio decides.
        unit_ratio = ratio
        if self._clips_sequences:
            sequence_ratio = gspo_sequence_ratio(logp, old_logp[rows], part.response_mask)
            unit_ratio = sequence_ratio[:, None].expand_as(ratio)
        clipped = ((unit_ratio > 1 + self.algo.epsilon_high) & (adv > 0)) | ((unit_ratio < 1 - self.algo.epsilon) & (adv < 0))
        # Silenced: the configured policy loss gives the token no gradient although A ≠ 0 (PPO's clip, DPPO's mask;
        # never CISPO or SAPO) — `clipped` is PPO's rule whatever the loss, so the two side by side show the difference.
        with torch.enable_grad():
            leaf = logp.detach().requires_grad_()
            loss = policy_loss(self.algo, leaf, old_logp[rows], adv, part.response_mask)
            silenced = silenced_tokens(loss, leaf, adv)
        token_kl = kl_estimators.KL_ESTIMATORS[self.algo.kl_estimator](logp, ref_logp[rows])
        objective = -loss.detach()
        per_token = {"old_log_probs": old_logp, "ref_log_probs": ref_logp, "rewards": token_rewards,
                     "values": values, "returns": returns, "teacher_log_probs": teacher_logp}
        per_token = {k: v[rows] for k, v in per_token.items() if v is not None}
        per_token |= {"log_probs": logp, "token_kl": token_kl, "token_objective": objective}
        views = []
        for i in range(n):
            length = int(part.response_mask[i].sum().item())
            ids = part.response_ids[i, :length].tolist()
            views.append(
                {
                    "prompt": part.prompts[i],
                    "response": part.responses[i],
                    "tokens": [self.tokenizer.convert_ids_to_tokens(t) for t in ids],
                    "reward": rewards[i].item(),
                    "success": bool(successes[i]),
                    "truncated": bool(part.truncated[i]),
                    "advantages": adv[i, :length].tolist(),
                    "ratios": ratio[i, :length].tolist(),
                    "clipped": clipped[i, :length].tolist(),
                    "silenced": silenced[i, :length].tolist(),
                    "entropies": part.entropy[i, :length].tolist(),
                    "ids": ids,
                    **{k: v[i, :length].tolist() for k, v in per_token.items()},
                }
            )
        return views

    @torch.no_grad()
    def evaluate(self, n_prompts: int = 256, seed: int = 12345) -> dict:
        """Success rate and mean reward of the current policy on fresh prompts, one sample each."""
        return evaluate_policy(self.policy, self.tokenizer, self.task, self.max_new_tokens, self.algo.temperature,
                               n_prompts, seed)

    @property
    def _clips_sequences(self) -> bool:
        return self.algo.policy_loss in ("gspo", "gspo_token")

    # ------------------------------------------------------------ checkpoints
    def save_checkpoint(self, folder: str | Path) -> Path:
        """Policy, critic, optimisers and counters, written to a staging folder and renamed into place.

        Tensors (optimiser moments, the sampling generator's state) go to `trainer_state.pt`, read back with
        `torch.load(weights_only=True)`, which unpickles tensors and plain containers only; counters and the
        prompt sampler's state go to `trainer_state.json`. A folder that holds anything else is refused
        (`check_checkpoint_folder`): the old checkpoint is replaced, nothing the lab did not write is deleted."""
        folder = Path(folder)
        check_checkpoint_folder(folder)
        staging = staging_folder(folder)
        try:
            self.policy.save_pretrained(staging / "policy")
            self.tokenizer.save_pretrained(staging / "policy")
            if self.critic is not None:
                self.critic.save(staging / "critic")
            torch.save(
                {
                    "optimizer": self.optimizer.state_dict(),
                    "critic_optimizer": self.critic_optimizer.state_dict() if self.critic_optimizer else None,
                    "generator": self.generator.get_state(),
                    # the stale sampler's queue (rollout_staleness > 0), so a resumed run samples as it would have
                    "behaviour_snapshots": None if self._snapshots is None else list(self._snapshots),
                },
                staging / "trainer_state.pt",
            )
            version, internal, gauss = self.prompt_rng.getstate()
            (staging / "trainer_state.json").write_text(json.dumps(
                {
                    "step_index": self.step_index,
                    "beta": self.beta,
                    "running_baseline": self.running_baseline,
                    "snapshot_step": self._snapshot_step,
                    "prompt_rng": [version, list(internal), gauss],
                }
            ))
            backup = folder.with_name(folder.name + ".old")
            if folder.exists():
                folder.rename(backup)
            staging.rename(folder)
            shutil.rmtree(backup, ignore_errors=True)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return folder

    def load_checkpoint(self, folder: str | Path) -> None:
        """Resume from `save_checkpoint`'s folder (call after `prepare()`)."""
        folder = Path(folder)
        state = torch.load(folder / "trainer_state.pt", map_location=self.device, weights_only=True)
        counters = json.loads((folder / "trainer_state.json").read_text())
        self.policy.load_state_dict(load_policy(folder / "policy").state_dict())
        if self.critic is not None:
            self.critic.load_state_dict(ValueModel.load(folder / "critic").state_dict())
            self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step_index = counters["step_index"]
        self.beta = counters["beta"]
        version, internal, gauss = counters["prompt_rng"]
        self.prompt_rng.setstate((version, tuple(internal), gauss))
        self.running_baseline = counters.get("running_baseline")
        self.generator.set_state(state["generator"].cpu())
        if state.get("behaviour_snapshots") is not None:
            self._behaviour_policy()  # builds the sampler and its queue
            self._snapshots.clear()
            self._snapshots.extend(state["behaviour_snapshots"])
            self._sampler.load_state_dict(self._snapshots[0])
            self._snapshot_step = counters["snapshot_step"]


def _concat_rollouts(parts: list[Rollout]) -> Rollout:
    """Stack rollouts of possibly different widths by padding prompts on the left and responses on the right."""
    if len(parts) == 1:
        return parts[0]
    prompt_length = max(p.prompt_length for p in parts)
    response_length = max(p.response_mask.shape[1] for p in parts)

    def pad(t, left, right, value=0):
        return torch.nn.functional.pad(t, (left, right), value=value)

    fields = {k: [] for k in ("sequences", "attention_mask", "response_mask", "logits", "old_logp", "entropy")}
    for p in parts:
        left, right = prompt_length - p.prompt_length, response_length - p.response_mask.shape[1]
        fields["sequences"].append(pad(p.sequences, left, right))
        fields["attention_mask"].append(pad(p.attention_mask, left, right))
        for k in ("response_mask", "old_logp", "entropy"):
            fields[k].append(pad(getattr(p, k), 0, right))
        fields["logits"].append(torch.nn.functional.pad(p.logits, (0, 0, 0, right)))
    return Rollout(
        prompt_length=prompt_length,
        ended_with_eos=torch.cat([p.ended_with_eos for p in parts]),
        prompts=[s for p in parts for s in p.prompts],
        responses=[s for p in parts for s in p.responses],
        **{k: torch.cat(v) for k, v in fields.items()},
    )
