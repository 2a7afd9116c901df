"""A batch of runs stepped as one: `step_together(runs)` gives each run one step.

RL runs (`Trainer`s) step as groups (`rl_core.engine.run_group.RunGroup`): the runs with one `group_key` — model
shapes, task, batch and length limit, update schedule, passes — are one vectorised program, whatever else differs
(seed, learning rate, clip range, β, loss…). A group lives as long as its members stay the same: the next step of
the same runs reuses its stacked weights and optimiser state; a run that joins or leaves forms a new group from the
runs' own modules and moments (each run's are views of its group's, so nothing is lost in the move). A run fitted to
preference pairs (DPO, IPO, the reward model) samples nothing and takes its own `step()` in its turn.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from rl_core.engine.run_group import RunGroup


def groups_of(runs: Sequence) -> list[list[int]]:
    """The positions of `runs` that train as one group each (RL runs with equal `group_key`), in order of first
    appearance; a run without a `group_key` (fitted to preference pairs) is a group of its own."""
    groups: dict[object, list[int]] = {}
    for i, run in enumerate(runs):
        key = run.group_key() if hasattr(run, "group_key") else ("alone", i)
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def step_together(runs: Sequence) -> list[dict | Exception]:
    """One step of every run, in order: its record, or the exception that ended its step (the other runs go on)."""
    outcomes: list[dict | Exception | None] = [None] * len(runs)
    for members in groups_of(runs):
        trainers = [runs[i] for i in members]
        if not hasattr(trainers[0], "group_key"):
            outcomes[members[0]] = _offline_step(trainers[0])
            continue
        group = trainers[0].group
        if group is None or group.trainers != trainers:
            try:
                group = RunGroup(trainers)
            except Exception as error:  # noqa: BLE001 - these runs cannot be stacked: each ends, the others go on
                for i in members:
                    outcomes[i] = error
                continue
        for i, outcome in zip(members, group.step()):
            outcomes[i] = outcome
    return outcomes


def _offline_step(run) -> dict | Exception:
    """The step of a run that samples nothing (its `step()`), with its `step_time`."""
    started = time.perf_counter()
    try:
        record = run.step()
    except Exception as error:  # noqa: BLE001 - this run's step failed; the caller ends this run only
        return error
    record["step_time"] = time.perf_counter() - started
    return record
