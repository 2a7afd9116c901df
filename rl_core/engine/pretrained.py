"""A run's `model` by name: a preset of `models.MODEL_PRESETS` (random weights, the character tokenizer), or a
Hugging Face causal LM with its own tokenizer and weights: a folder saved with `save_pretrained`, or a Hub id
(`openai-community/gpt2`), which `transformers` downloads once where the machine is online and reads from its cache
where it is not.

The policy, π_ref (its frozen copy), the critic (`ValueModel.from_policy`: a value head on a copy of the policy's
backbone) and the SFT warm start (`sft.sft_policy`, from the pretrained weights instead of random ones) are all
built from it. The engine's sampler (`decoding.KVDecoder`) and its stacked runs run GPT-2's modules, so the
architecture must be GPT-2's (`gpt2`, `distilgpt2`, a `GPT2LMHeadModel` folder of one's own); any other model is
refused with its name and what it is.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoTokenizer,
    GPT2LMHeadModel,
    PretrainedConfig,
    PreTrainedTokenizerBase,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from rl_core.config import AlgoConfig
from rl_core.engine.lora import lora_parameter_count
from rl_core.engine.models import MODEL_CONSTRUCTION, MODEL_PRESETS, build_policy, model_config
from rl_core.engine.tokenizer import build_char_tokenizer

# The architecture the engine's sampler and run stacking read (`decoding.KVDecoder`, `stacked_runs`).
SUPPORTED_MODEL_TYPES = ("gpt2",)
# SFT from pretrained weights: a tenth of what the presets' random weights want (3e-3 for tiny, 3e-4 for the 124M
# shape), the usual order for fine-tuning a trained LM, which a preset's rate would pull far from what it knows.
PRETRAINED_SFT_LEARNING_RATE = 3e-5
# Per parameter of the model: π_ref's float32 weights (4 bytes), and for each trained parameter its float32 weights,
# gradient and AdamW's two moments (16 bytes). Full fine-tuning trains every parameter of the policy (20 bytes in
# all); LoRA trains its adapters alone, over a frozen base that is π_ref's own copy; a critic (a value head on a
# copy of the backbone) trains all of its own.
REFERENCE_BYTES_PER_PARAMETER = 4
TRAINED_BYTES_PER_PARAMETER = 16
# Activations, the key/value cache of a rollout and the allocator's slack, on top of the above.
MEMORY_HEADROOM = 1.25
# The Hub ids the app's model picker offers besides the folders under RLHF_LAB_MODELS_DIR (comma-separated).
ALLOWED_HUB_IDS_VARIABLE = "RLHF_LAB_HUB_MODELS"
MODELS_DIR_VARIABLE = "RLHF_LAB_MODELS_DIR"


def is_preset(model: str) -> bool:
    return model in MODEL_PRESETS


def _source(model: str) -> str:
    """What `from_pretrained` reads: a folder's absolute path, or the Hub id as given."""
    path = Path(model).expanduser()
    return str(path.resolve()) if path.is_dir() else model


@functools.lru_cache(maxsize=64)
def pretrained_config(model: str) -> PretrainedConfig:
    """The model's configuration, read once per process; a ValueError naming the model says why it cannot be used:
    not found (neither a preset, nor a folder, nor a Hub id in the cache or reachable), not a causal LM, or a causal
    LM of an architecture the engine does not run."""
    allowed = f"a preset ({', '.join(MODEL_PRESETS)}), a folder saved with save_pretrained, or a Hugging Face Hub id"
    path = Path(model).expanduser()
    if path.is_dir() and not (path / "config.json").is_file():
        raise ValueError(f"model={model!r} is a folder without config.json; allowed: {allowed}")
    looks_like_folder = path.is_absolute() or model.startswith((".", "~")) or model.count("/") > 1
    if looks_like_folder and not path.is_dir():
        raise ValueError(f"model={model!r} is not a folder here; allowed: {allowed}")
    try:  # the local cache first: a name that is no Hub id, or an offline machine, costs no network retries
        config = AutoConfig.from_pretrained(_source(model), local_files_only=True)
    except (OSError, ValueError) as error:
        if "/" not in model:
            raise ValueError(
                f"model={model!r} is unknown: not a preset, not a folder here, and not a Hugging Face "
                f"Hub id (owner/name) in the local cache; allowed: {allowed}"
            ) from error
        config = _config_from_the_hub(model, allowed)
    if config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise ValueError(
            f"model={model!r} is a {config.model_type!r} model, not a causal LM (AutoModelForCausalLM "
            f"cannot load it); allowed: {allowed} of a causal LM"
        )
    # An encoder whose architecture also has a decoder form (BERT, RoBERTa: AutoModelForCausalLM loads them as
    # such) says which it is in `is_decoder`; a config without the field (GPT-2's, Llama's) is a decoder's.
    if getattr(config, "is_decoder", True) is False:
        raise ValueError(
            f"model={model!r} is a {config.model_type!r} encoder (its config has is_decoder=False), not a causal "
            f"LM; allowed: {allowed} of a causal LM of the GPT-2 architecture"
        )
    if config.model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(
            f"model={model!r} is a {config.model_type!r} causal LM; the lab's sampler runs the GPT-2 "
            f"architecture only: allowed model types {', '.join(SUPPORTED_MODEL_TYPES)} (e.g. "
            "openai-community/gpt2, distilbert/distilgpt2, or a GPT2LMHeadModel folder)"
        )
    return config


