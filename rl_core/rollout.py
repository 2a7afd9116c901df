"""Batched sampling with the KV cache, and the per-token quantities of a (prompt, response) batch.

Layout: every sequence is `[left-padded prompt | right-padded response]`, so all prompts end at the same
column `P` and response token t of every row sits at column `P + t`. The logits that predict response token t
are read at column `P + t − 1`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import GPT2LMHeadModel, PreTrainedTokenizerBase

from rl_core.losses import entropy_from_logits
from rl_core.models import position_ids_from_mask


@dataclass
class TokenBatch:
    """Token ids of (prompt, response) pairs: prompt ids left-padded to `prompt_length`, then response ids."""

    sequences: torch.Tensor  # [B, P + T] long
    attention_mask: torch.Tensor  # [B, P + T] long
    prompt_length: int  # P
    response_mask: torch.Tensor  # [B, T] float: 1 for response tokens up to and including EOS

    @property
    def response_ids(self) -> torch.Tensor:
        return self.sequences[:, self.prompt_length :]


@dataclass
class Rollout(TokenBatch):
    """A sampled batch with what the sampler saw at every step."""

    logits: torch.Tensor  # [B, T, V] the sampling policy's logits / temperature at each step
    old_logp: torch.Tensor  # [B, T] log π_old of the sampled tokens: π_old is the policy that sampled them
    entropy: torch.Tensor  # [B, T] entropy of the sampling distribution at each step
    ended_with_eos: torch.Tensor  # [B] bool
    prompts: list[str]
    responses: list[str]  # decoded text, without EOS

    @property
    def truncated(self) -> torch.Tensor:
        """[B] bool: the response hit the length limit without emitting EOS."""
        return ~self.ended_with_eos

    @property
    def lengths(self) -> torch.Tensor:
        return self.response_mask.sum(-1)

    def select(self, rows: torch.Tensor) -> "Rollout":
        """The sub-batch of the given row indices."""
        index = rows.tolist()
        return Rollout(
            sequences=self.sequences[rows],
            attention_mask=self.attention_mask[rows],
            prompt_length=self.prompt_length,
            response_mask=self.response_mask[rows],
            logits=self.logits[rows],
            old_logp=self.old_logp[rows],
            entropy=self.entropy[rows],
            ended_with_eos=self.ended_with_eos[rows],
            prompts=[self.prompts[i] for i in index],
            responses=[self.responses[i] for i in index],
        )


def encode_prompts(tokenizer: PreTrainedTokenizerBase, prompts: list[str], device: torch.device):
    """BOS + prompt characters, left-padded: `(input_ids, attention_mask)`."""
    rows = [[tokenizer.bos_token_id] + ids for ids in tokenizer(prompts, add_special_tokens=False)["input_ids"]]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row) :] = torch.tensor(row)
        mask[i, width - len(row) :] = 1
    return ids.to(device), mask.to(device)


@torch.no_grad()
def sample(
    policy: GPT2LMHeadModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    max_new_tokens: int,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    num_generations: int = 1,
) -> Rollout:
    """Sample `num_generations` responses per prompt (rows `i·G … i·G + G − 1` answer prompt i), token by token
    with the KV cache, from softmax(logits / temperature).

    Each prompt is encoded and run through the model once; its keys and values are then shared by its group."""
    device = next(policy.parameters()).device
    was_training = policy.training
    if was_training:  # switching modes walks every module: only when dropout is actually on
        policy.eval()
    prompt_ids, prompt_mask = encode_prompts(tokenizer, prompts, device)
    # Inference mode skips autograd's bookkeeping on every op: a third off each decoding call of a small model.
    # What leaves the loop goes through a functional op (stack, cat, clone) below, outside inference mode, so the
    # Rollout holds ordinary tensors that a loss may use.
    with torch.inference_mode():
        tokens, step_logits, alive, finished = _decode(
            policy, tokenizer, prompt_ids, prompt_mask, max_new_tokens, temperature, generator, num_generations
        )
    prompt_ids = prompt_ids.repeat_interleave(num_generations, dim=0)
    prompt_mask = prompt_mask.repeat_interleave(num_generations, dim=0)
    response_ids = torch.stack(tokens, dim=1)
    response_mask = torch.stack(alive, dim=1).float()
    logits = torch.stack(step_logits, dim=1)
    if was_training:
        policy.train()
    responses = tokenizer.batch_decode(response_ids.cpu().tolist(), skip_special_tokens=True)
    return Rollout(
        sequences=torch.cat([prompt_ids, response_ids], dim=1),
        attention_mask=torch.cat([prompt_mask, response_mask.long()], dim=1),
        prompt_length=prompt_ids.shape[1],
        response_mask=response_mask,
        logits=logits,
        old_logp=token_logprobs(logits, response_ids) * response_mask,
        entropy=entropy_from_logits(logits) * response_mask,
        ended_with_eos=finished.clone(),  # the one field no functional op has copied out of inference mode
        prompts=[p for p in prompts for _ in range(num_generations)],
        responses=responses,
    )


def _decode(policy, tokenizer, prompt_ids, prompt_mask, max_new_tokens, temperature, generator, num_generations):
    """The token-by-token loop of `sample` → `(tokens, logits / temperature, response mask, finished)`, one
    entry per step in the first three; `finished` [B] says which rows emitted EOS."""
    out = policy(
        input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=position_ids_from_mask(prompt_mask), use_cache=True
    )
    cache = out.past_key_values
    cache.batch_repeat_interleave(num_generations)
    prompt_mask = prompt_mask.repeat_interleave(num_generations, dim=0)
    logits = out.logits[:, -1, :].float().repeat_interleave(num_generations, dim=0) / temperature
    eos = tokenizer.eos_token_id
    tokens, step_logits, alive = [], [], []
    finished = torch.zeros(prompt_mask.shape[0], dtype=torch.bool, device=prompt_mask.device)
    attention = prompt_mask
    positions = position_ids_from_mask(prompt_mask)
    for step in range(max_new_tokens):
        token = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator).squeeze(-1)
        # Rows that already ended keep emitting padding, which the response mask hides.
        token = torch.where(finished, torch.full_like(token, tokenizer.pad_token_id), token)
        tokens.append(token)
        step_logits.append(logits)
        alive.append(~finished)
        finished = finished | (token == eos)
        if bool(finished.all()) or step == max_new_tokens - 1:
            break
        attention = torch.cat([attention, alive[-1].long()[:, None]], dim=-1)
        positions = positions[:, -1:] + 1
        out = policy(
            input_ids=token[:, None], attention_mask=attention, position_ids=positions, past_key_values=cache, use_cache=True
        )
        cache = out.past_key_values
        logits = out.logits[:, -1, :].float() / temperature
    return tokens, step_logits, alive, finished


def encode_pairs(
    tokenizer: PreTrainedTokenizerBase, prompts: list[str], responses: list[str], device: torch.device
) -> TokenBatch:
    """Teacher-forcing layout of given responses (each followed by EOS) after their prompts."""
    prompt_ids, prompt_mask = encode_prompts(tokenizer, prompts, device)
    rows = [ids + [tokenizer.eos_token_id] for ids in tokenizer(responses, add_special_tokens=False)["input_ids"]]
    width = max(len(r) for r in rows)
    response_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    response_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        response_ids[i, : len(row)] = torch.tensor(row)
        response_mask[i, : len(row)] = 1
    response_ids, response_mask = response_ids.to(device), response_mask.to(device)
    return TokenBatch(
        sequences=torch.cat([prompt_ids, response_ids], dim=1),
        attention_mask=torch.cat([prompt_mask, response_mask], dim=1),
        prompt_length=prompt_ids.shape[1],
        response_mask=response_mask.float(),
    )


def response_logits(model: GPT2LMHeadModel, batch: TokenBatch, temperature: float = 1.0) -> torch.Tensor:
    """Logits `[B, T, V]` (divided by the sampling temperature) that predict each response token.

    The last column predicts nothing that was sampled, so it is left out of the pass."""
    attention_mask = batch.attention_mask[:, :-1]
    out = model(
        input_ids=batch.sequences[:, :-1],
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        use_cache=False,  # one pass over whole sequences: keys and values are never needed again
    )
    return out.logits[:, batch.prompt_length - 1 :, :].float() / temperature


def frozen_response_logits(model: GPT2LMHeadModel, batch: TokenBatch, temperature: float = 1.0) -> torch.Tensor:
    """`response_logits` of a model that is not being trained (the reference): computed in inference mode, which
    skips autograd's bookkeeping, and copied out so that a loss may use them."""
    with torch.inference_mode():
        logits = response_logits(model, batch, temperature)
    return logits.clone()


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log π(a_t|s_t) `[B, T]` of the given tokens under `logits` `[B, T, V]`."""
    return torch.log_softmax(logits, dim=-1).gather(-1, tokens[..., None]).squeeze(-1)
