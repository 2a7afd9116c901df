"""A class shares the server: a learner's runs beyond their share of the loop wait while the class's go first, a run
goes on only while its learner has time to spend, and a server that starts after a crash marks what the dead one
left as interrupted, its learners' pages saying so."""

import dataclasses
import functools
import os
import re
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from streamlit.testing.v1 import AppTest

import ui.jobs
from rl_core.algorithms import get_preset
from rl_core.config import RunConfig
from rl_core.runs.first_point import PREPARATION_SECONDS, lane_first_step_seconds
from rl_core.runs.limits import estimated_step_seconds
from rl_core.runs.run_loop import first_wait
from rl_core.runs.store import RunStore
from ui.jobs import RESTARTED_TRAINING, RESTARTED_WAITING, Job, LiveLoop, start_server_upkeep

ROOT = Path(__file__).resolve().parents[1]


def tiny_run(steps: int) -> RunConfig:
    algo = get_preset("grpo", prompts_per_step=2, num_generations=2, ppo_epochs=1, num_minibatches=1)
    return RunConfig(algo=algo, task="reverse", steps=steps, sft_steps=0)


def wait_for(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


class Request:
    """A queue ticket of a learner's, as a Job is one (`session`)."""

    def __init__(self, session: str | None):
        self.session = session


def test_a_learners_run_beyond_their_share_lets_a_later_learners_run_go_first():
    slots = LiveLoop(3, per_learner=1)
    order, release = [], threading.Event()
    stops = {}

    def hold(name: str, learner: str) -> None:
        stops[name] = threading.Event()
        with slots.hold(stops[name], ticket=Request(learner)) as acquired:
            if acquired:
                order.append(name)
                release.wait(30)

    threads = []
    for name, learner in (("a1", "a"), ("a2", "a"), ("b1", "b")):  # one after the other
        threads.append(threading.Thread(target=hold, args=(name, learner), daemon=True))
        threads[-1].start()
        wait_for(lambda: len(order) + len(slots._waiting) == len(threads))
    wait_for(lambda: len(order) == 2)
    assert order == ["a1", "b1"] and slots.learner_runs("a") == (1, 1) and slots.learner_runs("b") == (1, 0)
    release.set()
    for thread in threads:
        thread.join(10)
    assert order == ["a1", "b1", "a2"]


def test_a_run_goes_on_only_while_its_learner_has_time_to_spend(tmp_path, monkeypatch):
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    monkeypatch.setenv("RLHF_LAB_LEARNER_SECONDS_PER_HOUR", "60")
    store = RunStore()
    earlier = store.add_run(tiny_run(5), "earlier", session="me")  # 100 s of the hour already trained
    store.start_run(earlier)
    with store._write() as db:
        db.execute("UPDATE runs SET started_at = ? WHERE id = ?", (time.time() - 100, earlier))
    store.finish_run(earlier, "finished")
    job = Job(tiny_run(200), LiveLoop(2), session="me").start()  # its tab closed or not: the hour is spent
    assert job.join(120)
    snap = job.snapshot()
    assert snap.status == "stopped" and snap.steps_done == 1
    # 100 s before it, and its own seconds since it started
    assert re.match(r"your runs have trained 1\d\d s in the last hour; allowed: 60 s an hour", snap.error), snap.error
    another = Job(tiny_run(3), LiveLoop(2), session="someone else").start()
    assert another.join(120) and another.snapshot().status == "finished"


def dead_pid() -> int:
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(ended.stdout)


def left_by_a_dead_server(store: RunStore, learner: str, page: str | None = None) -> tuple[int, int]:
    """A run of `learner` that was training and one that was waiting when their server was killed: (training,
    waiting)."""
    training = store.add_run(tiny_run(50), "grpo · grpo page #1", session=learner, page=page, page_run=1)
    store.start_run(training)
    store.add_step(training, {"step": 1, "reward_mean": 0.5})
    waiting = store.add_run(tiny_run(50), "grpo · grpo page #2", session=learner, page=page, page_run=2)
    with store._write() as db:
        db.execute("UPDATE runs SET owner_pid = ?", (dead_pid(),))
    return training, waiting


def test_a_server_that_starts_marks_what_a_dead_one_left_running_or_queued_as_interrupted(tmp_path, monkeypatch):
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    monkeypatch.setattr(ui.jobs, "_upkeep_begun", threading.Event())
    store = RunStore(recover=False)
    training, waiting = left_by_a_dead_server(store, "me")
    assert sorted(start_server_upkeep()) == [training, waiting]
    stored = store.runs([training, waiting])
    assert [run.status for run in stored] == ["interrupted", "interrupted"]
    shown = [Job.from_store(run, store, LiveLoop(2)).snapshot() for run in stored]
    assert [(snap.status, snap.steps_done) for snap in shown] == [("interrupted", 1), ("interrupted", 0)]
    assert shown[0].error.startswith(RESTARTED_TRAINING) and shown[1].error.startswith(RESTARTED_WAITING)
    assert start_server_upkeep() == []  # once per server process


def test_a_learner_whose_request_was_queued_when_the_server_died_is_told_so_on_their_page(tmp_path, monkeypatch):
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    monkeypatch.setattr(ui.jobs, "_upkeep_begun", threading.Event())
    learner = secrets.token_urlsafe(18)  # a learner this process's pages have never shown: the server restarted
    left_by_a_dead_server(RunStore(recover=False), learner, page="grpo")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.session_state["lab:session"] = learner
    at.run()
    at.switch_page("app_pages/grpo.py").run()
    warnings = [w.value for w in at.warning]
    assert any(RESTARTED_WAITING in w and w.startswith("Interrupted after 0 of 50 steps") for w in warnings), warnings


def test_a_learner_with_as_many_runs_as_allowed_cannot_press_train_on_another_page(tmp_path, monkeypatch):
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    # Two training and two waiting, started from other pages (or other tabs): the loop's count is the learner's.
    monkeypatch.setattr(LiveLoop, "learner_runs", lambda loop, learner: (2, 2) if learner == "me" else (0, 0))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.session_state["lab:session"] = "me"
    at.run()
    at.switch_page("app_pages/grpo.py").run()
    assert any(
        "you have 2 runs training and 2 waiting; allowed: at most 2 training and 2 waiting" in w.value
        for w in at.warning
    ), [w.value for w in at.warning]
    assert at.button(key="grpo:train").disabled


def test_time_left_goes_on_at_the_pace_so_far():
    from ui.jobs import time_left

    assert time_left(elapsed=12.0, done=40, total=50) == pytest.approx(3.0)  # 0.3 s each, 10 to go
    assert time_left(elapsed=5.0, done=0, total=50) is None and time_left(elapsed=5.0, done=50, total=50) is None


def test_a_loaded_machine_stretches_an_estimate_by_its_runnable_processes_per_core():
    from rl_core.runs.limits import contention

    assert contention(load=7.0, cores=2, workers=1) == pytest.approx(4.0)  # 8 runnable on 2 cores
    assert contention(load=0.5, cores=16, workers=2) == 1.0  # cores to spare: as on an idle machine


def test_the_train_button_says_how_long_at_this_servers_pace_now_counting_the_warm_start_to_build(
    tmp_path, monkeypatch
):
    from rl_core.engine.pretrained import model_tokenizer
    from rl_core.engine.sft import checkpoint_folder
    from rl_core.runs.limits import (
        SFT_STEP_SECONDS,
        estimated_evaluation_seconds,
        estimated_seconds,
        estimated_step_seconds,
    )
    from rl_core.runs.run_loop import RunLoop
    from toy_tasks import get_task
    from ui.lab import DEFAULT_STEPS

    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    monkeypatch.setenv("RLHF_LAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(os, "getloadavg", lambda: (7.0, 7.0, 7.0))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.session_state["lab:session"] = secrets.token_urlsafe(18)
    at.run()
    at.switch_page("app_pages/grpo.py").run()
    # Alone in the loop (1 learner) on 2 cores at load 7: every estimate × (7 + 1) / 2; an empty cache first
    # trains the page's 200-step SFT warm start of the tiny model.
    run = RunConfig(algo=get_preset("grpo"), task="caesar", steps=DEFAULT_STEPS)
    seconds = estimated_seconds(run) * 4
    warm = 200 * SFT_STEP_SECONDS * 4
    assert at.button(key="grpo:train").help.endswith(
        f"About {seconds + warm:,.0f} s at this server's pace now (you alone in the training loop, load average 7.0 "
        f"on 2 cores); of which about {warm:,.0f} s build its SFT warm start, which this server has not cached yet."
    )
    task = get_task("caesar")  # as the trainer names the folder it publishes the checkpoint in
    folder = checkpoint_folder(
        tmp_path / "cache", task, model_tokenizer("tiny"), "tiny", 0, task.default_demo_noise, run.sft_steps
    )
    folder.mkdir(parents=True)  # as the warm start's checkpoint is published: its folder
    at.run()
    assert at.button(key="grpo:train").help.endswith(
        f"About {seconds:,.0f} s at this server's pace now (you alone in the training loop, load average 7.0 on 2 "
        "cores); its warm start is cached on this server."
    )
    # Three other learners in the loop, stepping on one thread: each step takes 4 learners' turns, the evaluation
    # after the last (off the loop, in the job's thread) its own time. On two: each takes 4 / 2.
    monkeypatch.setattr(RunLoop, "learners", property(lambda loop: 3))
    for cores in (1.0, 2.0):
        monkeypatch.setattr(RunLoop, "cores_ahead", lambda loop, runs, cores=cores: cores if runs == 4 else None)
        at.run()
        shared = (run.steps * estimated_step_seconds(run) * 4 / cores + estimated_evaluation_seconds(run)) * 4
        assert at.button(key="grpo:train").help.endswith(
            f"About {shared:,.0f} s at this server's pace now (4 learners sharing the training loop, load average "
            "7.0 on 2 cores); its warm start is cached on this server."
        )


def test_the_wait_for_a_first_point_counts_half_the_pages_refresh_interval():
    from ui.jobs import JobSnapshot

    def page(snap, job, refresh):
        from ui.dashboard import progress

        progress(snap, job, refresh)

    job = Job(tiny_run(steps=5), LiveLoop(1))
    snap = JobSnapshot(
        status="preparing",
        steps_total=5,
        records=[],
        samples={},
        phase=("sft", 10, 50),
        setup={},
        error=None,
        waiting_for=0,
        queue_place=None,
        wait_estimate=None,
        elapsed=8.0,
        seconds_per_step=None,
        first_point_in=20.0,
    )
    # A page redrawn every 14 s shows the first point 7 s after it comes, on average: 20 + 14 / 2. A wait under
    # 3 s gets no number: 1.2 + 2 / 2 = 2.2 s. On a server at 2.2 times an idle one's time, the bound is
    # ⌈3 × 2.2⌉ = 7 s: 5 + 2 / 2 = 6 s is under it, and 8 s is not.
    for first, refresh, slower, shown in (
        (20.0, 14.0, 1.0, "about 27 s"),
        (20.0, None, 1.0, "about 20 s"),
        (1.2, 2.0, 1.0, "under 3 s"),
        (5.0, 2.0, 2.2, "under 7 s"),
        (8.0, None, 2.2, "about 8 s"),
    ):
        changed = dataclasses.replace(snap, first_point_in=first, slower=slower)
        at = AppTest.from_function(page, args=(changed, job, refresh)).run()
        assert not at.exception, at.exception
        text = at.get("progress")[0].proto.text
        assert text == f"Building the warm start: SFT warm start 10/50, {shown} to its first point", text


def test_a_short_waits_bound_grows_with_the_servers_load():
    from ui.dashboard import first_point_wait, short_wait_bound

    # ⌈3 × slower⌉, never under 3 s: an idle server (and one whose load is under a core each) says "under 3 s".
    assert [short_wait_bound(s) for s in (0.4, 1.0, 1.01, 2.2, 3.0)] == [3, 3, 4, 7, 9]
    assert first_point_wait(2.9) == "under 3 s"
    assert first_point_wait(3.0) == "about 3 s"
    assert first_point_wait(6.9, slower=2.2) == "under 7 s"
    assert first_point_wait(7.4, slower=2.2) == "about 7 s"


def test_the_server_is_as_much_slower_as_its_load_per_core(monkeypatch):
    from ui import jobs

    monkeypatch.setattr(jobs.os, "cpu_count", lambda: 2)
    for load, slower in ((0.5, 1.0), (2.0, 1.0), (4.4, 2.2)):
        monkeypatch.setattr(jobs.os, "getloadavg", lambda load=load: (load, 0.0, 0.0))
        assert jobs.server_slower() == pytest.approx(slower)


def test_the_phases_before_a_first_point_add_up_at_the_warm_starts_and_the_loops_pace():
    from rl_core.runs.first_point import first_point_seconds, first_turn_seconds, still_ahead

    # Before the loop has timed a run's first record: half the turn under way and the turn that takes it in, 2 s
    # each: 3 s. Once it has, its measure: 7 s.
    assert first_turn_seconds(2.0, None) == pytest.approx(3.0)
    assert first_turn_seconds(2.0, 7.0) == 7.0
    # 40 SFT steps left and the check's 3, at 0.5 s a step, then a preparation of 1.5 s and a first turn of 3 s:
    # 21.5 + 1.5 + 3.
    assert first_point_seconds(40, 0.5, 1.5, 3.0) == pytest.approx(26.0)
    assert first_point_seconds(0, 0.5, 1.5, 3.0) == pytest.approx(4.5)  # a cached warm start: no check
    # A phase of 1.5 s begun at 10 s: 1.5 s left before it begins, 0.5 s at 11 s, none once it overran.
    assert still_ahead(1.5, None, 11.0) == 1.5
    assert still_ahead(1.5, 10.0, 11.0) == pytest.approx(0.5)
    assert still_ahead(1.5, 10.0, 13.0) == 0.0


class Clock:
    """A monotonic clock the test sets."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_runs_first_point_is_announced_from_its_warm_start_groups_own_pace_and_its_first_turn(tmp_path, monkeypatch):
    from test_warm_start_builder import Builds, wait_until

    from rl_core.runs.first_point import PREPARATION_SECONDS
    from rl_core.runs.limits import SFT_STEP_SECONDS, estimated_step_seconds
    from rl_core.runs.warm_start_builder import WarmStartBuilder

    monkeypatch.setenv("RLHF_LAB_CACHE", str(tmp_path))  # empty: the 50-step warm start is trained
    clock, slots, builds = Clock(), LiveLoop(2), Builds()
    slots.builder = WarmStartBuilder(build_group=builds, clock=clock)
    run = RunConfig(algo=get_preset("grpo"), task="caesar", steps=50, sft_steps=50)
    job = Job(run, slots, clock=clock)
    job._set(status="preparing")
    turn = estimated_step_seconds(run)  # an empty loop: the run's turn is its own step (the server's speed 1)
    # Queued with the builder idle: the 50 steps and the check's 3 at the estimated step of one seed, its
    # preparation (none timed here yet), then 1.5 turns, after the queue's wait.
    job._set(status="queued")
    monkeypatch.setattr(slots, "wait_estimate", lambda ticket: 4.0)
    assert job.snapshot().first_point_in == pytest.approx(
        4.0 + 53 * SFT_STEP_SECONDS + PREPARATION_SECONDS + 1.5 * turn
    )
    # Its place taken (its preparation begun, as `_work` begins it), about to reach the builder, then with it but
    # not yet in a group: the group it joins may still grow (classmates' clicks).
    job._set(status="preparing")
    job._prepare()
    assert job.snapshot().first_point_in is None
    job._set(with_builder=True)
    assert job.snapshot().first_point_in is None
    job._set(with_builder=False)

    def prepared(trainer):  # its checkpoint loaded from the cache in 2 s
        clock.now += 2.0
        return iter(())

    # Its thread, with a trainer whose `prepare` finds the checkpoint and a loop that is not stepped here.
    monkeypatch.setattr(ui.jobs, "prepared_items", prepared)
    monkeypatch.setattr(slots.loop, "train", lambda *args, **kwargs: None)
    monkeypatch.setattr(ui.jobs, "end_item", lambda trainer: {})
    trained = threading.Thread(target=job._train, args=(object(), None, None), daemon=True)
    trained.start()
    _, on_step, release = builds.next()
    wait_until(lambda: job.snapshot().warm_start is not None)
    assert job.snapshot().first_point_in is None  # its group under way, no pace of its own yet
    classmate = Job(RunConfig(algo=get_preset("grpo"), task="caesar", steps=50, sft_steps=50, seed=1), slots)
    classmate._set(status="preparing")
    assert classmate.snapshot().first_point_in is None  # the builder busy: the group it will join is not known
    on_step(1)
    clock.now += 6.0
    on_step(7)  # 1 s a step: 43 steps and 3 of checks left, then its preparation and its first turn
    assert job.snapshot().first_point_in == pytest.approx(46.0 + PREPARATION_SECONDS + 1.5 * turn)
    release.set()
    trained.join(10)
    assert not trained.is_alive()
    assert job.snapshot().warm_start is None and job._builds == []  # built and prepared: its first turn is left
    assert slots.preparation_wall(1) == 2.0  # from the builder's end to joining the loop, alone
    assert job.snapshot().first_point_in == pytest.approx(1.5 * turn)
    clock.now += 0.5 * turn
    assert job.snapshot().first_point_in == pytest.approx(1.0 * turn)  # what is left of it
    # A run with its warm start cached, 0.5 s into its preparation: 1.5 s of the 2 s this server timed, then its
    # first turn (1.5 of its own steps, the loop being empty).
    cached = Job(tiny_run(steps=5), slots, clock=clock)
    cached._set(status="preparing", builds=[])  # nothing for the builder
    cached._prepare()
    clock.now += 0.5
    assert cached.snapshot().first_point_in == pytest.approx(1.5 + 1.5 * estimated_step_seconds(tiny_run(steps=5)))
    job._add({"step": 1, "reward_mean": 0.5})
    assert job.snapshot().first_point_in is None


def test_a_lone_runs_preparation_after_a_burst_is_announced_at_its_own_company_not_the_bursts():
    """Four runs prepare together for 8 s: 2 s a run. A run preparing alone then is told 2 s (the burst's median
    wall would be 8 s); a second run that starts 1 s into it makes both 2 s × 2, less what each has done."""
    clock, slots = Clock(), LiveLoop(8)
    turn = 1.5 * estimated_step_seconds(tiny_run(steps=5))  # an empty loop: its first turn is its own step

    def preparing() -> Job:
        job = Job(tiny_run(steps=5), slots, clock=clock)
        job._set(status="preparing", builds=[])
        job._prepare()
        return job

    burst = [preparing() for _ in range(4)]
    assert burst[0].snapshot().first_point_in == pytest.approx(4 * PREPARATION_SECONDS + turn)  # untimed: 4 at once
    clock.now += 8.0
    for job in burst:
        slots.observe_preparation(*job._prepared(clock.now))
    assert slots.preparing.count == 0
    assert slots.preparation_wall(1) == 2.0 and slots.preparation_wall(3) == 6.0
    queued = Job(tiny_run(steps=5), slots, clock=clock)
    queued._set(status="preparing", builds=[])  # its place taken, its preparation not begun: itself alone
    assert queued.snapshot().first_point_in == pytest.approx(2.0 + turn)
    lone = preparing()
    assert lone.snapshot().first_point_in == pytest.approx(2.0 + turn)
    clock.now += 1.0
    second = preparing()
    assert lone.snapshot().first_point_in == pytest.approx(2 * 2.0 - 1.0 + turn)
    assert second.snapshot().first_point_in == pytest.approx(2 * 2.0 + turn)
    clock.now += 3.0  # the lone run alone for 1 s, then with the second for 3 s: a mean company of 7/4
    assert lone._prepared(clock.now) == (4.0, 1.75)
    # A preparation ends once: joining the loop without one begun is a fault, not a silent nothing to time; a run
    # that ends leaves the preparing runs if it was among them, and only then.
    with pytest.raises(RuntimeError, match="had not begun"):
        lone._prepared(clock.now)
    lone._stop_preparing(clock.now)
    second._stop_preparing(clock.now)
    assert slots.preparing.count == 0


def loop_after_a_burst() -> tuple[LiveLoop, list[tuple[float, int]]]:
    """A loop whose latest runs (a class's burst of twenty) waited 7 s each for their first records; a turn takes
    0.8 s and one that takes runs in 2 s; preparations 1 s a run. And its first waits (seconds, company), to add to."""
    slots, waits = LiveLoop(8), [(7.0, 20)] * 5
    slots.loop = SimpleNamespace(turn_seconds=1.0, turn_wall=0.8, intake_wall=2.0, learners=20, awaiting_first=0)
    slots.loop.first_record_wall = lambda company=None: first_wait(waits, company)
    slots.loop.steps_in_lane = lambda step_seconds, trainer=None: False  # the class's runs and the tiny ones here
    slots.observe_preparation(4.0, 4.0)  # 1 s a run
    return slots, waits


def preparing_job(slots: LiveLoop, clock) -> Job:
    """A tiny run of five steps preparing in `slots`, its warm starts built."""
    job = Job(tiny_run(steps=5), slots, clock=clock)
    job._set(status="preparing", builds=[])
    job._prepare()
    return job


def test_a_run_joining_alone_after_a_burst_waits_half_an_ordinary_turn_and_its_intake_not_the_bursts_waits():
    """A class's runs joined together and waited 7 s each for their first records (each behind the turns that took
    in the ones before it); now a turn takes 0.8 s and one that takes runs in 2 s, preparations 1 s a run. A run
    preparing alone: 1 s, then half a turn under way and its intake, 0.4 + 2 s. Two preparing: 2 × 1 s each, and
    the burst's waits, for they join together."""
    clock, (slots, _) = Clock(), loop_after_a_burst()
    preparing = functools.partial(preparing_job, slots, clock)

    lone = preparing()
    assert lone.snapshot().first_point_in == pytest.approx(1.0 + 0.4 + 2.0)
    clock.now += 1.0
    slots.observe_preparation(*lone._prepared(clock.now))
    lone._set(joined_at=clock.now)
    clock.now += 0.5
    assert lone.snapshot().first_point_in == pytest.approx(2.4 - 0.5)  # what is left of its wait in the loop
    pair = [preparing(), preparing()]
    assert pair[0].snapshot().first_point_in == pytest.approx(2 * 1.0 + 7.0)
    queued = Job(tiny_run(steps=5), slots, clock=clock)  # who it will join with is not known: the latest runs' wait
    queued._set(status="queued")
    slots.wait_estimate = lambda ticket: 3.0  # the queue's wait
    assert queued.snapshot().first_point_in == pytest.approx(3.0 + 3 * 1.0 + 7.0)


def test_runs_joining_together_are_told_the_waits_of_runs_that_joined_with_as_little_company_not_a_bursts():
    """As above, a loop whose latest runs (a class's burst of twenty) waited 7 s each; preparations 1 s a run. Three
    runs preparing together (a company of 3) are told 3 × 1 s of preparation, then the burst's 7 s while no run has
    joined with a company of 3 or less; once one joined with one other and waited 3 s, that: 3 + 3 s. The first of
    the three joins (its company 3, counted then), is told what is left of 3 s; once the loop has its wait, 2.5 s
    with a company of 3, a run preparing with the other two (a company of 3) is told the median of 3 and 2.5 s."""
    clock, (slots, waits) = Clock(), loop_after_a_burst()
    preparing = functools.partial(preparing_job, slots, clock)

    trio = [preparing() for _ in range(3)]
    assert trio[0].snapshot().first_point_in == pytest.approx(3 * 1.0 + 7.0)
    waits.append((3.0, 2))
    assert trio[0].snapshot().first_point_in == pytest.approx(3 * 1.0 + 3.0)
    clock.now += 1.0
    trio[0]._prepared(clock.now)
    trio[0]._set(status="training", joined_at=clock.now, company=trio[0]._joining_company())
    assert trio[0]._company == 3  # the two still preparing, and itself
    clock.now += 0.5
    assert trio[0].snapshot().first_point_in == pytest.approx(3.0 - 0.5)
    waits.append((2.5, 3))  # its wait as the loop kept it, with the company it joined with
    trio[0]._add({"step": 1, "reward_mean": 0.5})
    fourth = preparing()  # with the other two: a company of 3, its preparation 3 × 1 s
    assert fourth.snapshot().first_point_in == pytest.approx(3 * 1.0 + 2.75)


def test_a_page_draws_a_run_of_a_loaded_model_whose_folder_was_deleted(tmp_path, monkeypatch):
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    learner = secrets.token_urlsafe(18)
    gone = tmp_path / "saved-model"  # saved with save_pretrained, trained on, then deleted
    run = RunConfig(algo=get_preset("grpo"), task="caesar", model=str(gone), steps=3, sft_steps=0)
    store = RunStore()
    run_id = store.add_run(run, "grpo · grpo page #1", session=learner, page="grpo", page_run=1)
    store.start_run(run_id)
    for step in (1, 2, 3):
        store.add_step(run_id, {"step": step, "reward_mean": 0.5})
    store.finish_run(run_id, "finished")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.session_state["lab:session"] = learner
    at.run()
    at.switch_page("app_pages/grpo.py").run()
    assert not at.exception, at.exception
    assert any(s.value.startswith("Finished 3 steps") for s in at.success), [s.value for s in at.success]


def test_the_servers_speed_follows_the_runs_stepping_now_from_their_third_step_wall_on(monkeypatch):
    from rl_core.runs.limits import estimated_evaluation_seconds, estimated_step_seconds

    monkeypatch.setattr(ui.jobs.os, "getloadavg", lambda: (0.0, 0.0, 0.0))  # an idle machine: evaluations as estimated
    clock, slots = Clock(), LiveLoop(2)
    run = tiny_run(steps=50)
    job = Job(run, slots, clock=clock)
    for step in (1, 2, 3):
        job._add({"step": step, "reward_mean": 0.5})
        clock.now += 2.0
    assert slots.speed == 1.0  # two step walls: its joining the loop may still be in them
    job._add({"step": 4, "reward_mean": 0.5})  # three walls of 2 s
    speed = 2.0 / estimated_step_seconds(run)
    assert slots.speed == pytest.approx(speed)
    # A run that has not stepped yet (one queued behind it, say) is estimated at that pace, its evaluation apart,
    # and its preparation before it (none timed yet): its 49 steps after the first, and its first turn, which the
    # loop has not timed (the job stepped outside it), half a turn under way and the one that takes it in at its own
    # step, 1.5 steps: 50.5 steps.
    expected = 50.5 * estimated_step_seconds(run) * speed + estimated_evaluation_seconds(run) + PREPARATION_SECONDS
    assert Job(run, slots, clock=clock).seconds_left() == pytest.approx(expected)


def test_a_queued_run_waits_for_the_steps_ahead_at_the_loops_pace_and_their_evaluation_at_the_machines(monkeypatch):
    """The run ahead holds the loop's one place: 5 default GRPO steps (estimated 64 × (4.07e-4 + 2 × 2.95e-4) + 4 ×
    1.77e-2 = 0.134608 s each), then its evaluation (256 × 2.28e-4 = 0.058368 s), which its job's thread runs off
    the loop. The server's steps come 30 times their estimate apart (a turn shared by many learners); the machine is
    at load 5 on 2 cores, (5 + 1) / 2 = 3 times slower than idle. Before its first step: its first turn, which the
    loop has not timed, half a turn under way and the turn that takes it in at its own step, 1.5 × 0.134608 × 30 =
    6.05736 s, then its 4 other steps and the evaluation, 4 × 0.134608 × 30 + 0.058368 × 3 = 16.328064 s (the
    evaluation at the loop's 30× would be 1.75 s, not 0.18): 22.385424 s; after its second step, 2 s after its
    first: 3 × 2 + 0.175104 = 6.175104 s. Before it joined the loop, its preparation still ahead too: 0.15 s before
    this server timed one; 1.2 s a run as timed, preparing alone, 0.5 s of it gone: 0.7 s. A run queued behind it
    is told as much."""
    monkeypatch.setattr(ui.jobs.os, "getloadavg", lambda: (5.0, 1.0, 1.0))
    monkeypatch.setattr(ui.jobs.os, "cpu_count", lambda: 2)
    clock, slots = Clock(), LiveLoop(1)
    slots.observe_speed(3.0, 0.1)
    ahead = Job(RunConfig(algo=get_preset("grpo"), task="caesar", steps=5, sft_steps=0), slots, clock=clock)
    assert ahead.seconds_left() == pytest.approx(22.385424 + PREPARATION_SECONDS)
    slots.observe_preparation(1.2, 1.0)
    ahead._prepare()
    clock.now += 0.5
    assert ahead.seconds_left() == pytest.approx(22.385424 + 0.7)
    slots.observe_preparation(*ahead._prepared(clock.now))
    ahead._set(joined_at=clock.now)
    assert ahead.seconds_left() == pytest.approx(22.385424)
    clock.now += 1.0
    assert ahead.seconds_left() == pytest.approx(21.385424)  # a second of its first turn gone
    ahead._add({"step": 1, "reward_mean": 0.5})
    clock.now += 2.0
    ahead._add({"step": 2, "reward_mean": 0.5})
    assert ahead.seconds_left() == pytest.approx(6.175104)
    never, give_up, queued = threading.Event(), threading.Event(), Request("b")
    with slots.hold(never, ticket=ahead, seconds_left=ahead.seconds_left):
        waiting = threading.Thread(target=lambda: slots.hold(give_up, ticket=queued).__enter__(), daemon=True)
        waiting.start()
        wait_for(lambda: slots.queue_place(queued) == 1)
        assert slots.wait_estimate(queued) == pytest.approx(6.175104)
        give_up.set()
        waiting.join(5)


HEAVY_LANE_RUN = RunConfig(
    algo=get_preset("grpo", prompts_per_step=128, ppo_epochs=64), task="reverse", steps=5, sft_steps=0
)


def heavy_lane_job(monkeypatch, load: float) -> tuple[Clock, LiveLoop, Job, float]:
    """A heavy GRPO run's job (a step of 128 updates, estimated 22.0 s) on a fake clock in a live loop of its own,
    the machine at `load` on 2 cores: the clock, the loop, the job and its step's estimate."""
    monkeypatch.setattr(ui.jobs.os, "getloadavg", lambda: (load, 1.0, 1.0))
    monkeypatch.setattr(ui.jobs.os, "cpu_count", lambda: 2)
    clock, slots = Clock(), LiveLoop(8)
    return clock, slots, Job(HEAVY_LANE_RUN, slots, clock=clock, session="c"), estimated_step_seconds(HEAVY_LANE_RUN)


def test_a_run_in_a_lane_of_its_own_is_announced_its_step_at_the_load_now_times_the_learners_counting_down(
    monkeypatch,
):
    """A step of 22.0 CPU-s (its estimate, 1024 × (4.07e-4 + 64 × 2.95e-4) + 128 × 1.77e-2 = 22.015488 s) in a lane
    whose run waits after each update until its thread has used its share, a quarter of a core among 4 learners:
    its first record after 22.0 × 4 s. At load 5 on 2 cores (6 runnable: a third of a core each) that share holds;
    with 2 learners (half a core each) the load leaves it a third of a core while it works, and it never waits:
    22.0 × 3 s."""
    clock, slots, job, step = heavy_lane_job(monkeypatch, load=5.0)
    assert step == pytest.approx(22.015488) and step > slots.loop.turn_seconds  # a lane of its own
    assert slots.learners_sharing(job) == 1  # nothing requested: itself alone
    # Runs requested and not ended (in the loop, queued, preparing or with the builder): learner a's two, b's,
    # one without a session (a learner of its own); four learners with its own.
    leaving = [Request("a"), Request("a"), Request("b")]
    for ticket in (*leaving, Request(None)):
        slots.request(ticket)
    assert slots.learners_sharing(job) == 4
    # Those learners, without the job (not requested): three, whose shares a lane's pauses leave them.
    assert slots.learners_training() == slots.loop.lane_sharing() == 3
    job._set(status="preparing", builds=[])
    job._prepare()
    lane = step * 4
    assert job.snapshot().first_point_in == pytest.approx(PREPARATION_SECONDS + lane)  # no preparation timed
    clock.now += 0.1
    assert job.snapshot().first_point_in == pytest.approx(PREPARATION_SECONDS - 0.1 + lane)
    slots.observe_preparation(*job._prepared(clock.now))
    job._set(joined_at=clock.now)  # in its lane: what is left of its first step
    assert job.snapshot().first_point_in == pytest.approx(lane)
    clock.now += 20.0
    assert job.snapshot().first_point_in == pytest.approx(lane - 20.0)
    for ticket in leaving:  # a's and b's runs ended: one other share, more than the load leaves it
        slots.withdraw(ticket)
    assert job.snapshot().first_point_in == pytest.approx(step * 3 - 20.0)
    clock.now += step * 3
    assert job.snapshot().first_point_in == 0.0  # overran: about to come
    job._add({"step": 1, "reward_mean": 0.5})
    assert job.snapshot().first_point_in is None
    # The loop's runs on two cores: a learner's share is 2/20 of a core, so 12.8 CPU-s take 128 s; one learner
    # alone has at most the one core its lane's thread can use.
    assert lane_first_step_seconds(12.8, learners=20, cores=2, slower=3.0) == pytest.approx(128.0)
    assert lane_first_step_seconds(12.8, learners=1, cores=2) == pytest.approx(12.8)


def test_a_lane_run_is_given_no_number_while_its_classmates_runs_are_on_their_way_to_the_loop(monkeypatch):
    """Its lane has the cores to itself until they join, so its wait is theirs to set: no number while a classmate's
    run has been requested and not joined (its click not yet at a place, preparing, or with the builder); a run
    queued for a place does not hold it back. Once the classmate joined: its step of 22.0 CPU-s among 2 learners on
    one part, load 1 on 2 cores: 44.0 s."""
    clock, slots, job, step = heavy_lane_job(monkeypatch, load=1.0)
    job._set(status="training", builds=[], joined_at=clock.now)
    assert job.snapshot().first_point_in == pytest.approx(step)
    quick = RunConfig(algo=get_preset("grpo"), task="caesar", steps=5, sft_steps=0)
    classmate = Job(quick, slots, clock=clock, session="d")
    slots.request(classmate)  # clicked; its thread has not reached a place yet
    assert slots.runs_on_the_way(job) == 1 and job.snapshot().first_point_in is None
    classmate._set(status="preparing")  # its place taken: preparing, or its warm starts with the builder
    assert job.snapshot().first_point_in is None
    classmate._set(joined_at=clock.now)
    assert slots.runs_on_the_way(job) == 0
    assert job.snapshot().first_point_in == pytest.approx(2 * step)
    # A run queued for a place (the server full) joins once one is free: not on its way.
    full, never, give_up = LiveLoop(1), threading.Event(), threading.Event()
    holder, queued = Job(quick, full, clock=clock, session="e"), Job(quick, full, clock=clock, session="f")
    for ticket in (holder, queued):
        full.request(ticket)
    with full.hold(never, ticket=holder):
        waiting = threading.Thread(target=lambda: full.hold(give_up, ticket=queued).__enter__(), daemon=True)
        waiting.start()
        wait_for(lambda: full.queue_place(queued) == 1)
        assert full.runs_on_the_way(None) == 1  # the holder, not yet joined; the queued run is not counted
        assert full.learners_training() == 1  # nor is its learner among those a lane leaves their shares to
        give_up.set()
        waiting.join(5)


def test_a_lane_runs_announcement_follows_its_steps_own_pace_once_it_has_done_an_update(monkeypatch):
    """The heavy step of GRPO, 64 epochs × 2 minibatches = 128 updates: before its second update it is announced
    from its estimate (step × learners, load 1 on 2 cores: no slower); 20 updates done after its first, of 100 s of
    work, the other 107 at that pace, 100 × 107 / 20 = 535 s of work, each update paced for the learners sharing
    the loop now: 535 s alone, 4 × 535 s among 4 learners (as the learners sharing change, whatever they were while
    it did the 20); a run in no lane, or an update count it cannot read, keeps the estimate."""
    clock, slots, job, step = heavy_lane_job(monkeypatch, load=1.0)
    job._set(status="training", builds=[], joined_at=clock.now, trainer=SimpleNamespace(algo=HEAVY_LANE_RUN.algo))
    progress = {"now": None}
    monkeypatch.setattr(slots.loop, "lane_progress", lambda trainer: progress["now"])
    assert job.snapshot().first_point_in == pytest.approx(step)  # in no lane yet: its estimate, one learner
    progress["now"] = (0, 0.0)  # sampling, or its first update: none done after it yet
    assert job.snapshot().first_point_in == pytest.approx(step)
    progress["now"] = (20, 100.0)
    assert job.snapshot().first_point_in == pytest.approx(535.0)
    for ticket in (Request("a"), Request("a"), Request("b"), Request(None)):
        slots.request(ticket)
    assert job.snapshot().first_point_in == pytest.approx(4 * 535.0)
    job._set(trainer=SimpleNamespace(algo=SimpleNamespace()))  # a fit without epochs and minibatches to count
    assert job.snapshot().first_point_in == pytest.approx(4 * step)  # its estimate among the 4
