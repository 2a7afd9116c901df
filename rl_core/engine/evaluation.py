"""The evaluation after a run's last step: success rate, mean reward and response length of its policy on fresh
prompts, one sample each, scored by the run's task.

Every run is evaluated on the same prompts (drawn from one seed) with a generator seeded alike, so runs differ
only in their policies. The policies of one `evaluation_key` (model, device, shape, length limit) are sampled as one
program, R runs in one token-by-token loop (`stacked_runs.sample_runs`); each run then draws exactly the numbers it
draws alone, and its tokens are its own unless a logit that differs in the last bits between the stacked and the
single-run matmul moves a cumulative probability across a draw. One run is a group of one, on the same path.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from rl_core.config import EVALUATION_PROMPTS
from rl_core.engine.lora import adapter_parameters, base_parameters, lora_scaling_of
from rl_core.engine.rollout import Rollout
from rl_core.engine.stacked_runs import Stack, StackedGPT2, sample_runs, shape_of

EVALUATION_SEED = 12345
# The most that one program's sampled logits `[R, prompts, T, vocabulary]` (float32) may take: a group whose runs
# would pass it is sampled in programs of fewer runs (the 124M shape's vocabulary, 50,257, takes 1.2 GB per run at
# 256 prompts × 24 tokens, so each of its runs is a program of its own; the toy presets fit thousands).
LOGITS_BYTES = 2**30


@dataclass(frozen=True)
class PolicyEvaluation:
    """What the evaluation of one run samples and scores: its policy (a plain GPT-2 or a peft-wrapped one), the
    run's model name (its tokenizer and architecture), tokenizer, task, length limit and sampling temperature."""

    policy: torch.nn.Module
    model: str
    tokenizer: PreTrainedTokenizerBase
    task: object
    max_new_tokens: int
    temperature: float


def evaluation_key(evaluation: PolicyEvaluation) -> tuple:
    """Runs with equal keys are evaluated as one program: one tokenizer, device, model shape and length limit.
    Tasks and temperatures may differ (a task's prompts are padded to the widest run's)."""
    policy = evaluation.policy
    return (
        evaluation.model,
        next(policy.parameters()).device,
        shape_of(policy),
        lora_scaling_of(policy),
        evaluation.max_new_tokens,
    )


def runs_per_program(evaluation: PolicyEvaluation, n_prompts: int) -> int:
    """How many runs of this evaluation's key one program samples: `LOGITS_BYTES` over one run's logits,
    `n_prompts × max_new_tokens × vocabulary × 4` bytes, and at least one."""
    one_run = n_prompts * evaluation.max_new_tokens * evaluation.policy.config.vocab_size * 4
    return max(1, LOGITS_BYTES // one_run)


def stacked_policy_weights(policies: Sequence[torch.nn.Module]) -> dict[str, torch.Tensor]:
    """The named weights `[R, …]` of R policies of one shape, copied into stacks of their own (the policies stay
    views of their groups' buffers, where they are): a plain model's every parameter; a peft-wrapped policy's frozen
    base and its adapters, under the names `StackedGPT2` reads."""
    if lora_scaling_of(policies[0]) is None:
        return Stack(policies, bind=False).views(grad=False)
    base = Stack(policies, parameters=base_parameters, bind=False)
    adapters = Stack(policies, parameters=adapter_parameters, bind=False)
    return base.views(grad=False) | adapters.views(grad=False)


@torch.no_grad()
def evaluate_policies(
    evaluations: Sequence[PolicyEvaluation], n_prompts: int = EVALUATION_PROMPTS, seed: int = EVALUATION_SEED
) -> list[dict]:
    """Each run's `success_rate`, `reward_mean` and `response_length` on `n_prompts` prompts drawn from `seed` (its
    task's), one sample each from a generator seeded with `seed`; runs of one `evaluation_key` only, sampled
    `runs_per_program` at a time."""
    if len({evaluation_key(e) for e in evaluations}) > 1:
        raise ValueError("the runs differ in model, device, shape or length limit; evaluate each key's runs apart")
    size = runs_per_program(evaluations[0], n_prompts)
    results = []
    for start in range(0, len(evaluations), size):
        results.extend(_evaluated(evaluations[start : start + size], n_prompts, seed))
    return results


def _evaluated(evaluations: Sequence[PolicyEvaluation], n_prompts: int, seed: int) -> list[dict]:
    """`evaluate_policies` of runs sampled as one program."""
    first = evaluations[0]
    device = next(first.policy.parameters()).device
    model = StackedGPT2(first.policy, stacked_policy_weights([e.policy for e in evaluations]))
    rollouts = sample_runs(
        model,
        first.tokenizer,
        [e.task.sample_prompts(n_prompts, random.Random(seed)) for e in evaluations],
        first.max_new_tokens,
        [e.temperature for e in evaluations],
        [torch.Generator(device=device).manual_seed(seed) for _ in evaluations],
    )
    return [scored(evaluation, rollout) for evaluation, rollout in zip(evaluations, rollouts)]


def scored(evaluation: PolicyEvaluation, rollout: Rollout) -> dict:
    """One run's evaluation record from its sampled responses (one per prompt), scored by its task."""
    scores = evaluation.task.score(rollout.prompts, rollout.responses, rollout.truncated.tolist())
    return {
        "success_rate": sum(scores.successes) / len(rollout.prompts),
        "reward_mean": sum(scores.rewards) / len(rollout.prompts),
        "response_length": rollout.lengths.mean().item(),
    }
