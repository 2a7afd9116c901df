"""What a CUDA graph, and what a preallocated key/value cache, pay for sampling: one rollout's T tokens, four ways.

For R runs of one preset (default `grpo` on `caesar`, the tiny model, the SFT warm start of seed 0), each with its
own copy of the policy and its own prompts, one rollout of exactly T tokens per row (no stop at EOS, so that every
way does the same work) is timed as:

* `hf_dynamic_cache` — `model(input_ids, cache=…)` token by token, the cache growing by concatenation
  (transformers' `DynamicCache`), once per run;
* `kv_decoder` — the engine's `decoding.KVDecoder` (keys and values written into buffers sized once per rollout),
  once per run;
* `stacked_eager` — the R runs' stacked weights (`stacked_runs.StackedGPT2`) in one token loop over one preallocated
  cache;
* `stacked_cuda_graph` — that same loop, all T steps, captured once as a CUDA graph and replayed (CUDA only): every
  shape is fixed for the whole rollout, so nothing in it needs the host.

Tokens are drawn by `categorical_from_uniform` from uniforms drawn before the clock starts, the same ones for
every way, so the four decode the same tokens up to float rounding; the largest logit difference of the graph's
replay from the eager loop is printed. Each cell is the median wall time of `--repeats` rollouts (after two
untimed ones), in milliseconds per rollout per run, with the device synchronised before each clock read.

Run from the repository root:
    python bench/decode_graphs.py [--device cuda] [--runs 1 16] [--tokens 16] [--repeats 20] [--out report.json]
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the engine is imported from the repository root

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from transformers import DynamicCache  # noqa: E402

from rl_core.algorithms import get_preset  # noqa: E402
from rl_core.config import RunConfig  # noqa: E402
from rl_core.engine.decoding import KVDecoder  # noqa: E402
from rl_core.engine.models import position_ids_from_mask, select_device  # noqa: E402
from rl_core.engine.rollout import categorical_from_uniform, encode_prompts  # noqa: E402
from rl_core.engine.stacked_runs import Stack, StackedGPT2  # noqa: E402
from rl_core.engine.trainer import Trainer  # noqa: E402


def synchronised(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_ms(fn, device: torch.device, repeats: int) -> float:
    """Median wall milliseconds of `fn()` over `repeats` calls, after two untimed ones."""
    for _ in range(2):
        fn()
    walls = []
    for _ in range(repeats):
        synchronised(device)
        start = time.perf_counter()
        fn()
        synchronised(device)
        walls.append(1000 * (time.perf_counter() - start))
    return statistics.median(walls)


def hf_dynamic_cache(policy, prompt_ids, prompt_mask, uniforms, G):
    """T tokens through `model(...)` with transformers' growing cache, the prompts repeated G times."""
    ids, mask = prompt_ids.repeat_interleave(G, 0), prompt_mask.repeat_interleave(G, 0)
    cache = DynamicCache(config=policy.config)
    positions = position_ids_from_mask(mask)
    out = policy(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True)
    logits, position = out.logits[:, -1].float(), positions[:, -1:] + 1
    for uniform in uniforms:
        token = categorical_from_uniform(logits, uniform[:, None])
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
        out = policy(input_ids=token[:, None], attention_mask=mask, position_ids=position, cache=cache, use_cache=True)
        logits, position = out.logits[:, -1].float(), position + 1
    return logits


def kv_decoder(policy, prompt_ids, prompt_mask, uniforms, G):
    """T tokens through the engine's `KVDecoder`."""
    decoder = KVDecoder(policy, prompt_ids, prompt_mask, G, len(uniforms))
    logits = decoder.first_logits
    for uniform in uniforms:
        logits = decoder.step(categorical_from_uniform(logits, uniform[:, None]))
    return logits


