"""Reuse of finished runs: the run key, the store's reused and watching rows (atomic, private, surviving the
deletion of the run they show), and experiments that train only what the store lacks: an identical request trains
nothing and writes the same summary, two identical requests in flight train once, `--fresh` trains again, a changed
knob trains only the changed runs, and a watched run that does not finish is trained by its watcher."""

import dataclasses
import json
import sqlite3
import threading

import pytest
import torch

from rl_core.algorithms import get_preset
from rl_core.cli import main
from rl_core.config import RunConfig
from rl_core.experiments import Arm, Experiment, get_experiment
from rl_core.experiments.runner import SUMMARY_FILE, ExperimentRun, unused_seeds
from rl_core.runs import reuse
from rl_core.runs.reuse import engine_version, recorded_when, reuse_line, run_key
from rl_core.runs.store import MIGRATIONS, RunStore

NAME = "gspo_clipping"  # no reward model to train: the quickest experiment
QUICK = {"seeds": [0], "steps": 2, "workers": 2}  # the command line's SFT steps: its runs are the same


def tiny_run(**changes) -> RunConfig:
    knobs = changes.pop("knobs", {})
    return RunConfig(algo=get_preset("grpo", **knobs), **{"task": "reverse", "steps": 3, "device": "cpu", **changes})


# ---------------------------------------------------------------------------------------------------- the key
def test_equal_runs_have_equal_keys_and_any_knob_seed_or_field_changes_it():
    assert run_key(tiny_run()) == run_key(tiny_run())
    keys = {
        run_key(run)
        for run in (
            tiny_run(),
            tiny_run(seed=1),
            tiny_run(knobs={"beta": 0.01}),
            tiny_run(steps=4),
            tiny_run(sft_steps=199),
            tiny_run(model="small"),
            tiny_run(demo_noise=0.5),
            tiny_run(task="caesar"),
            tiny_run(samples_per_record=2),
        )
    }
    assert len(keys) == 9


def test_the_key_holds_the_device_kind_not_how_it_was_asked_for():
    assert run_key(tiny_run()) == run_key(dataclasses.replace(tiny_run(), device="cpu:0"))


