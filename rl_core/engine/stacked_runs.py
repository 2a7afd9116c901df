"""R policies of one model shape run as one: every weight stacked along a leading run axis `[R, …]`.

R runs whose tensors sit side by side pay each op's fixed cost (Python, dispatch, a kernel launch) once: a linear
layer becomes one batched matmul (`baddbmm`) over the runs. Each run keeps its own weights, inputs and random
draws, so its numbers are the ones it gets alone, up to float rounding where a stacked op sums in another order.
What that buys depends on the op's size: on one CPU core a decoding step (64 rows × 1 token) is mostly fixed cost
and sampling R = 8 runs together costs each about 0.6 of its time alone; a teacher-forced pass of a few hundred
tokens already runs near the matmul throughput, and padding each run to the largest one costs more than stacking
saves (`bench/stacked_runs.py`, `docs/ARCHITECTURE.md`).

* `StackedPolicies.response_logits` — the teacher-forced pass of `rollout.response_logits` for R batches at once,
  with gradients into the stacked weights;
* `sample_runs` — `rollout.sample` for R runs in one token-by-token loop over one key/value cache, each run drawing
  from its own generator exactly the numbers it draws alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from transformers import GPT2LMHeadModel, PreTrainedTokenizerBase

from rl_core.engine.models import position_ids_from_mask
from rl_core.engine.rollout import Rollout, TokenBatch, categorical_from_uniform, encode_prompts, rollout_from_decoded

# The sampler drops finished rows from its batch once the busiest run's rows fill at most this share of its slots.
COMPACT_AT = 0.75
SHAPE_FIELDS = ("vocab_size", "n_layer", "n_embd", "n_head", "n_positions", "activation_function")


class StackedPolicies:
    """The weights of R `GPT2LMHeadModel`s of one shape, each stacked along a leading run axis.

    The stacked tensors are copies: leaves that collect every run's gradient (`weights[name].grad[r]` is run r's),
    written back to the models with `write_back`."""

    def __init__(self, policies: Sequence[GPT2LMHeadModel], requires_grad: bool = False):
        if not policies:
            raise ValueError("policies is empty; a stack holds at least one run")
        config = policies[0].config
        for r, policy in enumerate(policies[1:], start=1):
            differs = [f for f in SHAPE_FIELDS if getattr(policy.config, f) != getattr(config, f)]
            if differs:
                raise ValueError(
                    f"policy {r} differs from policy 0 in {', '.join(differs)}; a stack holds runs of one model shape"
                )
        self.config = config
        self.runs = len(policies)
        self.heads, self.head_dim = config.n_head, config.n_embd // config.n_head
        self.scaling = policies[0].transformer.h[0].attn.scaling
        self.activation = policies[0].transformer.h[0].mlp.act
        named = [dict(p.named_parameters()) for p in policies]  # a tied LM head is listed once, as the embedding
        self.weights = {
            name: torch.stack([n[name].detach() for n in named]).requires_grad_(requires_grad) for name in named[0]
        }

    def write_back(self, policies: Sequence[GPT2LMHeadModel]) -> None:
        """Copy each run's stacked weights into its model."""
        with torch.no_grad():
            for r, policy in enumerate(policies):
                for name, parameter in policy.named_parameters():
                    parameter.copy_(self.weights[name][r])

    # ------------------------------------------------------------------ the transformer over the run axis
    def _layer_norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """Layer norm of x `[R, M, d]`, each run with its own scale and shift."""
        w = self.weights
        normed = F.layer_norm(x, x.shape[-1:], eps=self.config.layer_norm_epsilon)
        return torch.addcmul(w[f"{name}.bias"][:, None], normed, w[f"{name}.weight"][:, None])

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """GPT-2's `Conv1D` (`x·W + b`, W stored `[in, out]`) of every run at once: x `[R, N, in]`."""
        return torch.baddbmm(self.weights[f"{name}.bias"][:, None], x, self.weights[f"{name}.weight"])

    def _block(self, i: int, hidden: torch.Tensor, attend) -> torch.Tensor:
        """Transformer block i on hidden `[R, M, d]`; `attend(layer, qkv)` turns the projections `[R, M, 3·d]`
        into the attention context `[R, M, d]`."""
        p = f"transformer.h.{i}"
        qkv = self._linear(self._layer_norm(hidden, f"{p}.ln_1"), f"{p}.attn.c_attn")
        hidden = hidden + self._linear(attend(i, qkv), f"{p}.attn.c_proj")
        mlp = self._linear(self.activation(self._linear(self._layer_norm(hidden, f"{p}.ln_2"), f"{p}.mlp.c_fc")),
                           f"{p}.mlp.c_proj")
        return hidden + mlp

    def _heads(self, qkv: torch.Tensor, sequences: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Query, key and value `[sequences, H, L, hd]` of projections that hold `sequences` sequences in a row."""
        qkv = qkv.reshape(sequences, -1, 3, self.heads, self.head_dim).transpose(1, 3)
        return qkv.unbind(2)

    def _embed(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """Token plus position embeddings `[R, M, d]` of ids `[R, M]`, each run through its own tables."""
        run = torch.arange(self.runs, device=input_ids.device)[:, None]
        wte, wpe = self.weights["transformer.wte.weight"], self.weights["transformer.wpe.weight"]
        # One lookup in the runs' tables laid end to end: `embedding`'s backward is a dense scatter, where indexing
        # a stacked table backs up through a sort.
        return (F.embedding(input_ids + run * wte.shape[1], wte.flatten(0, 1))
                + F.embedding(position_ids + run * wpe.shape[1], wpe.flatten(0, 1)))

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits `[R, M, V]` of final hidden states `[R, M, d]`."""
        head = self.weights.get("lm_head.weight", self.weights["transformer.wte.weight"])
        return torch.bmm(self._layer_norm(hidden, "transformer.ln_f"), head.transpose(1, 2)).float()

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, attend) -> torch.Tensor:
        """Last hidden states `[R, M, d]` of ids `[R, M]` at their positions; `attend` (see `_block`) lays the
        tokens out as sequences, so that a decoder can run attention over its cache."""
        hidden = self._embed(input_ids, position_ids)
        for i in range(self.config.n_layer):
            hidden = self._block(i, hidden, attend)
        return hidden

    # ------------------------------------------------------------------ teacher forcing
    def response_logits(self, batches: Sequence[TokenBatch], temperature: float = 1.0) -> list[torch.Tensor]:
        """`rollout.response_logits(policy_r, batches[r], temperature)` for every run r, from one pass.

        The linear layers see each run's prefix tree (or padded batch) flattened, padded to the largest run's token
        count; attention runs per run, on the run's own sequences (padding them to the longest run's would cost
        attention, quadratic in length, more than the calls it saves)."""
        if len(batches) != self.runs:
            raise ValueError(f"{len(batches)} batches for a stack of {self.runs} runs; give one batch per run")
        trees = [b.prefix_tree for b in batches]
        M = max(t.input_ids.numel() for t in trees)
        input_ids = torch.stack([F.pad(t.input_ids.flatten(), (0, M - t.input_ids.numel())) for t in trees])
        position_ids = torch.stack([F.pad(t.position_ids.flatten(), (0, M - t.position_ids.numel())) for t in trees])
        masks = [_four_d(t.attention_mask)[:, None] for t in trees]

        def attend(layer, qkv):
            parts = []
            for r, (tree, mask) in enumerate(zip(trees, masks)):
                n, length = tree.input_ids.shape
                query, key, value = self._heads(qkv[r, : n * length], n)
                context = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=self.scaling)
                parts.append(F.pad(context.transpose(1, 2).reshape(n * length, -1), (0, 0, 0, M - n * length)))
            return torch.stack(parts)

        logits = self._head(self.forward(input_ids, position_ids, attend)) / temperature  # [R, M, V]
        return [logits[r][t.logit_index] for r, t in enumerate(trees)]


