"""The models of R runs as one: every run's weights in one flat buffer `[R, N]`, for the runs' whole life together.

A group of runs (`rl_core.engine.run_group`) keeps each of its models — policy, reference, critic, teacher — as a
`Stack`: one `[R, N]` tensor whose row r holds run r's parameters end to end. Each run's own `torch.nn.Module` sees
its row (its parameters are views of it), so chat, evaluation and checkpoints read the run's current weights, and
nothing is ever copied back. A pass reads the named weights `[R, …]` as views of the buffer, so gradients land in
one `[R, N]` tensor, which one optimiser step (`rl_core.engine.stacked_adamw`) updates for every run at once.

What R runs side by side save is each op's fixed cost (Python, dispatch, a kernel launch), paid once for all of
them: a linear layer is one batched matmul (`baddbmm`) over the runs, attention one call over every run's
sequences. Each run keeps its own weights, inputs and random draws, so its numbers are the ones it gets alone, up
to float rounding where a stacked op sums in another order.

* `Stack` — the buffer, its named views, and binding each run's module to its row;
* `AdapterStack` — LoRA policies: their adapters' stack over the frozen base (π_ref's stack);
* `StackedGPT2` — GPT-2's forward over stacked weights (the language-model head, or a critic's value head);
* `teacher_forced` — the teacher-forced pass of R batches at once, each packed as its prefix tree;
* `sample_runs` — `rollout.sample` for R runs in one token-by-token loop over one key/value cache, each run drawing
  from its own generator exactly the numbers it draws alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F
from torch.nn import Parameter
from transformers import PreTrainedTokenizerBase

from rl_core.engine.lora import adapter_parameters, lora_scaling_of
from rl_core.engine.models import position_ids_from_mask
from rl_core.engine.packing import prefix_tree, token_index
from rl_core.engine.rollout import (
    Rollout,
    TokenBatch,
    categorical_from_uniform,
    encode_prompts,
    rollout_from_decoded,
    token_logprobs,
)

# The sampler drops finished rows from its batch once the busiest run's rows fill at most this share of its slots.
COMPACT_AT = 0.75
SHAPE_FIELDS = ("vocab_size", "n_layer", "n_embd", "n_head", "n_positions", "activation_function")


def shape_of(module: torch.nn.Module) -> tuple:
    """What two modules must share to stack: their class, config shape and parameter shapes."""
    config = getattr(module, "config", None)
    fields = tuple(getattr(config, f, None) for f in SHAPE_FIELDS)
    return type(module).__name__, fields, tuple((n, tuple(p.shape)) for n, p in module.named_parameters())


class Stack:
    """The parameters of R modules of one shape in one buffer `[R, N]`; `views()` gives them by name, `[R, …]`.

    With `trainable` the buffer is a leaf that collects every run's gradient (`buffer.grad[r]` is run r's). Each
    module is bound to its row: its parameters become views of the buffer, so an update of the buffer is the
    module's update (a tied weight, listed once by `named_parameters`, stays tied); without `bind` the buffer is a
    copy and the modules stay as they are (a pass that reads the runs' weights once: the evaluation after their last
    step). `parameters` picks and names the parameters stacked (all of them by default; a LoRA policy's adapters,
    `AdapterStack`)."""

    def __init__(
        self,
        modules: Sequence[torch.nn.Module],
        trainable: bool = False,
        parameters: Callable[[torch.nn.Module], Iterable[tuple[str, Parameter]]] = torch.nn.Module.named_parameters,
        bind: bool = True,
    ):
        if not modules:
            raise ValueError("modules is empty; a stack holds at least one run")
        first = shape_of(modules[0])
        for r, module in enumerate(modules[1:], start=1):
            if shape_of(module) != first:
                raise ValueError(
                    f"module {r} differs from module 0 in its shape; a stack holds runs of one model shape"
                )
        self.runs = len(modules)
        self.parameters = parameters
        self.shapes = {name: p.shape for name, p in parameters(modules[0])}
        with torch.no_grad():
            self.buffer = torch.stack(
                [torch.cat([p.detach().reshape(-1) for _, p in parameters(module)]) for module in modules]
            )
        self.buffer.requires_grad_(trainable)
        if bind:
            for r, module in enumerate(modules):
                self.bind(module, r)

    def bind(self, module: torch.nn.Module, r: int) -> None:
        """Make `module`'s parameters views of row r."""
        for (_name, parameter), view in zip(self.parameters(module), self._split(self.buffer.data[r]).values()):
            parameter.data = view

    def _split(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """`rows` `[…, N]` cut into the named parameters `[…, *shape]`: one `split`, whose backward writes every
        parameter's gradient into one `[…, N]` tensor (a slice per parameter would allocate and add a zero-filled
        `[…, N]` gradient for each of them)."""
        lead = rows.shape[:-1]
        pieces = rows.split([shape.numel() for shape in self.shapes.values()], dim=-1)
        return {name: piece.view(*lead, *shape) for (name, shape), piece in zip(self.shapes.items(), pieces)}

    def views(self, runs: torch.Tensor | None = None, grad: bool = True) -> dict[str, torch.Tensor]:
        """The named weights `[R', …]` of the given runs (every run when None): in autograd's view of the buffer
        (`grad`), so that a loss's gradient reaches it, or detached for a pass without one."""
        buffer = self.buffer if grad else self.buffer.detach()
        return self._split(buffer if runs is None else buffer[runs])


@torch.no_grad()
def own_storage(modules: Iterable[torch.nn.Module]) -> None:
    """Give each module's parameters storage of their own again (copies of their rows): they no longer follow a
    stack's buffer, and a saved module holds its own tensors, not the whole buffer."""
    for module in modules:
        for parameter in module.parameters():
            parameter.data = parameter.data.clone()


class AdapterStack:
    """The LoRA policies of R runs (`rl_core.engine.lora`): their adapters in a `Stack` of their own, over the frozen
    base, which is π_ref's stack (π_ref is the base with the adapters off). `buffer` is the adapters' `[R, N_A]`, the
    part the optimiser updates; `views()` gives the base's weights and the adapters by name, as `Stack.views`. The
    policies may be some of the base's runs (`base_runs`: a few runs' stale samplers)."""

    def __init__(
        self,
        policies: Sequence[torch.nn.Module],
        base: Stack,
        trainable: bool = False,
        base_runs: torch.Tensor | None = None,
    ):
        self.adapters = Stack(policies, trainable, parameters=adapter_parameters)
        self.base = base
        self.base_runs = base_runs  # the base's rows of these policies (all of them when None)
        self.buffer = self.adapters.buffer

    def views(self, runs: torch.Tensor | None = None, grad: bool = True) -> dict[str, torch.Tensor]:
        base_runs = runs if self.base_runs is None else self.base_runs if runs is None else self.base_runs[runs]
        return self.base.views(base_runs, grad=False) | self.adapters.views(runs, grad)


class StackedGPT2:
    """GPT-2 over named weights stacked along a run axis `[R, …]` (`Stack.views`), from a `GPT2LMHeadModel` (the
    language-model head) or a `ValueModel` (a scalar value head) whose shape they have."""

    def __init__(self, module: torch.nn.Module, weights: dict[str, torch.Tensor]):
        self.weights = weights
        self.config = module.config
        self.runs = next(iter(weights.values())).shape[0]
        self.prefix = "transformer" if hasattr(module, "transformer") else "backbone"
        block = getattr(module, self.prefix).h[0]
        self.heads, self.head_dim = self.config.n_head, self.config.n_embd // self.config.n_head
        self.scaling = block.attn.scaling
        self.activation = block.mlp.act
        self.lora_scaling = lora_scaling_of(module)

    def _layer_norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """Layer norm of x `[R, M, d]`, each run with its own scale and shift."""
        w = self.weights
        normed = F.layer_norm(x, x.shape[-1:], eps=self.config.layer_norm_epsilon)
        return torch.addcmul(w[f"{name}.bias"][:, None], normed, w[f"{name}.weight"][:, None])

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """GPT-2's `Conv1D` (`x·W + b`, W stored `[in, out]`) of every run at once: x `[R, N, in]`; where the layer
        has LoRA adapters A `[R, r, in]`, B `[R, out, r]`, plus (α/r)·(x·Aᵀ)·Bᵀ, peft's order of operations."""
        out = torch.baddbmm(self.weights[f"{name}.bias"][:, None], x, self.weights[f"{name}.weight"])
        a = self.weights.get(f"{name}.lora_A")
        if a is None:
            return out
        b = self.weights[f"{name}.lora_B"]
        return out + torch.bmm(torch.bmm(x, a.transpose(1, 2)), b.transpose(1, 2)) * self.lora_scaling

    def _block(self, i: int, hidden: torch.Tensor, attend, tokens: torch.Tensor | None = None) -> torch.Tensor:
        """Transformer block i on hidden `[R, M, d]`; `attend(layer, qkv)` turns the projections `[R, M, 3·d]`
        into the attention context `[R, M, d]`. With `tokens` (`packing.token_index`) the MLP runs on those
        positions only, gathered out and added back in place; the others keep their hidden state past attention,
        which no real token reads (its mask hides them), and nothing reads their MLP's."""
        p = f"{self.prefix}.h.{i}"
        qkv = self._linear(self._layer_norm(hidden, f"{p}.ln_1"), f"{p}.attn.c_attn")
        hidden = hidden + self._linear(attend(i, qkv), f"{p}.attn.c_proj")
        if tokens is None:
            return hidden + self._mlp(hidden, p)
        # One slot past the layout takes the index of a run with fewer tokens than the widest; it is dropped after.
        spare = F.pad(hidden, (0, 0, 0, 1))
        where = tokens[..., None].expand(-1, -1, hidden.shape[-1])
        return spare.scatter_add(1, where, self._mlp(spare.gather(1, where), p))[:, :-1]

    def _mlp(self, hidden: torch.Tensor, p: str) -> torch.Tensor:
        """Block `p`'s MLP of hidden `[R, N, d]`: c_proj(act(c_fc(ln_2(hidden))))."""
        inner = self._linear(self._layer_norm(hidden, f"{p}.ln_2"), f"{p}.mlp.c_fc")
        return self._linear(self.activation(inner), f"{p}.mlp.c_proj")

    def _heads(self, qkv: torch.Tensor, sequences: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Query, key and value `[sequences, H, L, hd]` of projections that hold `sequences` sequences in a row."""
        qkv = qkv.reshape(sequences, -1, 3, self.heads, self.head_dim).transpose(1, 3)
        return qkv.unbind(2)

    def _embed(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """Token plus position embeddings `[R, M, d]` of ids `[R, M]`, each run through its own tables."""
        run = torch.arange(self.runs, device=input_ids.device)[:, None]
        wte, wpe = self.weights[f"{self.prefix}.wte.weight"], self.weights[f"{self.prefix}.wpe.weight"]
        # One lookup in the runs' tables laid end to end: `embedding`'s backward is a dense scatter, where indexing
        # a stacked table backs up through a sort.
        return F.embedding(input_ids + run * wte.shape[1], wte.flatten(0, 1)) + F.embedding(
            position_ids + run * wpe.shape[1], wpe.flatten(0, 1)
        )

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits `[R, M, V]` of final hidden states `[R, M, d]`."""
        head = self.weights.get("lm_head.weight", self.weights[f"{self.prefix}.wte.weight"])
        return torch.bmm(self._layer_norm(hidden, f"{self.prefix}.ln_f"), head.transpose(1, 2)).float()

    def values(self, hidden: torch.Tensor) -> torch.Tensor:
        """A value model's V `[R, M]` of final hidden states `[R, M, d]`."""
        normed = self._layer_norm(hidden, f"{self.prefix}.ln_f")
        w, b = self.weights["value_head.weight"], self.weights["value_head.bias"]  # nn.Linear: [1, d], [1]
        return torch.baddbmm(b[:, None], normed, w.transpose(1, 2)).squeeze(-1)

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, attend, tokens: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Last hidden states `[R, M, d]` of ids `[R, M]` at their positions; `attend` (see `_block`) lays the
        tokens out as sequences, so that a decoder can run attention over its cache; `tokens` (see `_block`) the
        positions whose MLPs count (all where None)."""
        hidden = self._embed(input_ids, position_ids)
        for i in range(self.config.n_layer):
            hidden = self._block(i, hidden, attend, tokens)
        return hidden


# ------------------------------------------------------------------------------------------------ teacher forcing
def stacked_trees(batches: Sequence[TokenBatch], response_columns: int) -> tuple[torch.Tensor, ...]:
    """R batches' prefix trees as one layout: `(input_ids [R, U·L], position_ids [R, U·L], mask [R·U, 1, L, L],
    index [R, B, T], tokens [R, n] or None)`, each tree padded to the largest one's `U` sequences of `L` positions (a
    padding query sees itself alone, so no softmax row is empty; nothing reads it), its `logit_index` mapped into the
    padded layout and padded to `response_columns` columns (the padding points at position 0; the response mask hides
    it), and `tokens` the positions of its real tokens (`packing.token_index`).

    Where some batches are packed and others are not (a random minibatch that shares few prompts), the others are
    packed too: one padded batch's B rows among trees of U ≪ B sequences would pad every run to B sequences."""
    trees = [b.prefix_tree for b in batches]
    if len({t.attention_mask.dim() for t in trees}) > 1:
        trees = [
            t
            if t.attention_mask.dim() == 4
            else prefix_tree(b.sequences, b.attention_mask, b.prompt_length, b.response_mask, pack=True)
            for t, b in zip(trees, batches)
        ]
    U = max(t.input_ids.shape[0] for t in trees)
    L = max(t.input_ids.shape[1] for t in trees)
    device = trees[0].input_ids.device
    ids, positions, masks, indices, real = [], [], [], [], []
    eye = torch.eye(L, dtype=torch.bool, device=device)
    for tree in trees:
        u, length = tree.input_ids.shape
        ids.append(F.pad(tree.input_ids, (0, L - length, 0, U - u)).flatten())
        positions.append(F.pad(tree.position_ids, (0, L - length, 0, U - u)).flatten())
        real.append(F.pad(tree.real, (0, L - length, 0, U - u)).flatten())
        masks.append(F.pad(_four_d(tree.attention_mask), (0, L - length, 0, L - length, 0, U - u)) | eye)
        index = tree.logit_index
        index = (index // length) * L + index % length
        indices.append(F.pad(index, (0, response_columns - index.shape[1])))
    real = torch.stack(real)
    tokens = token_index(real, int(real.sum(1).max()))
    return torch.stack(ids), torch.stack(positions), torch.cat(masks)[:, None], torch.stack(indices), tokens


def teacher_forced(model: StackedGPT2, layout: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Final hidden states `[R, B, T, d]` at the positions that predict each response token, from one pass of the
    stacked model over `stacked_trees`' layout."""
    input_ids, position_ids, mask, index, tokens = layout
    R = input_ids.shape[0]
    sequences, length = mask.shape[0], mask.shape[-1]

    def attend(layer, qkv):
        query, key, value = model._heads(qkv, sequences)
        context = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=model.scaling)
        return context.transpose(1, 2).reshape(R, sequences // R * length, -1)

    hidden = model.forward(input_ids, position_ids, attend, tokens)
    B, T = index.shape[1:]
    return hidden.gather(1, index.reshape(R, B * T, 1).expand(-1, -1, hidden.shape[-1])).view(R, B, T, -1)


def teacher_forced_logits(model: StackedGPT2, layout: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Logits `[R, B, T, V]` at the positions that predict each response token (`teacher_forced`, then the LM
    head)."""
    hidden = teacher_forced(model, layout)
    return model._head(hidden.flatten(1, 2)).view(*hidden.shape[:3], -1)


def response_token_logprobs(
    model: StackedGPT2, batches: Sequence[TokenBatch], pad: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """log π_r(y_t | x, y_<t) `[R, B, T]` of each run's given responses (`teacher_forced_logits` of R batches, run r
    under its own weights) and their masks `[R, B, T]`, each batch padded to the longest response (id `pad`, mask 0).
    """
    width = max(b.response_mask.shape[1] for b in batches)
    ids = torch.stack([F.pad(b.response_ids, (0, width - b.response_ids.shape[1]), value=pad) for b in batches])
    mask = torch.stack([F.pad(b.response_mask, (0, width - b.response_mask.shape[1])) for b in batches])
    return token_logprobs(teacher_forced_logits(model, stacked_trees(batches, width)), ids), mask


def _four_d(attention_mask: torch.Tensor) -> torch.Tensor:
    """A prefix tree's mask as `[U, L, L]` bool: its 4-D mask as it is, or the padded layout's 2-D key mask made
    causal (a left-padding query sees itself, so that no softmax row is empty; nothing reads it)."""
    if attention_mask.dim() == 4:
        return attention_mask[:, 0]
    L = attention_mask.shape[1]
    causal = torch.ones((L, L), dtype=torch.bool, device=attention_mask.device).tril()
    return (causal & attention_mask.bool()[:, None, :]) | torch.eye(L, dtype=torch.bool, device=attention_mask.device)


# ------------------------------------------------------------------------------------------------------- sampling
@torch.no_grad()
def sample_runs(
    model: StackedGPT2,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[list[str]],
    max_new_tokens: int,
    temperatures: Sequence[float],
    generators: Sequence[torch.Generator],
    num_generations: int = 1,
) -> list[Rollout]:
    """`rollout.sample(policy_r, tokenizer, prompts[r], max_new_tokens, temperatures[r], generators[r],
    num_generations)` for every run r of the stacked model, in one token-by-token loop.

    Each run draws from its own generator as many numbers, in the same order, as it draws alone; so its tokens are
    its own run's, unless a logit that differs in the last bits moves a cumulative probability across a draw."""
    R = model.runs
    if not (len(prompts) == len(temperatures) == len(generators) == R):
        raise ValueError(
            f"a stack of {R} runs needs {R} prompt lists, temperatures and generators; got "
            f"{len(prompts)}, {len(temperatures)} and {len(generators)}"
        )
    if len({len(p) for p in prompts}) != 1:
        raise ValueError(f"every run samples the same number of prompts; got {[len(p) for p in prompts]}")
    device = next(iter(model.weights.values())).device
    # Runs given the same prompts (every run's evaluation) share one encoding: the tokenizer is a sizeable share of a
    # tiny model's sampling.
    encodings = {key: encode_prompts(tokenizer, list(key), device) for key in {tuple(p) for p in prompts}}
    encoded = [encodings[tuple(p)] for p in prompts]
    width = max(ids.shape[1] for ids, _ in encoded)
    # Every run's prompts left-padded to the widest run's: positions count from the first real token, and the
    # padding is masked, so a run's logits do not depend on the others' widths.
    pad = tokenizer.pad_token_id
    prompt_ids = torch.stack([F.pad(ids, (width - ids.shape[1], 0), value=pad) for ids, _ in encoded])
    prompt_mask = torch.stack([F.pad(mask, (width - mask.shape[1], 0)) for _, mask in encoded])
    temperature = torch.tensor(temperatures, dtype=torch.float32, device=device)[:, None, None]
    with torch.inference_mode():
        decoded = _decode_runs(
            model,
            tokenizer.eos_token_id,
            pad,
            prompt_ids,
            prompt_mask,
            max_new_tokens,
            temperature,
            generators,
            num_generations,
        )
    return [rollout_from_decoded(tokenizer, prompts[r], *encoded[r], decoded[r], num_generations) for r in range(R)]


def _decode_runs(model, eos, pad, prompt_ids, prompt_mask, max_new_tokens, temperature, generators, num_generations):
    """`rollout._decode` for every run: a list of R `(response ids, response mask, logits / temperature, finished)`.

    The loop keeps `n` slots per run, in batch order; a slot whose row has finished goes on computing, unread, until
    the busiest run's rows fill at most `COMPACT_AT` of the slots: then every run's finished slots leave at once."""
    R, P, width = prompt_ids.shape
    rows, T = P * num_generations, max_new_tokens
    device = prompt_ids.device
    real = prompt_mask.bool().reshape(R * P, width)
    key_mask = torch.cat([real, real.new_ones((R * P, T))], dim=1)[:, None, None, :]
    shape = (R * P, model.heads, width + T, model.head_dim)
    keys = [key_mask.new_empty(shape, dtype=torch.float32) for _ in range(model.config.n_layer)]
    values = [torch.empty_like(k) for k in keys]
    length = 0  # positions in the cache

    def attend(layer, qkv):
        rows_now, n = qkv.shape[1] // tokens_per_row, tokens_per_row
        query, key, value = model._heads(qkv, R * rows_now)  # [R·rows, H, n, hd]
        keys[layer][:, :, length : length + n] = key
        values[layer][:, :, length : length + n] = value
        if n > 1:  # the prompts: causal over their real tokens (a padding query sees itself: no empty softmax row)
            causal = torch.ones((n, n), dtype=torch.bool, device=device).tril()
            mask = (causal & real[:, None, None, :]) | torch.eye(n, dtype=torch.bool, device=device)
        else:
            mask = key_mask[..., : length + n]
        context = F.scaled_dot_product_attention(
            query,
            keys[layer][:, :, : length + n],
            values[layer][:, :, : length + n],
            attn_mask=mask,
            scale=model.scaling,
        )
        return context.transpose(1, 2).reshape(R, rows_now * n, -1)

    def head(hidden):
        return model._head(hidden) / temperature

    positions = position_ids_from_mask(prompt_mask)
    tokens_per_row = width
    hidden = model.forward(prompt_ids.view(R, P * width), positions.view(R, P * width), attend)
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
        logits = head(model.forward(token, next_position[..., 0], attend))
        length += 1
        next_position = next_position + 1
    return [
        (
            response_ids[r, :rows, : steps[r]],
            response_mask[r, :rows, : steps[r]],
            step_logits[r, :rows, : steps[r]],
            finished[r, :rows],
        )
        for r in range(R)
    ]
