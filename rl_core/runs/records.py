"""The trainer's per-step records as JSON lines, as `train --metrics-out` and the experiment runner write them.

Every line is strict JSON, so NaN and ±inf (a metric with nothing to average on that step, e.g. the length of
correct responses when none was correct) are written as null; reading turns null back into NaN, so a record read
from a file is the record the run store gives.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path


def json_safe(value):
    """The record with NaN/inf replaced by None, so every line is strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


def write_jsonl(path: Path, records: Iterable[dict]) -> None:
    with Path(path).open("w") as file:
        for record in records:
            file.write(json.dumps(json_safe(record)) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    """The records of a JSON-lines file; a null scalar becomes NaN (samples are left as written)."""
    with Path(path).open() as file:
        return [{k: math.nan if v is None else v for k, v in json.loads(line).items()} for line in file if line.strip()]
