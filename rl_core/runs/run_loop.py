"""One training loop for a changing set of runs: the live lab's trainings interleave step by step, none queues
behind another's whole training, and the CPU is shared per learner, not per run.

`RunLoop.train(trainer, on_record, learner, step_seconds)` hands a prepared trainer to the loop and blocks its caller
until the run ends. The loop is one thread that, each turn, takes in the runs that joined since the last turn, ends
those that have trained their steps or were stopped, chooses which runs step (`choose_turn`) and steps them with
`run_batch.step_together` (the runs of one shape as one group), on more threads than its own where it has them
(Threads, below). A run's step that raises ends that run only; the others go on. A run that joins while a turn is
under way takes its first step in the next turn.

Fair shares. A turn is time-boxed (`turn_seconds`) and split evenly among the learners with runs in the loop: each
learner's account earns `turn_seconds / learners` a turn (never more than one turn's share banked) and pays each of
its steps' seconds (`step_time`). A learner in credit steps its runs in rotation while the credit lasts, so twenty
runs of one learner move no faster together than one run of another learner, and a learner whose steps cost more
than its share steps every few turns instead of lengthening everyone's turn (deficit round robin). A share is never
less than the cheapest step in the loop, though: on a loaded machine ten learners' steps (timed by the clock) can
outlast the box together, and with smaller shares they would step in ever-changing subsets, each subset a new group
for `step_together` (new stacked weights, a smaller program) instead of one group of all.

Lanes. A run whose step costs more than the whole turn (its estimate before the first step, then its measured step
time) and far more than the other runs' (`goes_to_lane`) would hold every run of the loop for that long, so it steps
in a lane of its own, a thread beside the loop: after each of its updates (epoch × minibatch) and after each step it
waits `lane_pause` for the work since its last wait (`LanePacer`), so that it uses its learner's share of the time
and no more even within one long step (a step of 1,024 responses × 64 epochs ran for minutes and took a core from the
class meanwhile), and its seconds are charged to its learner's account as the loop's are. The work is its thread's
CPU seconds, not the wall they took: while the loop's thread steps its runs, the lane's thread waits for the
interpreter lock between its torch ops: a step of 128 updates (4.2 s alone) beside six learners' runs got 0.49 of a
core while it worked, and paced by that wall it waited as if it had worked twice what it had (89 updates in 40 s;
paced by its CPU, 188 and its first record after 27 s, where its share, 4.3 s × 7 learners, is 30 s). The class
bench's heavy run, told 262 s from its estimate, had no point 651 s later. A lane's run whose measured step no
longer goes to a lane beside the loop's measured runs (its first steps were slow on a busy machine, or the loop's
runs grew as costly) rejoins the loop after that step (`returns_from_lane`); beside no measured run it stays.

Threads. Runs of one shape step as one group (`run_batch.groups_of`), one program on the loop's thread. With
`threads` > 1 a turn of at least MIN_THREADED_RUNS runs may step on that many of torch's intra-op threads (each op's
arithmetic split over the cores, outside the interpreter lock; the Python between the ops stays on one), on the turns
where that is the faster (`ThreadsChoice`: the loop times its turns on one thread and on all, and keeps the faster;
a second thread pays only while a core is free). Torch's thread count is each thread's own: the loop sets its own
for the turn and gives it back after, and a lane sets its run's (`use_preset_threads`), since a thread started while
the loop held two would take two. Its runs' `step_time` is then the wall of a program on those cores: a turn's box
of `turn_seconds` is the loop's wall either way, and a lane's share of the time is `cores` cores' over the learners
(`lane_pause`), the cores the latest turn held (`cores`).

The thread starts with the first run and ends when the last has left. Preparing a run (building its models, an SFT
warm start) and evaluating it after its last step are left to the caller's thread, off the loop: the runs in the
loop go on stepping meanwhile.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field

import torch

from rl_core.engine.models import use_preset_threads
from rl_core.engine.run_batch import step_together
from rl_core.runs.run_stream import stepped_out
from rl_core.runs.store import max_trainings
from rl_core.runs.sweep import default_workers

# A turn's time box: twelve runs of the default presets (about 0.07 s a step on the reference CPU) fit in it, and a
# page's chart still gains a point about every second. A run whose step takes longer goes to a lane of its own.
TURN_SECONDS = 1.0
# How much of a step's newest measurement its running estimate takes (the first step is slower than the rest).
STEP_WEIGHT = 0.5
# Turns whose wall time `RunLoop.turn_wall` takes the median of, and runs whose wait for their first record
# `RunLoop.first_record_wall` does: the loop's pace now, not at its start.
TURNS_TIMED = 5
# First waits (a run's joining to its first record) the loop keeps, each with the company it joined with, and takes
# the median of the latest TURNS_TIMED of (`first_record_wall`): as many as a class's burst, so that the waits of
# runs with little company outlast it.
FIRST_WAITS_KEPT = 24
# The fewest runs a turn steps on more than one intra-op thread: a smaller group's ops are too small to split, and
# the second thread waits for work between them on a core of its own (a run alone: 14.3–21.4 steps/s on two threads
# against 14.1–20.8 on one, at twice the CPU seconds; ten runs: 4.4–5.3 against 3.5, bench/README.md,
# "live_loop_pace.py").
MIN_THREADED_RUNS = 4
# How many times the cheapest other run's step a run's step must cost, beyond a whole turn, to go to a lane
# (`goes_to_lane`). A turn alone is no test on a busy machine, where every run's step is slower alike: in a class of
# twenty at load 9, nine ordinary runs went to lanes (each measured slower than a turn while it stepped alone or
# among the first few), each then a program of one stepping beside the others, and the time those lanes charged
# their learners was five times what the loop's runs paid (bench/class_load.py). The runs a lane is for cost tens
# of times the others (the class bench's heavy link, 90×; the small model, 6.6× the tiny one).
LANE_RATIO = 4.0
# The environment variable that sets the app's loop threads (`loop_threads`).
THREADS_KNOB = "RLHF_LAB_LOOP_THREADS"


def loop_threads() -> int:
    """RLHF_LAB_LOOP_THREADS: the threads the app's loop steps its runs on at once; default the cores this process
    may use. A value that is not an integer ≥ 1 is refused by name."""
    return max_trainings(default_workers(), THREADS_KNOB)


# How the loop picks its threads each turn (`ThreadsChoice`): measured turns a setting needs before it is compared,
# and the turns after which the setting not chosen is tried again (the machine's other work comes and goes).
CHOICE_SAMPLES = 2
CHOICE_RETRY_TURNS = 40
# Turns whose cores `RunLoop.cores_ahead` averages: one cycle of the choice (the setting kept, then the other tried),
# so that the mean weighs each setting by the turns it holds, not by the one the latest turn happened to try.
CORES_TIMED = CHOICE_RETRY_TURNS + 2 * CHOICE_SAMPLES + 1


class ThreadsChoice:
    """Whether a turn's runs step on one thread or on all the loop's `threads`: whichever stepped them faster lately.

    A second thread pays only while a core is free: each op's share of the work waits for the other core, and
    where other work holds it, every op of the thousands in a step waits (bench/README.md, "live_loop_pace.py"). So
    the loop measures both: each setting's wall seconds per run stepped, over turns that stepped the same runs as
    the turn before (a turn of other runs builds its groups anew; a change of threads alone does not), the latest
    CHOICE_SAMPLES of each. A setting with fewer is tried (all threads first); then the faster by their medians is
    kept; CHOICE_RETRY_TURNS turns after they were compared, the other's measurements are dropped and it is tried
    again. A trial costs little where two threads lose: with one core held by other work, ten runs' turns took
    0.74–1.05 s on two threads against 0.26–0.39 s on one.
    Clock-free: the loop gives it the seconds."""

    def __init__(self, threads: int):
        self.threads = threads
        self._seconds: dict[int, deque[float]] = {setting: deque(maxlen=CHOICE_SAMPLES) for setting in {threads, 1}}
        self._last: tuple | None = None  # the runs the latest turn stepped
        self._compared_at: int | None = None  # the turn the settings were first compared on full measurements

    def choose(self, turn: int) -> int:
        """The threads turn number `turn` steps on."""
        if self.threads == 1:
            return 1
        for setting in (self.threads, 1):
            if len(self._seconds[setting]) < CHOICE_SAMPLES:
                return setting
        faster = min((self.threads, 1), key=lambda setting: statistics.median(self._seconds[setting]))
        if self._compared_at is None:
            self._compared_at = turn
        elif turn - self._compared_at >= CHOICE_RETRY_TURNS:
            other = 1 if faster == self.threads else self.threads
            self._seconds[other].clear()
            self._compared_at = None
            return other
        return faster

    def timed(self, runs: tuple, setting: int, seconds: float) -> None:
        """A turn that stepped `runs` (their identities) on `setting` threads in `seconds` of wall time."""
        if self._last == runs and runs:
            self._seconds[setting].append(seconds / len(runs))
        self._last = runs


def step_on_threads(runs: Sequence, threads: int) -> list[dict | Exception]:
    """`step_together(runs)` on `threads` of torch's intra-op threads (this thread's count, given back after), or
    the exception that ended it for each of them: a fault of the loop's step ends the runs it stepped, not the
    loop."""
    before = torch.get_num_threads()
    if threads != before:
        torch.set_num_threads(threads)
    try:
        return step_together(runs)
    except Exception as error:  # noqa: BLE001 - these runs end; the loop goes on with any others
        return [error] * len(runs)
    finally:
        if threads != before:
            torch.set_num_threads(before)


@dataclass(eq=False)
class _Member:
    trainer: object  # a prepared Trainer or DPOTrainer
    on_record: Callable[[dict], None]
    learner: Hashable  # whose share the run's steps spend
    step_seconds: float  # the estimate of its next step's cost: given at first, then measured
    measured: bool = False  # whether `step_seconds` is measured yet (it has stepped), not the estimate it joined with
    elapsed: float = 0.0  # seconds of RL so far: the sum of its records' step_time
    stepped_at: int = -1  # the turn of its latest step in the loop: its learner's rotation goes least recent first
    joined_at: float | None = None  # when it joined, until its first record in a turn (None in a lane)
    company: int | None = None  # the runs that joined with it, itself included (None: not known)
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def leave(self, error: BaseException | None = None) -> None:
        self.error = error
        self.done.set()


@dataclass
class _Account:
    """A learner's share: seconds it may still spend (negative: it overspent and sits out turns)."""

    credit: float = 0.0


