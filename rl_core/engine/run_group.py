"""A group of runs trained as one program: the unit of training (one run is a group of one).

Runs that share their shapes (`Trainer.group_key`: model, task, G, prompts per step, length limit, the passes of
their algorithm) keep their models stacked for as long as they train together (`stacked_runs.Stack`: one `[R, N]`
buffer per model, each run's module a view of its row). A step of the group follows docs/ALGORITHMS.md for all R
runs at once:

1. sample — one token-by-token loop for all runs (dynamic sampling's further rounds for the runs still short);
2. reward — each run's task scores its own responses (text, in Python: the one part that is a loop over runs);
3. π_old — where the sampler differs from the trainer, a pass of the current policies;
4. score — one pass of the references (critics, teachers), then the KL in the reward and the advantages;
5. metrics — of the batch as sampled and scored;
6. update — K epochs × minibatches, each one pass of the policies (and critics), one loss, one backward and one
   AdamW step (`stacked_adamw`) for all runs; runs whose update is skipped or failed keep their weights;
7. the records — every per-run number moved to the host in one transfer; adaptive β and the running baseline.

The formulas are the same pure functions a single run uses, computed for every run at once by `torch.func.vmap`
(`per_run`). Runs share one vmapped call when their configs differ at most in `VECTOR_KNOBS` (passed as `[R]`
tensors) and the knobs read outside the formulas (`RUN_KNOBS`: learning rates, Adam's ε, the gradient clip, the
temperature); runs whose formulas differ (a clip and CISPO, say) share every pass and the update, and call their
formulas apart. Summation order: a stacked pass pads each run's prefix tree to the largest run's, and a run's
`[B, T]` tensors to the group's longest response; padding is masked, so it changes sums only by the order in
which float additions are done (docs/ARCHITECTURE.md, "A group of runs").
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_map

from rl_core.engine.lora import share_base
from rl_core.engine.packing import prefix_trees
from rl_core.engine.rollout import Rollout, token_logprobs
from rl_core.engine.stacked_adamw import StackedAdamW, clip_grad_norms, stacked_state
from rl_core.engine.stacked_runs import (
    AdapterStack,
    Stack,
    StackedGPT2,
    sample_runs,
    stacked_trees,
    teacher_forced,
    teacher_forced_logits,
)
from rl_core.formulas import kl as kl_estimators
from rl_core.formulas.advantages import reward_to_go, running_mean_update
from rl_core.formulas.aggregation import aggregate_loss
from rl_core.formulas.distillation import reverse_kl_advantages
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
    skewed_group_weight_ratio,
    zero_advantage_group_fraction,
)
from rl_core.formulas.rewards import kl_penalized_token_rewards
from rl_core.formulas.rollout_correction import correction_weights, rollout_mismatch_metrics
from rl_core.formulas.sampling import dynamic_sampling_keep, overlong_filter_mask

# Knobs a formula may read as a tensor, one value per run: runs that differ in them share one vmapped call.
VECTOR_KNOBS = ("epsilon", "epsilon_high", "gamma", "lam", "cliprange_value", "vf_coef")
# Knobs read outside the formulas, per run: the optimisers', the gradient clip, the temperatures, the setup's.
RUN_KNOBS = (
    "learning_rate",
    "adam_epsilon",
    "max_grad_norm",
    "critic_learning_rate",
    "temperature",
    "rollout_temperature",
    "teacher_sft_steps",
    "value_pretrain_steps",
)
IDENTITY = ("name", "title", "summary")
RARE_TOKEN_PROBABILITY = 0.1  # π_old(a_t) below this counts as a rare token in `silenced_rare_frac`
CRITIC_ADAM_EPSILON = 1e-8  # torch's default, the critic's optimiser
# Value pretraining stops once the critic explains this much of the return variance on a batch it has not seen.
VALUE_PRETRAIN_TARGET = 0.5


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. a loss became NaN); the message says what and where."""


class _Knobs:
    """A run's config as a formula reads it: the vector knobs' values of this run (0-dim tensors under vmap), every
    other field from the config its formula group shares, and `current_beta`, the run's β now (adaptive with
    target_kl): its value where β is on, the number 0 where it is off (so that no term reads a tensor to decide)."""

    def __init__(self, algo, values: dict[str, torch.Tensor]):
        self.__dict__.update(_algo=algo, _values=values)

    def __getattr__(self, name):
        values = self.__dict__["_values"]
        if name == "current_beta":
            return values.get("beta", 0.0)
        return values[name] if name in values else getattr(self.__dict__["_algo"], name)


def per_run(fn: Callable, algo, knobs: dict[str, torch.Tensor], *args):
    """`fn(config, *args)` for every run of a formula group at once: each arg a `[R, …]` tensor (or None), each
    knob's values `[R]`; what `fn` returns (tensors, dicts and tuples of them) comes back with a leading run axis.
    A group of one calls `fn` directly on its run's slices (vmap's bookkeeping would buy nothing)."""

    def one(values, *per_run_args):
        return fn(_Knobs(algo, values), *per_run_args)

    if next(a for a in args if a is not None).shape[0] == 1:
        out = one({k: v[0] for k, v in knobs.items()}, *(None if a is None else a[0] for a in args))
        return tree_map(lambda t: t.unsqueeze(0), out)
    in_dims = (0, *(None if a is None else 0 for a in args))
    return torch.func.vmap(one, in_dims=in_dims)(knobs, *args)


def formula_key(algo, beta: float) -> tuple:
    """Runs with equal keys compute their formulas in one vmapped call: every field but the vector, run and identity
    knobs, and whether β is on (a KL term is in the loss, or not)."""
    skip = (*VECTOR_KNOBS, *RUN_KNOBS, *IDENTITY)
    return (*((f.name, getattr(algo, f.name)) for f in dataclasses.fields(algo) if f.name not in skip), beta != 0)


@dataclasses.dataclass
class FormulaGroup:
    algo: object  # the config its runs share (a vector knob's value here is the first run's)
    positions: torch.Tensor | None  # where its runs sit in the part being stepped; None: all of them, in order
    knobs: dict[str, torch.Tensor]  # vector knobs `[R']` (and `beta` while it is on)
    beta_on: bool

    def take(self, x):
        return x if x is None or self.positions is None else x[self.positions]


