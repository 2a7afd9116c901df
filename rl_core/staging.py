"""Folders written whole or not at all: a checkpoint is written into a staging folder beside its destination and
renamed into place, so a reader never sees half of one.

A staging folder's name carries the id of the process writing it (`<name>.staging-<pid>-<random>`). A process
killed mid-write leaves its staging folder behind (an SFT checkpoint's can hold hundreds of MB); the next writer in
the same place removes every staging folder whose process is gone, so nothing accumulates.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from rl_core.store import process_alive

MARK = ".staging-"


def staging_folder(folder: Path) -> Path:
    """A fresh, empty staging folder for `folder`, after clearing the stale ones beside it."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(folder.parent)
    return Path(tempfile.mkdtemp(prefix=f"{folder.name}{MARK}{os.getpid()}-", dir=folder.parent))


def publish(staging: Path, folder: Path) -> bool:
    """Rename `staging` to `folder`; False (and `staging` removed) when another process published it first."""
    try:
        staging.rename(folder)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        return False
    return True


def remove_stale_staging(parent: Path) -> list[Path]:
    """Remove the staging folders in `parent` whose writing process no longer runs; returns them."""
    removed = []
    for path in parent.glob(f"*{MARK}*"):
        pid = path.name.rpartition(MARK)[2].partition("-")[0]
        if pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
