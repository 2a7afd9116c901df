"""The toy tasks: every module in this package is imported on load, so a new file is all a new task needs."""

from __future__ import annotations

import importlib
import pkgutil

from toy_tasks.base import TASKS, ToyTask

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

DEFAULT_TASK = "caesar"


def get_task(name: str, **kwargs) -> ToyTask:
    """A fresh instance of the task called `name`; keyword arguments go to its constructor."""
    if name not in TASKS:
        raise ValueError(f"task {name!r} is unknown; allowed: {', '.join(TASKS)}")
    return TASKS[name](**kwargs)