class Part:
    """Runs of a group stepped together after sampling: those whose batches have the same size (all of them,
    unless dynamic sampling left some short). Their stacked tensors are `[R', B, …]`."""

    def __init__(self, group: RunGroup, runs: list[int], batches: list[tuple]):
        self.group, self.runs = group, runs
        self.index = None if runs == list(range(group.R)) else torch.tensor(runs, device=group.device)
        self.trainers = [group.trainers[r] for r in runs]
        self.rollouts: list[Rollout] = [batches[r][0] for r in runs]
        self.T = max(b.response_mask.shape[1] for b in self.rollouts)
        self.run_axis = torch.arange(len(runs), device=group.device)[:, None]
        self.rewards = torch.stack([batches[r][1] for r in runs])
        self.successes = torch.stack([batches[r][2] for r in runs])
        mask = self.stacked("response_mask")
        self.mask = mask
        self.ids = self.stacked("response_ids")
        self.truncated = torch.stack([b.truncated for b in self.rollouts])
        # Every run's prompts, left-padded to the widest run's, for the prefix trees of its batch and minibatches.
        P = max(b.prompt_length for b in self.rollouts)
        self.prompt_ids, self.prompt_mask = (
            torch.stack([F.pad(getattr(b, f)[:, : b.prompt_length], (P - b.prompt_length, 0)) for b in self.rollouts])
            for f in ("sequences", "attention_mask")
        )
        self.widths = torch.tensor(
            [(b.prompt_length, b.response_mask.shape[1]) for b in self.rollouts], device=group.device
        )
        self.layout = self.tree()
        self.skip_no_signal = torch.tensor([t.algo.skip_no_signal_updates for t in self.trainers], device=group.device)
        self.formulas = []
        keys: dict[tuple, list[int]] = {}
        for p, trainer in enumerate(self.trainers):
            keys.setdefault(formula_key(trainer.algo, trainer.beta), []).append(p)
        for positions in keys.values():
            algo = self.trainers[positions[0]].algo
            knobs = {k: self.knob(k, positions) for k in VECTOR_KNOBS}
            if self.trainers[positions[0]].beta != 0:
                knobs["beta"] = self.knob("beta", positions, state=True)
            index = None if len(keys) == 1 else torch.tensor(positions, device=group.device)
            self.formulas.append(FormulaGroup(algo, index, knobs, "beta" in knobs))

    def tree(self, rows: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        """The stacked prefix trees (`stacked_trees`' layout) of every run's batch, or of its rows `rows` `[R', b]`:
        built for all runs at once (`packing.prefix_trees`), or tree by tree where they are not plain prefix
        trees. A shuffle of the whole batch reads the batch's layout re-indexed, as `Rollout.select` reads a
        run's own tree; where the batch's layout is not every run's own tree, the trees themselves."""
        shuffle = rows is not None and rows.shape[1] == self.mask.shape[1]
        if shuffle and self.own_trees:
            input_ids, position_ids, mask, index, tokens = self.layout
            return input_ids, position_ids, mask, index[self.run_axis, rows], tokens
        if not shuffle:
            take = (lambda x: x) if rows is None else (lambda x: x[self.run_axis, rows])
            layout = prefix_trees(
                take(self.prompt_ids),
                take(self.prompt_mask),
                take(self.ids),
                take(self.mask).sum(-1),
                self.widths[:, 1],
                self.widths[:, 0],
                mixed=rows is not None,
            )
            if rows is None:
                self.own_trees = layout is not None
            if layout is not None:
                return layout
        batches = self.rollouts if rows is None else [b.select(rows[p]) for p, b in enumerate(self.rollouts)]
        return stacked_trees(batches, self.T)

    def knob(self, name: str, positions: Sequence[int] | None = None, state: bool = False) -> torch.Tensor:
        trainers = self.trainers if positions is None else [self.trainers[p] for p in positions]
        values = [getattr(t if state else t.algo, name) for t in trainers]
        return torch.tensor(values, dtype=torch.float32, device=self.group.device)

    def stacked(self, field: str, rollouts: Sequence[Rollout] | None = None) -> torch.Tensor:
        """A rollout field `[B, T_r, …]` of every run, padded to the part's T and stacked `[R', B, T, …]`."""
        tensors = [getattr(b, field) for b in (rollouts or self.rollouts)]
        extra = tensors[0].dim() - 2  # logits carry a vocabulary axis after T
        return torch.stack([F.pad(t, (0, 0) * extra + (0, self.T - t.shape[1])) for t in tensors])

    def weights(self, stack: Stack, grad: bool = True) -> dict[str, torch.Tensor]:
        return stack.views(self.index, grad)

    def over_formulas(self, fn: Callable, *args) -> list[tuple[FormulaGroup, object]]:
        """`per_run(fn, …)` for each formula group of the part, on its runs' slices of `args`."""
        return [(fg, per_run(fn, fg.algo, fg.knobs, *(fg.take(a) for a in args))) for fg in self.formulas]

    def merged(self, results: list[tuple[FormulaGroup, object]], pick: Callable) -> torch.Tensor | None:
        """One `[R', …]` tensor of what `pick` takes from every formula group's results, in the part's run order."""
        pieces = [(fg, pick(out)) for fg, out in results]
        if pieces[0][1] is None:
            return None
        if len(pieces) == 1:
            return pieces[0][1]
        first = pieces[0][1]
        merged = first.new_empty((len(self.runs), *first.shape[1:]))
        for fg, piece in pieces:
            merged[fg.positions] = piece
        return merged

    def each(self, x: torch.Tensor, fn: Callable[[int, torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """`fn(p, x[p])` for each run p of the part, stacked: a formula that draws from a run's own generator."""
        return torch.stack([fn(p, x[p]) for p in range(len(self.runs))])


class Records:
    """Per-run numbers of a step kept as tensors until `values()` moves them to the host in one transfer."""

    def __init__(self, runs: int):
        self.entries: list[tuple[torch.Tensor | None, str, torch.Tensor]] = []
        self.runs = runs

    def add(self, positions: torch.Tensor | None, metrics: dict[str, torch.Tensor]) -> None:
        for name, value in metrics.items():
            self.entries.append((positions, name, value))

    def add_all(self, results: list[tuple[FormulaGroup, dict]]) -> None:
        for fg, metrics in results:
            self.add(fg.positions, metrics)

    def values(self) -> list[dict[str, float]]:
        records: list[dict[str, float]] = [{} for _ in range(self.runs)]
        if not self.entries:
            return records
        flat = torch.cat([value.detach().reshape(-1).double() for _, _, value in self.entries]).tolist()
        start = 0
        for positions, name, value in self.entries:
            count = value.numel()
            runs = range(self.runs) if positions is None else positions.tolist()
            for p, number in zip(runs, flat[start : start + count]):
                # NaN (a mean over nothing) as `math.nan` itself, so that equal records compare equal.
                records[p][name] = number if number == number else math.nan
            start += count
        return records


def bound_group(members: Sequence, listed: Callable[[object], list]):
    """The group `members` formed last, to step again, or None when a new one must be formed: when it holds other
    runs (`listed(group)` is not `members`), or when one of them has stepped in another group since (a turn of the
    live loop that stepped only some of them), since its weights and moments are in that group's buffers now and
    the old group's rows of it are stale."""
    group = members[0].group
    if group is None or listed(group) != list(members) or any(m.group is not group for m in members):
        return None
    return group


class RunGroup:
    """R prepared trainers of one `group_key`, their models stacked: `step()` trains one step of each."""

    def __init__(self, trainers: Sequence):
        self.trainers = list(trainers)
        self.R = len(self.trainers)
        self.paused = 0.0  # seconds a run in a lane waited between the updates of the step under way
        first = self.trainers[0]
        self.device, self.tokenizer, self.algo = first.device, first.tokenizer, first.algo
        self.reference = Stack([t.reference for t in self.trainers])
        self.policy = self._policy_stack([t.policy for t in self.trainers], trainable=True)
        if first.algo.use_peft:
            for trainer in self.trainers:  # the base's one copy: π_ref's row in its stack
                share_base(trainer.policy, trainer.reference)
        self.critic = Stack([t.critic for t in self.trainers], trainable=True) if first.critic is not None else None
        self.teacher = Stack([t.teacher for t in self.trainers]) if first.teacher is not None else None

        def knob(name):
            return torch.tensor([getattr(t.algo, name) for t in self.trainers], dtype=torch.float32, device=self.device)

        self.policy_adam = StackedAdamW(
            self.policy.buffer,
            knob("learning_rate"),
            knob("adam_epsilon"),
            stacked_state([t.policy_adam for t in self.trainers], self.policy.buffer),
        )
        self.max_grad_norm, self.temperature = knob("max_grad_norm"), knob("temperature")
        self.critic_adam = None
        if self.critic is not None:
            eps = torch.full((self.R,), CRITIC_ADAM_EPSILON, device=self.device)
            self.critic_adam = StackedAdamW(
                self.critic.buffer,
                knob("critic_learning_rate"),
                eps,
                stacked_state([t.critic_adam for t in self.trainers], self.critic.buffer),
            )
        for r, trainer in enumerate(self.trainers):
            trainer.group = self
            trainer.policy_adam = self.policy_adam.run_state(r)
            trainer.critic_adam = None if self.critic_adam is None else self.critic_adam.run_state(r)

    def _policy_stack(
        self, policies: list, trainable: bool = False, base_runs: torch.Tensor | None = None
    ) -> Stack | AdapterStack:
        """The stack of policies (of the runs `base_runs`, every run when None): every weight, or with LoRA the
        adapters over the frozen base (π_ref's stack)."""
        if self.algo.use_peft:
            return AdapterStack(policies, self.reference, trainable, base_runs)
        return Stack(policies, trainable)

    # ------------------------------------------------------------------------------------------- the step
    def step(self) -> list[dict | Exception]:
        """One step of every run: its record, or the exception that ended its step (the other runs go on).

        A record's `step_time` is the group's seconds shared evenly, and `tokens_per_second` the run's response
        tokens over that: what the step cost this run, alone or in company (without a lane's waits between its
        updates, `Trainer.share_pause`)."""
        started, self.paused = time.perf_counter(), 0.0
        try:
            batches, stats = self._collect()
        except Exception as error:  # noqa: BLE001 - the shared sampler failed: every run of the group ends
            return [error] * self.R
        outcomes: list[dict | Exception | None] = [None] * self.R
        sizes: dict[int, list[int]] = {}
        for r, batch in enumerate(batches):
            sizes.setdefault(len(batch[0].prompts), []).append(r)
        for runs in sizes.values():
            for r, outcome in zip(runs, self._train(Part(self, runs, batches), [stats[r] for r in runs])):
                outcomes[r] = outcome
        seconds = (time.perf_counter() - started - self.paused) / self.R
        for outcome, batch in zip(outcomes, batches):
            if isinstance(outcome, dict):
                outcome["step_time"] = seconds
                outcome["tokens_per_second"] = batch[0].response_mask.sum().item() / seconds
        return outcomes

    def _train(self, part: Part, stats: list[dict]) -> list[dict | Exception]:
        """Steps 3–7 for the runs of one part; `stats` are their batches' dynamic-sampling statistics."""
        records = Records(len(part.runs))
        records.add(None, self._collect_metrics(part))
        mismatch = self._trainer_logprobs(part)
        scored = self._score(part, records)
        failures = self._update(part, scored, self._noise_only(part), records)
        views = self._sample_views(part, scored)
        values = records.values()
        out: list[dict | Exception] = []
        for p, trainer in enumerate(part.trainers):
            if failures[p] is not None:
                out.append(TrainingError(f"step {trainer.step_index + 1}: {failures[p]}"))
                continue
            record = {"step": trainer.step_index + 1, **stats[p], **mismatch[p], **values[p]}
            record["skipped_updates"] = int(record["skipped_updates"])
            if "next_baseline" in record:
                trainer.running_baseline = record.pop("next_baseline")
            record["beta"] = trainer.beta
            if trainer.algo.target_kl is not None:
                trainer.beta = adaptive_beta(trainer.beta, record["kl_sequence"], trainer.algo.target_kl)
            record["samples"] = views[p]
            trainer.step_index += 1
            out.append(record)
        return out

    # ------------------------------------------------------------------------------------ value pretraining
    def pretrain_value(self, budget: int, progress: Callable[[str, int, int], None]) -> list[tuple[float, int]]:
        """VAPO: the policies stay frozen (= SFT); the critics regress on Monte-Carlo returns (λ = 1), with the
        update schedule of RL (epochs × minibatches) on each fresh batch, until a run's explained variance on a
        batch it has not trained on reaches VALUE_PRETRAIN_TARGET or `budget` batches are spent. Returns each run's
        `(explained variance, batches trained on)`."""
        done: list[tuple[float, int] | None] = [None] * self.R
        for step in range(budget + 1):
            part = Part(self, list(range(self.R)), self._sample(list(range(self.R))))
            with torch.no_grad():
                values = self._values(part, part.layout, grad=False) * part.mask
            returns = part.merged(part.over_formulas(_monte_carlo_returns, part.rewards, part.mask), lambda out: out)
            held_out = torch.func.vmap(explained_variance)(values, returns, part.mask).tolist()
            for r, explained in enumerate(held_out):  # measured before the critic sees this batch
                if done[r] is None and (explained >= VALUE_PRETRAIN_TARGET or step == budget):
                    done[r] = (explained, step)
            if all(done):
                break
            active = torch.tensor([d is None for d in done], device=self.device)
            runs = torch.arange(self.R, device=self.device)[:, None]
            B = part.mask.shape[1]
            for _ in range(self.algo.ppo_epochs):
                order = torch.stack(
                    [torch.randperm(B, generator=t.generator, device=self.device) for t in part.trainers]
                )
                for rows in order.chunk(self.algo.num_minibatches, dim=1):
                    layout = part.tree(rows)
                    mask = part.mask[runs, rows]
                    critic = part.over_formulas(
                        _critic_terms,
                        self._values(part, layout, grad=True) * mask,
                        values[runs, rows],
                        returns[runs, rows],
                        mask,
                    )
                    self._zero_grad()
                    part.merged(critic, lambda out: out[0]).sum().backward()
                    self._clipped(self.critic.buffer, part)
                    self.critic_adam.step(active)
            self._zero_grad()
            progress("value_pretrain", step + 1, budget)
        return done

    # ------------------------------------------------------------------------------- 1–2: sample and reward
    def _sample(self, runs: list[int]) -> list[tuple[Rollout, torch.Tensor, torch.Tensor]]:
        """`(rollout, rewards, successes)` of the given runs: `prompts_per_step` prompts × G responses each, in one
        loop, rewarded by each run's task (`Trainer.rewards`)."""
        trainers = [self.trainers[r] for r in runs]
        algo = self.algo
        prompts = [t.task.sample_prompts(algo.prompts_per_step, t.prompt_rng) for t in trainers]
        index = None if len(runs) == self.R else torch.tensor(runs, device=self.device)
        if algo.rollout_staleness:
            # Each run's stale copy: a stack of the samplers, built for this loop.
            sampler = self._policy_stack([t.behaviour_policy() for t in trainers], base_runs=index)
            weights = sampler.views(grad=False)
        else:
            weights = self.policy.views(index, grad=False)
        model = StackedGPT2(trainers[0].policy, weights)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=algo.rollout_dtype == "bfloat16"):
            rollouts = sample_runs(
                model,
                self.tokenizer,
                prompts,
                trainers[0].max_new_tokens,
                [t.behaviour_temperature for t in trainers],
                [t.generator for t in trainers],
                algo.num_generations,
            )
        return [(rollout, *trainer.rewards(rollout)) for trainer, rollout in zip(trainers, rollouts)]

    def _collect(self) -> tuple[list[tuple], list[dict]]:
        """Every run's training batch `(rollout, rewards, successes)` and its dynamic-sampling statistics. With dynamic
        sampling, groups with identical rewards are dropped and refilled from new prompts; the sampling statistics
        (`_collect_metrics`) describe the policy's first, unfiltered sample."""
        first = self._sample(list(range(self.R)))
        self._first_sample = first
        algo, G = self.algo, self.algo.num_generations
        if not algo.dynamic_sampling:
            return first, [{} for _ in range(self.R)]
        kept: list[list[tuple]] = [[] for _ in range(self.R)]
        sampled_groups, rounds = [0] * self.R, [0] * self.R
        batches, short = dict(enumerate(first)), list(range(self.R))
        for round_index in range(algo.max_resample_rounds + 1):
            if round_index:
                batches = dict(zip(short, self._sample(short)))
            for r in short:
                rollout, rewards, successes = batches[r]
                keep = dynamic_sampling_keep(rewards, G)
                sampled_groups[r] += keep.numel()
                rows = torch.nonzero(keep.repeat_interleave(G)).squeeze(-1)
                kept[r].append((rollout.select(rows), rewards[rows], successes[rows]))
                rounds[r] = round_index + 1
            short = [r for r in short if sum(len(k[1]) for k in kept[r]) < algo.prompts_per_step * G]
            if not short:
                break
        out, stats = [], []
        for r in range(self.R):
            kept_groups = sum(len(k[1]) for k in kept[r]) // G
            stats.append(
                {
                    "dynamic_sampling_dropped_frac": 1 - kept_groups / sampled_groups[r],
                    "dynamic_sampling_rounds": rounds[r],
                }
            )
            if kept_groups == 0:  # nothing informative: train on the first batch (its advantages are all zero)
                out.append(first[r])
                continue
            rows = torch.arange(min(kept_groups, algo.prompts_per_step) * G, device=self.device)
            merged = concat_rollouts([k[0] for k in kept[r]]).select(rows)
            out.append((merged, torch.cat([k[1] for k in kept[r]])[rows], torch.cat([k[2] for k in kept[r]])[rows]))
        return out, stats

    def _collect_metrics(self, part: Part) -> dict[str, torch.Tensor]:
        """Reward, success, truncation and length statistics of each run's first, unfiltered sample."""
        first = [self._first_sample[r] for r in part.runs]
        rewards = torch.stack([b[1] for b in first])
        successes = torch.stack([b[2] for b in first])
        truncated = torch.stack([b[0].truncated for b in first])
        lengths = torch.stack([b[0].lengths for b in first])
        G = self.algo.num_generations

        def statistics(rewards, successes, truncated, lengths):
            wins = successes.float()
            stats = {
                "reward_mean": rewards.mean(),
                "reward_std": rewards.std(unbiased=False),
                "success_rate": wins.mean(),
                "truncated_frac": truncated.float().mean(),
                "response_length": lengths.mean(),
                "response_length_correct": _mean_or_nan(lengths, wins),
                "response_length_incorrect": _mean_or_nan(lengths, 1 - wins),
            }
            if G > 1:  # with one response per prompt there are no groups to be uninformative
                stats["zero_adv_group_frac"] = zero_advantage_group_fraction(rewards, G)
            return stats

        return torch.func.vmap(statistics)(rewards, successes, truncated, lengths)

    # ----------------------------------------------------------------------------------------------- 3: π_old
    def _trainer_logprobs(self, part: Part) -> list[dict]:
        """Where the sampler μ may differ from π_old (a stale copy, another temperature or precision): π_old's
        logits, log-probabilities and entropy from a pass of the current policies, μ's kept as `behaviour_logp`,
        and the mismatch metrics. Otherwise the sampler's own are π_old's (μ ≡ π_old) and nothing is recorded."""
        part.logits = part.stacked("logits")
        part.old_logp, part.entropy = part.stacked("old_logp"), part.stacked("entropy")
        part.behaviour_logp = None
        if not part.trainers[0].behaviour_differs:
            return [{} for _ in part.runs]
        with torch.no_grad():
            part.logits = self._logits(part, self.policy, part.layout, grad=False)
        part.behaviour_logp = part.old_logp
        part.old_logp = token_logprobs(part.logits, part.ids) * part.mask
        part.entropy = entropy_from_logits(part.logits) * part.mask
        metrics = []
        for p, trainer in enumerate(part.trainers):
            old, behaviour, mask, a = part.old_logp[p], part.behaviour_logp[p], part.mask[p], trainer.algo
            weights = correction_weights(
                old,
                behaviour,
                mask,
                a.rollout_is_mode,
                a.rollout_is_level,
                a.rollout_is_threshold,
                a.is_correction_gating,
                a.is_correction_threshold,
            )
            metrics.append(
                rollout_mismatch_metrics(old, behaviour, mask, a.rollout_is_level, a.rollout_is_threshold, weights)
            )
        return metrics

    def _logits(self, part: Part, stack: Stack, layout, grad: bool = True, runs: torch.Tensor | None = None):
        """Logits `[R', B, T, V]` / each run's temperature of a stacked language model over a stacked layout."""
        module = self.trainers[0].teacher if stack is self.teacher else self.trainers[0].policy
        model = StackedGPT2(module, stack.views(part.index if runs is None else runs, grad))
        temperature = self.temperature if part.index is None else self.temperature[part.index]
        return teacher_forced_logits(model, layout) / temperature[:, None, None, None]

    def _values(self, part: Part, layout, grad: bool) -> torch.Tensor:
        """The critics' V(s_t) `[R', B, T]` at the state before each response token (where its logits are read)."""
        model = StackedGPT2(self.trainers[0].critic, self.critic.views(part.index, grad))
        hidden = teacher_forced(model, layout)
        R, B, T = hidden.shape[:3]
        return model.values(hidden.flatten(1, 2)).view(R, B, T)

    # ----------------------------------------------------------------------------------------------- 4: score
    def _score(self, part: Part, records: Records) -> dict:
        """The batch scored before any update: the references' log-probabilities, the critics' values, the KL
        estimate folded into the per-token rewards (`kl_in = reward`), the advantages, and a teacher's scores."""
        with torch.no_grad():
            ref_logits = self._logits(part, self.reference, part.layout, grad=False)
            ref_logp = token_logprobs(ref_logits, part.ids)
            old_values = teacher_logits = teacher_logp = None
            if self.critic is not None:
                old_values = self._values(part, part.layout, grad=False) * part.mask
            if self.teacher is not None:
                teacher_logits = self._logits(part, self.teacher, part.layout, grad=False)
                teacher_logp = token_logprobs(teacher_logits, part.ids)
        # A critic whose values are no longer finite ends its run (else the NaN reaches the advantages and looks
        # like the policy's).
        finite_values = None if old_values is None else torch.isfinite(old_values).flatten(1).all(1)
        baseline = torch.tensor(
            [math.nan if t.running_baseline is None else t.running_baseline for t in part.trainers], device=self.device
        )
        trainer = part.trainers[0]

        def score(
            algo,
            old_logp,
            ref_logp,
            mask,
            rewards,
            old_values,
            baseline,
            teacher_logp,
            logits,
            ref_logits,
            teacher_logits,
            entropy,
        ):
            kl_in_reward = kl_estimators.KL_ESTIMATORS[algo.kl_estimator](old_logp, ref_logp) * mask
            beta_in_reward = algo.current_beta if algo.kl_in == "reward" else 0.0
            token_rewards = kl_penalized_token_rewards(rewards, kl_in_reward, mask, beta_in_reward, trainer.reward_clip)
            out = {"kl_in_reward": kl_in_reward, "token_rewards": token_rewards}
            used = None
            metrics = {}
            if algo.baseline == "running_mean":
                # b: the running mean of the earlier batches' mean returns (the first batch's own mean), then
                # b ← 0.9·b + 0.1·mean(R) with this batch.
                batch_mean = (token_rewards * mask).sum(-1).mean()
                used = torch.where(torch.isnan(baseline), batch_mean, baseline)
                metrics |= {"baseline": used, "next_baseline": running_mean_update(used, batch_mean)}
            advantages, returns = estimate_advantages(
                algo, AdvantageInputs(token_rewards, mask, old_values, algo.num_generations, used)
            )
            if teacher_logp is not None:
                metrics["teacher_kl"] = masked_mean(kl_estimators.kl_k1(old_logp, teacher_logp), mask)
                metrics["teacher_kl_exact"] = masked_mean(kl_estimators.kl_exact(logits, teacher_logits), mask)
                advantages = distillation_advantages(algo, advantages, old_logp, teacher_logp, mask)
            out["advantages"] = advantages
            if returns is not None:  # the critic's targets, with a critic
                out["returns"] = returns
            exact_kl = kl_estimators.kl_exact(logits, ref_logits)
            metrics |= {
                "entropy": masked_mean(entropy, mask),
                "kl_exact": masked_mean(exact_kl, mask),
                **kl_estimator_stats(old_logp, ref_logp, exact_kl, mask),
                **{
                    f"kl_{name}": masked_mean(fn(old_logp, ref_logp), mask)
                    for name, fn in kl_estimators.KL_ESTIMATORS.items()
                },
                **{f"advantage_{k}": v for k, v in advantage_stats(advantages, mask).items()},
                **first_last_token_advantages(advantages, mask),
                # The measured KL that adaptive β compares with target_kl: the estimator summed over each response.
                "kl_sequence": kl_in_reward.sum(-1).mean(),
            }
            if algo.num_generations > 1:
                seq_advantages = masked_mean(advantages, mask, dim=-1)
                metrics["skewed_group_weight_ratio"] = skewed_group_weight_ratio(
                    seq_advantages, rewards, algo.num_generations
                )
                metrics["equal_group_weight_share"] = equal_group_weight_share(
                    seq_advantages, rewards, algo.num_generations
                )
            return out, metrics

        results = part.over_formulas(
            score,
            part.old_logp,
            ref_logp,
            part.mask,
            part.rewards,
            old_values,
            baseline,
            teacher_logp,
            part.logits,
            ref_logits,
            teacher_logits,
            part.entropy,
        )
        records.add_all([(fg, metrics) for fg, (_, metrics) in results])
        scored = {
            name: part.merged(results, lambda out, name=name: out[0].get(name))
            for name in ("kl_in_reward", "token_rewards", "advantages", "returns")
        }
        return scored | {
            "ref_logp": ref_logp,
            "old_values": old_values,
            "teacher_logp": teacher_logp,
            "finite_values": finite_values,
        }

    def _noise_only(self, part: Part) -> torch.Tensor:
        """`[R']` bool: the runs whose batch carries no reward signal that whitening could scale (no update)."""
        flags = [
            (
                fg,
                per_run(
                    lambda algo, rewards, on=fg.beta_on: whitens_noise_only(algo, rewards, float(on)),
                    fg.algo,
                    fg.knobs,
                    fg.take(part.rewards),
                ),
            )
            for fg in part.formulas
        ]
        noise_only = part.merged(flags, lambda out: out)
        # A teacher's signal is no noise: with one, equal task rewards never make a step noise only.
        skip = torch.tensor(
            [t.algo.skip_no_signal_updates and t.teacher is None for t in part.trainers], device=self.device
        )
        return noise_only & skip

    # ---------------------------------------------------------------------------------------------- 6: update
    def _update(self, part: Part, scored: dict, noise_only: torch.Tensor, records: Records) -> list:
        """K epochs × minibatches of policy (and critic) updates, each one pass, one backward and one optimiser step
        for every run; records each run's metrics averaged over the updates, and returns each run's failure (a
        function of its record that words it) or None."""
        algo = self.algo
        R, B = len(part.runs), part.mask.shape[1]
        loss_mask = part.mask
        if algo.overlong_filter:
            loss_mask = torch.func.vmap(overlong_filter_mask)(part.mask, part.truncated)
        positive = None
        if any(t.algo.positive_nll_coef > 0 for t in part.trainers):
            # VAPO imitates its best responses; when every reward is equal there is no best one to imitate.
            top, bottom = part.rewards.amax(1, keepdim=True), part.rewards.amin(1, keepdim=True)
            positive = (part.rewards >= top) & (top > bottom)
        policy_terms = functools.partial(_policy_terms, max_length=part.trainers[0].max_new_tokens)
        # The update at which each run failed (−1: none; −2: its critic's values were not finite when scored).
        failed_at = torch.full((R,), -1, dtype=torch.long, device=self.device)
        if scored["finite_values"] is not None:
            failed_at = torch.where(scored["finite_values"], failed_at, -2)
        shared: dict[str, torch.Tensor] = {}  # sums over the updates of the metrics every run has
        own: dict[int, tuple[FormulaGroup, dict]] = {}  # and of those of each formula group
        history = []  # each update's totals, loss parts and gradient norms: what a failure's message quotes
        skipped = torch.zeros(R, device=self.device)
        runs = torch.arange(R, device=self.device)[:, None]
        for _ in range(algo.ppo_epochs):
            order = torch.stack([torch.randperm(B, generator=t.generator, device=self.device) for t in part.trainers])
            for rows in order.chunk(algo.num_minibatches, dim=1):

                def take(x, rows=rows):
                    return None if x is None else x[runs, rows]

                layout = part.tree(rows)
                logits = self._logits(part, self.policy, layout)
                logp = token_logprobs(logits, take(part.ids))
                mask, advantages, old_logp = take(loss_mask), take(scored["advantages"]), take(part.old_logp)
                logp = self._clip_cov(part, logp, advantages, mask)
                results = part.over_formulas(
                    policy_terms,
                    logits,
                    logp,
                    old_logp,
                    take(scored["ref_logp"]),
                    advantages,
                    mask,
                    take(positive),
                    take(part.behaviour_logp),
                    take(scored["teacher_logp"]),
                )
                total = part.merged(results, lambda out: out[0])
                per_token = part.merged(results, lambda out: out[1])
                # Where the loss gives a token no gradient although A ≠ 0: PPO's clip, DPPO's mask, MIS's drops.
                (gradient,) = torch.autograd.grad(per_token.sum(), logp, retain_graph=True)
                silenced = (gradient == 0) & (advantages != 0)
                rare = old_logp < math.log(RARE_TOKEN_PROBABILITY)
                metrics = {
                    "total_loss": total.detach(),
                    "silenced_frac": torch.func.vmap(masked_mean)(silenced.float(), mask),
                    "silenced_rare_frac": torch.func.vmap(masked_mean)((silenced & rare).float(), mask),
                }
                loss, finite = total.sum(), torch.isfinite(total)
                if self.critic is not None:
                    values = self._values(part, layout, grad=True) * take(part.mask)
                    critic = part.over_formulas(
                        _critic_terms, values, take(scored["old_values"]), take(scored["returns"]), take(part.mask)
                    )
                    critic_loss = part.merged(critic, lambda out: out[0])
                    loss = loss + critic_loss.sum()  # each run's vf_coef · loss
                    metrics |= {
                        "critic_loss": part.merged(critic, lambda out: out[1]),
                        "explained_variance": part.merged(critic, lambda out: out[2]),
                    }
                    finite = finite & torch.isfinite(values).flatten(1).all(1)
                self._zero_grad()
                loss.backward()
                grad_norm = self._clipped(self.policy.buffer, part)
                ok = finite & torch.isfinite(grad_norm)
                alive = failed_at == -1
                failed_at = torch.where(alive & ~ok, len(history), failed_at)
                alive = alive & ok
                # Every advantage 0 and no other term (the gradient is exactly 0: Adam's momentum alone would move
                # on), or whitened noise (see whitens_noise_only): no optimiser step.
                skip = part.skip_no_signal & ((grad_norm == 0) | noise_only)
                self.policy_adam.step(self._spread(alive & ~skip, part))
                if self.critic is not None:
                    self._clipped(self.critic.buffer, part)
                    self.critic_adam.step(self._spread(alive, part))
                skipped += skip.float()
                metrics["grad_norm"] = grad_norm
                if self.R == 1 and part.trainers[0].share_pause is not None:  # a run in a lane of its own
                    self.paused += part.trainers[0].share_pause()
                for name, value in metrics.items():
                    shared[name] = shared.get(name, 0) + value
                for fg, (_, _, parts, extra) in results:
                    sums = own.setdefault(id(fg), (fg, {}))[1]
                    for name, value in {**parts, **extra}.items():
                        sums[name] = sums.get(name, 0) + value.detach()
                history.append((total.detach(), [(fg, out[2]) for fg, out in results], grad_norm))
        updates = len(history)  # the last update's gradient stays in the buffers, as an optimiser leaves it
        records.add(None, {name: value / updates for name, value in shared.items()})
        for fg, sums in own.values():
            records.add(fg.positions, {name: value / updates for name, value in sums.items()})
        records.add(None, {"skipped_updates": skipped})
        return self._failures(part, failed_at, history)

    def _clip_cov(self, part: Part, logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor):
        """Clip-Cov: the log-probabilities of the tokens it selects detached, each run drawing from its own
        generator (so a loop over the runs that use it)."""
        if not any(t.algo.cov_mode == "clip_cov" for t in part.trainers):
            return logp

        def detached(p: int, lp: torch.Tensor) -> torch.Tensor:
            algo = part.trainers[p].algo
            if algo.cov_mode != "clip_cov":
                return torch.zeros_like(lp, dtype=torch.bool)
            return clip_cov_detach_mask(
                lp, advantages[p], mask[p], algo.cov_fraction, 1.0, 5.0, part.trainers[p].generator
            )

        return torch.where(part.each(logp, detached), logp.detach(), logp)

    def _failures(self, part: Part, failed_at: torch.Tensor, history: list) -> list[str | None]:
        """Each run's failure, worded as a single run's trainer words it, or None."""
        out = []
        for p, update in enumerate(failed_at.tolist()):
            trainer = part.trainers[p]
            if update == -1:
                out.append(None)
                continue
            algo = trainer.algo
            critic = (
                f"the critic diverged (its values are no longer finite); lower critic_learning_rate (now "
                f"{algo.critic_learning_rate:g}) or vf_coef (now {algo.vf_coef:g})"
            )
            if update == -2:
                out.append(critic)
                continue
            total, parts, grad_norm = history[update]
            loss = total[p].item()
            if not math.isfinite(loss):
                named = {}
                for fg, values in parts:
                    members = list(range(len(part.runs))) if fg.positions is None else fg.positions.tolist()
                    if p in members:
                        named = {k: v[members.index(p)].item() for k, v in values.items()}
                out.append(
                    f"the loss became {loss} ({', '.join(f'{k}={v:.4g}' for k, v in named.items())}); lower "
                    "learning_rate or check the knobs"
                )
            elif math.isfinite(grad_norm[p].item()):
                out.append(critic)
            else:
                out.append(f"the gradient norm became {grad_norm[p].item()}; lower learning_rate")
        return out

    def _clipped(self, buffer: torch.Tensor, part: Part) -> torch.Tensor:
        """Clip each run's gradient to its `max_grad_norm`; the part's runs' norms before clipping `[R']`."""
        norms = clip_grad_norms(buffer.grad, self.max_grad_norm)
        return norms if part.index is None else norms[part.index]

    def _spread(self, flags: torch.Tensor, part: Part) -> torch.Tensor:
        """Per-run flags of a part `[R']` as flags of the whole group `[R]` (False outside the part)."""
        if part.index is None:
            return flags
        out = torch.zeros(self.R, dtype=torch.bool, device=self.device)
        out[part.index] = flags
        return out

    def _zero_grad(self) -> None:
        for stack in (self.policy, self.critic):
            if stack is not None:
                stack.buffer.grad = None

    # --------------------------------------------------------------------------------------- the token views
    def _sample_views(self, part: Part, scored: dict) -> list[list[dict]]:
        """A few responses of each run token by token: advantage, ratio after this step's updates, clipped or not,
        silenced or not, entropy; and what a run export needs: log-probabilities (now, as sampled, reference, and
        the teacher's when there is one), token rewards, the critic's values and targets (when there are any), the
        KL estimate and the objective `−L_t` per token."""
        n = min(part.trainers[0].run.samples_per_record, part.mask.shape[1])  # the same for a group's runs
        if n == 0:
            return [[] for _ in part.runs]
        rows = torch.arange(n, device=self.device)
        heads = [b.select(rows) for b in part.rollouts]
        layout = part.tree(rows.expand(len(part.runs), -1))
        with torch.no_grad():
            logits = self._logits(part, self.policy, layout, grad=False)
        logp = token_logprobs(logits, part.ids[:, :n]).requires_grad_()
        cut = {k: (None if v is None else v[:, :n]) for k, v in scored.items() if k != "finite_values"}
        old_logp, mask, adv = part.old_logp[:, :n], part.mask[:, :n], cut["advantages"]
        ratio = torch.exp(logp.detach() - old_logp)
        with torch.enable_grad():
            results = part.over_formulas(_view_terms, logp, old_logp, adv, mask, cut["ref_logp"])
            per_token = part.merged(results, lambda out: out[0])
            (gradient,) = torch.autograd.grad(per_token.sum(), logp)
        silenced = (gradient == 0) & (adv != 0)
        clipped = part.merged(results, lambda out: out[1])
        token_kl = part.merged(results, lambda out: out[2])
        per_token_fields = {
            "advantages": adv,
            "ratios": ratio,
            "clipped": clipped,
            "silenced": silenced,
            "entropies": part.entropy[:, :n],
            "ids": part.ids[:, :n],
            "old_log_probs": old_logp,
            "ref_log_probs": cut["ref_logp"],
            "rewards_t": cut["token_rewards"],
            "values": cut["old_values"],
            "returns": cut["returns"],
            "teacher_log_probs": cut["teacher_logp"],
            "log_probs": logp.detach(),
            "token_kl": token_kl,
            "token_objective": -per_token.detach(),
        }
        host = {k: v.tolist() for k, v in per_token_fields.items() if v is not None}
        lengths = mask.sum(-1).long().tolist()
        rewards, successes = part.rewards[:, :n].tolist(), part.successes[:, :n].tolist()
        truncated = part.truncated[:, :n].tolist()
        views = []
        for p in range(len(part.runs)):
            run_views = []
            for i in range(n):
                length = lengths[p][i]
                row = {k: v[p][i][:length] for k, v in host.items()}
                ids = row.pop("ids")
                run_views.append(
                    {
                        "prompt": heads[p].prompts[i],
                        "response": heads[p].responses[i],
                        "tokens": [self.tokenizer.convert_ids_to_tokens(t) for t in ids],
                        "reward": rewards[p][i],
                        "success": bool(successes[p][i]),
                        "truncated": truncated[p][i],
                        "advantages": row.pop("advantages"),
                        "ratios": row.pop("ratios"),
                        "clipped": row.pop("clipped"),
                        "silenced": row.pop("silenced"),
                        "entropies": row.pop("entropies"),
                        "ids": ids,
                        **{("rewards" if k == "rewards_t" else k): v for k, v in row.items()},
                    }
                )
            views.append(run_views)
        return views


# -------------------------------------------------------------------------------- per-run formulas (vmapped)
def _policy_terms(
    algo, logits, logp, old_logp, ref_logp, advantages, mask, positive, behaviour_logp, teacher_logp, max_length
):
    """One run's minibatch loss: `(total, per-token policy loss, loss parts, metrics)`."""
    weights = None
    if behaviour_logp is not None:
        weights = correction_weights(
            old_logp,
            behaviour_logp,
            mask,
            algo.rollout_is_mode,
            algo.rollout_is_level,
            algo.rollout_is_threshold,
            algo.is_correction_gating,
            algo.is_correction_threshold,
        )
    inputs = LossInputs(
        algo,
        logits,
        logp,
        old_logp,
        ref_logp,
        advantages,
        mask,
        algo.current_beta,
        max_length,
        positive,
        weights,
        teacher_logp,
    )
    parts = loss_parts(inputs)
    total = sum(parts.values())
    detached = logp.detach()
    ratio = torch.exp(detached - old_logp)
    if algo.policy_loss in ("gspo", "gspo_token"):
        # GSPO clips whole responses, so its clip fractions count responses, not tokens.
        seq_ratio = gspo_sequence_ratio(detached, old_logp, mask)[:, None]
        seq_advantages = masked_mean(advantages, mask, dim=-1)[:, None]
        seq_mask = (mask.sum(-1, keepdim=True) > 0).float()
        clips = clip_fractions(seq_ratio, seq_advantages, seq_mask, algo.epsilon, algo.epsilon_high)
        # The GSPO paper and verl's pg_clipfrac count tokens: every token of a clipped response is clipped.
        clips["clip_frac_tokens"] = clip_fractions(
            seq_ratio.expand_as(mask), seq_advantages.expand_as(mask), mask, algo.epsilon, algo.epsilon_high
        )["clip_frac"]
    elif algo.policy_loss == "dppo_tv":  # a trust region in probability: its clip is the mask
        clips = dppo_clip_fractions(detached, old_logp, advantages, mask, algo.dppo_delta_low, algo.dppo_delta_high)
    else:
        clips = clip_fractions(ratio, advantages, mask, algo.epsilon, algo.epsilon_high, algo.dual_clip)
    # The share of tokens the clip (or DPPO's mask) silences, whatever the loss clips: one axis for all.
    clips.setdefault("clip_frac_tokens", clips["clip_frac"])
    if "kl_loss" in parts:
        clips["kl_capped_frac"] = kl_capped_fraction(inputs)
    metrics = {**clips, "approx_kl": approx_kl(detached, old_logp, mask), "ratio_mean": masked_mean(ratio, mask)}
    return total, policy_per_token(inputs), parts, metrics


def _critic_terms(algo, values, old_values, returns, mask):
    """One run's critic term `c_vf · L_V` (clipped value loss, token-mean), its loss and explained variance."""
    loss = aggregate_loss(clipped_value_loss(values, old_values, returns, algo.cliprange_value), mask, "token-mean")
    return algo.vf_coef * loss, loss.detach(), explained_variance(values.detach(), returns, mask)


def _view_terms(algo, logp, old_logp, advantages, mask, ref_logp):
    """A token view's per-token policy loss, PPO's clip rule (for GSPO its response's ratio decides), and KL."""
    ratio = torch.exp(logp.detach() - old_logp)
    unit_ratio = ratio
    if algo.policy_loss in ("gspo", "gspo_token"):
        unit_ratio = gspo_sequence_ratio(logp.detach(), old_logp, mask)[:, None].expand_as(ratio)
    clipped = ((unit_ratio > 1 + algo.epsilon_high) & (advantages > 0)) | (
        (unit_ratio < 1 - algo.epsilon) & (advantages < 0)
    )
    token_kl = kl_estimators.KL_ESTIMATORS[algo.kl_estimator](logp.detach(), ref_logp)
    return policy_loss(algo, logp, old_logp, advantages, mask), clipped, token_kl


def _monte_carlo_returns(algo, rewards, mask):
    """The returns value pretraining regresses on: the task reward on the last token, reward-to-go (λ = 1)."""
    token_rewards = kl_penalized_token_rewards(rewards, torch.zeros_like(mask), mask, 0.0, effective_reward_clip(algo))
    return reward_to_go(token_rewards, mask, algo.gamma)


def distillation_advantages(algo, task_advantages, old_logp, teacher_logp, mask) -> torch.Tensor:
    """The advantages the policy loss sees with a teacher: the task's (or none, `use_task_rewards=False`), plus in
    the policy-gradient form `c_distill · reverse_kl_advantages`, scored when the batch was sampled, as a reward is
    (the supervised form is a loss term instead: `rl_core.formulas.loss_terms`)."""
    advantages = task_advantages if algo.use_task_rewards else torch.zeros_like(task_advantages)
    if algo.use_policy_gradient:
        advantages = advantages + algo.distillation_loss_coef * reverse_kl_advantages(
            old_logp, teacher_logp, mask, algo.distillation_loss_mode
        )
    return advantages


def _mean_or_nan(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The mean of x over the entries with weight 1, NaN where there are none."""
    count = weights.sum()
    return torch.where(count > 0, (x * weights).sum() / count.clamp(min=1), torch.nan)


def concat_rollouts(parts: list[Rollout]) -> Rollout:
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