def test_a_tiny_run_on_auto_is_keyed_to_the_cpu_where_a_gpu_is_too(monkeypatch):
    cpu_key = run_key(tiny_run(device="cpu"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert run_key(tiny_run(device="auto")) == cpu_key  # auto trains the tiny model on the CPU: a CPU record answers
    assert run_key(tiny_run(device="cuda")) != cpu_key


def test_a_change_of_the_engine_changes_every_key(monkeypatch):
    before = run_key(tiny_run())
    monkeypatch.setattr(reuse, "engine_version", lambda: "another engine")
    assert run_key(tiny_run()) != before


def test_the_engine_version_hashes_the_sources_of_both_packages(tmp_path, monkeypatch):
    for package in reuse.ENGINE_PACKAGES:
        (tmp_path / package / "sub").mkdir(parents=True)
        (tmp_path / package / "sub" / "a.py").write_text("x = 1\n")
    (tmp_path / "elsewhere.py").write_text("y = 1\n")
    monkeypatch.setattr(reuse, "ROOT", tmp_path)
    versions = []
    for edit in (None, ("elsewhere.py", "y = 2\n"), ("toy_tasks/sub/a.py", "x = 2\n"), ("rl_core/b.py", "")):
        if edit:
            (tmp_path / edit[0]).write_text(edit[1])
        engine_version.cache_clear()
        versions.append(engine_version())
    engine_version.cache_clear()
    # a file outside the packages changes nothing; an edit or a new file inside either does
    assert versions[0] == versions[1] and len(set(versions[1:])) == 3


def test_recorded_when_is_one_minute_or_a_span():
    assert recorded_when([0.0, 30.0]) == recorded_when([0.0])
    assert recorded_when([0.0, 7200.0]) == f"{recorded_when([0.0])} to {recorded_when([7200.0])}"


# ---------------------------------------------------------------------------------------------- the store
def finished_run(store: RunStore, key: str, session: str | None = None, steps: int = 3) -> int:
    run_id = store.add_run(tiny_run(), "grpo", session=session, key=key)
    store.start_run(run_id)
    for step in range(1, steps + 1):
        store.add_step(run_id, {"step": step, "reward_mean": step / 10, "samples": [{"response": f"r{step}"}]})
    store.finish_run(run_id, "finished", final={"success_rate": 0.5})
    return run_id


def test_a_request_of_a_finished_key_is_a_finished_row_of_its_own_showing_the_records(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    source = finished_run(store, "k", session="a")
    reused = store.add_run(tiny_run(), "grpo", session="b", key="k", reuse=True)
    row, original = store.run(reused), store.run(source)
    assert row.status == "finished" and row.reused and row.records_from == source and row.session == "b"
    assert (row.steps_done, row.final, row.finished_at, row.wall_time) == (
        original.steps_done,
        original.final,
        original.finished_at,
        original.wall_time,
    )
    assert store.steps(reused) == store.steps(source) and store.samples(reused, 2) == [{"response": "r2"}]
    assert store.training_seconds("b", since=0) == 0.0, "b trained nothing"
    # another key, or fresh, is queued to train
    assert store.run(store.add_run(tiny_run(), "grpo", key="other", reuse=True)).status == "queued"
    assert not store.run(store.add_run(tiny_run(), "grpo", key="k")).reused
    assert store.reusable(["k", "other", "none"]) == {"k", "other"}


def test_deleting_the_trained_run_hands_its_records_to_a_row_that_shows_them(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    source = finished_run(store, "k", session="a")
    records = store.steps(source)
    first, second = (store.add_run(tiny_run(), "grpo", session=s, key="k", reuse=True) for s in ("b", "c"))
    assert store.delete([first, source], session="b") == 1, "b deletes its own row, never a's"
    assert store.steps(source) == records and store.steps(second) == records
    assert store.delete([source], session="a") == 1
    assert store.steps(second) == records and store.run(second).records_from == second
    later = store.add_run(tiny_run(), "grpo", session="d", key="k", reuse=True)
    assert store.steps(later) == records and store.run(later).records_from == second
    assert store.delete([second], session="c") == 1
    assert store.steps(later) == records and store.run(later).records_from == later
    with sqlite3.connect(tmp_path / "runs.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM steps").fetchone()[0] == len(records), "stored once"


def test_a_watching_row_follows_its_run_and_trains_when_that_one_does_not_finish(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    source = store.add_run(tiny_run(), "grpo", session="a", key="k")
    watcher = store.add_run(tiny_run(), "grpo", session="b", key="k", reuse=True)
    assert store.run(watcher).status == "queued" and store.run(watcher).records_from == source
    third = store.add_run(tiny_run(), "grpo", key="k", reuse=True)
    assert store.run(third).records_from == source, "a third request watches the run that trains, not a watcher"
    store.start_run(source)
    store.add_step(source, {"step": 1, "reward_mean": 0.1})
    assert store.follow(watcher) == "waiting" and store.run(watcher).steps_done == 1
    assert store.steps(watcher) == store.steps(source)
    store.finish_run(source, "finished", final={"success_rate": 1.0})
    assert store.follow(watcher) == "finished" and store.run(watcher).status == "finished"
    # a watched run that fails (or stops, or whose owner is gone) leaves its watcher to train
    failing = store.add_run(tiny_run(), "grpo", key="f")
    orphan = store.add_run(tiny_run(), "grpo", key="f", reuse=True)
    store.finish_run(failing, "failed", error="boom")
    assert store.follow(orphan) == "train"
    assert store.run(orphan).status == "queued" and not store.run(orphan).reused and store.steps(orphan) == []


def test_a_run_whose_owner_is_gone_is_not_joined(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    source = store.add_run(tiny_run(), "grpo", key="k")
    with sqlite3.connect(tmp_path / "runs.sqlite") as db:  # as if queued by a process that has ended
        db.execute("UPDATE runs SET owner_pid = 2147483647 WHERE id = ?", (source,))
    assert store.reusable(["k"]) == set()
    assert not store.run(store.add_run(tiny_run(), "grpo", key="k", reuse=True)).reused


def test_requests_racing_for_one_key_queue_it_once(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    barrier = threading.Barrier(8)

    def request():
        barrier.wait()
        store.add_run(tiny_run(), "grpo", key="k", reuse=True)

    threads = [threading.Thread(target=request) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    runs = store.runs()
    trainers = [run for run in runs if not run.reused]
    assert len(runs) == 8 and len(trainers) == 1
    assert {run.records_from for run in runs if run.reused} == {trainers[0].id}


def test_a_v2_store_is_migrated_and_its_runs_have_no_key(tmp_path):
    path = tmp_path / "runs.sqlite"
    with sqlite3.connect(path) as db:  # a file written before runs had a key
        for statement in MIGRATIONS[0] + MIGRATIONS[1]:
            db.execute(statement)
        db.execute("PRAGMA user_version = 2")
        db.execute(
            "INSERT INTO runs (label, task, algo, seed, variant, config, status, steps_total, created_at, "
            "heartbeat_at, owner_pid, owner_host) VALUES ('old', 'reverse', 'grpo', 0, '{}', '{}', "
            "'finished', 3, 0, 0, 1, 'elsewhere')"
        )
    store = RunStore(path)
    [old] = store.runs()
    assert old.run_key is None and not old.reused
    assert not store.run(store.add_run(tiny_run(), "grpo", key="k", reuse=True)).reused


# ---------------------------------------------------------------------------------------------- experiments
def trained_here(store: RunStore) -> list:
    """The runs that trained (started by a worker here), not those answered from another's records."""
    return [run for run in store.runs() if not run.reused and run.started_at is not None]


def comparable(summary: dict) -> dict:
    """A summary without what names this request rather than the computation: ids and wall times."""
    rows = [{k: v for k, v in row.items() if k not in ("run_id", "wall_time")} for row in summary["runs"]]
    return {**{k: v for k, v in summary.items() if k not in ("sweep_id", "wall_time", "runs")}, "runs": rows}


def steps_stored(path) -> int:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT COUNT(*) FROM steps").fetchone()[0]


@pytest.mark.slow
def test_an_identical_experiment_trains_nothing_and_writes_the_same_summary_and_fresh_trains_again(tmp_path, capsys):
    db = tmp_path / "runs.sqlite"
    experiment = get_experiment(NAME)
    first = ExperimentRun(experiment, tmp_path / "first", RunStore(db), **QUICK).run()
    assert len(trained_here(RunStore(db))) == 2 and steps_stored(db) == 4
    second = ExperimentRun(experiment, tmp_path / "second", RunStore(db), **QUICK)
    assert all(run.reused and run.status == "finished" for run in RunStore(db).runs(second.sweep.run_ids))
    summary = second.run()
    assert len(trained_here(RunStore(db))) == 2 and steps_stored(db) == 4, "nothing trained"
    assert comparable(summary) == comparable(first)
    written = [json.loads((tmp_path / folder / SUMMARY_FILE).read_text()) for folder in ("first", "second")]
    assert comparable(written[0]) == comparable(written[1])
    for row in first["runs"]:
        assert (tmp_path / "first" / row["records"]).read_text() == (tmp_path / "second" / row["records"]).read_text()
    # the command line reuses by default and says so; --fresh trains again
    command = ["experiment", NAME, "--seeds", "0", "--steps", "2", "--db", str(db), "--out", str(tmp_path / "cli")]
    assert main(command) == 0
    assert "reused 2 of 2 runs (recorded " in capsys.readouterr().out and len(trained_here(RunStore(db))) == 2
    assert main([*command, "--fresh"]) == 0
    assert "reused 0 of 2 runs" in capsys.readouterr().out.splitlines()
    assert len(trained_here(RunStore(db))) == 4 and steps_stored(db) == 8
    assert unused_seeds(experiment, RunStore(db), 2, steps=2) == [1, 2]
    assert unused_seeds(experiment, RunStore(db), 1, steps=3) == [0], "other steps: other runs"


@pytest.mark.slow
def test_two_identical_requests_in_flight_train_once(tmp_path):
    db = tmp_path / "runs.sqlite"
    requests = [ExperimentRun(get_experiment(NAME), tmp_path / f"out{i}", RunStore(db), **QUICK) for i in range(2)]
    summaries = [None, None]

    def run(i):
        summaries[i] = requests[i].run()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    store = RunStore(db)
    assert len(trained_here(store)) == 2 and len({run.run_key for run in trained_here(store)}) == 2
    assert steps_stored(db) == 4
    assert [run.status for run in store.runs()] == ["finished"] * 4
    assert comparable(summaries[0]) == comparable(summaries[1])
    assert reuse_line(store.runs(requests[1].sweep.run_ids)).startswith("reused 2 of 2 runs (recorded ")


@pytest.mark.slow
def test_a_watcher_trains_what_it_watched_when_that_request_stops(tmp_path):
    db = tmp_path / "runs.sqlite"
    first, second = (ExperimentRun(get_experiment(NAME), tmp_path / f"out{i}", RunStore(db), **QUICK) for i in range(2))
    first.stop()  # its runs end as stopped without training
    assert {run.status for run in first.sweep.run()} == {"stopped"}
    summary = second.run()
    assert [row["status"] for row in summary["runs"]] == ["finished"] * 2
    assert [run.id for run in trained_here(RunStore(db))] == second.sweep.run_ids


TWO_ARMS = dict(
    name="two_arms",
    title="two arms",
    claim="b beats a",
    source="none",
    task="reverse",
    steps=2,
    metric="x",
    effect=lambda runs: 0.0,
    expected="positive",
    knobs=("beta",),
    seeds=(0,),
    run_fields={"sft_steps": 5},
)


@pytest.mark.slow
def test_a_changed_knob_trains_only_the_changed_runs(tmp_path):
    db = tmp_path / "runs.sqlite"
    before = Experiment(arms=(Arm("a", "grpo", {"beta": 0.0}), Arm("b", "grpo", {"beta": 0.1})), **TWO_ARMS)
    after = dataclasses.replace(before, arms=(before.arms[0], Arm("b", "grpo", {"beta": 0.2})))
    ExperimentRun(before, tmp_path / "before", RunStore(db), workers=2).run()
    changed = ExperimentRun(after, tmp_path / "after", RunStore(db), workers=2)
    changed.run()
    rows = RunStore(db).runs(changed.sweep.run_ids)
    assert [(run.reused, run.status) for run in rows] == [(True, "finished"), (False, "finished")]
    assert len(trained_here(RunStore(db))) == 3


@pytest.mark.parametrize(
    "arguments, message",
    [
        ([NAME, "--all"], f"--all runs every experiment; drop the name '{NAME}' or --all"),
        ([], "or pass --all or --list"),
    ],
)
def test_all_with_a_name_or_neither_is_refused_in_one_line(arguments, message, tmp_path, capsys):
    assert main(["experiment", *arguments, "--db", str(tmp_path / "runs.sqlite")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


@pytest.mark.slow
def test_all_runs_every_experiment_in_turn_and_warms_the_store(tmp_path, capsys, monkeypatch):
    from rl_core import cli

    two_arms = Experiment(arms=(Arm("a", "grpo", {"beta": 0.0}), Arm("b", "grpo", {"beta": 0.1})), **TWO_ARMS)
    monkeypatch.setattr(cli, "EXPERIMENTS", {NAME: get_experiment(NAME), two_arms.name: two_arms})
    command = [
        "experiment",
        "--all",
        "--seeds",
        "0",
        "--steps",
        "2",
        "--db",
        str(tmp_path / "runs.sqlite"),
        "--out",
        str(tmp_path / "out"),
    ]
    assert main(command) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [NAME, "two_arms"]
    assert all(", reused 0 of 2 runs, " in line for line in lines)
    assert (tmp_path / "out" / NAME / SUMMARY_FILE).is_file() and (
        tmp_path / "out" / "two_arms" / SUMMARY_FILE
    ).is_file()
    assert main(command) == 0
    assert all(", reused 2 of 2 runs (recorded " in line for line in capsys.readouterr().out.splitlines())
