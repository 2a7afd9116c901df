"""The job layer under the app, without Streamlit: the concurrency cap and its queue, Stop, failures, and the
bounded metrics history."""

import contextlib
import math
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from rl_core.algorithms import get_preset
from rl_core.config import RunConfig
from rl_core.runs.limits import ServerLimits, estimated_seconds, estimated_step_seconds
from rl_core.runs.store import RunStore
from ui.jobs import (
    Job,
    LiveLoop,
    MetricHistory,
    SampleHistory,
    TrainingSlots,
    planned_seconds_left,
    token_view_responses,
)

LONG = ServerLimits().max_steps  # the longest run the app allows by default: far longer than a test waits


def tiny_run(steps: int = 1000, task: str = "reverse") -> RunConfig:
    """Steps of a fraction of a second: four responses per step, no SFT warm start to wait for."""
    algo = get_preset("grpo", prompts_per_step=2, num_generations=2, ppo_epochs=1, num_minibatches=1)
    return RunConfig(algo=algo, task=task, steps=steps, sft_steps=0)


def wait_for(condition, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def jobs():
    started: list[Job] = []
    yield started
    for job in started:
        job.stop()
        job.join(10)


def test_slots_admit_at_most_the_limit_and_queue_the_rest_in_order():
    slots = TrainingSlots(2)
    stops = [threading.Event() for _ in range(4)]
    admitted, release = [], threading.Event()

    def hold(index: int) -> None:
        with slots.hold(stops[index]) as acquired:
            if acquired:
                admitted.append(index)
                release.wait()

    threads = []
    for index in range(4):
        threads.append(threading.Thread(target=hold, args=(index,), daemon=True))
        threads[-1].start()
        time.sleep(0.05)  # arrival order 0, 1, 2, 3
    wait_for(lambda: len(admitted) == 2)
    time.sleep(0.3)
    assert admitted == [0, 1] and slots.running == 2
    stops[3].set()  # a queued one gives up: it must leave without a slot
    threads[3].join(1)
    assert not threads[3].is_alive() and 3 not in admitted
    release.set()
    for thread in threads[:3]:
        thread.join(2)
    assert admitted == [0, 1, 2] and slots.running == 0


def test_a_job_beyond_the_cap_is_queued_and_says_so_until_a_slot_frees(jobs):
    slots = LiveLoop(2)
    # Threads started together may reach the queue in any order: admit the first two one after the other. They
    # train far longer than the test takes (its fixture stops them), so their slots stay taken until the Stop below.
    for _ in range(2):
        jobs.append(Job(tiny_run(steps=LONG), slots).start())
        wait_for(lambda: jobs[-1].snapshot().status != "queued")
    jobs.append(Job(tiny_run(), slots).start())
    wait_for(lambda: slots.queue_place(jobs[2]) == 1)
    queued = jobs[2].snapshot()
    assert queued.status == "queued" and queued.waiting_for == 2
    assert {jobs[0].snapshot().status, jobs[1].snapshot().status} <= {"preparing", "training"}
    jobs[0].stop()
    wait_for(lambda: jobs[2].snapshot().steps_done >= 1)
    assert jobs[0].snapshot().status == "stopped"


def test_stop_ends_the_thread_within_a_second(jobs):
    job = Job(tiny_run(), LiveLoop(1)).start()
    jobs.append(job)
    wait_for(lambda: job.snapshot().steps_done >= 2)
    pressed = time.monotonic()
    job.stop()
    assert job.join(timeout=1.0), "still training a second after Stop"
    assert time.monotonic() - pressed < 1.0
    assert job.snapshot().status == "stopped"


def test_stop_while_queued_ends_at_once(jobs):
    slots = LiveLoop(1)
    jobs.append(Job(tiny_run(steps=LONG), slots).start())
    wait_for(lambda: jobs[0].snapshot().status in ("preparing", "training"))  # admitted before the second arrives
    jobs.append(Job(tiny_run(), slots).start())
    wait_for(lambda: slots.queue_place(jobs[1]) == 1)
    jobs[1].stop()
    assert jobs[1].join(timeout=1.0)
    assert jobs[1].snapshot().status == "stopped" and slots.running == 1


def test_a_failure_in_the_thread_becomes_a_message_not_a_traceback(jobs):
    job = Job(tiny_run(task="no_such_task"), LiveLoop(1)).start()
    jobs.append(job)
    assert job.join(timeout=30)
    snap = job.snapshot()
    assert snap.status == "failed"
    assert "no_such_task" in snap.error and "Traceback" not in snap.error


def test_a_finished_job_keeps_every_step_and_every_steps_samples(jobs):
    job = Job(tiny_run(steps=3), LiveLoop(1)).start()
    jobs.append(job)
    assert job.join(timeout=120)
    snap = job.snapshot()
    assert snap.status == "finished" and not snap.active
    assert [r["step"] for r in snap.records] == [1, 2, 3]
    assert all("samples" not in r for r in snap.records)
    assert sorted(snap.samples) == [1, 2, 3] and all(len(s) == 4 for s in snap.samples.values())
    assert snap.eta is None


def test_sample_history_stays_bounded_evenly_spaced_and_keeps_the_latest_step():
    history = SampleHistory(capacity=50)
    for step in range(1, 1001):
        history.add(step, [{"step": step}])
    steps = sorted(history.view())
    assert len(steps) <= 51 and steps[0] == 1 and steps[-1] == 1000
    kept = sorted(history.steps)
    assert {b - a for a, b in zip(kept, kept[1:])} == {history.stride}
    assert history.view()[1000] == [{"step": 1000}]


def test_sample_history_counts_responses_so_a_step_of_every_group_thins_sooner():
    history = SampleHistory(capacity=320)  # five steps of 64 responses
    for step in range(1, 21):
        history.add(step, [{"step": step}] * 64)
    assert sum(map(len, history.steps.values())) <= 320
    # halved at step 6 (1, 3, 5), then every second step kept until the next overflow at step 11 (1, 5, 9)
    assert sorted(history.steps) == [1, 5, 9, 13, 17] and history.stride == 4
    assert sorted(history.view()) == [1, 5, 9, 13, 17, 20], "the latest step always"


def test_the_lab_records_every_group_of_a_step_up_to_64_responses_in_whole_groups():
    assert token_view_responses(8, 8) == 64, "the default batch, whole"
    assert token_view_responses(4, 8) == 32, "a smaller batch, whole"
    assert token_view_responses(16, 8) == 64, "eight of sixteen groups"
    assert token_view_responses(32, 3) == 63, "21 whole groups of 3"
    assert token_view_responses(2, 64) == 64 and token_view_responses(64, 1) == 64


def test_metric_history_stays_bounded_and_evenly_spaced():
    history = MetricHistory(capacity=100)
    for step in range(1, 5001):
        history.add({"step": step})
    steps = [r["step"] for r in history.records]
    assert 50 <= len(steps) <= 100
    assert steps[0] == 1
    gaps = {b - a for a, b in zip(steps, steps[1:])}
    assert gaps == {history.stride}


def test_a_live_lab_run_is_kept_in_the_run_store(jobs, tmp_path, monkeypatch):
    from rl_core.runs.store import RunStore

    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    job = Job(tiny_run(steps=3), LiveLoop(2), label="GRPO · grpo page #1").start()
    jobs.append(job)
    assert job.join(120)
    stored = RunStore(tmp_path / "runs.sqlite").runs()
    assert [(run.label, run.status, run.steps_done) for run in stored] == [("GRPO · grpo page #1", "finished", 3)]
    steps = RunStore(tmp_path / "runs.sqlite").steps(stored[0].id)
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert steps[-1]["reward_mean"] == job.snapshot().records[-1]["reward_mean"]


def test_a_sweep_holds_one_slot_per_worker_and_queued_requests_learn_their_place_and_wait():
    slots = TrainingSlots(2)
    release_sweep, release_job = threading.Event(), threading.Event()
    never = threading.Event()
    sweep_ticket, job_ticket, later_ticket = object(), object(), object()
    events = []

    def hold(ticket, n, release, name):
        with slots.hold(never, slots=n, ticket=ticket):
            events.append(name)
            release.wait()

    with slots.hold(never, slots=1) as acquired:  # a short training, timed so estimates have a basis
        assert acquired
        time.sleep(1.0)
    sweep = threading.Thread(target=hold, args=(sweep_ticket, 2, release_sweep, "sweep"), daemon=True)
    sweep.start()
    wait_for(lambda: events == ["sweep"])
    assert slots.running == 2  # a two-worker sweep fills the cap: no live-lab training runs beside it
    job = threading.Thread(target=hold, args=(job_ticket, 1, release_job, "job"), daemon=True)
    job.start()
    wait_for(lambda: slots.queue_place(job_ticket) == 1)
    later = threading.Thread(target=hold, args=(later_ticket, 2, release_job, "later"), daemon=True)
    later.start()
    wait_for(lambda: slots.queue_place(later_ticket) == 2)
    # Every hold is assumed to take as long as the finished one (1 s). The sweep began a moment ago, so the job
    # starts when it ends, in a little under 1 s; the two-slot request after it needs the job's slot too, which
    # frees one typical hold after that.
    job_wait, later_wait = slots.wait_estimate(job_ticket), slots.wait_estimate(later_ticket)
    assert 0.5 < job_wait < 1.1 and later_wait == pytest.approx(job_wait + 1.0, abs=0.05)
    assert slots.wait_estimate(sweep_ticket) is None and slots.queue_place(sweep_ticket) is None
    release_sweep.set()
    wait_for(lambda: events == ["sweep", "job"])
    release_job.set()
    wait_for(lambda: events == ["sweep", "job", "later"])
    with pytest.raises(ValueError, match="workers=3 is out of range; allowed: 1 to 2"), slots.hold(never, slots=3):
        pass


def test_a_queued_job_reports_its_place(jobs):
    slots = LiveLoop(1)
    first = Job(tiny_run(), slots).start()
    jobs.append(first)
    wait_for(lambda: first.snapshot().status != "queued")
    second = Job(tiny_run(), slots).start()
    jobs.append(second)
    wait_for(lambda: second.snapshot().queue_place == 1)
    snap = second.snapshot()
    assert snap.status == "queued" and snap.waiting_for == 1
    assert 0 < snap.wait_estimate <= first.seconds_left() + 0.1, "the first run's seconds left: nothing is ahead"


def test_a_stopped_training_does_not_shorten_the_estimates():
    slots = TrainingSlots(1)
    stop, never, waiting = threading.Event(), threading.Event(), object()
    with slots.hold(stop):
        stop.set()  # stopped after a moment: not a training's length
    holding = threading.Event()

    def hold():
        with slots.hold(never):
            holding.set()
            time.sleep(0.5)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    holding.wait(5)
    queued = threading.Thread(target=lambda: slots.hold(never, ticket=waiting).__enter__(), daemon=True)
    queued.start()
    wait_for(lambda: slots.queue_place(waiting) == 1)
    assert slots.wait_estimate(waiting) is None
    thread.join(5)


# ------------------------------------------------------------------------------------------ limits and failures
def test_the_wait_shown_to_a_queued_learner_is_within_a_factor_2_of_the_wait(jobs, tmp_path, monkeypatch):
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    slots = LiveLoop(1)
    running = Job(tiny_run(steps=40), slots).start()
    jobs.append(running)
    wait_for(lambda: running.snapshot().steps_done >= 3)  # its step time is measured
    queued = Job(tiny_run(steps=2), slots).start()
    jobs.append(queued)
    wait_for(lambda: slots.queue_place(queued) == 1)
    shown, since = queued.snapshot().wait_estimate, time.monotonic()
    wait_for(lambda: queued.snapshot().status != "queued", timeout=300)
    waited = time.monotonic() - since
    assert shown is not None and waited / 2 <= shown <= 2 * waited, (shown, waited)


def test_a_job_beyond_the_server_limits_fails_naming_the_limit_and_stores_nothing(jobs, tmp_path, monkeypatch):
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    slots = LiveLoop(1)
    job = Job(tiny_run(steps=1_000_000), slots).start()
    jobs.append(job)
    assert job.join(60)
    snap = job.snapshot()
    assert snap.status == "failed" and "steps=1000000 is out of range; allowed: at most 2000" in snap.error
    assert slots.running == 0 and not (tmp_path / "runs.sqlite").exists()


def test_a_full_store_ends_the_run_as_failed_says_why_and_frees_the_slot(jobs, tmp_path, monkeypatch):
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    monkeypatch.setenv("RLHF_LAB_STORE_MAX_MB", "0.1")  # a few steps of samples fill it
    slots = LiveLoop(1)
    job = Job(tiny_run(steps=200), slots).start()
    jobs.append(job)
    assert job.join(120)
    snap = job.snapshot()
    assert snap.status == "failed" and 0 < snap.steps_done < 200
    assert "the run store is full" in snap.error and "RLHF_LAB_STORE_MAX_MB=0.1 MB" in snap.error
    assert str(tmp_path) not in snap.error and slots.running == 0
    assert [run.status for run in RunStore().runs()] == ["failed"]
    refused = Job(tiny_run(steps=2), slots).start()  # the next one is refused at once, saying why
    jobs.append(refused)
    assert refused.join(60) and "delete old runs" in refused.snapshot().error


def test_a_store_that_fails_to_record_the_end_still_ends_the_job_and_frees_its_slot(jobs, tmp_path, monkeypatch):
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))

    @contextlib.contextmanager
    def full_disk(self):
        raise sqlite3.OperationalError("database or disk is full")
        yield

    finish_run = RunStore.finish_run

    def finish_on_a_full_disk(self, *args, **kwargs):  # the write of the run's end finds the disk full
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(RunStore, "_write", full_disk)
            finish_run(self, *args, **kwargs)

    monkeypatch.setattr(RunStore, "finish_run", finish_on_a_full_disk)
    slots = LiveLoop(1)
    job = Job(tiny_run(steps=2), slots).start()
    jobs.append(job)
    assert job.join(120)
    snap = job.snapshot()
    assert snap.status == "failed" and "could not record the run's end: database or disk is full" in snap.error
    assert slots.running == 0 and not job.active
    monkeypatch.undo()
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    after = Job(tiny_run(steps=1), slots).start()  # its ghost row ("running") takes no place under the cap
    jobs.append(after)
    assert after.join(120) and after.snapshot().status == "finished"


