"""One training loop for a changing set of runs: the live lab's trainings interleave step by step, none queues
behind another's whole training.

`RunLoop.train(trainer, on_record)` hands a prepared trainer to the loop and blocks its caller until the run ends.
The loop is one thread that, each turn, takes in the runs that joined since the last turn, ends those that have
trained their steps or were stopped, and steps every other run once with `run_batch.step_together` (their
sampling requests stacked where they can be). A run's step that raises ends that run only; the others go on. A run
that joins while a turn is under way takes its first step in the next turn, so a turn of R runs costs about R of
their steps and a newly joined run waits at most one turn.

The thread starts with the first run and ends when the last has left. Preparing a run (building its models, an
SFT warm start) and evaluating it after its last step are left to the caller's thread, off the loop: the runs in
the loop go on stepping meanwhile.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from rl_core.engine.run_batch import step_together
from rl_core.runs.run_stream import stepped_out


@dataclass(eq=False)
class _Member:
    trainer: object  # a prepared Trainer or DPOTrainer
    on_record: Callable[[dict], None]
    elapsed: float = 0.0  # seconds of RL so far: the sum of its records' step_time
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def leave(self, error: BaseException | None = None) -> None:
        self.error = error
        self.done.set()


class RunLoop:
    """The loop's thread, started by the first run that joins and ended when none is left."""

    def __init__(self, name: str = "training-loop"):
        self.name = name
        self._lock = threading.Lock()
        self._joining: list[_Member] = []
        self._members: list[_Member] = []
        self._thread: threading.Thread | None = None

    @property
    def runs(self) -> int:
        """Runs in the loop or about to join it."""
        with self._lock:
            return len(self._members) + len(self._joining)

    def train(self, trainer, on_record: Callable[[dict], None]) -> None:
        """Step `trainer` in the loop until it has trained its steps or its stop event is set, then return; raise
        what ended its step otherwise (TrainingStopped for a Stop pressed mid-step).

        `on_record(record)` is called in the loop's thread after each of the run's steps, before its next one (a
        record carries `step_time` and `elapsed`, as `run_stream.batch_stream`'s do): it may read the run's models
        then, and whatever it raises ends this run only."""
        member = _Member(trainer, on_record)
        with self._lock:
            self._joining.append(member)
            if self._thread is None:
                self._thread = threading.Thread(target=self._turns, name=self.name, daemon=True)
                self._thread.start()
        member.done.wait()
        if member.error is not None:
            raise member.error

    def _turns(self) -> None:
        try:
            while self._turn():
                pass
        except BaseException as error:  # noqa: BLE001 - a fault of the loop itself: every run in it ends with it
            with self._lock:
                members, self._members = self._members + self._joining, []
                self._joining.clear()
                self._thread = None
            for member in members:
                member.leave(error)

    def _turn(self) -> bool:
        """One turn; False once no run is left (the thread then ends, and the next `train` starts another)."""
        with self._lock:
            self._members += self._joining
            self._joining.clear()
            for member in [m for m in self._members if stepped_out(m.trainer)]:
                self._members.remove(member)
                member.leave()
            if not self._members:
                self._thread = None
                return False
            stepping = list(self._members)
        for member, outcome in zip(stepping, step_together([m.trainer for m in stepping])):
            if not isinstance(outcome, Exception):
                member.elapsed += outcome["step_time"]
                outcome["elapsed"] = member.elapsed
                try:
                    member.on_record(outcome)
                    continue
                except Exception as error:  # noqa: BLE001 - this run's consumer failed (a full store): it ends
                    outcome = error
            with self._lock:
                self._members.remove(member)
            member.leave(outcome)
        return True