def _four_d(attention_mask: torch.Tensor) -> torch.Tensor:
    """A prefix tree's mask as `[U, L, L]` bool: its 4-D mask as it is, or the padded layout's 2-D key mask made
    causal (a left-padding query sees itself, so that no softmax row is empty; nothing reads it)."""
    if attention_mask.dim() == 4:
        return attention_mask[:, 0]
    L = attention_mask.shape[1]
    causal = torch.ones((L, L), dtype=torch.bool, device=attention_mask.device).tril()
    return (causal & attention_mask.bool()[:, None, :]) | torch.eye(L, dtype=torch.bool, device=attention_mask.device)


@torch.no_grad()
def sample_runs(
    stack: StackedPolicies,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[list[str]],
    max_new_tokens: int,
    temperatures: Sequence[float],
    generators: Sequence[torch.Generator],
    num_generations: int = 1,
) -> list[Rollout]:
    """`rollout.sample(policy_r, tokenizer, prompts[r], max_new_tokens, temperatures[r], generators[r],
    num_generations)` for every run r of the stack, in one token-by-token loop.

    Each run draws from its own generator as many numbers, in the same order, as it draws alone; so its tokens are
    its own run's, unless a logit that differs in the last bits moves a cumulative probability across a draw."""
    R = stack.runs
    if not (len(prompts) == len(temperatures) == len(generators) == R):
        raise ValueError(f"a stack of {R} runs needs {R} prompt lists, temperatures and generators; got "
                         f"{len(prompts)}, {len(temperatures)} and {len(generators)}")
    if len({len(p) for p in prompts}) != 1:
        raise ValueError(f"every run samples the same number of prompts; got {[len(p) for p in prompts]}")
    device = stack.weights["transformer.wte.weight"].device
    encoded = [encode_prompts(tokenizer, p, device) for p in prompts]
    width = max(ids.shape[1] for ids, _ in encoded)
    # Every run's prompts left-padded to the widest run's: positions count from the first real token, and the
    # padding is masked, so a run's logits do not depend on the others' widths.
    pad = tokenizer.pad_token_id
    prompt_ids = torch.stack([F.pad(ids, (width - ids.shape[1], 0), value=pad) for ids, _ in encoded])
    prompt_mask = torch.stack([F.pad(mask, (width - mask.shape[1], 0)) for _, mask in encoded])
    temperature = torch.tensor(temperatures, dtype=torch.float32, device=device)[:, None, None]
    with torch.inference_mode():
        decoded = _decode_runs(stack, tokenizer.eos_token_id, pad, prompt_ids, prompt_mask,
                               max_new_tokens, temperature, generators, num_generations)
    return [
        rollout_from_decoded(tokenizer, prompts[r], *encoded[r], decoded[r], num_generations) for r in range(R)
    ]