def test_the_training_cap_counts_other_processes_runs_in_the_store(jobs, tmp_path, monkeypatch):
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    store = RunStore()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])  # another server, alive
    try:
        elsewhere = []
        for _seed in (0, 1):
            run_id = store.add_run(tiny_run(steps=5), "elsewhere")
            store.start_run(run_id)
            elsewhere.append(run_id)
        with store._write() as db:
            db.execute("UPDATE runs SET owner_pid = ?", (other.pid,))
        job = Job(tiny_run(steps=2), LiveLoop(2, cap=2)).start()  # the server's cap is 2: both places taken
        jobs.append(job)
        time.sleep(3)
        assert job.snapshot().steps_done == 0 and job.active
        store.finish_run(elsewhere[0], "finished")  # one ends: the job starts
        wait_for(lambda: job.snapshot().status == "finished")
    finally:
        other.kill()
        other.wait()


def test_a_sweeps_hold_tells_the_queue_its_estimated_seconds_left():
    slots = TrainingSlots(1)
    runs = [tiny_run(steps=100), tiny_run(steps=100)]
    # one worker, no run measured yet (speed 1): both runs' estimates, one after the other
    expected = 2 * estimated_seconds(runs[0])
    never, give_up, waiting = threading.Event(), threading.Event(), object()
    with slots.hold(never, seconds_left=planned_seconds_left(runs, 1, slots)):
        queued = threading.Thread(target=lambda: slots.hold(give_up, ticket=waiting).__enter__(), daemon=True)
        queued.start()
        wait_for(lambda: slots.queue_place(waiting) == 1)
        assert slots.wait_estimate(waiting) == pytest.approx(expected, abs=0.5)
        give_up.set()
        queued.join(5)


