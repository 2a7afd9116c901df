"""Token-by-token decoding of a `GPT2LMHeadModel` over a preallocated key/value cache.

`model(input_ids=…, past_key_values=…)` spends most of a decoding call of a small model on plumbing: building
the 4-D attention mask, growing a `DynamicCache` by concatenation, packing output classes, reading config
attributes. `KVDecoder` runs the same modules of the same model (layer norms, `c_attn`, scaled dot-product
attention with the model's own scaling, `c_proj`, MLP, `ln_f`, `lm_head`) and writes keys and values into
buffers sized once for the whole response. Each prompt is run once and its keys and values are shared by its
group. Rows that have finished can be dropped, so the tail of a rollout, where a few long responses are still
going, costs what those rows cost.

The logits match a full `model(...)` pass over the same tokens (tests/test_decoding.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import GPT2LMHeadModel

from rl_core.engine.models import position_ids_from_mask


class KVDecoder:
    """Decoding state of a batch of `len(prompts) · num_generations` rows; `first_logits` `[rows, V]` predict
    every row's first token, and `step` feeds one more token per row."""

    def __init__(
        self,
        model: GPT2LMHeadModel,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        num_generations: int,
        max_new_tokens: int,
    ):
        self.model = model
        config = model.config
        self.heads, self.head_dim = config.n_head, config.n_embd // config.n_head
        prompts, width = prompt_ids.shape
        shape = (prompts, self.heads, width + max_new_tokens, self.head_dim)
        parameter = next(model.parameters())
        self.keys = [parameter.new_empty(shape) for _ in model.transformer.h]
        self.values = [parameter.new_empty(shape) for _ in model.transformer.h]
        self.length = 0
        positions = position_ids_from_mask(prompt_mask)
        real = prompt_mask.bool()
        # A row attends to its prompt's real tokens and to its own responses, which are all real: the prompts' left
        # padding is the only thing to mask, and prompts without any need no mask (the faster attention kernel).
        if real.all():
            self.key_mask = None
            prompt_attention = None
        else:
            self.key_mask = torch.cat([real, real.new_ones((prompts, max_new_tokens))], dim=1)[:, None, None, :]
            causal = torch.ones((width, width), dtype=torch.bool, device=real.device).tril()
            # Padding positions also see themselves, so that no softmax row is empty; nothing reads them.
            prompt_attention = (causal & real[:, None, None, :]) | torch.eye(
                width, dtype=torch.bool, device=real.device
            )
        prompt_logits = self._forward(prompt_ids, positions, prompt_attention, is_causal=self.key_mask is None)
        self.next_position = positions[:, -1:] + 1
        rows = torch.arange(prompts, device=prompt_ids.device).repeat_interleave(num_generations)
        self.first_logits = prompt_logits[rows]
        self.keep(rows)  # each prompt's keys and values, once per row of its group

    def keep(self, rows: torch.Tensor) -> None:
        """Go on with the given rows (a bool mask, or indices over the current rows, possibly repeated)."""
        self.keys = [k[rows] for k in self.keys]
        self.values = [v[rows] for v in self.values]
        self.next_position = self.next_position[rows]
        if self.key_mask is not None:
            self.key_mask = self.key_mask[rows]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Append one token per current row `[rows]`; returns the logits `[rows, V]` that predict the next one."""
        mask = None if self.key_mask is None else self.key_mask[..., : self.length + 1]
        logits = self._forward(tokens[:, None], self.next_position, mask, is_causal=False)
        self.next_position = self.next_position + 1
        return logits

    def _forward(self, tokens, positions, mask, is_causal) -> torch.Tensor:
        """Run `tokens` `[rows, n]` at `positions` after the cached ones; logits `[rows, V]` of the last of them."""
        transformer = self.model.transformer
        rows, n = tokens.shape
        end = self.length + n
        hidden = transformer.wte(tokens) + transformer.wpe(positions)
        for block, keys, values in zip(transformer.h, self.keys, self.values):
            attention = block.attn
            qkv = attention.c_attn(block.ln_1(hidden)).view(rows, n, 3, self.heads, self.head_dim).transpose(1, 3)
            query, key, value = qkv.unbind(2)  # [rows, heads, n, head_dim] each
            keys[:, :, self.length : end] = key
            values[:, :, self.length : end] = value
            context = F.scaled_dot_product_attention(
                query,
                keys[:, :, :end],
                values[:, :, :end],
                attn_mask=mask,
                is_causal=is_causal,
                scale=attention.scaling,
            )
            hidden = hidden + attention.c_proj(context.transpose(1, 2).reshape(rows, n, -1))
            hidden = hidden + block.mlp(block.ln_2(hidden))
        self.length = end
        return self.model.lm_head(transformer.ln_f(hidden[:, -1])).float()