def lane_pause(step_seconds: float, learners: int, cores: int = 1, wall_seconds: float | None = None) -> float:
    """Seconds a lane waits after work that used `step_seconds` of its thread's CPU over `wall_seconds` (None: the
    same; more where other threads held the interpreter or the cores), so that its run uses its learner's share of
    the loop's `cores` cores, cores/learners of a core (a lane is one thread: at most all of one):
    `step_seconds × max(learners / cores, 1) − wall_seconds`, at least 0."""
    wall = step_seconds if wall_seconds is None else wall_seconds
    return max(step_seconds * max(learners / cores, 1) - wall, 0.0)


def works_on_its_thread(trainer) -> bool:
    """Whether a run's work is its stepping thread's CPU time (`time.thread_time`): on the CPU with one torch
    thread (the tiny and small presets). An accelerator's kernels, or torch's other intra-op threads, work outside
    it, and a lane of such a run is paced by the wall."""
    device = getattr(trainer, "device", None)
    return (device is None or torch.device(device).type == "cpu") and torch.get_num_threads() == 1


class LanePacer:
    """The waits of a lane's run: called between its updates (`Trainer.share_pause`) and after its steps, it waits
    `lane_pause` of the CPU seconds its thread used since its last wait (`work_clock`) over the wall seconds they
    took (`clock`), at the learners' count and the loop's cores then, or until the run is stopped; returns the
    seconds it waited (which are not the step's cost). Made and called in the lane's thread (`time.thread_time`
    is the calling thread's)."""

    def __init__(
        self,
        learners: Callable[[], int],
        stop_event: threading.Event,
        clock: Callable[[], float],
        cores: Callable[[], int] = lambda: 1,
        work_clock: Callable[[], float] = time.thread_time,
    ):
        self.learners, self.stop_event, self.clock, self.cores = learners, stop_event, clock, cores
        self.work_clock = work_clock
        self.since, self.worked_since = clock(), work_clock()
        self.updates = 0  # its calls since the step under way began: its updates done (and one more once it ends)
        self.worked = 0.0  # the work seconds (`work_clock`) of the step's updates after its first

    def __call__(self) -> float:
        began, worked = self.clock(), self.work_clock()
        self.updates += 1  # done before its wait
        if self.updates > 1:
            self.worked += worked - self.worked_since
        pause = lane_pause(worked - self.worked_since, self.learners(), self.cores(), began - self.since)
        self.stop_event.wait(pause)
        self.since, self.worked_since = self.clock(), self.work_clock()
        return self.since - began

    def next_step(self) -> None:
        """The lane's step has ended and its wait after it too: the next step begins now."""
        self.updates, self.worked = 0, 0.0