class StackedDecode:
    """One rollout of T tokens for R stacked runs over a preallocated cache, every shape fixed: the prompts' pass
    fills the cache and the first logits (`prefill`), then `decode` runs the T token steps, all reading and
    writing the same tensors, so that the T steps can be captured as one CUDA graph."""

    def __init__(self, stack: StackedGPT2, prompt_ids, prompt_mask, uniforms, G):
        R, P, width = prompt_ids.shape
        self.stack, self.R, self.rows, self.width, self.G = stack, R, P * G, width, G
        self.prompt_ids, self.prompt_mask, self.uniforms = prompt_ids, prompt_mask, uniforms  # uniforms [T, R, rows]
        T = uniforms.shape[0]
        real = prompt_mask.bool().reshape(R * P, width)
        group = torch.arange(P, device=prompt_ids.device).repeat_interleave(G)
        self.flat = (torch.arange(R, device=prompt_ids.device)[:, None] * P + group).flatten()
        self.key_mask = torch.cat([real, real.new_ones((R * P, T))], dim=1)[:, None, None, :][self.flat]
        self.real, self.group = real, group
        dtype = stack.weights["transformer.wte.weight"].dtype
        shape = (R * self.rows, stack.heads, width + T, stack.head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=prompt_ids.device) for _ in range(stack.config.n_layer)]
        self.values = [torch.zeros_like(k) for k in self.keys]
        self.logits = torch.zeros((R, self.rows, stack.config.vocab_size), device=prompt_ids.device)
        self.position = torch.zeros((R, self.rows), dtype=torch.long, device=prompt_ids.device)

    def prefill(self) -> None:
        stack, R, width = self.stack, self.R, self.width
        P = self.prompt_ids.shape[1]
        keys = [
            torch.empty((R * P, stack.heads, width, stack.head_dim), dtype=k.dtype, device=k.device) for k in self.keys
        ]
        values = [torch.empty_like(k) for k in keys]
        causal = torch.ones((width, width), dtype=torch.bool, device=self.real.device).tril()
        mask = (causal & self.real[:, None, None, :]) | torch.eye(width, dtype=torch.bool, device=self.real.device)

        def attend(layer, qkv):
            query, key, value = stack._heads(qkv, R * P)
            keys[layer].copy_(key)
            values[layer].copy_(value)
            context = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=stack.scaling)
            return context.transpose(1, 2).reshape(R, P * width, -1)

        positions = position_ids_from_mask(self.prompt_mask)
        hidden = stack.forward(self.prompt_ids.view(R, P * width), positions.view(R, P * width), attend)
        self.logits.copy_(stack._head(hidden.view(R, P, width, -1)[:, :, -1])[:, self.group])
        for layer in range(len(keys)):
            self.keys[layer][:, :, :width] = keys[layer][self.flat]
            self.values[layer][:, :, :width] = values[layer][self.flat]
        self.position.copy_(positions[:, :, -1][:, self.group] + 1)

    def decode(self) -> None:
        stack, R, rows = self.stack, self.R, self.rows
        for step, uniform in enumerate(self.uniforms):
            length = self.width + step

            def attend(layer, qkv, length=length):
                query, key, value = stack._heads(qkv, R * rows)
                self.keys[layer][:, :, length : length + 1] = key
                self.values[layer][:, :, length : length + 1] = value
                context = F.scaled_dot_product_attention(
                    query,
                    self.keys[layer][:, :, : length + 1],
                    self.values[layer][:, :, : length + 1],
                    attn_mask=self.key_mask[..., : length + 1],
                    scale=stack.scaling,
                )
                return context.transpose(1, 2).reshape(R, rows, -1)

            token = categorical_from_uniform(self.logits.flatten(0, 1), uniform.flatten()[:, None]).view(R, rows)
            self.logits.copy_(stack._head(stack.forward(token, self.position, attend)))
            self.position.add_(1)

    def rollout(self) -> None:
        self.prefill()
        self.decode()