# ------------------------------------------------------------------------------------------ the shared live loop
class DivergesAtStep3(Job):
    """A job whose run's third step fails, as a diverged run's does: its rewards are NaN from then on."""

    def _local_trainer(self):
        trainer = super()._local_trainer()
        rewards = trainer.rewards

        def diverging(rollout):
            scores, successes = rewards(rollout)
            return (scores * math.nan if trainer.step_index == 2 else scores), successes

        trainer.rewards = diverging
        return trainer


def test_two_jobs_train_in_one_loop_as_one_training_both_stepping_before_either_ends(jobs, tmp_path, monkeypatch):
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    slots = LiveLoop(2, cap=1)  # one training under the server's cap: two threads of their own could not both run
    jobs.extend(Job(tiny_run(steps=LONG), slots).start() for _ in range(2))
    wait_for(lambda: all(job.snapshot().steps_done >= 3 for job in jobs))
    assert all(job.snapshot().status == "training" for job in jobs) and slots.loop.runs == 2
    running = [run for run in RunStore().runs() if run.status == "running"]
    assert len(running) == 2 and len({run.batch_id or run.id for run in running}) == 1, "one batch in the store"


def test_a_failing_run_ends_alone_and_the_other_goes_on(jobs, tmp_path, monkeypatch):
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    slots = LiveLoop(2)
    steady = Job(tiny_run(steps=LONG), slots).start()
    jobs.append(steady)
    wait_for(lambda: steady.snapshot().steps_done >= 1)
    failing = DivergesAtStep3(tiny_run(steps=LONG), slots).start()
    jobs.append(failing)
    assert failing.join(120)
    snap = failing.snapshot()
    assert snap.status == "failed" and snap.steps_done == 2
    assert snap.error.startswith("TrainingError: step 3: the loss became nan")
    at_failure = steady.snapshot().steps_done
    wait_for(lambda: steady.snapshot().steps_done >= at_failure + 3)
    assert steady.snapshot().status == "training" and slots.running == 1
    assert {run.status for run in RunStore().runs()} == {"failed", "running"}


