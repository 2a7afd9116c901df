"""A batch of runs stepped as one: `step_together(runs)` gives each run one step.

RL runs (`Trainer`s) step as groups (`rl_core.engine.run_group.RunGroup`): the runs with one `group_key` — model
shapes, task, batch and length limit, update schedule, passes — are one vectorised program, whatever else differs
(seed, learning rate, clip range, β, loss…). A group lives as long as its members stay the same: the next step of
the same runs reuses its stacked weights and optimiser state; a run that joins or leaves forms a new group from the
runs' own modules and moments (each run's are views of its group's, so nothing is lost in the move). A run whose
step asks for no sample (offline DPO, `step_phases`) steps by itself in its turn.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence

from rl_core.engine.rollout import Rollout, SampleRequest
from rl_core.engine.run_group import RunGroup


def run_alone(phases: Generator[SampleRequest, Rollout, object]):
    """What a coroutine of sampling requests returns when each of its requests is sampled by itself."""
    try:
        request = next(phases)
        while True:
            request = phases.send(request.sample())
    except StopIteration as done:
        return done.value


def groups_of(runs: Sequence) -> list[list[int]]:
    """The positions of `runs` that train as one group each (RL runs with equal `group_key`), in order of first
    appearance; a run without a `group_key` (offline DPO) is a group of its own."""
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
    """A step that samples nothing (`step_phases` returns `(record, None)` without a request), with its
    `step_time`."""
    started = time.perf_counter()
    try:
        record, _ = run_alone(run.step_phases())
    except Exception as error:  # noqa: BLE001 - this run's step failed; the caller ends this run only
        return error
    record["step_time"] = time.perf_counter() - started
    return record
