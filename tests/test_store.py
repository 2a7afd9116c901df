"""The run store: schema and its version, a run's life written and read back, several processes writing at once,
and a writer killed mid-run leaving a consistent file whose run is marked interrupted on the next open."""

import os
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from rl_core.algorithms import get_preset
from rl_core.config import RunConfig
from rl_core.runs.store import MIGRATIONS, SCHEMA_VERSION, STALE_AFTER, Heartbeat, RunStore, StoreError, use_wal

# A writer process: one run, `steps` records (with samples) written `pause` seconds apart, then finished.
WRITER = """
import sys, time
from rl_core.algorithms import get_preset
from rl_core.config import RunConfig
from rl_core.runs.store import RunStore
db, steps, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
store = RunStore(db)
run_id = store.add_run(RunConfig(algo=get_preset("grpo"), task="reverse", steps=steps), label="grpo")
store.start_run(run_id)
for step in range(1, steps + 1):
    store.add_step(run_id, {"step": step, "success_rate": step / steps, "samples": [{"response": "x" * 40}] * 4})
    time.sleep(pause)
store.finish_run(run_id, "finished", final={"success_rate": 1.0})
"""


def writer(db, steps: int, pause: float = 0.0) -> subprocess.Popen:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db), str(steps), str(pause)],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def steps_written(db) -> int:
    runs = RunStore(db, recover=False).runs() if db.exists() else []
    return runs[0].steps_done if runs else 0


def tiny_run(steps: int = 3, seed: int = 0) -> RunConfig:
    return RunConfig(algo=get_preset("rloo", beta=0.1), task="reverse", steps=steps, seed=seed)