def test_stop_of_one_job_leaves_the_other_training(jobs):
    slots = LiveLoop(2)
    jobs.extend(Job(tiny_run(steps=LONG), slots).start() for _ in range(2))
    wait_for(lambda: all(job.snapshot().steps_done >= 2 for job in jobs))
    stopped, going = jobs
    stopped.stop()
    assert stopped.join(timeout=1.0), "still training a second after Stop"
    assert stopped.snapshot().status == "stopped"
    at_stop = going.snapshot().steps_done
    wait_for(lambda: going.snapshot().steps_done >= at_stop + 3)
    assert going.snapshot().status == "training" and slots.running == 1 and slots.loop.runs == 1


def test_the_server_limit_names_the_knob_of_the_live_loop(monkeypatch):
    monkeypatch.setenv("RLHF_LAB_MAX_LIVE_RUNS", "0")
    with pytest.raises(ValueError, match="RLHF_LAB_MAX_LIVE_RUNS='0' is out of range; allowed: an integer ≥ 1"):
        LiveLoop.from_env()
    monkeypatch.delenv("RLHF_LAB_MAX_LIVE_RUNS")
    assert LiveLoop.from_env().limit == 40


def test_a_server_with_a_live_loop_switches_threads_every_half_millisecond():
    """The loop's threads retake the interpreter lock after every torch op; beside a page's script each retake waits
    up to a switch interval (SWITCH_INTERVAL_SECONDS, ui/jobs.py)."""
    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)  # Python's own
        LiveLoop.from_env()
        assert sys.getswitchinterval() == pytest.approx(0.0005)
    finally:
        sys.setswitchinterval(before)