def first_wait(waits: Iterable[tuple[float, int | None]], company: int | None) -> float | None:
    """The median of the latest TURNS_TIMED of `waits` (seconds, the company each run joined with, oldest first)
    whose company was `company` or less, else of the latest TURNS_TIMED whatever their company (`company` None, or
    none joined with so little); None if there are none."""
    waits = list(waits)
    few = [seconds for seconds, joined_with in waits if None not in (company, joined_with) and joined_with <= company]
    latest = (few or [seconds for seconds, _ in waits])[-TURNS_TIMED:]
    return statistics.median(latest) if latest else None


def goes_to_lane(step_seconds: float, others: Sequence[float], turn_seconds: float) -> bool:
    """Whether a run whose step costs `step_seconds` steps in a lane of its own beside runs whose steps were
    measured at `others`: more than `turn_seconds` and more than LANE_RATIO × the cheapest of `others`. A run with
    no others measured to compare with is judged by `step_seconds` against the turn alone: give it the estimate it
    joined with, not a measurement (a lone run's step on a busy machine says more of the machine than of the run)."""
    return step_seconds > turn_seconds and (not others or step_seconds > LANE_RATIO * min(others))


def returns_from_lane(step_seconds: float, others: Sequence[float], turn_seconds: float) -> bool:
    """Whether a run stepping in a lane, its step measured at `step_seconds`, rejoins the loop whose runs' steps
    were measured at `others`: there are some, and beside them its step would not go to a lane (`goes_to_lane`).
    Beside none it stays: the loop's next runs would otherwise wait for its whole step in their first turn."""
    return bool(others) and not goes_to_lane(step_seconds, others, turn_seconds)