def _config_from_the_hub(model: str, allowed: str) -> PretrainedConfig:
    try:
        return AutoConfig.from_pretrained(model)
    except (OSError, ValueError) as error:
        offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
        reason = "HF_HUB_OFFLINE is set" if offline else "the Hub could not be reached or has no such model"
        raise ValueError(
            f"model={model!r} is unknown: not a preset, not a folder here, and as a Hugging Face Hub id not in the "
            f"local cache, and {reason}; allowed: {allowed} (a Hub id needs the network once, then its cache serves)"
        ) from error


def check_model(model: str) -> None:
    """ValueError naming `model` and what is allowed when it is neither a preset nor a loadable causal LM."""
    if not isinstance(model, str) or not model:
        raise ValueError(
            f"model={model!r} is not a model name; allowed: {', '.join(MODEL_PRESETS)}, a folder or a "
            "Hugging Face Hub id"
        )
    if not is_preset(model):
        pretrained_config(model)


def model_positions(model: str) -> int:
    """The context length of the model: the positions a prompt and its response share."""
    if is_preset(model):
        return MODEL_PRESETS[model].n_positions
    return pretrained_config(model).n_positions


def model_width(model: str) -> int:
    """The width of the model's hidden states (n_embd)."""
    if is_preset(model):
        return MODEL_PRESETS[model].n_embd
    return pretrained_config(model).n_embd


def model_tokenizer(model: str) -> PreTrainedTokenizerBase:
    """The character tokenizer for a preset, else the model's own, padding on the left as the sampler wants; a
    tokenizer without a pad token (GPT-2's) pads with its EOS, without a BOS (some BPE tokenizers) starts prompts with
    its EOS, as TRL does."""
    if is_preset(model):
        return build_char_tokenizer()
    tokenizer = AutoTokenizer.from_pretrained(_source(model), padding_side="left")
    if tokenizer.eos_token is None:
        raise ValueError(
            f"model={model!r}: its tokenizer has no EOS token, which ends every response; allowed: a "
            "tokenizer with an eos_token"
        )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.bos_token is None:
        tokenizer.bos_token = tokenizer.eos_token
    vocabulary = pretrained_config(model).vocab_size
    if len(tokenizer) > vocabulary:
        raise ValueError(
            f"model={model!r}: its tokenizer has {len(tokenizer)} tokens but the model only "
            f"{vocabulary} embeddings; allowed: a tokenizer saved with the model"
        )
    return tokenizer


def sft_learning_rate(model: str) -> float:
    return MODEL_PRESETS[model].sft_learning_rate if is_preset(model) else PRETRAINED_SFT_LEARNING_RATE


def model_identity(model: str, tokenizer: PreTrainedTokenizerBase) -> str:
    """What a cached warm start of this model depends on: a preset's config; a loaded model's config, its source and
    the size and modification time of each of its files (a folder saved again is another model)."""
    if is_preset(model):
        return model_config(model, tokenizer).to_json_string()
    folder = Path(_source(model))
    if not folder.is_dir():  # a Hub id: the snapshot in the cache that transformers resolved
        from transformers.utils import cached_file

        folder = Path(cached_file(model, "config.json")).parent
    files = sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in folder.iterdir() if f.is_file())
    return pretrained_config(model).to_json_string() + str(folder) + repr(files)


