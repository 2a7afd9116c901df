"""Talking to a policy: its answer to one prompt, and at each position of the answer its likeliest tokens.

A learner types a prompt after a run and sees what the trained policy and its reference (the SFT warm start) answer,
token by token with their top tokens and probabilities. `check_prompt` holds a typed prompt to what the task's
prompts are made of, so a policy is never asked about text it cannot have seen. `Probe` follows one decision of
one fixed prompt through a run: the distribution over a few tokens at one position, a handful of floats per step.
"""

from __future__ import annotations

import functools
import os
import random
from dataclasses import dataclass

import torch
from transformers import GPT2LMHeadModel, PreTrainedTokenizerBase

from rl_core.engine.decoding import KVDecoder
from rl_core.engine.models import use_preset_threads
from rl_core.engine.rollout import sample_from_logits
from toy_tasks import get_task

TOP_K = 5  # tokens shown per position
PROMPT_SAMPLES = 1000  # prompts drawn to learn which characters a task's prompts are made of
EXAMPLES_SEED = 0  # the task's example prompts, and the probe's prompt, are its first prompts from this seed


@dataclass(frozen=True)
class Answer:
    """A policy's answer to one prompt, one entry per generated token (EOS included when it came)."""

    prompt: str
    tokens: list[str]
    probabilities: list[float]  # π(y_t | x, y_<t) of each generated token
    top: list[list[tuple[str, float]]]  # per position the TOP_K likeliest tokens with their probabilities
    ended: bool  # the answer closed with EOS before the length limit

    @property
    def text(self) -> str:
        return "".join(self.tokens[:-1] if self.ended else self.tokens)


