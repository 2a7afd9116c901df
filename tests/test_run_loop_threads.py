"""Real runs stepped by the live loop on two of torch's intra-op threads (`rl_core.runs.run_loop.step_on_threads`) train
as they do in one group on one: the same records to 1e-5 (the tolerance of a group against alone,
tests/test_run_batch.py), and the stacked group is stepped again turn after turn, not stacked anew."""

import torch

import rl_core.runs.run_loop
from rl_core.algorithms import get_run_algo
from rl_core.config import RunConfig
from rl_core.engine.run_batch import step_together
from rl_core.runs.run_loop import RunLoop
from rl_core.runs.run_stream import trainer_for
from tests.test_run_batch import TIMING, close
from tests.test_run_loop import joined_while_held
from toy_tasks import DEFAULT_TASK

STEPS = 2
# Eight GRPO runs of one shape, other seeds and clip ranges: on two threads, one group on two intra-op threads.
RUNS = [
    RunConfig(
        algo=get_run_algo("grpo", epsilon=0.2 + 0.01 * k), task=DEFAULT_TASK, steps=STEPS, seed=k % 2, sft_steps=40
    )
    for k in range(8)
]


def prepared(cache) -> list:
    trainers = [trainer_for(run, cache) for run in RUNS]
    for trainer in trainers:
        trainer.prepare()
    return trainers


def without_timing(record: dict) -> dict:
    return {key: value for key, value in record.items() if key not in TIMING}


def test_runs_on_two_intra_op_threads_give_the_records_of_one_thread(tmp_path, monkeypatch):
    one_group = prepared(tmp_path)
    assert torch.get_num_threads() == 1  # the tiny preset's, set as the trainers were built
    expected = [[] for _ in RUNS]
    for _ in range(STEPS):
        for records, record in zip(expected, step_together(one_group)):
            records.append(without_timing(record))

    stepped = []  # per step: the intra-op threads it ran on, its runs' groups after it

    def watched(runs):
        outcomes = step_together(runs)
        stepped.append((torch.get_num_threads(), [getattr(run, "group", None) for run in runs]))
        for outcome in outcomes:
            outcome["step_time"] = 0.01  # every learner in credit every turn, whatever the machine's load
        return outcomes

    monkeypatch.setattr(rl_core.runs.run_loop, "step_together", watched)
    trainers = prepared(tmp_path)
    outcomes = joined_while_held(RunLoop(threads=2), trainers)
    for k, outcome in enumerate(outcomes):
        assert outcome["ended"] == "returned", k
        close([without_timing(record) for record in outcome["records"]], expected[k], path=f"run {k}")
    # After the holder's turn, two turns of the eight on two threads, one group, stacked in the first turn and
    # stepped again in the next.
    turns = stepped[1:]
    assert [threads for threads, _ in turns] == [2] * STEPS
    groups = {group for _, runs in turns for group in runs}
    assert len(groups) == 1 and list(next(iter(groups)).trainers) == trainers