def test_a_runs_seconds_left_before_its_first_step_count_the_warm_start_the_cache_lacks(tmp_path, monkeypatch):
    from rl_core.engine.pretrained import model_tokenizer
    from rl_core.engine.sft import checkpoint_folder
    from rl_core.runs.first_point import PREPARATION_SECONDS
    from rl_core.runs.limits import SFT_STEP_SECONDS
    from toy_tasks import get_task

    monkeypatch.setenv("RLHF_LAB_CACHE", str(tmp_path))
    # An idle machine: the evaluation as estimated.
    monkeypatch.setattr("ui.jobs.os.getloadavg", lambda: (0.0, 0.0, 0.0))
    run = RunConfig(algo=get_preset("grpo"), task="caesar", steps=50)  # the tiny model's 200-step warm start
    # A fresh server's speed is 1: the estimate as measured on the reference CPU, the SFT steps and the preparation
    # (none timed yet) before it; its first step comes after its first turn, half a turn under way and the one that
    # takes it in, each its own step while the loop has timed none: half a step more than its steps.
    before = 200 * SFT_STEP_SECONDS + PREPARATION_SECONDS + 0.5 * estimated_step_seconds(run)
    assert Job(run, LiveLoop(1)).seconds_left() == pytest.approx(before + estimated_seconds(run))
    task = get_task("caesar")  # as the trainer names the folder it publishes the checkpoint in
    checkpoint_folder(tmp_path, task, model_tokenizer("tiny"), "tiny", 0, task.default_demo_noise, 200).mkdir(
        parents=True
    )
    assert Job(run, LiveLoop(1)).seconds_left() == pytest.approx(
        PREPARATION_SECONDS + 0.5 * estimated_step_seconds(run) + estimated_seconds(run)
    )
