"""What a message may show a learner or a terminal: one line, a bounded length, no absolute path.

A message can carry a learner's own input (a knob name of ten thousand characters) or an exception's text (a
server path, a multi-line SQLite error); `brief` makes any of them fit on one line of a page or a terminal."""

from __future__ import annotations

import re

MAX_MESSAGE = 300  # characters: a few lines of a page; the start of a message says what was refused and why

# An absolute file path in a message: the pages never show where the server keeps its files.
_PATH = re.compile(r"(?<![\w.])(?:[A-Za-z]:)?[/\\](?:[^\s/\\'\"]+[/\\])+")


def without_paths(message: str) -> str:
    """`message` with every absolute path cut to its last part: `/srv/cache/sft/x/model.bin` → `…/model.bin`."""
    return _PATH.sub("…/", message)


def brief(message: str, limit: int = MAX_MESSAGE) -> str:
    """`message` path-free, on one line, and at most `limit` characters (cut in the middle of a long one, with
    how many characters were left out)."""
    text = " ".join(without_paths(str(message)).split())
    if len(text) <= limit:
        return text
    keep = limit - len(f" … ({len(text)} characters left out) … ")  # the count has at most len(text)'s digits
    tail = min(40, keep // 3)
    return f"{text[: keep - tail]} … ({len(text) - keep} characters left out) … {text[-tail:]}"
