"""Direct preference optimisation: the policy trained on preference pairs themselves, with no reward model and no
sampling during training (DPO, Rafailov et al. 2023; IPO, Azar et al. 2023).

DPO starts from the closed-form optimum of the KL-regularised RL objective, π*(y|x) ∝ π_ref(y|x) exp(r(x, y)/β),
and reads it backwards: every policy defines an *implicit reward* r_θ(x, y) = β (log π_θ(y|x) − log π_ref(y|x))
(up to a term of x alone, which cancels in a comparison). Putting that reward into the Bradley-Terry likelihood
of the labels gives a loss on the policy directly. IPO keeps the same log-ratio difference but regresses it onto
a fixed target instead of pushing it through a sigmoid, so it stops growing once the pair is ordered by 1/(2β).

Every log-probability here is a sequence's: the sum over the response's tokens, the closing EOS included, as in
both papers (`sequence_logprobs`); IPO divides each by its response's token count first, as TRL does (`ipo_loss`).
Pairs are `reward_model.PreferencePair`s; the accuracy and the margin of the implicit rewards are the reward model's
`pairwise_accuracy` and `reward_margin`, applied to them.
"""

from __future__ import annotations

import functools
import random
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from transformers import GPT2LMHeadModel, PreTrainedTokenizerBase

from rl_core.config import DPO_RANGES, DPOConfig, RunConfig
from rl_core.engine.evaluation import EVALUATION_PROMPTS, EVALUATION_SEED, PolicyEvaluation, evaluate_policies
from rl_core.engine.models import MODEL_PRESETS, frozen_reference, use_preset_threads
from rl_core.engine.pair_run import PairRunTrainer
from rl_core.engine.reward_model import (
    PreferencePair,
    bradley_terry_loss,
    check_pair_training,
    pair_responses,
    pairwise_accuracy,
    reward_margin,
    split_pairs,
)
from rl_core.engine.rollout import (
    TokenBatch,
    encode_pairs,
    frozen_response_logits,
    response_logits,
    token_logprobs,
)
from rl_core.engine.run_group import Records, bound_group
from rl_core.engine.sft import DEFAULT_SFT_STEPS, default_cache_dir, sft_policy
from rl_core.engine.stacked_adamw import MAX_GRAD_NORM, StackedAdamW, clip_grad_norms
from rl_core.engine.stacked_runs import (
    Stack,
    StackedGPT2,
    response_token_logprobs,
    sample_runs,
    stacked_trees,
    teacher_forced_logits,
)
from rl_core.engine.tokenizer import build_char_tokenizer
from rl_core.engine.trainer import Progress, prepare_warm_start, stoppable
from rl_core.formulas.kl import kl_exact, kl_k3
from rl_core.formulas.masking import masked_mean, masked_sum
from toy_tasks.base import ToyTask

MAX_BETA = DPO_RANGES["beta"].high  # the lab's upper bound on β, as a DPO run's knob has it


def implicit_reward(logps: torch.Tensor, ref_logps: torch.Tensor, beta: float) -> torch.Tensor:
    """r_θ(x, y) = β (log π_θ(y|x) − log π_ref(y|x)) per response `[B]`: the reward under which π_θ is the optimum
    of the KL-regularised objective with coefficient β (Rafailov et al. 2023, eq. 5), TRL's `rewards/chosen` and
    `rewards/rejected`. Zero for every response while π_θ = π_ref."""
    return beta * (logps - ref_logps)


def log_ratio_difference(
    chosen_logps: torch.Tensor,
    rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
) -> torch.Tensor:
    """h = (log π_θ − log π_ref)(y_w) − (log π_θ − log π_ref)(y_l) per pair `[N]`: how much more the policy has
    raised the chosen response than the rejected one, relative to the reference (Azar et al. 2023's h_π)."""
    return (chosen_logps - ref_chosen_logps) - (rejected_logps - ref_rejected_logps)


