"""A small GPT-2 and a byte-level BPE tokenizer made here, as a Hugging Face model folder (`save_pretrained`), for
the tests of `--model FOLDER`: nothing is downloaded."""

from __future__ import annotations

import random
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from toy_tasks import TASKS, get_task

END = "<|endoftext|>"  # GPT-2's one special token: BOS, EOS and (here) padding alike
BPE_VOCABULARY = 400  # the 256 bytes and about 140 merges


def task_text(per_task: int = 200, seed: int = 0) -> list[str]:
    """Prompts and demonstrations of every toy task, to train the BPE merges on."""
    rng = random.Random(seed)
    lines = []
    for name in TASKS:
        task = get_task(name)
        for prompt in task.sample_prompts(per_task, rng):
            lines.append(prompt + task.demonstration(prompt, rng, 0.0))
    return lines


def bpe_tokenizer(vocabulary: int = BPE_VOCABULARY) -> PreTrainedTokenizerFast:
    """GPT-2's kind of tokenizer (byte-level BPE, `<|endoftext|>`), its merges learnt from the tasks' text."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocabulary, special_tokens=[END], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    backend.train_from_iterator(task_text(), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=END, eos_token=END)


def save_gpt2_folder(folder: Path, n_layer: int = 2, n_embd: int = 64, n_positions: int = 128, seed: int = 0) -> Path:
    """A GPT-2 of random weights and the BPE tokenizer, saved together in `folder` as `from_pretrained` reads them."""
    tokenizer = bpe_tokenizer()
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=2,
        n_positions=n_positions,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        activation_function="gelu",
    )  # as the presets: on a CPU about 4× faster than GPT-2's tanh form
    import torch

    torch.manual_seed(seed)
    GPT2LMHeadModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
