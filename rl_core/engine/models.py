"""The four models of RLHF, built from `GPT2Config` presets (nothing is downloaded).

* policy (actor): a `GPT2LMHeadModel`;
* critic: a GPT-2 backbone with a scalar value head, V(s_t) read at every position;
* reward model: the same architecture, read at the last token of prompt + response;
* reference: a frozen copy of the SFT policy.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel, GPT2Model, PreTrainedTokenizerBase


@dataclass(frozen=True)
class ModelPreset:
    name: str
    n_layer: int
    n_embd: int
    n_head: int
    n_positions: int
    description: str
    # Intra-op threads on a CPU: tiny matrices gain nothing from a second thread and lose a lot when two
    # trainings share two cores; None leaves torch's default.
    cpu_threads: int | None
    # Peak learning rate of the SFT warm start from random weights. The small presets learn fastest near 3e-3;
    # the 124M shape stalls there (caesar, 200 steps: demonstration NLL 1.46 at 3e-3 against 0.81 at 3e-4).
    sft_learning_rate: float
    # Whether `device="auto"` puts it on an accelerator. The tiny and small shapes' ops are too small to pay for a
    # GPU's kernel launches: on an H200 machine a tiny run's rollout took longer than on one CPU thread here, and
    # each of an experiment's tiny runs trained 2–8× longer on the GPU than on that machine's CPU cores
    # (docs/ARCHITECTURE.md, "On a GPU").
    accelerated: bool


MODEL_PRESETS: dict[str, ModelPreset] = {
    p.name: p
    for p in (
        ModelPreset(
            "tiny",
            2,
            64,
            2,
            64,
            "2 layers × 64 wide (≈0.1 M parameters): seconds on a laptop CPU",
            1,
            3e-3,
            accelerated=False,
        ),
        ModelPreset(
            "small",
            4,
            128,
            4,
            64,
            "4 layers × 128 wide (≈0.8 M parameters): CPU, a little slower",
            1,
            3e-3,
            accelerated=False,
        ),
        ModelPreset(
            "gpt2",
            12,
            768,
            12,
            1024,
            "the 124M GPT-2 shape (12 × 768, 12 heads): for a GPU",
            None,
            3e-4,
            accelerated=True,
        ),
    )
}


def model_config(preset: str, tokenizer: PreTrainedTokenizerBase) -> GPT2Config:
    """The `GPT2Config` of a named preset, sized to the tokenizer's vocabulary."""
    if preset not in MODEL_PRESETS:
        raise ValueError(f"model preset {preset!r} is unknown; allowed: {', '.join(MODEL_PRESETS)}")
    p = MODEL_PRESETS[preset]
    return GPT2Config(
        vocab_size=len(tokenizer),
        n_layer=p.n_layer,
        n_embd=p.n_embd,
        n_head=p.n_head,
        n_positions=p.n_positions,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        # The exact (erf) GELU rather than GPT-2's tanh approximation: the two differ by at most 5e-4, the weights
        # are trained from scratch anyway, and on a CPU torch's erf kernel runs about 4× faster (0.18 vs 0.81 ms
        # for a 832 × 256 activation on one thread).
        activation_function="gelu",
        # Dropout would make the ratio differ from 1 on the first, on-policy update.
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )


# While `from_pretrained` loads, transformers replaces `PreTrainedModel.tie_weights` and torch's init functions with
# no-ops on the classes and modules themselves, not per call. A model that another thread builds or loads meantime
# comes out with an untied LM head, or fails to load, or keeps uninitialised weights; the app trains in threads.
# Every model this module makes is made under this one lock.
MODEL_CONSTRUCTION = threading.Lock()


def build_policy(preset: str, tokenizer: PreTrainedTokenizerBase) -> GPT2LMHeadModel:
    with MODEL_CONSTRUCTION:
        return GPT2LMHeadModel(model_config(preset, tokenizer))


def load_policy(folder: str | Path) -> GPT2LMHeadModel:
    """A policy saved with `save_pretrained` (an SFT checkpoint, or any local GPT-2 folder)."""
    with MODEL_CONSTRUCTION:
        return GPT2LMHeadModel.from_pretrained(str(folder))


def frozen_reference(policy: GPT2LMHeadModel) -> GPT2LMHeadModel:
    """π_ref: a frozen copy of the (SFT) policy."""
    reference = copy.deepcopy(policy)
    reference.requires_grad_(False)
    reference.eval()
    return reference


class ValueModel(nn.Module):
    """A GPT-2 backbone with a scalar head: the critic V_φ(s_t) and, read at the last token, a reward model."""

    def __init__(self, config: GPT2Config):
        super().__init__()
        self.config = config
        with MODEL_CONSTRUCTION:
            self.backbone = GPT2Model(config)
            self.value_head = nn.Linear(config.n_embd, 1)

    @classmethod
    def from_policy(cls, policy: GPT2LMHeadModel) -> ValueModel:
        """A critic whose backbone starts as a copy of the policy's transformer (the usual initialisation)."""
        model = cls(policy.config)
        model.backbone.load_state_dict(policy.transformer.state_dict())
        return model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Values `[B, L]`, one per position: the value of the state that ends at that position."""
        hidden = self.backbone(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),
            use_cache=False,
        ).last_hidden_state
        return self.value_head(hidden).squeeze(-1)

    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.config.save_pretrained(folder)
        torch.save(self.state_dict(), folder / "value_model.pt")

    @classmethod
    def load(cls, folder: str | Path) -> ValueModel:
        folder = Path(folder)
        model = cls(GPT2Config.from_pretrained(folder))
        model.load_state_dict(torch.load(folder / "value_model.pt", map_location="cpu", weights_only=True))
        return model


def build_value_model(preset: str, tokenizer: PreTrainedTokenizerBase) -> ValueModel:
    return ValueModel(model_config(preset, tokenizer))


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counted from each row's first real token, so left padding does not shift them."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


# Torch's intra-op thread count when this module was imported: a model preset without a count of its own gets this,
# not whatever count the previous training in the process happened to set.
DEFAULT_CPU_THREADS = torch.get_num_threads()


def use_preset_threads(preset: str, device: torch.device) -> None:
    """On a CPU, set torch's intra-op threads to the preset's count (torch's default where it names none)."""
    if device.type == "cpu":
        preset_threads = MODEL_PRESETS[preset].cpu_threads if preset in MODEL_PRESETS else None  # a loaded model: None
        torch.set_num_threads(preset_threads or DEFAULT_CPU_THREADS)


def select_device(requested: str = "auto", model: str | None = None) -> torch.device:
    """`auto` picks cuda, then mps, then cpu, except for a model preset that is not `accelerated` (tiny, small),
    which stays on the cpu (a loaded model, `rl_core.engine.pretrained`, takes the accelerator); any torch device
    string forces that device."""
    if requested != "auto":
        try:
            device = torch.device(requested)
        except RuntimeError as error:
            raise ValueError(
                f"device {requested!r} is not a torch device; allowed: auto, cpu, cuda, cuda:N, mps"
            ) from error
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device {requested!r} was asked for but CUDA is not available here; use auto or cpu")
        if device.type == "mps" and not torch.backends.mps.is_available():
            raise ValueError(f"device {requested!r} was asked for but MPS is not available here; use auto or cpu")
        return device
    if model in MODEL_PRESETS and not MODEL_PRESETS[model].accelerated:
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")
