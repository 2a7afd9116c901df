"""Character-level tokenizer built with the `tokenizers` library and wrapped as a Hugging Face fast tokenizer.

One fixed vocabulary (printable ASCII plus three special tokens) serves every toy task, so any policy,
critic or reward model trained here can read any task's text and checkpoints stay interchangeable.
"""

from __future__ import annotations

import string

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD_TOKEN = "<pad>"
BOS_TOKEN = "<bos>"
EOS_TOKEN = "<eos>"
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN)
CHARACTERS = "".join(c for c in string.printable if c.isprintable())


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """A tokenizer mapping every printable ASCII character to one id; ids 0, 1, 2 are pad, bos, eos."""
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + tuple(CHARACTERS))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=None))
    # Split into single characters; the WordLevel model then maps each character to its id.
    backend.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD_TOKEN,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        padding_side="left",
    )
