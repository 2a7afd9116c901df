"""One training loop for a changing set of runs: the live lab's trainings interleave step by step, none queues
behind another's whole training, and the CPU is shared per learner, not per run.

`RunLoop.train(trainer, on_record, learner, step_seconds)` hands a prepared trainer to the loop and blocks its caller
until the run ends. The loop is one thread that, each turn, takes in the runs that joined since the last turn, ends
those that have trained their steps or were stopped, chooses which runs step (`choose_turn`) and steps them with
`run_batch.step_together` (the runs of one shape as one group), on more threads than its own where it has them
(Threads, below). A run's step that raises ends that run only; the others go on. A run that joins while a turn is
under way takes its first step in the next turn.

Fair shares. A turn is time-boxed (`turn_seconds`) and split evenly among the learners with runs in the loop:
each learner's account earns `turn_seconds / learners` a turn (× the parts stepped at once, Threads below; never
more than one turn's share banked) and pays each of its steps' seconds (`step_time`). A learner in credit steps its
runs in rotation while the credit lasts, so twenty runs of one learner move no faster together than one run of
another learner, and a learner whose steps cost more than its share steps every few turns instead of lengthening
everyone's turn (deficit round robin). A share is never less than the cheapest step in the loop, though: on a
loaded machine ten learners' steps (timed by the clock) can outlast the box together, and with smaller shares they
would step in ever-changing subsets, each subset a new group for `step_together` (new stacked weights, a smaller
program) instead of one group of all.

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

Threads. Runs of one shape step as one group (`run_batch.groups_of`), and a group is one thread's work: with
`threads` > 1 the loop steps a turn's runs as parts on that many threads at once (`cut`: each shape a part, the
largest cut into contiguous parts of near-equal size while each keeps MIN_PART_RUNS runs), its own thread taking the
first part and a pool of `threads` − 1 the others, on the turns where that is the faster (`ThreadsChoice`: the loop
times its turns on one thread and on all, and keeps the faster; a second thread pays only while a core is free).
The cut depends only on the turn's runs, so the same runs give
the same parts turn after turn and each part's group is stepped again, not stacked anew. A part whose step raises
ends its own runs; the records are handed over in the loop's thread, in the loop's order, once every part is done.
With K parts at once a turn holds K cores' seconds of steps (`step_time` is a part's seconds shared among its runs),
so the accounts earn K × `turn_seconds` a turn between them (`choose_turn`), K the parts all the loop's runs make,
and a lane's share of the time is K' cores' over the learners (`lane_pause`), K' the parts the turn's chosen runs
make (`parts`): fewer where a turn takes only some of the runs.

The thread (and its pool) starts with the first run and ends when the last has left. Preparing a run (building its
models, an SFT warm start) and evaluating it after its last step are left to the caller's thread, off the loop: the
runs in the loop go on stepping meanwhile.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from rl_core.engine.run_batch import groups_of, step_together
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
# The fewest runs of one shape a part stepped on a thread of its own keeps: a group's step has a fixed cost (its
# ops' dispatch, its Python, under the interpreter lock) that a cut pays once more per part (per run, a group of 2
# costs about 0.75× a run alone, of 4 0.55×), so a smaller part would spend its core mostly on that cost
# (bench/README.md, "live_loop_pace.py").
MIN_PART_RUNS = 4
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


def cut(runs: Sequence, threads: int, min_part: int = MIN_PART_RUNS) -> list[list[int]]:
    """The parts `runs` step in at once, each on a thread: lists of positions of `runs`. One thread: one part of
    them all (`step_together` groups it by shape). More: each shape (`groups_of`) a part, and while the parts are
    fewer than `threads`, the shape with the largest parts (the first of equals) is cut into one part more, if each
    then keeps `min_part` runs: n runs in k parts are k contiguous slices, the first n mod k of them ⌊n/k⌋ + 1 runs
    and the rest ⌊n/k⌋. The same runs in the same order give the same parts."""
    if threads <= 1:
        return [list(range(len(runs)))]
    shapes = groups_of(runs)
    counts = [1] * len(shapes)
    while sum(counts) < threads:
        cuttable = [i for i, shape in enumerate(shapes) if len(shape) // (counts[i] + 1) >= min_part]
        if not cuttable:
            break
        counts[max(cuttable, key=lambda i: len(shapes[i]) / counts[i])] += 1
    parts = []
    for shape, k in zip(shapes, counts):
        size, larger = divmod(len(shape), k)
        start = 0
        for j in range(k):
            end = start + size + (j < larger)
            parts.append(shape[start:end])
            start = end
    return parts


# How the loop picks its threads each turn (`ThreadsChoice`): measured turns a setting needs before it is compared,
# and the turns after which the setting not chosen is tried again (the machine's other work comes and goes).
CHOICE_SAMPLES = 2
CHOICE_RETRY_TURNS = 40
# Turns whose parts `RunLoop.mean_parts` averages: one cycle of the choice (the setting kept, then the other tried),
# so that the mean weighs each setting by the turns it holds, not by the one the latest turn happened to try.
PARTS_TIMED = CHOICE_RETRY_TURNS + 2 * CHOICE_SAMPLES + 1


class ThreadsChoice:
    """Whether a turn's runs step on one thread or on all the loop's `threads`: whichever stepped them faster lately.

    A second thread pays only while a core is free. A tiny run's step is thousands of ops of microseconds that take
    the interpreter lock back after each, so two parts on two threads of a busy machine take turns on one core
    and cost more than one group (ten learners stepped at 0.19–0.21 of their pace alone on two threads at load 2–4,
    0.20–0.26 on one; on a quiet machine 0.32–0.33 against 0.24–0.27: bench/README.md, "live_loop_pace.py"). So
    the loop measures both: each setting's wall seconds per run stepped, over turns that stepped the same runs with
    the same setting as the turn before (a turn after a change builds its groups anew), the latest
    CHOICE_SAMPLES of each. A setting with fewer is tried (all threads first); then the faster by their medians is
    kept; CHOICE_RETRY_TURNS turns after they were compared, the other's measurements are dropped and it is tried
    again.
    Clock-free: the loop gives it the seconds."""

    def __init__(self, threads: int):
        self.threads = threads
        self._seconds: dict[int, deque[float]] = {setting: deque(maxlen=CHOICE_SAMPLES) for setting in {threads, 1}}
        self._last: tuple | None = None  # (the runs stepped, the setting) of the latest turn
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
        if self._last == (runs, setting) and runs:
            self._seconds[setting].append(seconds / len(runs))
        self._last = (runs, setting)


def step_part(runs: Sequence) -> list[dict | Exception]:
    """`step_together(runs)`, or the exception that ended it for each of them: a part's fault ends its runs only."""
    try:
        return step_together(runs)
    except Exception as error:  # noqa: BLE001 - this part's runs end; the other parts' go on
        return [error] * len(runs)


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


