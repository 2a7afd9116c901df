"""A batch of runs stepped as one: the unit of training (a single run is a batch of one).

A training step is a coroutine (`Trainer.step_phases`): it yields each sampling request (`rollout.SampleRequest`)
and is sent the rollout. `step_together` drives one step of every run of a batch: it collects the runs' requests,
serves those that can share one token-by-token loop together (`stacked_runs.sample_runs`: same model shape,
device, length limit, group size and prompt count, a float32 sampler) and every other one alone, and sends each
run its rollout; dynamic sampling's extra rounds come back as new requests and are served the same way.

Only sampling is stacked. On a CPU a decoding step (64 rows × 1 token) is mostly per-op cost, which the runs then
share; the teacher-forced passes, losses and optimiser steps already run near the throughput of a core, and
stacking them measured slower (`bench/stacked_runs.py`, docs/ARCHITECTURE.md), so each run does them on its own
weights as it does alone. A run's records in a batch therefore equal its records alone up to the sampler's float
rounding (`tests/test_run_batch.py`).
"""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from typing import Protocol

from rl_core.engine.rollout import Rollout, SampleRequest
from rl_core.engine.stacked_runs import SHAPE_FIELDS, StackedPolicies, sample_runs

StepPhases = Generator[SampleRequest, Rollout, tuple[dict, int | None]]


class Steppable(Protocol):
    def step_phases(self) -> StepPhases: ...


def stack_key(request: SampleRequest) -> tuple | None:
    """Requests with equal keys are sampled in one loop; None: this one is sampled alone (a bfloat16 sampler runs
    under autocast, which the stacked loop does not reproduce op for op)."""
    if request.dtype != "float32":
        return None
    config = request.policy.config
    return (
        tuple(getattr(config, field) for field in SHAPE_FIELDS),
        next(request.policy.parameters()).device,
        request.max_new_tokens,
        request.num_generations,
        len(request.prompts),
    )


def serve(requests: Sequence[SampleRequest]) -> tuple[list[Rollout], list[float]]:
    """Each request's rollout, and the seconds of sampling charged to each (a shared loop's time split evenly)."""
    groups: dict[object, list[int]] = {}
    for i, request in enumerate(requests):
        key = stack_key(request)
        groups.setdefault(("alone", i) if key is None else key, []).append(i)
    rollouts: list[Rollout | None] = [None] * len(requests)
    seconds = [0.0] * len(requests)
    for members in groups.values():
        started = time.perf_counter()
        if len(members) == 1:
            rollouts[members[0]] = requests[members[0]].sample()
        else:
            asked = [requests[i] for i in members]
            stack = StackedPolicies([request.policy for request in asked])
            sampled = sample_runs(
                stack, asked[0].tokenizer, [request.prompts for request in asked], asked[0].max_new_tokens,
                [request.temperature for request in asked], [request.generator for request in asked],
                asked[0].num_generations,
            )
            for i, rollout in zip(members, sampled):
                rollouts[i] = rollout
        share = (time.perf_counter() - started) / len(members)
        for i in members:
            seconds[i] += share
    return rollouts, seconds


def run_alone(phases: Generator[SampleRequest, Rollout, object]):
    """What a coroutine of sampling requests returns when each of its requests is sampled by itself."""
    try:
        request = next(phases)
        while True:
            request = phases.send(request.sample())
    except StopIteration as done:
        return done.value


def step_together(runs: Sequence[Steppable]) -> list[dict | Exception]:
    """One step of every run, in order: its record, or the exception that ended its step (the other runs go on).

    A record's `step_time` is the seconds of its own phases plus its share of the sampling it shared, and
    `tokens_per_second` its response tokens over that: what the step cost this run, alone or in company. A run
    that asks for no sample (offline DPO) steps in its turn."""
    phases = [run.step_phases() for run in runs]
    seconds = [0.0] * len(runs)
    outcomes: list[tuple[dict, int | None] | Exception | None] = [None] * len(runs)
    waiting: dict[int, SampleRequest] = {}

    def advance(r: int, rollout: Rollout | None) -> None:
        started = time.perf_counter()
        try:
            waiting[r] = phases[r].send(rollout)
        except StopIteration as done:
            outcomes[r] = done.value  # (record, response tokens)
        except Exception as error:  # noqa: BLE001 - this run's step failed; the caller ends this run only
            outcomes[r] = error
        finally:
            seconds[r] += time.perf_counter() - started

    for r in range(len(runs)):
        advance(r, None)
    while waiting:
        asked = sorted(waiting)
        requests = [waiting.pop(r) for r in asked]
        try:
            rollouts, sampling = serve(requests)
        except Exception as error:  # noqa: BLE001 - a shared loop failed: every run that asked of it ends
            for r in asked:
                phases[r].close()
                outcomes[r] = error
            continue
        for r, rollout, spent in zip(asked, rollouts, sampling):
            seconds[r] += spent
            advance(r, rollout)
    return [_timed(outcome, spent) for outcome, spent in zip(outcomes, seconds)]


def _timed(outcome: tuple[dict, int | None] | Exception, seconds: float) -> dict | Exception:
    """A finished step's record with its `step_time` (and `tokens_per_second`); an exception as it is."""
    if isinstance(outcome, Exception):
        return outcome
    record, tokens = outcome
    record["step_time"] = seconds
    if tokens is not None:  # None: a run that trains on no sampled tokens (offline DPO)
        record["tokens_per_second"] = tokens / seconds
    return record