def dpo_loss(
    chosen_logps: torch.Tensor,
    rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """L_DPO = −mean_i log σ(β h_i), h the `log_ratio_difference` (Rafailov et al. 2023, eq. 7; TRL's
    `loss_type="sigmoid"`): the Bradley-Terry loss of the implicit rewards.

    It is log 2 while π_θ = π_ref. Its gradient with respect to log π_θ(y_w) is −β σ(−β h_i) / N, and the opposite
    for log π_θ(y_l): the same push on both, weighted by how wrongly the pair is still ordered. Nothing in it says
    where the chosen log-probability should go, only the difference; both may fall while h grows."""
    return bradley_terry_loss(
        implicit_reward(chosen_logps, ref_chosen_logps, beta), implicit_reward(rejected_logps, ref_rejected_logps, beta)
    )


def ipo_loss(
    chosen_logps: torch.Tensor,
    rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    beta: float,
    chosen_lengths: torch.Tensor,
    rejected_lengths: torch.Tensor,
) -> torch.Tensor:
    """L_IPO = mean_i (h̄_i − 1/(2β))², h̄ the `log_ratio_difference` of *per-token mean* log-probabilities: each
    response's sequence log-probability (policy and reference) divided by its token count, EOS included (Azar et al.
    2023's empirical IPO loss, their τ written β; TRL's `loss_type="ipo"`).

    Why per token: with summed log-probabilities h grows with the responses' length, so one β would set a target
    1/(2β) that is loose for long responses and tight for short ones. TRL divides by the completion's token count
    (since its PR #1265, confirmed with the IPO authors as the form behind the paper's results), and the lab uses
    TRL's knob names, so β means here what it means there. The loss is 1/(4β²) while π_θ = π_ref and vanishes at
    h̄ = 1/(2β): the pair is pushed apart by a fixed amount per token and then held there, where DPO's sigmoid keeps
    pushing (ever more weakly) however far apart they already are. Its gradient with respect to log π_θ(y_w) is
    2 (h̄_i − 1/(2β)) / (N |y_w|), and minus that with |y_l| for log π_θ(y_l)."""
    h = log_ratio_difference(
        chosen_logps / chosen_lengths,
        rejected_logps / rejected_lengths,
        ref_chosen_logps / chosen_lengths,
        ref_rejected_logps / rejected_lengths,
    )
    return ((h - 1 / (2 * beta)) ** 2).mean()


def preference_loss(
    loss_type: str,
    chosen_logps: torch.Tensor,
    rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    beta: float,
    chosen_lengths: torch.Tensor,
    rejected_lengths: torch.Tensor,
) -> torch.Tensor:
    """TRL's DPOTrainer loss of `loss_type` from sequence log-probabilities and the responses' token counts:
    `"sigmoid"` (`dpo_loss`, on the sums) or `"ipo"` (`ipo_loss`, on the per-token means)."""
    if loss_type == "ipo":
        return ipo_loss(
            chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta, chosen_lengths, rejected_lengths
        )
    return dpo_loss(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta)


PREFERENCE_LOSS_TYPES = ("sigmoid", "ipo")  # TRL's `loss_type` names of `preference_loss`


def sequence_logprobs(
    model: GPT2LMHeadModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    responses: list[str],
    frozen: bool = False,
) -> torch.Tensor:
    """log π(y|x) `[B]`: the sum of the response's token log-probabilities (its EOS included) given the prompt, in
    one teacher-forced pass; `frozen` for a model that is not being trained (the reference: no autograd)."""
    batch = encode_pairs(tokenizer, prompts, responses, next(model.parameters()).device)
    logits = (frozen_response_logits if frozen else response_logits)(model, batch)
    return masked_sum(token_logprobs(logits, batch.response_ids), batch.response_mask, dim=-1)


def pair_logprobs(
    model: GPT2LMHeadModel, tokenizer: PreTrainedTokenizerBase, pairs: list[PreferencePair], frozen: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence log-probabilities of the chosen and of the rejected responses, in one pass over both."""
    logps = sequence_logprobs(model, tokenizer, [p.prompt for p in pairs] * 2, pair_responses(pairs), frozen)
    return logps[: len(pairs)], logps[len(pairs) :]


def pair_batch(tokenizer: PreTrainedTokenizerBase, pairs: list[PreferencePair], device: torch.device) -> TokenBatch:
    """The teacher-forcing layout of the pairs' chosen responses, then their rejected ones, after their prompts (the
    batch `pair_logprobs` reads)."""
    return encode_pairs(tokenizer, [p.prompt for p in pairs] * 2, pair_responses(pairs), device)


def pair_lengths(
    tokenizer: PreTrainedTokenizerBase, pairs: list[PreferencePair], device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token counts `[N]` of the chosen and of the rejected responses, each with its closing EOS (the tokens whose
    log-probabilities `pair_logprobs` sums), as floats for dividing by."""

    def count(responses: list[str]) -> torch.Tensor:
        ids = tokenizer(responses, add_special_tokens=False)["input_ids"]
        return torch.tensor([len(row) + 1 for row in ids], dtype=torch.float32, device=device)

    return count([p.chosen for p in pairs]), count([p.rejected for p in pairs])


def preference_metrics(
    loss: torch.Tensor,
    chosen_logps: torch.Tensor,
    rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    beta: float | torch.Tensor,
) -> dict[str, torch.Tensor]:
    """TRL's DPOTrainer metrics of a batch of pairs, as 0-dim tensors (read from the host once per step, with every
    run's of a group): `loss`, `rewards/chosen`, `rewards/rejected` (mean implicit rewards), `rewards/accuracies`
    (the share whose implicit chosen reward is strictly higher), `rewards/margins` (their mean difference),
    `logps/chosen`, `logps/rejected` (mean sequence log-probabilities)."""
    chosen = implicit_reward(chosen_logps, ref_chosen_logps, beta).detach()
    rejected = implicit_reward(rejected_logps, ref_rejected_logps, beta).detach()
    return {
        "loss": loss.detach(),
        "rewards/chosen": chosen.mean(),
        "rewards/rejected": rejected.mean(),
        "rewards/accuracies": pairwise_accuracy(chosen, rejected),
        "rewards/margins": reward_margin(chosen, rejected),
        "logps/chosen": chosen_logps.detach().mean(),
        "logps/rejected": rejected_logps.detach().mean(),
    }


def check_preference_loss(loss_type: str, beta: float) -> None:
    """`loss_type` one of PREFERENCE_LOSS_TYPES and 0 < `beta` ≤ MAX_BETA, or a ValueError naming the knob (a page
    asks before it spends seconds on the warm start)."""
    if loss_type not in PREFERENCE_LOSS_TYPES:
        raise ValueError(f"loss_type={loss_type!r} is unknown; allowed: {', '.join(PREFERENCE_LOSS_TYPES)}")
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 < beta <= MAX_BETA:
        raise ValueError(f"beta={beta!r} is out of range; allowed: 0 < beta ≤ {MAX_BETA:g}")


def preference_warm_start(
    task: ToyTask,
    seed: int,
    device: torch.device | str = "cpu",
    model_preset: str = "tiny",
    cache_dir: Path | None = None,
) -> GPT2LMHeadModel:
    """The task's SFT policy for `seed` with its default demonstrations and steps (the checkpoint RL starts from,
    cached), after the task is prepared (its SFT check scores with the task's reward)."""
    if model_preset not in MODEL_PRESETS:
        raise ValueError(f"model_preset={model_preset!r} is unknown; allowed: {', '.join(MODEL_PRESETS)}")
    device = torch.device(device)
    # The thread count of the preset, as for RL (one thread for the small presets): DPOTraining runs with it too.
    use_preset_threads(model_preset, device)
    task.prepare(cache_dir or default_cache_dir(), device, seed)
    policy, _ = sft_policy(
        task, build_char_tokenizer(), model_preset, seed, task.default_demo_noise, DEFAULT_SFT_STEPS, device, cache_dir
    )
    return policy


class DPOTraining:
    """DPO or IPO from a warm start, one optimiser step at a time: `steps()` yields a record per step, so a page
    can draw the fit live. `policy` is trained in place; a frozen copy of it, taken here, is π_ref.

    Offline: each step draws `batch_size` training pairs with replacement and never samples from the policy.
    A `holdout_fraction` of the pairs is kept out (`held_out`). Every `eval_every` steps, at the last step and
    before the first (step 0), a record also carries the metrics on the held-out pairs (`eval_` + TRL's name)
    and, from `n_eval_prompts` samples of the policy on fixed prompts, the task's own verdict (`success_rate`,
    the gold success that the labels stand for), its reward (`reward_mean`) and the per-token KL(π_θ‖π_ref),
    exact (`kl_exact`) and its k3 estimate (`kl_k3`)."""

    def __init__(
        self,
        policy: GPT2LMHeadModel,
        pairs: list[PreferencePair],
        task: ToyTask,
        loss_type: str = "sigmoid",
        beta: float = 0.1,
        steps: int = 100,
        batch_size: int = 32,
        learning_rate: float = 5e-4,
        seed: int = 0,
        holdout_fraction: float = 0.2,
        eval_every: int = 10,
        n_eval_prompts: int = 128,
        tokenizer: PreTrainedTokenizerBase | None = None,
    ):
        check_preference_loss(loss_type, beta)
        check_pair_training(pairs, holdout_fraction, steps, batch_size, learning_rate)
        for knob, value in (("eval_every", eval_every), ("n_eval_prompts", n_eval_prompts)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{knob}={value!r} is out of range; allowed: an integer ≥ 1")
        # The policy's own tokenizer; the character tokenizer of the model presets by default.
        self.policy, self.task, self.tokenizer = policy, task, tokenizer or build_char_tokenizer()
        self.loss_type, self.beta = loss_type, float(beta)
        self.total_steps, self.batch_size, self.eval_every = steps, batch_size, eval_every
        self.rng = random.Random(seed)
        self.held_out, self.train = split_pairs(pairs, holdout_fraction, self.rng)
        self.reference = frozen_reference(policy)
        # The reference never changes: its log-probabilities of the held-out pairs are computed once.
        self.held_out_ref_logps = pair_logprobs(self.reference, self.tokenizer, self.held_out, frozen=True)
        self.device = next(policy.parameters()).device
        self.held_out_lengths = pair_lengths(self.tokenizer, self.held_out, self.device)
        # Fixed prompts and generator: the gold success of two steps differs by the policy, not by the draw.
        self.eval_prompts = task.sample_prompts(n_eval_prompts, random.Random(seed + 1))
        self.eval_seed = seed + 1
        # The SFT policy has no dropout, and eval mode keeps it so (as TRL's disable_dropout) through training.
        self.policy.eval()
        self.learning_rate = float(learning_rate)
        self.adam_state: dict | None = None  # AdamW's moments and step count, views of its group's once it trains
        self.group: DPOGroup | None = None  # the group it last trained in

    def steps(self) -> Iterator[dict[str, float]]:
        """Train; one record per step: `step`, the minibatch's `preference_metrics`, and where evaluated (step 0,
        every `eval_every` steps and the last) the held-out `eval_*` metrics, `success_rate`, `reward_mean`,
        `kl_exact` and `kl_k3`."""
        yield {"step": 0} | self.evaluate()
        for step in range(1, self.total_steps + 1):
            record = {"step": step} | self.update()
            if step % self.eval_every == 0 or step == self.total_steps:
                record |= self.evaluate()
            yield record

    def alone(self) -> DPOGroup:
        """The group of this training alone (formed again where it last trained in other company)."""
        if self.group is None or self.group.trainings != [self]:
            DPOGroup([self])
        return self.group

    def update(self) -> dict[str, float]:
        """One optimiser step on `batch_size` training pairs drawn with replacement; returns the minibatch's
        `preference_metrics`, measured before the step (as TRL logs them). A group of one (`DPOGroup.update`)."""
        return self.alone().update()[0]

    def evaluate(self, samples: int = 0, pairs: bool = True) -> dict:
        """The held-out pairs' metrics (`eval_` + TRL's names; unless not `pairs`), and of one sample (temperature
        1) per fixed prompt the gold `success_rate`, the task's reward `reward_mean` (its learned reward model's
        standardised score), and the per-token KL(π_θ‖π_ref): `kl_exact` over the vocabulary at each sampled
        state, `kl_k3` its k3 estimate at the sampled token. With `samples`, the first few samples as `samples`
        (token views). A group of one (`DPOGroup.evaluate`)."""
        return self.alone().evaluate([samples], [pairs])[0]

    def sample_views(self, rollout, ref_logp: torch.Tensor, scores, n: int) -> list[dict]:
        """The first `n` evaluation samples token by token: what the RL runs' views hold that DPO has (reward,
        gold verdict, log-probabilities of the policy and of the reference, entropy)."""
        views = []
        for i in range(min(n, len(rollout.prompts))):
            length = int(rollout.response_mask[i].sum().item())
            ids = rollout.response_ids[i, :length].tolist()
            views.append(
                {
                    "prompt": rollout.prompts[i],
                    "response": rollout.responses[i],
                    "tokens": [self.tokenizer.convert_ids_to_tokens(t) for t in ids],
                    "reward": scores.rewards[i],
                    "success": bool(scores.successes[i]),
                    "truncated": bool(rollout.truncated[i]),
                    "ids": ids,
                    "log_probs": rollout.old_logp[i, :length].tolist(),
                    "ref_log_probs": ref_logp[i, :length].tolist(),
                    "entropies": rollout.entropy[i, :length].tolist(),
                }
            )
        return views


class DPOGroup:
    """R `DPOTraining`s of one shape (model, minibatch size, held-out pairs, evaluation prompts) trained as one
    program, as a group of RL runs is (docs/ARCHITECTURE.md, "A group of runs"): the policies and the references each
    one `Stack` (every training's modules are views of their rows from now on), one teacher-forced pass of the
    policies over every run's chosen and rejected responses, one of the references, the same pure losses
    (`preference_loss`, vmapped over the runs of each `loss_type` with β an `[R]` tensor), one backward, each run's
    gradient clipped to its own norm, and one `StackedAdamW` step with each run's learning rate. Each run draws its
    own minibatches from its own `random.Random`, exactly as alone; the evaluation samples every run's prompts in one
    loop (`sample_runs`, each run from its own generator). A group of one is how a training steps alone."""

    def __init__(self, trainings: Sequence[DPOTraining]):
        self.trainings = list(trainings)
        first = self.trainings[0]
        for knob, value in (
            ("batch_size", lambda t: t.batch_size),
            ("held-out pairs", lambda t: len(t.held_out)),
            ("n_eval_prompts", lambda t: len(t.eval_prompts)),
            ("max_new_tokens", lambda t: t.task.max_new_tokens),
        ):
            if len({value(t) for t in self.trainings}) > 1:
                raise ValueError(f"the trainings differ in {knob}; a group holds trainings of one shape")
        self.R, self.device, self.tokenizer = len(self.trainings), first.device, first.tokenizer
        self.policy = Stack([t.policy for t in self.trainings], trainable=True)
        self.reference = Stack([t.reference for t in self.trainings])
        self.optimizer = StackedAdamW.at_torch_defaults(
            self.policy.buffer, [t.learning_rate for t in self.trainings], [t.adam_state for t in self.trainings]
        )
        self.beta = torch.tensor([t.beta for t in self.trainings], device=self.device)
        # TRL's max_grad_norm: one pair far from its target cannot throw the policy far in one step.
        self.max_grad_norm = torch.full((self.R,), MAX_GRAD_NORM, device=self.device)
        # The runs of each loss type, whose losses are one vmapped call.
        self.loss_types: dict[str, list[int]] = {}
        for r, training in enumerate(self.trainings):
            self.loss_types.setdefault(training.loss_type, []).append(r)
            training.group = self
            training.adam_state = self.optimizer.run_state(r)

    def _sequence_logprobs(self, stack: Stack, module, batches: list[TokenBatch], runs=None) -> torch.Tensor:
        """log π(y|x) `[R', B]` of each run's batch under its row of `stack` (the runs `runs`, all when None)."""
        model = StackedGPT2(module, stack.views(runs, grad=torch.is_grad_enabled()))
        logp, mask = response_token_logprobs(model, batches, self.tokenizer.pad_token_id)
        return masked_sum(logp, mask, dim=-1)

    def _losses(self, runs: list[int], logps, ref_logps, lengths) -> torch.Tensor:
        """`preference_loss` `[R']` of the runs `runs` from their sequence log-probabilities and lengths `[R', 2N]`
        (the chosen responses, then the rejected)."""
        n = logps.shape[1] // 2
        losses = [None] * len(runs)
        for loss_type, members in self.loss_types.items():
            positions = [p for p, r in enumerate(runs) if r in members]
            if not positions:
                continue
            index = torch.tensor(positions, device=self.device)
            pieces = [t[index] for t in (logps, ref_logps, lengths)]
            beta = self.beta[torch.tensor(runs, device=self.device)[index]]
            loss = torch.func.vmap(functools.partial(_pair_loss, loss_type, n))(*pieces, beta)
            for p, value in zip(positions, loss.unbind()):
                losses[p] = value
        return torch.stack(losses)

    def _metrics(self, runs: list[int], loss, logps, ref_logps) -> dict[str, torch.Tensor]:
        """`preference_metrics` of each run `[R']`."""
        n = logps.shape[1] // 2
        beta = self.beta[torch.tensor(runs, device=self.device)]
        return torch.func.vmap(lambda loss, lp, ref, b: preference_metrics(loss, lp[:n], lp[n:], ref[:n], ref[n:], b))(
            loss, logps, ref_logps, beta
        )

    def update(self) -> list[dict[str, float]]:
        """`DPOTraining.update` of every run: each run's minibatch from its own generator, one pass of the policies and
        one of the references, one backward and one optimiser step; every run's metrics in one transfer."""
        everyone = list(range(self.R))
        drawn = [t.rng.choices(t.train, k=t.batch_size) for t in self.trainings]
        batches = [pair_batch(self.tokenizer, pairs, self.device) for pairs in drawn]
        logps = self._sequence_logprobs(self.policy, self.trainings[0].policy, batches)
        with torch.no_grad():
            ref_logps = self._sequence_logprobs(self.reference, self.trainings[0].reference, batches)
        # The responses' token counts with EOS (`pair_lengths`), read off the masks rather than tokenised again.
        lengths = torch.stack([batch.response_mask.sum(-1) for batch in batches])
        loss = self._losses(everyone, logps, ref_logps, lengths)
        self.policy.buffer.grad = None
        loss.sum().backward()  # each run's loss reaches its own row only: every row gets its own run's gradient
        clip_grad_norms(self.policy.buffer.grad, self.max_grad_norm)
        self.optimizer.step(torch.ones(self.R, dtype=torch.bool))
        records = Records(self.R)
        records.add(None, self._metrics(everyone, loss, logps.detach(), ref_logps))
        return records.values()

    @torch.no_grad()
    def evaluate(self, samples: list[int], pairs: list[bool]) -> list[dict]:
        """`DPOTraining.evaluate(samples[r], pairs[r])` of every run r: the held-out pairs of the runs that ask for
        them in one pass, every run's evaluation prompts sampled in one loop and read by the references in one pass;
        the numbers in one transfer."""
        records = Records(self.R)
        held = [r for r in range(self.R) if pairs[r]]
        if held:
            trainings = [self.trainings[r] for r in held]
            runs = None if len(held) == self.R else torch.tensor(held, device=self.device)
            batches = [pair_batch(self.tokenizer, t.held_out, self.device) for t in trainings]
            logps = self._sequence_logprobs(self.policy, trainings[0].policy, batches, runs)
            ref_logps = torch.stack([torch.cat(t.held_out_ref_logps) for t in trainings])
            lengths = torch.stack([torch.cat(t.held_out_lengths) for t in trainings])
            metrics = self._metrics(held, self._losses(held, logps, ref_logps, lengths), logps, ref_logps)
            records.add(runs, {f"eval_{key}": value for key, value in metrics.items()})
        first = self.trainings[0]
        rollouts = sample_runs(
            StackedGPT2(first.policy, self.policy.views(grad=False)),
            self.tokenizer,
            [t.eval_prompts for t in self.trainings],
            first.task.max_new_tokens,
            [1.0] * self.R,
            [torch.Generator(device=self.device).manual_seed(t.eval_seed) for t in self.trainings],
        )
        width = max(rollout.response_mask.shape[1] for rollout in rollouts)
        reference = StackedGPT2(first.reference, self.reference.views(grad=False))
        ref_logits = teacher_forced_logits(reference, stacked_trees(rollouts, width))
        extra = []
        for r, (training, rollout) in enumerate(zip(self.trainings, rollouts)):
            logits = ref_logits[r, :, : rollout.response_mask.shape[1]]
            ref_logp = token_logprobs(logits, rollout.response_ids)
            scores = training.task.score(rollout.prompts, rollout.responses, rollout.truncated.tolist())
            mask = rollout.response_mask
            kls = {
                "kl_exact": masked_mean(kl_exact(rollout.logits, logits), mask),
                "kl_k3": masked_mean(kl_k3(rollout.old_logp, ref_logp), mask),
            }
            records.add(torch.tensor([r]), {name: value[None] for name, value in kls.items()})
            extra.append(
                {
                    "success_rate": sum(scores.successes) / len(scores.successes),
                    "reward_mean": sum(scores.rewards) / len(scores.rewards),
                }
            )
            if samples[r]:
                extra[-1]["samples"] = training.sample_views(rollout, ref_logp, scores, samples[r])
        return [record | more for record, more in zip(records.values(), extra)]


def _pair_loss(loss_type: str, n: int, logps, ref_logps, lengths, beta) -> torch.Tensor:
    """`preference_loss` of one run from its sequence log-probabilities and lengths `[2N]`, chosen then rejected."""
    return preference_loss(
        loss_type, logps[:n], logps[n:], ref_logps[:n], ref_logps[n:], beta, lengths[:n], lengths[n:]
    )


class DPOTrainer(PairRunTrainer):
    """A run whose `algo` is a `DPOConfig`, trained as `rl_core.engine.trainer.Trainer` trains an RL run (the same
    `prepare()`, `steps()`, `step_index`, `evaluate()`), so a sweep, the run store and reuse take it like any run.

    Data: the task's own preference pairs for the run's seed, the very pairs its reward model is fitted to
    (`task.preference_pairs(task.n_pairs, Random(seed), task.label_noise)`). Start: the run's SFT warm start, as
    for the RL runs of that seed. Step k's record holds the minibatch's TRL metrics (`loss`, `rewards/*`,
    `logps/chosen`, `logps/rejected`) and the `DPOTraining.evaluate` metrics (gold `success_rate`, `reward_mean`,
    `kl_exact`, `kl_k3`, and at the first step, every `eval_steps` and the last the held-out `eval_*`), all
    measured before the k-th update: like an RL run's record, step k describes the policy after k − 1 updates."""

    kind = DPOConfig

    def __init__(self, run: RunConfig, cache_dir: Path | None = None, stop_event: threading.Event | None = None):
        super().__init__(run, cache_dir, stop_event)
        self.policy = self.reference = None

    def prepare(self, progress: Progress | None = None) -> dict:
        """Reward model (the task's, for its `reward_mean`), SFT policy, its frozen copy as π_ref, the pairs;
        returns the setup metrics."""
        self.policy, setup = prepare_warm_start(self, stoppable(progress, self.stop_event))
        task, algo = self.task, self.algo
        self.training = DPOTraining(
            self.policy,
            self.task_pairs(),
            task,
            loss_type=algo.loss_type,
            beta=algo.beta,
            steps=self.run.steps,
            batch_size=algo.per_device_train_batch_size,
            learning_rate=algo.learning_rate,
            seed=self.run.seed,
            holdout_fraction=algo.holdout_fraction,
            eval_every=1,
            n_eval_prompts=algo.n_eval_prompts,
            tokenizer=self.tokenizer,
        )
        self.reference = self.training.reference
        return setup | {"train_pairs": len(self.training.train), "held_out_pairs": len(self.training.held_out)}

    @classmethod
    def step_group(cls, trainers: Sequence[DPOTrainer]) -> list[dict]:
        """One step of each run, as one `DPOGroup` (kept while its runs stay the same): each run's evaluation of its
        policy as it is, then one update of all."""
        trainings = [t.training for t in trainers]
        group = bound_group(trainings, lambda g: g.trainings)
        if group is None:
            group = DPOGroup(trainings)
        steps = [t.step_index + 1 for t in trainers]
        # The held-out pairs (a fifth of the task's, by default 600) cost most of a step: at the first step, every
        # `eval_steps` and at the last, as TRL evaluates.
        pairs = [s == 1 or s % t.algo.eval_steps == 0 or s == t.run.steps for s, t in zip(steps, trainers)]
        evaluated = group.evaluate([t.run.samples_per_record for t in trainers], pairs)
        records = [{"step": s} | e | u for s, e, u in zip(steps, evaluated, group.update())]
        for trainer in trainers:
            trainer.step_index += 1
        return records

    def evaluation(self) -> PolicyEvaluation:
        """What the evaluation after the last step samples: the policy at its task's length limit, temperature 1."""
        return PolicyEvaluation(self.policy, self.run.model, self.tokenizer, self.task, self.task.max_new_tokens, 1.0)

    def evaluate(self, n_prompts: int = EVALUATION_PROMPTS, seed: int = EVALUATION_SEED) -> dict:
        """The final evaluation every run gets (`rl_core.engine.evaluation`), a group of one."""
        return evaluate_policies([self.evaluation()], n_prompts, seed)[0]
