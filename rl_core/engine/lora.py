"""LoRA (Hu et al., 2021) on the policy, through `peft`: its weights W stay frozen and each adapted layer learns a
low-rank update, W + (α/r)·B·A with A `[r, in]` and B `[out, r]`.

peft builds the adapters (`get_peft_model` with a `LoraConfig`: their names, A's Kaiming initialisation and B = 0,
so the first policy is the SFT policy exactly) and writes and reads them (`save_pretrained`'s adapter folder:
`adapter_config.json` and `adapter_model.safetensors`). The engine trains them as it trains every weight: a group's
runs keep their adapters in one stacked buffer (`stacked_runs.AdapterStack`) over the frozen base, which is π_ref's
stack itself (π_ref is the base with the adapters off, so each run holds one copy of the base), and
`stacked_runs.StackedGPT2` adds (α/r)·(x·Aᵀ)·Bᵀ to each adapted layer. Knob names are TRL's `ModelConfig`'s
(`use_peft`, `lora_r`, `lora_alpha`, `lora_target_modules`); dropout on the adapters is not offered, since the
policy trains with dropout off (the first update's ratios must be 1).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import GPT2Config, GPT2LMHeadModel

if TYPE_CHECKING:  # peft is imported where LoRA is used: it costs every other process about 0.7 s to import
    from peft import LoraConfig, PeftModel

ADAPTER = "default"  # peft's name for a model's one adapter
PEFT_PREFIX = "base_model.model."  # what peft puts before the wrapped model's parameter names


def lora_scaling(lora_alpha: float, lora_r: int) -> float:
    """The factor of the low-rank update, W + (α/r)·B·A: with it a change of r needs less retuning of the learning
    rate (Hu et al.)."""
    return lora_alpha / lora_r


def lora_config(algo) -> LoraConfig:
    """peft's configuration for the run's LoRA knobs. GPT-2's layers are `Conv1D`s, whose weight is stored
    `[in, out]`: peft's `fan_in_fan_out`."""
    from peft import LoraConfig

    return LoraConfig(
        r=algo.lora_r,
        lora_alpha=algo.lora_alpha,
        target_modules=algo.lora_target_modules.split(","),
        lora_dropout=0.0,
        fan_in_fan_out=True,
        task_type="CAUSAL_LM",
    )


def with_adapters(policy: GPT2LMHeadModel, algo, seed: int) -> PeftModel:
    """`policy` (changed in place) wrapped by peft with fresh adapters: A drawn from the run's seed alone (the global
    RNG, which other code in the process shares, is left as it was), B = 0."""
    from peft import get_peft_model

    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        # peft reads transformers' `is_gradient_checkpointing`, deprecated in transformers 5: nothing for a learner.
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
        torch.manual_seed(seed)
        return get_peft_model(policy, lora_config(algo))


def lora_scaling_of(module: torch.nn.Module) -> float | None:
    """α/r of a peft-wrapped policy; None for a plain model."""
    if "peft" not in sys.modules:  # nothing has made a peft model in this process
        return None
    from peft import PeftModel

    if not isinstance(module, PeftModel):
        return None
    config = module.peft_config[ADAPTER]
    return lora_scaling(config.lora_alpha, config.r)


def adapter_parameters(module: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """The adapters of a peft-wrapped policy, named as the engine reads them: `transformer.h.0.attn.c_attn.lora_A`
    for peft's `base_model.model.transformer.h.0.attn.c_attn.lora_A.default.weight`."""
    suffix = f".{ADAPTER}.weight"
    return [
        (name.removeprefix(PEFT_PREFIX).removesuffix(suffix), parameter)
        for name, parameter in module.named_parameters()
        if ".lora_" in name
    ]


def base_parameters(module: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """The frozen weights of a peft-wrapped policy under the wrapped model's own names (`base_layer` dropped)."""
    return [
        (name.removeprefix(PEFT_PREFIX).replace(".base_layer.", "."), parameter)
        for name, parameter in module.named_parameters()
        if ".lora_" not in name
    ]


def share_base(policy: PeftModel, reference: GPT2LMHeadModel) -> None:
    """Make the policy's frozen weights π_ref's own tensors (they hold the same values): one copy per run."""
    weights = dict(reference.named_parameters())
    for name, parameter in base_parameters(policy):
        parameter.data = weights[name].data


def load_adapters(policy: PeftModel, folder: str | Path) -> None:
    """Set the policy's adapters from a folder that peft's `save_pretrained` wrote."""
    from peft import load_peft_weights, set_peft_model_state_dict

    set_peft_model_state_dict(policy, load_peft_weights(str(folder)), adapter_name=ADAPTER)


def lora_parameter_count(config: GPT2Config, lora_r: int, lora_target_modules: str) -> int:
    """Adapter parameters of a GPT-2: n_layer · Σ over the adapted layers of r·(in + out), with `c_attn` d → 3d,
    the attention's `c_proj` d → d, `c_fc` d → inner and the MLP's `c_proj` inner → d (inner = n_inner or 4d)."""
    d = config.n_embd
    inner = config.n_inner or 4 * d
    shapes = {"c_attn": [(d, 3 * d)], "c_proj": [(d, d), (inner, d)], "c_fc": [(d, inner)]}
    targets = lora_target_modules.split(",")
    per_layer = sum(lora_r * (n_in + n_out) for target in targets for n_in, n_out in shapes[target])
    return config.n_layer * per_layer