def _decode_runs(stack, eos, pad, prompt_ids, prompt_mask, max_new_tokens, temperature, generators, num_generations):
    """`rollout._decode` for every run: a list of R `(response ids, response mask, logits / temperature, finished)`.

    The loop keeps `n` slots per run, in batch order; a slot whose row has finished goes on computing, unread, until
    the busiest run's rows fill at most `COMPACT_AT` of the slots: then every run's finished slots leave at once."""
    R, P, width = prompt_ids.shape
    rows, T = P * num_generations, max_new_tokens
    device = prompt_ids.device
    real = prompt_mask.bool().reshape(R * P, width)
    key_mask = torch.cat([real, real.new_ones((R * P, T))], dim=1)[:, None, None, :]
    shape = (R * P, stack.heads, width + T, stack.head_dim)
    keys = [key_mask.new_empty(shape, dtype=stack.weights["transformer.wte.weight"].dtype)
            for _ in range(stack.config.n_layer)]
    values = [torch.empty_like(k) for k in keys]
    length = 0  # positions in the cache

    def attend(layer, qkv):
        rows_now, n = qkv.shape[1] // tokens_per_row, tokens_per_row
        query, key, value = stack._heads(qkv, R * rows_now)  # [R·rows, H, n, hd]
        keys[layer][:, :, length : length + n] = key
        values[layer][:, :, length : length + n] = value
        if n > 1:  # the prompts: causal over their real tokens (a padding query sees itself: no empty softmax row)
            causal = torch.ones((n, n), dtype=torch.bool, device=device).tril()
            mask = (causal & real[:, None, None, :]) | torch.eye(n, dtype=torch.bool, device=device)
        else:
            mask = key_mask[..., : length + n]
        context = F.scaled_dot_product_attention(
            query, keys[layer][:, :, : length + n], values[layer][:, :, : length + n], attn_mask=mask,
            scale=stack.scaling,
        )
        return context.transpose(1, 2).reshape(R, rows_now * n, -1)

    def head(hidden):
        return stack._head(hidden) / temperature

    positions = position_ids_from_mask(prompt_mask)
    tokens_per_row = width
    hidden = stack.forward(prompt_ids.view(R, P * width), positions.view(R, P * width), attend)
    logits = head(hidden.view(R, P, width, -1)[:, :, -1])  # [R, P, V]
    length, tokens_per_row = width, 1
    group = torch.arange(P, device=device).repeat_interleave(num_generations)
    run = torch.arange(R, device=device)[:, None]
    flat = (run * P + group).flatten()  # each prompt's keys and values, once per row of its group
    keys, values, key_mask = [k[flat] for k in keys], [v[flat] for v in values], key_mask[flat]
    next_position = positions[:, :, -1:][:, group] + 1  # [R, rows, 1]
    logits = logits[:, group]
    vocab = logits.shape[-1]
    # Row `rows` of each run is a sink for the writes of unused slots.
    response_ids = torch.full((R, rows + 1, T), pad, dtype=torch.long, device=device)
    response_mask = torch.zeros((R, rows + 1, T), device=device)
    step_logits = torch.zeros((R, rows + 1, T, vocab), device=device)
    finished = torch.zeros((R, rows + 1), dtype=torch.bool, device=device)
    slot_row = torch.arange(rows, device=device).repeat(R, 1)  # [R, n]: the batch row each slot decodes
    valid = torch.ones((R, rows), dtype=torch.bool, device=device)  # [R, n]: slots of rows still decoding
    active = [rows] * R  # rows still decoding, per run
    steps = [T] * R
    for step in range(T):
        # Each run's draws go to its decoding slots, which are in batch order: the numbers it draws alone.
        uniform = torch.zeros(valid.shape, device=device)
        uniform[valid] = torch.cat([torch.rand(a, generator=g, device=device) for a, g in zip(active, generators) if a])
        token = categorical_from_uniform(logits.flatten(0, 1), uniform.flatten()[:, None]).view(valid.shape)
        target = torch.where(valid, slot_row, rows)
        response_ids[run, target, step] = token
        response_mask[run, target, step] = 1.0
        step_logits[run, target, step] = logits
        ended = valid & (token == eos)
        finished[run, torch.where(ended, target, rows)] = True
        valid = valid & ~ended
        counts = valid.sum(1).tolist()
        for r in range(R):
            if active[r] and (counts[r] == 0 or step == T - 1):
                steps[r] = step + 1
        active = [0 if step == T - 1 else c for c in counts]
        if not any(active):
            break
        n = valid.shape[1]
        if max(active) <= COMPACT_AT * n:
            # Copying the cache at every step cost more than running the dead slots (bench/stacked_runs.py).
            order = torch.argsort((~valid).to(torch.int8), dim=1, stable=True)[:, : max(active)]
            slot_row, token, valid = slot_row.gather(1, order), token.gather(1, order), valid.gather(1, order)
            flat = (run * n + order).flatten()
            keys, values, key_mask = [k[flat] for k in keys], [v[flat] for v in values], key_mask[flat]
            next_position = next_position.gather(1, order[..., None])
        logits = head(stack.forward(token, next_position[..., 0], attend))
        length += 1
        next_position = next_position + 1
    return [
        (response_ids[r, :rows, : steps[r]], response_mask[r, :rows, : steps[r]], step_logits[r, :rows, : steps[r]],
         finished[r, :rows])
        for r in range(R)
    ]