def top_tokens(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k likeliest tokens at each position: `(probabilities [T, k], ids [T, k])`, likeliest first, of
    π(a | s_t) = softmax(z_t)_a for logits z `[T, V]`."""
    return torch.softmax(logits.float(), dim=-1).topk(min(k, logits.shape[-1]), dim=-1)


@torch.inference_mode()
def decode(
    policy: GPT2LMHeadModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt: str,
    max_new_tokens: int,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> tuple[list[int], torch.Tensor]:
    """One answer to `prompt`, token by token with the KV cache: `(token ids, logits / temperature [T, V])`.

    Greedy, y_t = argmax_a z_t[a], without a generator; with one, y_t ~ softmax(z_t / temperature) drawn as the
    trainer's sampler draws (`rollout.sample_from_logits`), so a seed gives one answer. Stops after EOS."""
    device = next(policy.parameters()).device
    ids = torch.tensor(
        [[tokenizer.bos_token_id, *tokenizer(prompt, add_special_tokens=False)["input_ids"]]], device=device
    )
    decoder = KVDecoder(policy, ids, torch.ones_like(ids), 1, max_new_tokens)
    logits = decoder.first_logits / temperature
    tokens, steps = [], []
    for position in range(max_new_tokens):
        token = logits.argmax(-1) if generator is None else sample_from_logits(logits, generator)
        tokens.append(int(token))
        steps.append(logits[0])
        if tokens[-1] == tokenizer.eos_token_id or position == max_new_tokens - 1:
            break
        logits = decoder.step(token) / temperature
    return tokens, torch.stack(steps).clone()


def answer(
    policy: GPT2LMHeadModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt: str,
    max_new_tokens: int,
    temperature: float = 1.0,
    seed: int | None = None,
    top_k: int = TOP_K,
) -> Answer:
    """`decode`'s answer (greedy, or sampled from `seed`) with the probability of each of its tokens and the
    `top_k` likeliest tokens at each of its positions."""
    generator = None
    if seed is not None:
        generator = torch.Generator(device=next(policy.parameters()).device).manual_seed(seed)
    ids, logits = decode(policy, tokenizer, prompt, max_new_tokens, temperature, generator)
    probabilities = torch.softmax(logits, dim=-1)
    top_p, top_ids = top_tokens(logits, top_k)
    token = tokenizer.convert_ids_to_tokens
    return Answer(
        prompt=prompt,
        tokens=token(ids),
        probabilities=probabilities[torch.arange(len(ids)), ids].tolist(),
        top=[list(zip(token(row_ids), row_p)) for row_ids, row_p in zip(top_ids.tolist(), top_p.tolist())],
        ended=ids[-1] == tokenizer.eos_token_id,
    )


# ---------------------------------------------------------------------------------------------- prompts
@functools.cache
def prompt_form(task_name: str) -> tuple[str, str]:
    """`(characters, end)`: the characters a task's prompts are made of and the text every one of them ends with
    (e.g. "abcdefgh" and ">" for caesar), read off PROMPT_SAMPLES of its prompts."""
    prompts = get_task(task_name).sample_prompts(PROMPT_SAMPLES, random.Random(EXAMPLES_SEED))
    end = os.path.commonprefix([p[::-1] for p in prompts])[::-1]
    characters = "".join(sorted({c for p in prompts for c in p[: len(p) - len(end)]}))
    return characters, end


def example_prompts(task_name: str, n: int = 4) -> list[str]:
    """The task's first `n` distinct prompts from EXAMPLES_SEED."""
    drawn = get_task(task_name).sample_prompts(8 * n, random.Random(EXAMPLES_SEED))
    return list(dict.fromkeys(drawn))[:n]


def check_prompt(task_name: str, text: str) -> str:
    """The prompt to ask: `text` without surrounding spaces, its task's closing text added if missing.

    ValueError naming `prompt` and what is allowed: a prompt made of other characters than the task's prompts,
    or longer than its longest prompt (the answer must fit in the model's context after it)."""
    characters, end = prompt_form(task_name)
    task = get_task(task_name)
    body = text.strip()
    body = body[: len(body) - len(end)] if end and body.endswith(end) else body
    allowed = (
        f"characters from {characters!r}, at most {task.max_prompt_length - len(end)} of them"
        + (f", then {end!r} (added when left out)" if end else "")
        + f", e.g. {example_prompts(task_name, 1)[0]!r}"
    )
    if not body:
        raise ValueError(f"prompt is empty; allowed: {allowed}")
    if others := "".join(sorted(set(body) - set(characters))):
        plural = "s" if len(others) > 1 else ""
        why = (
            f"{end!r} only closes a prompt"
            if set(others) <= set(end)
            else f"task {task_name}'s prompts never hold the character{plural} {', '.join(map(repr, others))}"
        )
        raise ValueError(f"prompt {text.strip()!r} cannot be asked: {why}; allowed: {allowed}")
    if len(body) + len(end) > task.max_prompt_length:
        raise ValueError(f"prompt {text.strip()!r} is {len(body)} characters long; allowed: {allowed}")
    return body + end


# ---------------------------------------------------------------------------------------------- the probe
@dataclass(frozen=True)
class Probe:
    """One decision followed through a run: π_θ(a | x, y_<j) for a few tokens a, at one position j of one prompt x.

    x is the task's first example prompt, y the reference's greedy answer to it, j the position where the reference
    is least sure of its own choice (argmin_t π_ref(y_t | x, y_<t)), and the tokens a are the reference's `TOP_K`
    likeliest there. Per step that is TOP_K + 1 floats (the rest of the mass as "other"), and one pass over at
    most a prompt and an answer, so a run can record it at every step."""

    prompt: str
    context: str  # y_<j: the reference's answer before the probed position
    tokens: tuple[str, ...]
    token_ids: tuple[int, ...]
    input_ids: tuple[int, ...]  # BOS, x, y_<j

    @classmethod
    def of(
        cls,
        task_name: str,
        reference: GPT2LMHeadModel,
        tokenizer: PreTrainedTokenizerBase,
        max_new_tokens: int,
        temperature: float = 1.0,
    ) -> Probe:
        prompt = example_prompts(task_name, 1)[0]
        said = answer(reference, tokenizer, prompt, max_new_tokens, temperature)
        position = min(range(len(said.tokens)), key=said.probabilities.__getitem__)
        tokens = tuple(token for token, _ in said.top[position])
        context = "".join(said.tokens[:position])
        input_ids = (tokenizer.bos_token_id, *tokenizer(prompt + context, add_special_tokens=False)["input_ids"])
        return cls(prompt, context, tokens, tuple(tokenizer.convert_tokens_to_ids(list(tokens))), input_ids)

    @torch.inference_mode()
    def probabilities(self, policy: GPT2LMHeadModel, temperature: float = 1.0) -> list[float]:
        """π(a | x, y_<j) of each probed token, then 1 − their sum (every other token)."""
        ids = torch.tensor([self.input_ids], device=next(policy.parameters()).device)
        logits = KVDecoder(policy, ids, torch.ones_like(ids), 1, 0).first_logits[0] / temperature
        chosen = torch.softmax(logits, dim=-1)[list(self.token_ids)].tolist()
        return [*chosen, max(1.0 - sum(chosen), 0.0)]


# ---------------------------------------------------------------------------------------------- a finished run
@dataclass(frozen=True)
class ChatModels:
    """What a run keeps to be talked to once it has ended: its policy as trained and its reference (the SFT warm
    start), frozen on the CPU, with what its answers need (model preset, task, length limit, sampling temperature)."""

    policy: GPT2LMHeadModel
    reference: GPT2LMHeadModel
    tokenizer: PreTrainedTokenizerBase
    model: str
    task: str
    max_new_tokens: int
    temperature: float

    @classmethod
    def of(cls, trainer) -> ChatModels:
        """The trainer's own models, moved (a trainer is done with them once its run has ended)."""
        models = [model.requires_grad_(False).eval().cpu() for model in (trainer.policy, trainer.reference)]
        return cls(
            *models,
            trainer.tokenizer,
            trainer.run.model,
            trainer.run.task,
            trainer.max_new_tokens,
            trainer.algo.temperature,
        )

    @property
    def nbytes(self) -> int:
        return sum(p.numel() * p.element_size() for model in (self.policy, self.reference) for p in model.parameters())

    def answers(self, prompt: str, seed: int | None = None) -> tuple[Answer, Answer]:
        """(reference, policy): each one's own answer to the prompt (`check_prompt` it first).

        On the preset's CPU thread count, as its training ran: a tiny model's passes on two threads of a loaded CPU
        took 8× as long as on one (0.15 s against 0.02 s for both answers, load average 17 on 2 cores)."""
        threads = torch.get_num_threads()
        use_preset_threads(self.model, torch.device("cpu"))
        try:
            return tuple(
                answer(model, self.tokenizer, prompt, self.max_new_tokens, self.temperature, seed)
                for model in (self.reference, self.policy)
            )
        finally:
            torch.set_num_threads(threads)  # the caller's thread gets its own count back