def test_a_new_store_has_the_current_schema_in_wal_mode(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    db = sqlite3.connect(store.path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"sweeps", "runs", "steps"} <= tables
    RunStore(store.path)  # reopening an up-to-date file changes nothing


def test_a_store_that_cannot_be_opened_is_refused_by_name(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(StoreError, match="cannot open the run store runs.sqlite") as refused:
        RunStore(tmp_path / "file" / "runs.sqlite")
    assert str(tmp_path) not in str(refused.value), "the file's name, never its folder"


def test_a_store_from_a_newer_schema_is_refused_by_name(tmp_path):
    path = tmp_path / "runs.sqlite"
    RunStore(path)
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match=f"^runs.sqlite has schema version {SCHEMA_VERSION + 1}"):
        RunStore(path)


def test_a_run_is_written_as_it_goes_and_read_back(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    sweep_id = store.create_sweep({"algos": ["rloo"]})
    run_id = store.add_run(tiny_run(), label="rloo · beta=0.1", variant={"beta": 0.1}, sweep_id=sweep_id)
    queued = store.run(run_id)
    assert (queued.status, queued.steps_done, queued.owner_pid, queued.active) == ("queued", 0, os.getpid(), True)
    assert store.latest_sweep() == sweep_id and [r.id for r in store.runs(sweep_id=sweep_id)] == [run_id]

    store.start_run(run_id)
    for step in (1, 2, 3):
        store.add_step(
            run_id,
            {
                "step": step,
                "reward_mean": step / 3,
                "response_length_correct": float("nan"),
                "samples": [{"prompt": "ab", "response": f"r{step}"}],
            },
        )
        assert store.run(run_id).steps_done == step
    store.finish_run(run_id, "finished", final={"success_rate": 0.75})

    run = store.run(run_id)
    assert (run.status, run.label, run.algo, run.seed, run.variant) == (
        "finished",
        "rloo · beta=0.1",
        "rloo",
        0,
        {"beta": 0.1},
    )
    assert run.final == {"success_rate": 0.75} and run.error is None and not run.active
    assert run.config["algo"]["beta"] == 0.1 and run.config["steps"] == 3
    assert run.wall_time >= 0
    steps = store.steps(run_id)
    assert [s["step"] for s in steps] == [1, 2, 3] and "samples" not in steps[0]
    assert steps[2]["response_length_correct"] != steps[2]["response_length_correct"]  # NaN comes back as NaN
    assert [s["step"] for s in store.steps(run_id, after=1)] == [2, 3]
    assert store.samples(run_id) == [{"prompt": "ab", "response": "r3"}]
    assert store.samples(run_id, step=1)[0]["response"] == "r1"


def test_delete_takes_the_steps_along_and_keeps_active_runs(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    done, training = store.add_run(tiny_run(), "rloo"), store.add_run(tiny_run(seed=1), "rloo")
    store.start_run(done)
    store.add_step(done, {"step": 1, "samples": []})
    store.finish_run(done, "failed", error="ValueError: boom")
    store.start_run(training)
    assert store.delete([done, training]) == 1
    assert [r.id for r in store.runs()] == [training] and store.steps(done) == []
    with pytest.raises(KeyError):
        store.run(done)
    with pytest.raises(ValueError, match="status='running' does not end a run"):
        store.finish_run(training, "running")


def test_settle_ends_only_runs_still_active(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    finished, queued = store.add_run(tiny_run(), "rloo"), store.add_run(tiny_run(seed=1), "rloo")
    store.finish_run(finished, "finished")
    assert store.settle([finished, queued], "stopped") == [queued]
    assert [r.status for r in store.runs()] == ["finished", "stopped"]


def test_a_stale_heartbeat_marks_a_run_interrupted_and_a_fresh_one_does_not(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    stale, fresh = store.add_run(tiny_run(), "rloo"), store.add_run(tiny_run(seed=1), "rloo")
    with sqlite3.connect(store.path) as db:  # this process is alive, but its heartbeat on `stale` is old
        db.execute("UPDATE runs SET heartbeat_at = ? WHERE id = ?", (time.time() - STALE_AFTER - 1, stale))
    assert store.recover() == [stale]
    assert store.run(stale).status == "interrupted" and "no sign of life" in store.run(stale).error
    assert store.run(fresh).status == "queued"


def test_the_heartbeat_thread_refreshes_this_process_runs(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    run_id = store.add_run(tiny_run(), "rloo")
    before = store.run(run_id).heartbeat_at
    with Heartbeat(store, interval=0.05):
        time.sleep(0.3)
    assert store.run(run_id).heartbeat_at > before


def test_a_refused_switch_to_wal_is_retried_until_the_lock_is_released(tmp_path):
    path = tmp_path / "runs.sqlite"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    # timeout=0: SQLite refuses at once while the lock is held, as it does when processes open a new file together
    opener = sqlite3.connect(path, timeout=0, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        opener.execute("PRAGMA journal_mode = WAL")
    release = threading.Timer(0.3, lambda: holder.execute("COMMIT"))
    release.start()
    started = time.monotonic()
    use_wal(opener)
    release.join()
    assert time.monotonic() - started >= 0.25
    assert opener.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_processes_writing_at_once_lose_nothing(tmp_path):
    db, writers, steps = tmp_path / "runs.sqlite", 4, 60
    processes = [writer(db, steps) for _ in range(writers)]
    for process in processes:
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr
        assert "locked" not in stderr
    store = RunStore(db)
    runs = store.runs()
    assert len(runs) == writers and all(r.status == "finished" and r.steps_done == steps for r in runs)
    assert all([s["step"] for s in store.steps(r.id)] == list(range(1, steps + 1)) for r in runs)


def test_a_writer_killed_mid_run_leaves_its_steps_and_is_marked_interrupted(tmp_path):
    db = tmp_path / "runs.sqlite"
    process = writer(db, steps=10_000, pause=0.01)
    deadline = time.monotonic() + 60
    while steps_written(db) < 5:
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline, "the writer wrote nothing"
        time.sleep(0.05)
    process.kill()  # SIGKILL: no cleanup of any kind
    process.wait()
    store = RunStore(db)
    [run] = store.runs()
    assert run.status == "interrupted" and f"pid {process.pid}" in run.error
    assert 5 <= run.steps_done < 10_000
    assert [s["step"] for s in store.steps(run.id)] == list(range(1, run.steps_done + 1))
    with sqlite3.connect(db) as check:
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_v1_store_is_migrated_and_its_runs_become_shared(tmp_path):
    path = tmp_path / "runs.sqlite"
    with sqlite3.connect(path) as db:  # a file written before runs had an owning session
        for statement in MIGRATIONS[0]:
            db.execute(statement)
        db.execute("PRAGMA user_version = 1")
        db.execute(
            "INSERT INTO runs (label, task, algo, seed, variant, config, status, steps_total, created_at, "
            "heartbeat_at, owner_pid, owner_host) VALUES ('old', 'reverse', 'grpo', 0, '{}', '{}', "
            "'finished', 3, 0, 0, 1, 'elsewhere')"
        )
    store = RunStore(path)
    [old] = store.runs()
    assert old.session is None and store.runs(visible_to="anyone") == [old]


def test_sessions_see_and_delete_only_their_own_runs_and_sweeps(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    runs = {}
    for session in ("a", "b", None):
        sweep = store.create_sweep({}, session=session)
        runs[session] = store.add_run(tiny_run(), "grpo", sweep_id=sweep, session=session)
        store.finish_run(runs[session], "finished")
    assert [r.id for r in store.runs(visible_to="a")] == [runs["a"], runs[None]]
    assert [r.id for r in store.runs(list(runs.values()), visible_to="b")] == [runs["b"], runs[None]]
    assert store.latest_sweep("a") == 1 and store.latest_sweep("c") is None and store.latest_sweep() == 3
    assert store.delete(list(runs.values()), session="a") == 1  # b's and the shared run stay
    assert sorted(r.id for r in store.runs()) == [runs["b"], runs[None]]


# A record the size of a real one (measured on a GRPO step, caesar / tiny, 8 samples: 1.3 kB of scalars, 12 kB
# of samples): 60 scalars, and 8 samples of 30 tokens with five per-token series.
def sized_record(step: int) -> dict:
    sample = {
        "prompt": "abcd",
        "response": "x" * 30,
        "tokens": ["x"] * 30,
        **{series: [0.123456789] * 30 for series in ("advantages", "ratios", "entropies", "log_probs", "kl")},
    }
    return {"step": step, **{f"metric_{i}": 0.123456789 * i for i in range(60)}, "samples": [sample] * 8}


def store_bytes(path) -> int:
    """The store on disk: the file and its write-ahead log."""
    return sum(os.path.getsize(p) for p in (path, f"{path}-wal") if os.path.exists(p))


def test_a_store_limited_to_1_mb_stays_within_it_and_says_why_it_refuses(tmp_path, monkeypatch):
    monkeypatch.setenv("RLHF_LAB_STORE_MAX_MB", "1")
    path = tmp_path / "runs.sqlite"
    store = RunStore(path)
    refusals = []
    for _ in range(2):  # two 300-step runs
        try:
            run_id = store.add_run(tiny_run(steps=300), "grpo")
            store.start_run(run_id)
            for step in range(1, 301):
                store.add_step(run_id, sized_record(step))
            store.finish_run(run_id, "finished")
        except StoreError as refused:
            refusals.append(str(refused))
    assert store_bytes(path) <= 1.5 * 2**20, store_bytes(path)
    assert refusals and all("RLHF_LAB_STORE_MAX_MB=1 MB" in r and "delete old runs" in r for r in refusals)
    assert str(tmp_path) not in "".join(refusals)
    first = store.runs()[0]  # it kept every step it wrote before the limit
    assert first.steps_done > 0 and [r["step"] for r in store.steps(first.id)] == list(range(1, first.steps_done + 1))
    # deleting runs makes room again
    store.finish_run(first.id, "failed")
    store.delete([run.id for run in store.runs()])
    store.add_run(tiny_run(), "grpo")


def test_the_samples_of_a_run_are_kept_for_its_latest_steps_only(tmp_path):
    from rl_core.runs.store import SAMPLE_WINDOW

    store = RunStore(tmp_path / "runs.sqlite")
    run_id = store.add_run(tiny_run(steps=SAMPLE_WINDOW + 5), "grpo")
    for step in range(1, SAMPLE_WINDOW + 6):
        store.add_step(run_id, {"step": step, "samples": [{"response": f"r{step}"}]})
    kept = [step for step in range(1, SAMPLE_WINDOW + 6) if store.samples(run_id, step=step)]
    assert kept == list(range(6, SAMPLE_WINDOW + 6))
    assert len(store.steps(run_id)) == SAMPLE_WINDOW + 5


def test_a_read_only_open_of_a_missing_file_creates_nothing(tmp_path):
    with pytest.raises(StoreError, match="there is no run store missing.sqlite there"):
        RunStore(tmp_path / "missing.sqlite", create=False)
    assert list(tmp_path.iterdir()) == []


def test_a_run_joins_a_training_loops_batch_without_a_place_of_its_own(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    first, second, third, other = (store.add_run(tiny_run(), "live") for _ in range(4))

    def give_up():  # a claim that would wait for the place gives up after three looks at the store
        tries = iter(range(3))
        return lambda: next(tries, None) is None

    assert store.claim(first, 1, give_up())  # the loop's first run takes the one place
    assert store.claim(second, 1, give_up(), join={first})  # joins it: no second place needed
    assert (store.run(second).status, store.run(second).batch_id) == ("running", first)
    store.finish_run(first, "finished")  # the batch goes on with its other run
    assert store.claim(third, 1, give_up(), join={first, second}) and store.run(third).batch_id == first
    assert not store.claim(other, 1, give_up())  # a run outside the loop still finds the one place taken
    store.finish_run(second, "stopped")
    store.finish_run(third, "failed")
    assert store.claim(other, 1, give_up(), join={first, second, third}), "no member training: a place of its own"
    assert store.run(other).batch_id is None


def test_a_claim_counts_live_owners_runs_only_and_gives_up_when_stopped(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        for pid in (alive.pid, dead.pid):
            run_id = store.add_run(tiny_run(), "elsewhere")
            store.start_run(run_id)
            with store._write() as db:
                db.execute("UPDATE runs SET owner_pid = ? WHERE id = ?", (pid, run_id))
        mine = store.add_run(tiny_run(), "mine")
        stop_at = time.monotonic() + 1.0
        # cap 1: the live process's run takes the place (the dead one's does not), so the claim waits, then stops
        assert not store.claim(mine, 1, lambda: time.monotonic() > stop_at)
        assert store.run(mine).status == "queued"
        assert store.claim(mine, 2, lambda: False) and store.run(mine).status == "running"
    finally:
        alive.kill()
        alive.wait()
