"""Training as a stream of items, and the one place where a sweep's stream is written to the run store.

Wherever a batch of runs trains (a sweep's worker process, a task on a Ray cluster), the training is
`batch_stream(trainers)` (`rl_core.engine.run_batch`), a generator of plain dicts, each tagged with its run's place in
the batch (the app's live loop, `rl_core.runs.run_loop`, whose set of runs changes, uses the same pieces:
`prepared_items` before a run joins, `end_item` after it leaves):

* `{PHASE: [phase, done, total]}` while `Trainer.prepare()` builds the reward model, SFT policy and critic,
* `{SETUP: {...}}` once, what `prepare()` returned,
* each step's record (it has `"step"`, and `"elapsed"`, seconds of RL so far, for "time to 90 %"),
* `{END: "finished", "final": {...}}` (the evaluation after the last step) or `{END: "stopped"}`.

* `{FAILED: error}` instead of an END when the run failed; the batch's other runs go on (`one_run`, for a batch of
  one, raises the error instead).

The runs of a batch train together, a step of each at a time; each run's items are the items it yields alone.
Plain dicts cross a process or a machine as they are (pickled by a process pool or by Ray), so the coordinator sees
the same items whether the runs trained beside it or on another machine, and `store_batch` writes them.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from rl_core.config import DPOConfig, RewardConfig, RunConfig
from rl_core.engine.preference_optimisation import DPOTrainer
from rl_core.engine.reward_model_run import RewardModelTrainer
from rl_core.engine.run_batch import evaluate_together, step_together
from rl_core.engine.trainer import Trainer, TrainingStopped
from rl_core.messages import brief
from rl_core.runs.store import RunStore

PHASE, SETUP, END, FAILED = "phase", "setup", "end", "failed"
# What a person reads for each phase `Trainer.prepare()` reports (a progress bar's label, a page's status line).
SETUP_PHASES = {
    "reward": "reward model",
    "sft": "SFT warm start",
    "teacher": "teacher",
    "value_pretrain": "value pretraining",
}


class RunInterrupted(Exception):
    """The process that trained the run went away mid-run (a killed Ray worker, a lost node): the run ends as
    interrupted, not failed, and can be trained again."""


def trainer_for(
    run: RunConfig, cache_dir: Path | None = None, stop_event=None
) -> Trainer | DPOTrainer | RewardModelTrainer:
    """The trainer of the run's kind: `DPOTrainer` for an offline DPO or IPO run (`algo` a `DPOConfig`),
    `RewardModelTrainer` for a reward-model fit (a `RewardConfig`), else `Trainer`."""
    kind = {DPOConfig: DPOTrainer, RewardConfig: RewardModelTrainer}.get(type(run.algo), Trainer)
    return kind(run, cache_dir=cache_dir, stop_event=stop_event or threading.Event())


def one_run(items: Iterator[tuple[int, dict]]) -> Iterator[dict]:
    """The items of a batch of one run, untagged, its failure raised."""
    for _, item in items:
        if FAILED in item:
            raise item[FAILED]
        yield item


def batch_training_stream(
    runs: Sequence[RunConfig], cache_dir: Path | None = None, stop_event=None
) -> Iterator[tuple[int, dict]]:
    """Train `runs` as one batch and yield `(place in the batch, item)`; `stop_event` ends them all."""
    stop_event = stop_event or threading.Event()
    yield from batch_stream([trainer_for(run, cache_dir, stop_event) for run in runs])


def batch_stream(trainers: Sequence[Trainer | DPOTrainer]) -> Iterator[tuple[int, dict]]:
    """Prepare each trainer, then step them together until each has trained its steps or is stopped; yields
    `(place in the batch, item)`, each run's items as the module docstring lists them.

    A record's "elapsed" is the seconds of RL the run has cost so far (the sum of its `step_time`): the time the
    consumer spends between two items (writing the store, a live view's own passes) is left out."""
    ready = []
    for r, trainer in enumerate(trainers):
        try:
            for item in prepared_items(trainer):
                yield r, item
            ready.append(r)
        except TrainingStopped:
            yield r, {END: "stopped"}
        except Exception as error:  # noqa: BLE001 - this run ends; the others of the batch go on
            yield r, {FAILED: error}
    elapsed = dict.fromkeys(ready, 0.0)
    while ready:
        # A run ends as soon as it has trained its steps (or is stopped), not when the batch's longest run does; the
        # runs that end together are evaluated together.
        ending = [r for r in ready if stepped_out(trainers[r])]
        for r, item in zip(ending, end_items([trainers[r] for r in ending])):
            ready.remove(r)
            yield r, item
        if not ready:
            break
        stepping = list(ready)
        for r, outcome in zip(stepping, step_together([trainers[r] for r in stepping])):
            if isinstance(outcome, Exception):
                ready.remove(r)
                yield r, {END: "stopped"} if isinstance(outcome, TrainingStopped) else {FAILED: outcome}
                continue
            elapsed[r] += outcome["step_time"]
            outcome["elapsed"] = elapsed[r]
            yield r, outcome


def stepped_out(trainer: Trainer | DPOTrainer) -> bool:
    """Trained its steps, or stopped: the run leaves its batch (or the live loop) before the next step, and its
    `end_item` comes next."""
    return trainer.step_index >= trainer.run.steps or trainer.stop_event.is_set()


def end_items(trainers: Sequence[Trainer | DPOTrainer]) -> list[dict]:
    """The items that end runs which stepped without failing: stopped early, or finished with their evaluation
    (`run_batch.evaluate_together`: the finished runs' policies of one shape sampled as one program), or FAILED
    where the evaluation failed, as a failed step."""
    evaluated = iter(evaluate_together([t for t in trainers if t.step_index >= t.run.steps]))
    items = []
    for trainer in trainers:
        if trainer.step_index < trainer.run.steps:  # the stop event ended it early
            items.append({END: "stopped"})
            continue
        outcome = next(evaluated)
        if isinstance(outcome, Exception):
            items.append({FAILED: outcome})
        else:
            items.append({END: "finished", "final": outcome})
    return items


def end_item(trainer: Trainer | DPOTrainer) -> dict:
    """`end_items` of one run."""
    return end_items([trainer])[0]


def prepared_items(trainer: Trainer | DPOTrainer) -> Iterator[dict]:
    """`trainer.prepare()` with its progress as PHASE items, then its SETUP item.

    `prepare` reports through a callback, so it runs in a thread that hands its reports over; only the latest
    report waiting is yielded (an SFT warm start reports every step, and a remote caller needs only the newest)."""
    items: queue.Queue = queue.Queue()

    def prepare() -> None:
        try:
            items.put({SETUP: trainer.prepare(lambda phase, done, total: items.put({PHASE: [phase, done, total]}))})
        except BaseException as error:  # noqa: BLE001 - raised again in the generator's own thread
            items.put(error)

    threading.Thread(target=prepare, name="prepare", daemon=True).start()
    while True:
        item = items.get()
        while not isinstance(item, BaseException) and PHASE in item and not items.empty():
            item = items.get()
        if isinstance(item, BaseException):
            raise item
        yield item
        if SETUP in item:
            return


def store_batch(store: RunStore, run_ids: Sequence[int], items: Iterator[tuple[int, dict]]) -> None:
    """Write a claimed batch's stream (`batch_stream`'s `(place, item)` pairs) to the store: each step as it comes,
    each run's end as its END or FAILED item arrives (failed with its message kept).

    A stream that raises ends every run not yet ended: TrainingStopped as stopped, RunInterrupted as interrupted,
    anything else as failed."""
    ended: set[int] = set()
    ending = ("stopped", None)  # a stream that ends without a run's END item was cut short
    try:
        for r, item in items:
            if "step" in item:
                store.add_step(run_ids[r], item)
            elif END in item:
                store.finish_run(run_ids[r], item[END], final=item.get("final"))
                ended.add(r)
            elif FAILED in item:
                store.finish_run(run_ids[r], "failed", error=_failure(item[FAILED]))
                ended.add(r)
    except TrainingStopped:
        pass
    except RunInterrupted as interrupted:
        ending = ("interrupted", brief(str(interrupted)))
    except Exception as failure:  # noqa: BLE001 - the store keeps the message; a sweep goes on with other runs
        ending = ("failed", _failure(failure))
    for r, run_id in enumerate(run_ids):
        if r not in ended:
            store.finish_run(run_id, ending[0], error=ending[1])


def _failure(error: Exception) -> str:
    return brief(f"{type(error).__name__}: {error}")