def choose_turn(
    members: Sequence[_Member], accounts: dict[Hashable, _Account], turn_seconds: float, turn: int
) -> list[_Member]:
    """The runs that step in turn number `turn`, a turn of `turn_seconds` of steps' seconds. The learners with runs
    in `members` (in the order of their first run) each earn a share, `turn_seconds / learners` or the cheapest
    `step_seconds` of `members` if that is more, their credit capped at it; a learner in credit then takes its runs
    in rotation (the least recently stepped first), each at its `step_seconds`, until its credit is spent (at least
    one run once it is in credit).

    Where every learner is still in debt after earning (steps that took longer than estimated, as when the load
    rises), every learner earns again until one is in credit: a turn in which nobody would step is skipped, not
    run. Run, it took no time, and the loop's pace (`RunLoop.turn_wall`, the median of recent turns) would read it
    as a turn as quick as nothing, announcing waits shorter than they are."""
    by_learner: dict[Hashable, list[_Member]] = {}
    for member in members:
        by_learner.setdefault(member.learner, []).append(member)
    share = max(turn_seconds / len(by_learner), min(member.step_seconds for member in members))
    chosen: list[_Member] = []
    while not chosen:  # ends: a learner's credit reaches `share` > 0 after at most (its debt / share) + 1 rounds
        for learner, runs in by_learner.items():
            account = accounts.setdefault(learner, _Account())
            account.credit = min(account.credit + share, share)
            budget = account.credit
            for member in sorted(runs, key=lambda run: run.stepped_at):  # a stable sort: ties in the loop's order
                if budget <= 0:
                    break
                chosen.append(member)
                member.stepped_at = turn
                budget -= member.step_seconds
    return [member for member in members if member in chosen]  # the loop's own order, for stable batches