def lane_pause(step_seconds: float, learners: int, parts: int = 1, wall_seconds: float | None = None) -> float:
    """Seconds a lane waits after work that used `step_seconds` of its thread's CPU over `wall_seconds` (None: the
    same; more where other threads held the interpreter or the cores), so that its run uses its learner's share of
    the loop's `parts` cores, parts/learners of a core (a lane is one thread: at most all of one):
    `step_seconds × max(learners / parts, 1) − wall_seconds`, at least 0."""
    wall = step_seconds if wall_seconds is None else wall_seconds
    return max(step_seconds * max(learners / parts, 1) - wall, 0.0)


def works_on_its_thread(trainer) -> bool:
    """Whether a run's work is its stepping thread's CPU time (`time.thread_time`): on the CPU with one torch
    thread (the tiny and small presets). An accelerator's kernels, or torch's other intra-op threads, work outside
    it, and a lane of such a run is paced by the wall."""
    device = getattr(trainer, "device", None)
    return (device is None or torch.device(device).type == "cpu") and torch.get_num_threads() == 1


class LanePacer:
    """The waits of a lane's run: called between its updates (`Trainer.share_pause`) and after its steps, it waits
    `lane_pause` of the CPU seconds its thread used since its last wait (`work_clock`) over the wall seconds they
    took (`clock`), at the learners' count and the loop's parts then, or until the run is stopped; returns the
    seconds it waited (which are not the step's cost). Made and called in the lane's thread (`time.thread_time`
    is the calling thread's)."""

    def __init__(
        self,
        learners: Callable[[], int],
        stop_event: threading.Event,
        clock: Callable[[], float],
        parts: Callable[[], int] = lambda: 1,
        work_clock: Callable[[], float] = time.thread_time,
    ):
        self.learners, self.stop_event, self.clock, self.parts = learners, stop_event, clock, parts
        self.work_clock = work_clock
        self.since, self.worked_since = clock(), work_clock()
        self.updates = 0  # its calls since the step under way began: its updates done (and one more once it ends)
        self.worked = 0.0  # the work seconds (`work_clock`) of the step's updates after its first

    def __call__(self) -> float:
        began, worked = self.clock(), self.work_clock()
        self.updates += 1  # done before its wait
        if self.updates > 1:
            self.worked += worked - self.worked_since
        pause = lane_pause(worked - self.worked_since, self.learners(), self.parts(), began - self.since)
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
    members: Sequence[_Member], accounts: dict[Hashable, _Account], turn_seconds: float, turn: int, parts: int = 1
) -> list[_Member]:
    """The runs that step in turn number `turn`, stepped as `parts` parts at once: a turn of `turn_seconds` holds
    `parts × turn_seconds` of steps' seconds. The learners with runs in `members` (in the order of their first run)
    each earn a share, `parts × turn_seconds / learners` or the cheapest `step_seconds` of `members` if that is more,
    their credit capped at it; a learner in credit then takes its runs in rotation (the least recently stepped
    first), each at its `step_seconds`, until its credit is spent (at least one run once it is in credit).

    Where every learner is still in debt after earning (steps that took longer than estimated, as when the load
    rises), every learner earns again until one is in credit: a turn in which nobody would step is skipped, not
    run. Run, it took no time, and the loop's pace (`RunLoop.turn_wall`, the median of recent turns) would read it
    as a turn as quick as nothing, announcing waits shorter than they are."""
    by_learner: dict[Hashable, list[_Member]] = {}
    for member in members:
        by_learner.setdefault(member.learner, []).append(member)
    share = max(parts * turn_seconds / len(by_learner), min(member.step_seconds for member in members))
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
    up to `threads` threads at once (`cut`); and the lanes of runs whose steps cost more than a turn."""

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
        self._parts = 1  # the parts the latest turn's members are cut into: the cores the loop's time is now
        self._recent_parts: deque[int] = deque(maxlen=PARTS_TIMED)  # the same of the latest turns (`mean_parts`)
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
    def parts(self) -> int:
        """Parts the loop's runs step in at once now (`cut` of them all, at most `threads`): the cores its time is
        (1 when idle)."""
        with self._lock:
            return self._parts

    @property
    def mean_parts(self) -> float:
        """The mean of `parts` over the latest PARTS_TIMED turns (`parts` before the first): the cores the loop's
        time is over a while, which a lane's pause follows turn by turn (`LanePacer`), for estimates that span many
        turns. The loop steps on one thread while its second gains nothing (`ThreadsChoice`), and tries two again
        every CHOICE_RETRY_TURNS turns; a heavy run's first step, estimated at the two parts of such a trial, was
        told 0.69-0.79 of its wait at load 4.4 on 2 cores (bench/class_load.py)."""
        with self._lock:
            return statistics.fmean(self._recent_parts) if self._recent_parts else float(self._parts)

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
        # The threads beside the loop's own that step a turn's other parts: this thread's, since a `train` that
        # comes as it ends starts another thread with a pool of its own.
        pool = ThreadPoolExecutor(self.threads - 1, f"{self.name}-part") if self.threads > 1 else None
        try:
            while self._turn(pool):
                pass
        except BaseException as error:  # noqa: BLE001 - a fault of the loop itself: every run in it ends with it
            with self._lock:
                members, self._members = self._members + self._joining, []
                self._joining.clear()
                self._thread, self._turn_began, self._parts = None, None, 1
            for member in members:
                member.leave(error)
        finally:
            if pool is not None:
                pool.shutdown()

    def _turn(self, pool: ThreadPoolExecutor | None) -> bool:
        """One turn, its parts but the first stepped on `pool`'s threads; False once no run is left in the loop (the
        thread then ends, and the next `train` starts another; lanes go on by themselves)."""
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
                self._thread, self._turn_began, self._parts = None, None, 1
                return False
            began, self._turn_began = self._turn_began, self._clock()
            if began is not None:
                (self._intake_walls if self._turn_took_in else self._turn_walls).append(self._turn_began - began)
            self._turn_took_in = took_in
            self._turn_number += 1
            everyone = [member.trainer for member in self._members]
            parts = len(cut(everyone, self.threads))  # on all its threads (on one: one part)
            choosing = parts > 1  # else one thread and all of them are the same
            threads = self._choice.choose(self._turn_number) if choosing else 1
            # The accounts earn for the parts all the loop's runs make: that sets how many runs a turn takes, the
            # same for every learner. The runs chosen may make fewer (four of eight are one part, not two), and
            # `parts` (the lanes' pauses, the Train button's estimate) reads the cores this turn holds.
            stepping = choose_turn(
                self._members, self._accounts, self.turn_seconds, self._turn_number, min(parts, threads)
            )
            positions = cut([member.trainer for member in stepping], threads)
            self._parts = len(positions)
            self._recent_parts.append(self._parts)
        began_stepping = self._clock() if choosing else 0.0
        outcomes = self._step(stepping, pool, positions)
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

    def _step(
        self, stepping: list[_Member], pool: ThreadPoolExecutor | None, positions: list[list[int]]
    ) -> list[dict | Exception]:
        """One step of each of `stepping`, in order: its parts (`cut`'s `positions` in it) on threads at once, the
        first on this thread."""
        trainers = [member.trainer for member in stepping]
        parts = [[trainers[i] for i in part] for part in positions]
        others = [pool.submit(step_part, part) for part in parts[1:]] if pool is not None else []
        stepped = [step_part(parts[0]), *(future.result() for future in others)]
        outcomes: list[dict | Exception | None] = [None] * len(trainers)
        for part, results in zip(positions, stepped):
            for i, outcome in zip(part, results):
                outcomes[i] = outcome
        return outcomes

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
        work = time.thread_time if works_on_its_thread(member.trainer) else self._clock
        pace = LanePacer(self.lane_sharing, member.trainer.stop_event, self._clock, lambda: self.parts, work)
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
