"""Folders written whole or not at all: a checkpoint is written into a staging folder beside its destination and
renamed into place, so a reader never sees half of one.

A staging folder's name carries the id of the process writing it (`<name>.staging-<pid>-<random>`). A process
killed mid-write leaves its staging folder behind (an SFT checkpoint's can hold hundreds of MB); the next writer in
the same place removes every staging folder whose process is gone, so nothing accumulates. In the lab's own cache
folders, staging folders of the earlier naming (`<name>.<8 random characters>`, no pid) are removed once they are
an hour old: no write takes that long.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

from rl_core.runs.store import process_alive

MARK = ".staging-"
UNMARKED = re.compile(r"^.+\.[a-z0-9_]{8}$")  # tempfile.mkdtemp(prefix=name + ".") before staging names had a pid
UNMARKED_STALE_AFTER = 3600.0

log = logging.getLogger(__name__)


def staging_folder(folder: Path, cache: bool = False) -> Path:
    """A fresh, empty staging folder for `folder`, after clearing the stale ones beside it (`cache`: in a folder
    only the lab writes, see `remove_stale_staging`)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(folder.parent, cache)
    return Path(tempfile.mkdtemp(prefix=f"{folder.name}{MARK}{os.getpid()}-", dir=folder.parent))


def publish(staging: Path, folder: Path) -> bool:
    """Rename `staging` to `folder`; False (and `staging` removed) when another process published it first."""
    try:
        staging.rename(folder)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        return False
    return True


def remove_stale_staging(parent: Path, cache: bool = False) -> list[Path]:
    """Remove the staging folders in `parent` whose writing process no longer runs; returns them.

    `cache`: `parent` is a folder only the lab writes (its SFT or reward-model cache), so unmarked staging folders
    of the earlier naming are removed too once an hour old. Elsewhere (a user's checkpoint folder) a name of that
    shape may be the user's own, and is left alone."""
    removed = []
    for path in parent.iterdir():
        pid = path.name.rpartition(MARK)[2].partition("-")[0] if MARK in path.name else ""
        stale = pid.isdigit() and not process_alive(int(pid))
        if not pid and cache and path.is_dir() and UNMARKED.match(path.name):
            stale = time.time() - path.stat().st_mtime > UNMARKED_STALE_AFTER
        if stale:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def discard_damaged(folder: Path, what: str, error: Exception) -> None:
    """Report a cached `folder` (`what` it holds) that its reader could not load, and remove it so that it is trained
    again: folders are published whole (a rename), so a failed read means a damaged file, not one half-written."""
    log.warning(
        "the cached %s %s is unreadable (%s: %s); training it again", what, folder.name, type(error).__name__, error
    )
    shutil.rmtree(folder, ignore_errors=True)
