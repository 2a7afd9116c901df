"""A batch of runs stepped as one: `step_together(runs)` gives each run one step.

RL runs (`Trainer`s) step as groups (`rl_core.engine.run_group.RunGroup`): the runs with one `group_key` — model
shapes, task, batch and length limit, update schedule, passes — are one vectorised program, whatever else differs
(seed, learning rate, clip range, β, loss…). A group lives as long as its members stay the same: the next step of
the same runs reuses its stacked weights and optimiser state; a run that joins or leaves, or that stepped in another
group meanwhile, makes a new group from the runs' own modules and moments (each run's are views of its group's, so
nothing is lost in the move). A run fitted to preference pairs (DPO, IPO, the reward model) samples nothing for its
update: the runs of one kind and shape (`pair_run.pair_group_plan`) step as one group of their kind
(`preference_optimisation.DPOGroup`, `reward_model.RewardModelGroup`). `evaluate_together(runs)` gives each run its
evaluation after the last step, the policies of one shape sampled as one program (`rl_core.engine.evaluation`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from rl_core.engine.evaluation import evaluate_policies, evaluation_key
from rl_core.engine.run_group import RunGroup, bound_group


def groups_of(runs: Sequence) -> list[list[int]]:
    """The positions of `runs` that train as one group each (runs with equal `group_key`), in order of first
    appearance."""
    groups: dict[object, list[int]] = {}
    for i, run in enumerate(runs):
        groups.setdefault((type(run).__name__, run.group_key()), []).append(i)
    return list(groups.values())


def step_together(runs: Sequence) -> list[dict | Exception]:
    """One step of every run, in order: its record, or the exception that ended its step (the other runs go on)."""
    outcomes: list[dict | Exception | None] = [None] * len(runs)
    for members in groups_of(runs):
        trainers = [runs[i] for i in members]
        if hasattr(trainers[0], "step_group"):  # fitted to preference pairs: DPO, IPO, the reward model
            for i, outcome in zip(members, _pair_steps(trainers)):
                outcomes[i] = outcome
            continue
        group = bound_group(trainers, lambda g: g.trainers)
        if group is None:
            try:
                group = RunGroup(trainers)
            except Exception as error:  # noqa: BLE001 - these runs cannot be stacked: each ends, the others go on
                for i in members:
                    outcomes[i] = error
                continue
        for i, outcome in zip(members, group.step()):
            outcomes[i] = outcome
    return outcomes


def evaluate_together(runs: Sequence) -> list[dict | Exception]:
    """Each run's evaluation after its last step, in order, or the exception that ended it (the other runs go on):
    the runs that sample their policy (`evaluation()`: RL, DPO, IPO) as one program per `evaluation_key`, each run
    with the numbers it gets alone; the others (a reward model's held-out pairs) each by itself."""
    outcomes: list[dict | Exception | None] = [None] * len(runs)
    programs: dict[tuple, list] = {}
    for i, run in enumerate(runs):
        try:
            if hasattr(run, "evaluation"):
                evaluation = run.evaluation()
                programs.setdefault(evaluation_key(evaluation), []).append((i, evaluation))
            else:
                outcomes[i] = run.evaluate()
        except Exception as error:  # noqa: BLE001 - this run's evaluation failed; the others go on
            outcomes[i] = error
    for members in programs.values():
        try:
            results = evaluate_policies([evaluation for _, evaluation in members])
        except Exception as error:  # noqa: BLE001 - the program failed: its runs end, the others go on
            results = [error] * len(members)
        for (i, _), result in zip(members, results):
            outcomes[i] = result
    return outcomes


def _pair_steps(trainers: Sequence) -> list[dict | Exception]:
    """One step of runs fitted to preference pairs, as one group (their kind's `step_group`), each record with the
    group's seconds shared evenly as its `step_time`; an exception ends every run of the group."""
    started = time.perf_counter()
    try:
        records = type(trainers[0]).step_group(trainers)
    except Exception as error:  # noqa: BLE001 - this group's step failed; the caller ends these runs only
        return [error] * len(trainers)
    for record in records:
        record["step_time"] = (time.perf_counter() - started) / len(trainers)
    return records