class RunLoop:
    """The loop's thread, started by the first run that joins and ended when none is left, stepping a turn's runs on
    one of torch's intra-op threads or `threads` (`ThreadsChoice`); and the lanes of runs whose steps cost more than
    a turn."""

    def __init__(
        self,
        name: str = "training-loop",
        turn_seconds: float = TURN_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        threads: int = 1,
        sharing: Callable[[], int] | None = None,
    ):
        if not (isinstance(threads, int) and threads >= 1):
            raise ValueError(f"threads={threads!r} is out of range; allowed: an integer ≥ 1")
        self.name = name
        # The learners whose shares a lane's run leaves them (`lane_sharing`): the server's count, which knows of
        # learners whose runs are still on their way to the loop; None: the loop's own (`learners`).
        self._sharing = sharing
        self.turn_seconds = turn_seconds
        self.threads = threads
        self._choice = ThreadsChoice(threads)
        self._cores = 1  # the intra-op threads the latest turn stepped on: the cores the loop's time is now
        # The cores of the latest turns that stepped MIN_THREADED_RUNS runs or more (`cores_ahead`).
        self._choosing_cores: deque[int] = deque(maxlen=CORES_TIMED)
        self._clock = clock  # seconds, monotonic; injectable for tests
        self._turn_began: float | None = None  # when the turn under way began (None: the thread is idle)
        self._turn_walls: deque[float] = deque(maxlen=TURNS_TIMED)  # wall seconds of the latest whole turns
        self._intake_walls: deque[float] = deque(maxlen=TURNS_TIMED)  # the same of the latest that took runs in
        # The latest runs' joining to first record, each with its company (`first_record_wall`).
        self._first_walls: deque[tuple[float, int | None]] = deque(maxlen=FIRST_WAITS_KEPT)
        self._turn_took_in = False  # whether the turn under way took in runs (its group built anew)
        self._lock = threading.Lock()
        self._joining: list[_Member] = []
        self._members: list[_Member] = []
        self._lanes: list[_Member] = []
        self._accounts: dict[Hashable, _Account] = {}
        self._turn_number = 0
        self._thread: threading.Thread | None = None

    @property
    def runs(self) -> int:
        """Runs in the loop, in lanes, or about to join."""
        with self._lock:
            return len(self._members) + len(self._joining) + len(self._lanes)

    @property
    def learners(self) -> int:
        """Learners with a run in the loop, in a lane or about to join: each has 1/learners of the time."""
        with self._lock:
            return self._learner_count()

    def lane_sharing(self) -> int:
        """The learners a lane's pauses leave their shares to (`LanePacer`): those in the loop, and those the server
        counts (`sharing`), whose runs may still be building their warm starts or preparing outside it. Paced for
        the loop's alone, a class's heavy run took a whole core while the class's warm starts built beside it, and
        their steps slowed by a third once it began (bench/class_load.py)."""
        return max(self.learners, self._sharing()) if self._sharing is not None else self.learners

    @property
    def turn_wall(self) -> float | None:
        """Wall seconds a turn of the loop takes now, from one turn's start to the next's (its runs' steps, their
        records handed over, and whatever else the process ran meanwhile): the median of the latest TURNS_TIMED
        that took in no run (one that does builds its stacked group anew: a class joining one by one made turns of
        the joining runs several times as long as the turns after, and a latecomer was told 19 s for 5); None
        before such a turn was timed."""
        with self._lock:
            return statistics.median(self._turn_walls) if self._turn_walls else None

    @property
    def intake_wall(self) -> float | None:
        """Wall seconds a turn that takes runs in takes now (it builds its stacked group anew): the median of the
        latest TURNS_TIMED such turns; None before one was timed."""
        with self._lock:
            return statistics.median(self._intake_walls) if self._intake_walls else None

    def first_record_wall(self, company: int | None = None) -> float | None:
        """Wall seconds from a run's joining the loop (`train`) to its first record being handed over: the median
        of the latest TURNS_TIMED runs' that stepped in a turn and joined with `company` runs or fewer (itself
        included), else of the latest TURNS_TIMED runs' whatever their company (`company` None, or none joined with
        so little); None before one did. Timed whole, since no sum of turns came to it: a run joins while a turn is
        under way, more often a long one than a short one (a class's runs joining one by one made the turns that
        took them in several times as long as the others), then waits for the turn that takes it in, which forms the
        group anew, and its first step is slower than its next. From the turns' walls a latecomer was told 1 s for
        3.1 s, and runs joining a loop of eleven 2 s for 5–6 s (bench/class_load.py). By company, not scaled by it as
        preparations are (`rl_core.runs.crowd`): the turn that takes runs in builds one group of the whole loop
        however many it takes in, and the waits of a class of eight's runs were 1.7–3.5 s at turns of 0.6–0.7 s.
        But a class's runs joining together wait behind the turns that take in the ones before them: after such a
        burst two of three runs joining well after it were told its 9 s for 2.7 and 3.0 s (load 4.4)."""
        with self._lock:
            return first_wait(self._first_walls, company)

    @property
    def awaiting_first(self) -> int:
        """Runs that joined the loop and have not had their first record yet: taken in by the turn under way or
        the next."""
        with self._lock:
            return len(self._joining) + sum(member.joined_at is not None for member in self._members)

    @property
    def cores(self) -> int:
        """The intra-op threads the loop's latest turn stepped on: the cores its time is (1 when idle)."""
        with self._lock:
            return self._cores

    def cores_ahead(self, runs: int) -> float:
        """The cores the loop's time will be over the coming turns while it steps `runs` runs: 1 on one thread or
        under MIN_THREADED_RUNS; else the mean of the latest CORES_TIMED turns that stepped that many, once there
        are as many (a whole cycle of `ThreadsChoice`: the setting kept, then the other tried), and before that
        (1 + threads) / 2, the middle of what the choice may keep. For estimates that span many turns, as a lane's
        pauses do (`LanePacer` follows the loop's cores turn by turn). A class's heavy run, estimated while the loop
        stepped two or three runs on one thread, was told 313 s, and once its class's nineteen stepped on two threads
        came after 194 s; estimated from the class's first turns, which try two threads first, it was told 157 s,
        and the loop then kept one: 283 s (bench/class_load.py, load 4 on 2 cores). The middle is within 1.5× of
        either end."""
        if self.threads == 1 or runs < MIN_THREADED_RUNS:
            return 1.0
        with self._lock:
            if len(self._choosing_cores) < CORES_TIMED:
                return (1 + self.threads) / 2
            return statistics.fmean(self._choosing_cores)

    def lane_progress(self, trainer) -> tuple[int, float] | None:
        """For a run stepping in a lane of its own: the updates its step under way has done after its first, and
        their work seconds (its thread's CPU, `LanePacer.work_clock`), not the waits between them; None for any
        other run. Their work, not their wall: the wall follows the learners sharing the loop then, and a heavy
        run whose step began while its class's runs built their warm starts outside it was told 35 s from its
        first updates' pace, and drew its point 195 s later. Not from the step's start: its sampling comes before
        its first update, and a step of 1,024 responses took 0.42 CPU-s to the end of its first update and 0.07
        for each of the 255 after."""
        with self._lock:
            if not any(member.trainer is trainer for member in self._lanes):
                return None
        pace = trainer.share_pause
        return (max(pace.updates - 1, 0), pace.worked) if isinstance(pace, LanePacer) else None

    def steps_in_lane(self, step_seconds: float, trainer=None) -> bool:
        """Whether `trainer` steps in a lane of its own: it does, or it has not had a turn yet and a step estimated
        at `step_seconds` would go to one beside the loop's runs now (`goes_to_lane`)."""
        with self._lock:
            if any(member.trainer is trainer for member in self._lanes):
                return True
            if any(member.trainer is trainer for member in self._members):
                return False
            return self._goes_to_lane(step_seconds, measured=False)

    def _goes_to_lane(self, step_seconds: float, measured: bool, member: _Member | None = None) -> bool:
        """`goes_to_lane` of a step of `step_seconds` (`measured`, or the estimate a run joined with) beside the
        loop's runs but `member` that have stepped (under the lock); a run alone, or beside runs that have not, by
        its estimate until it is measured beside others."""
        others = self._measured_steps(but=member)
        if not others and measured:
            return False  # measured alone: its estimate, which it did not go to a lane by, still stands
        return goes_to_lane(step_seconds, others, self.turn_seconds)

    def _measured_steps(self, but: _Member | None = None) -> list[float]:
        """The step seconds of the loop's runs but `but` that have stepped: what a run's step is compared with for
        a lane (under the lock)."""
        return [other.step_seconds for other in self._members if other is not but and other.measured]

    def _learner_count(self) -> int:
        return len({member.learner for member in (*self._members, *self._joining, *self._lanes)})

    def train(
        self,
        trainer,
        on_record: Callable[[dict], None],
        learner: Hashable | None = None,
        step_seconds: float = 0.0,
        company: int | None = None,
    ) -> None:
        """Step `trainer` in the loop until it has trained its steps or its stop event is set, then return; raise
        what ended its step otherwise (TrainingStopped for a Stop pressed mid-step).

        `learner` names whose share it spends (None: a learner of its own); `step_seconds` is the estimate of a
        step's cost until one is measured (`goes_to_lane` of it: it steps in a lane from the start); `company` the
        runs joining the loop with it, itself included, which its wait for its first record is kept with
        (`first_record_wall`).

        `on_record(record)` is called in the loop's (or the lane's) thread after each of the run's steps, before its
        next one (a record carries `step_time` and `elapsed`, as `run_stream.batch_stream`'s do): it may read the
        run's models then, and whatever it raises ends this run only."""
        member = _Member(trainer, on_record, object() if learner is None else learner, step_seconds)
        member.joined_at, member.company = self._clock(), company
        with self._lock:
            self._join(member)
        member.done.wait()
        if member.error is not None:
            raise member.error

    def _join(self, member: _Member) -> None:
        """`member` joins the loop at its next turn, the loop's thread started if it was idle (under the lock)."""
        self._joining.append(member)
        if self._thread is None:
            self._thread = threading.Thread(target=self._turns, name=self.name, daemon=True)
            self._thread.start()

    def _turns(self) -> None:
        try:
            while self._turn():
                pass
        except BaseException as error:  # noqa: BLE001 - a fault of the loop itself: every run in it ends with it
            with self._lock:
                members, self._members = self._members + self._joining, []
                self._joining.clear()
                self._thread, self._turn_began, self._cores = None, None, 1
            for member in members:
                member.leave(error)

    def _turn(self) -> bool:
        """One turn; False once no run is left in the loop (the thread then ends, and the next `train` starts
        another; lanes go on by themselves)."""
        with self._lock:
            took_in = bool(self._joining)
            for member in self._joining:
                self._members.append(member)
            self._joining.clear()
            for member in [m for m in self._members if stepped_out(m.trainer)]:
                self._members.remove(member)
                member.leave()
            for member in [m for m in self._members if self._goes_to_lane(m.step_seconds, m.measured, m)]:
                self._to_lane(member)
            present = {member.learner for member in (*self._members, *self._lanes)}
            for learner in [key for key in self._accounts if key not in present]:  # a learner who left
                del self._accounts[learner]
            if not self._members:
                self._thread, self._turn_began, self._cores = None, None, 1
                return False
            began, self._turn_began = self._turn_began, self._clock()
            if began is not None:
                (self._intake_walls if self._turn_took_in else self._turn_walls).append(self._turn_began - began)
            self._turn_took_in = took_in
            self._turn_number += 1
            stepping = choose_turn(self._members, self._accounts, self.turn_seconds, self._turn_number)
            choosing = self.threads > 1 and len(stepping) >= MIN_THREADED_RUNS  # else one thread
            threads = self._choice.choose(self._turn_number) if choosing else 1
            self._cores = threads
            if choosing:
                self._choosing_cores.append(threads)
        began_stepping = self._clock() if choosing else 0.0
        outcomes = step_on_threads([member.trainer for member in stepping], threads)
        if choosing:
            self._choice.timed(tuple(id(member) for member in stepping), threads, self._clock() - began_stepping)
        for member, outcome in zip(stepping, outcomes):
            if member.joined_at is not None and not isinstance(outcome, Exception):
                with self._lock:
                    self._first_walls.append((self._clock() - member.joined_at, member.company))
                member.joined_at = None
            if not self._took(member, outcome):
                with self._lock:
                    self._members.remove(member)
        return True

    def _took(self, member: _Member, outcome: dict | Exception) -> bool:
        """Account for one step's outcome and hand its record over; False if it ended the run (it has left)."""
        if not isinstance(outcome, Exception):
            member.elapsed += outcome["step_time"]
            outcome["elapsed"] = member.elapsed
            member.step_seconds += STEP_WEIGHT * (outcome["step_time"] - member.step_seconds)
            member.measured = True
            with self._lock:
                self._accounts.setdefault(member.learner, _Account()).credit -= outcome["step_time"]
            try:
                member.on_record(outcome)
                return True
            except Exception as error:  # noqa: BLE001 - this run's consumer failed (a full store): it ends
                outcome = error
        member.leave(outcome)
        return False

    def _to_lane(self, member: _Member) -> None:
        """Move a run from the loop to a lane of its own (under the lock)."""
        self._members.remove(member)
        member.joined_at = None  # its first record comes after a step of its own, which no turn times
        self._lanes.append(member)
        threading.Thread(target=self._lane, args=(member,), name=f"{self.name}-lane", daemon=True).start()

    def _lane(self, member: _Member) -> None:
        """Step one run by itself, pausing between its updates and after each step for the other learners' shares
        (`LanePacer`), until it ends."""
        run = getattr(member.trainer, "run", None)
        if hasattr(run, "model"):  # this thread's own torch threads: the run's, not the count the process set last
            use_preset_threads(run.model, member.trainer.device)
        work = time.thread_time if works_on_its_thread(member.trainer) else self._clock
        pace = LanePacer(self.lane_sharing, member.trainer.stop_event, self._clock, lambda: self.cores, work)
        member.trainer.share_pause = pace
        try:
            while not stepped_out(member.trainer):
                outcome = step_together([member.trainer])[0]
                if not self._took(member, outcome) or self._left_lane(member):
                    return
                pace()
                pace.next_step()
            member.leave()
        except BaseException as error:  # noqa: BLE001 - a fault of the lane itself ends its run
            member.leave(error)
        finally:
            with self._lock:
                if member in self._lanes:  # not when it rejoined the loop
                    self._leave_lane(member)

    def _left_lane(self, member: _Member) -> bool:
        """Whether the lane's run has rejoined the loop after its step (`returns_from_lane`): then it steps in the
        loop's next turn, unpaced by the lane, which ends."""
        with self._lock:
            returns = returns_from_lane(member.step_seconds, self._measured_steps(), self.turn_seconds)
            if stepped_out(member.trainer) or not returns:
                return False
            self._leave_lane(member)  # before it joins: the loop's turns must find it unpaced
            self._join(member)
            return True

    def _leave_lane(self, member: _Member) -> None:
        """`member` is no longer paced as a lane nor counted among the lanes (under the lock)."""
        member.trainer.share_pause = None
        self._lanes.remove(member)