def _architecture(model: str) -> PretrainedConfig:
    return model_config(model, build_char_tokenizer()) if is_preset(model) else pretrained_config(model)


def parameter_count(model: str) -> int:
    """Parameters of the model, counted from its config on the meta device (nothing allocated)."""
    with MODEL_CONSTRUCTION, torch.device("meta"):
        policy = GPT2LMHeadModel(_architecture(model))
    return sum(p.numel() for p in policy.parameters())


def training_bytes(parameters: int, critic: bool, trained: int | None = None) -> int:
    """Bytes = (4·P + 16·P_trained + 16·P with a critic) · 1.25: π_ref's float32 weights, the trained parameters'
    weights, gradients and AdamW moments (P_trained = P in full fine-tuning, the adapters with LoRA, whose frozen
    base is π_ref's copy), the critic's own, and headroom for activations and the rollout's cache."""
    trained = parameters if trained is None else trained
    per_model = REFERENCE_BYTES_PER_PARAMETER * parameters + TRAINED_BYTES_PER_PARAMETER * trained
    return int((per_model + (TRAINED_BYTES_PER_PARAMETER * parameters if critic else 0)) * MEMORY_HEADROOM)


def free_bytes(device: torch.device) -> int | None:
    """Memory free on the device: CUDA's free memory, or the machine's available RAM for the CPU; None elsewhere."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type == "cpu" and hasattr(os, "sysconf"):
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return None


def check_fits(model: str, device: torch.device, critic: bool, free: int | None = None, lora=None) -> None:
    """ValueError naming the model, its size and the device when training it needs more memory than is free: full
    fine-tuning, or LoRA with `lora` (a config with `lora_r` and `lora_target_modules`). Where full fine-tuning
    does not fit, the message offers LoRA (peft's default rank and layers) when that would."""
    free = free_bytes(device) if free is None else free
    if free is None:
        return
    parameters = parameter_count(model)
    architecture = _architecture(model)
    trained = None if lora is None else lora_parameter_count(architecture, lora.lora_r, lora.lora_target_modules)
    needed = training_bytes(parameters, critic, trained)
    if needed <= free:
        return
    what = "policy and π_ref" + (" and critic" if critic else "")
    how = "full fine-tuning" if lora is None else f"LoRA (lora_r={lora.lora_r}: adapters over frozen weights)"
    allowed = "a smaller model, or a device with more memory"
    if lora is None:
        adapters = lora_parameter_count(architecture, AlgoConfig.lora_r, AlgoConfig.lora_target_modules)
        lora_needed = training_bytes(parameters, critic, adapters)
        if lora_needed <= free:
            allowed += (
                f", or LoRA: use_peft=true (low-rank adapters train over frozen weights: about "
                f"{lora_needed / 2**30:.1f} GiB) with sft_steps=0 (the SFT warm start trains every weight)"
            )
    elif lora.lora_r > 1:
        allowed += ", or a lower lora_r"
    raise ValueError(
        f"model={model!r} ({parameters / 1e6:.1f} M parameters) does not fit on {device}: {how} of its {what} "
        f"needs about {needed / 2**30:.1f} GiB and {free / 2**30:.1f} GiB are free; allowed: {allowed}"
    )


def initial_policy(model: str, tokenizer: PreTrainedTokenizerBase) -> GPT2LMHeadModel:
    """The policy before SFT: a preset's random weights, or the pretrained weights, with dropout off (the first
    update's ratios must be 1, as with TRL's disable_dropout)."""
    if is_preset(model):
        return build_policy(model, tokenizer)
    with MODEL_CONSTRUCTION:
        return GPT2LMHeadModel.from_pretrained(_source(model), resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


def model_choices(environ: os._Environ | dict | None = None) -> list[str]:
    """What the app's model picker lists: the presets, the model folders (those with a config.json) under
    `RLHF_LAB_MODELS_DIR`, and the Hub ids in `RLHF_LAB_HUB_MODELS` (comma-separated) that the instructor allows."""
    environ = os.environ if environ is None else environ
    choices = list(MODEL_PRESETS)
    folder = environ.get(MODELS_DIR_VARIABLE)
    if folder and Path(folder).is_dir():
        choices += sorted(str(p) for p in Path(folder).iterdir() if (p / "config.json").is_file())
    choices += [name.strip() for name in environ.get(ALLOWED_HUB_IDS_VARIABLE, "").split(",") if name.strip()]
    return choices