def captured(decode: StackedDecode) -> torch.cuda.CUDAGraph:
    """The T decode steps as one CUDA graph (warmed up on a side stream first, as capture requires)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        decode.rollout()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    decode.prefill()
    with torch.cuda.graph(graph):
        decode.decode()
    return graph


def measure(trainer: Trainer, device: torch.device, runs: int, tokens: int, repeats: int) -> dict:
    algo, task, tokenizer = trainer.algo, trainer.task, trainer.tokenizer
    G = algo.num_generations
    policies = [copy.deepcopy(trainer.policy).to(device) for _ in range(runs)]
    encoded = [
        encode_prompts(tokenizer, task.sample_prompts(algo.prompts_per_step, random.Random(r)), device)
        for r in range(runs)
    ]
    width = max(ids.shape[1] for ids, _ in encoded)
    pad = tokenizer.pad_token_id
    prompt_ids = torch.stack([F.pad(ids, (width - ids.shape[1], 0), value=pad) for ids, _ in encoded])
    prompt_mask = torch.stack([F.pad(mask, (width - mask.shape[1], 0)) for _, mask in encoded])
    rows = prompt_ids.shape[1] * G
    uniforms = torch.rand((tokens, runs, rows), generator=torch.Generator().manual_seed(0)).to(device)
    stack = StackedGPT2(policies[0], Stack(policies).views(grad=False))
    row = {"runs": runs, "rows_per_run": rows, "tokens": tokens}

    with torch.inference_mode():
        row["hf_dynamic_cache"] = (
            timed_ms(
                lambda: [
                    hf_dynamic_cache(p, prompt_ids[r], prompt_mask[r], uniforms[:, r], G)
                    for r, p in enumerate(policies)
                ],
                device,
                repeats,
            )
            / runs
        )
        row["kv_decoder"] = (
            timed_ms(
                lambda: [
                    kv_decoder(p, prompt_ids[r], prompt_mask[r], uniforms[:, r], G) for r, p in enumerate(policies)
                ],
                device,
                repeats,
            )
            / runs
        )
        eager = StackedDecode(stack, prompt_ids, prompt_mask, uniforms, G)
        row["stacked_eager"] = timed_ms(eager.rollout, device, repeats) / runs
        eager.rollout()
        eager_logits = eager.logits.clone()
        alone = kv_decoder(policies[0], prompt_ids[0], prompt_mask[0], uniforms[:, 0], G)
        row["stacked_vs_alone_max_abs_logit_diff"] = (eager_logits[0] - alone).abs().max().item()
    if device.type == "cuda":
        # Inference-mode tensors cannot be recorded into a graph; no_grad keeps autograd out just as well.
        with torch.no_grad():
            graphed = StackedDecode(stack, prompt_ids, prompt_mask, uniforms, G)
            graph = captured(graphed)

            def replay():
                graphed.prefill()
                graph.replay()

            row["stacked_cuda_graph"] = timed_ms(replay, device, repeats) / runs
            replay()
            synchronised(device)
            row["graph_vs_eager_max_abs_logit_diff"] = (graphed.logits - eager_logits).abs().max().item()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N, mps")
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--tokens", type=int, default=None, help="tokens per row (default: the task's limit)")
    parser.add_argument("--algo", default="grpo")
    parser.add_argument("--task", default="caesar")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if min(args.runs) < 1 or args.repeats < 1 or (args.tokens is not None and args.tokens < 1):
        parser.error("--runs, --tokens and --repeats take positive integers")
    device = select_device(args.device)
    trainer = Trainer(RunConfig(algo=get_preset(args.algo), task=args.task, steps=1, seed=0, device="cpu"))
    trainer.prepare()
    tokens = args.tokens or trainer.max_new_tokens
    load_before = os.getloadavg()
    rows = [measure(trainer, device, runs, tokens, args.repeats) for runs in args.runs]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
    ways = ["hf_dynamic_cache", "kv_decoder", "stacked_eager"]
    if device.type == "cuda":
        ways.append("stacked_cuda_graph")
    print(
        f"{args.algo} on {args.task}, tiny model, {name}, torch {torch.__version__}; one rollout of {tokens} tokens; "
        f"load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}"
    )
    print(f"{'R':>3} {'rows':>5} " + " ".join(f"{w:>18}" for w in ways) + "   (ms per rollout per run)")
    for row in rows:
        print(f"{row['runs']:>3} {row['rows_per_run']:>5} " + " ".join(f"{row[w]:>18.3f}" for w in ways))
    for row in rows:
        extra = (
            f", CUDA graph vs eager {row['graph_vs_eager_max_abs_logit_diff']:.2e}"
            if "graph_vs_eager_max_abs_logit_diff" in row
            else ""
        )
        print(
            f"R={row['runs']}: largest logit difference, stacked vs alone "
            f"{row['stacked_vs_alone_max_abs_logit_diff']:.2e}{extra}"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps(
                {
                    "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                    "device": name,
                    "torch": torch.__version__,
                    "algo": args.algo,
                    "task": args.task,
                    "load_average_before": load_before,
                    "rows": rows,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
