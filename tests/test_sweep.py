"""Sweeps: planning and its refusals, the outcome summary, the `sweep` command end to end, and Stop."""

import csv
import math
import os
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from rl_core.cli import main
from rl_core.experiments import get_experiment
from rl_core.experiments.runner import plan_experiment
from rl_core.runs.store import RunStore, process_alive
from rl_core.runs.summary import format_table, run_outcome, summarise
from rl_core.runs.sweep import Sweep, batch_count, batches, parse_grid, plan_sweep, warm_start_kind
from rl_core.runs.workers import trains_in_local_workers

ROOT = Path(__file__).resolve().parents[1]
# Two prompts × two responses, one update per step, a short warm start: a run takes seconds.
QUICK = [
    "--set",
    "prompts_per_step=2",
    "--set",
    "num_generations=2",
    "--set",
    "ppo_epochs=1",
    "--set",
    "num_minibatches=1",
    "--sft-steps",
    "20",
]


def sweep_command(tmp_path: Path, *arguments: str) -> subprocess.CompletedProcess:
    """`python -m rl_core sweep …` in a subprocess with its own model cache and run store under tmp_path."""
    env = {**os.environ, "RLHF_LAB_CACHE": str(tmp_path / "cache")}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "rl_core",
            "sweep",
            "--db",
            str(tmp_path / "runs.sqlite"),
            "--out",
            str(tmp_path / "out"),
            *arguments,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def read_csv(path: Path) -> list[dict]:
    with path.open() as file:
        return list(csv.DictReader(file))


def test_grid_values_are_typed_per_knob_and_refused_by_name():
    assert parse_grid(["beta=0, 0.1", "dual_clip=none,3"]) == {"beta": [0.0, 0.1], "dual_clip": [None, 3.0]}
    assert parse_grid(["loss_agg_mode=token-mean,seq-mean-token-mean"])["loss_agg_mode"][1] == "seq-mean-token-mean"
    for bad, message in [
        ("beta", "not of the form"),
        ("bogus=1,2", "unknown knob 'bogus'"),
        ("use_critic=maybe", "use_critic='maybe' is not a boolean"),
        ("beta=0.1,0.1", "repeats"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_grid([bad])


def test_a_plan_crosses_presets_grid_values_and_seeds():
    planned = plan_sweep(
        ["grpo", "rloo"],
        range(2),
        "reverse",
        5,
        overrides={"prompts_per_step": 4},
        grid={"beta": [0.0, 0.1]},
        sft_steps=10,
    )
    assert [(p.label, p.run.seed) for p in planned][:3] == [
        ("grpo · beta=0.0", 0),
        ("grpo · beta=0.0", 1),
        ("grpo · beta=0.1", 0),
    ]
    assert len(planned) == 8 and all(p.run.algo.prompts_per_step == 4 and p.run.sft_steps == 10 for p in planned)
    assert [p.run.algo.beta for p in planned if p.run.algo.name == "rloo"] == [0.0, 0.0, 0.1, 0.1]
    # One SFT checkpoint per seed, shared by all: one kind, two seeds.
    assert len({(warm_start_kind(p.run), p.run.seed) for p in planned}) == 2


@pytest.mark.parametrize(
    "algos, kwargs, message",
    [
        (["nope"], {}, "algorithm 'nope' is unknown"),
        (["grpo", "grpo"], {}, "lists a preset twice"),
        (["grpo"], {"grid": {"epsilon": [0.2, 1.5]}}, "epsilon=1.5 is out of range"),
        (["grpo"], {"overrides": {"beta": 0.1}, "grid": {"beta": [0.0]}}, "beta is both set and swept"),
        (["grpo"], {"model": "huge"}, "model='huge' is unknown"),
        ([], {}, "algos is empty"),
        (
            ["grpo", "rloo"],
            {"grid": {"beta": [0.0, 0.1]}, "seeds": range(251)},
            r"the sweep has 1004 runs \(presets × grid values × seeds\); allowed: at most 1000",
        ),
    ],
)
def test_a_plan_refuses_bad_input_by_name(algos, kwargs, message):
    with pytest.raises(ValueError, match=message):
        plan_sweep(algos, kwargs.pop("seeds", range(1)), "reverse", 5, **kwargs)


def test_outcomes_and_their_summary_across_seeds(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    planned = plan_sweep(["grpo"], range(3), "reverse", 3)
    rows = []
    for index, p in enumerate(planned):
        run_id = store.add_run(p.run, p.label)
        store.start_run(run_id)
        records = [
            {"step": s, "success_rate": (s + index) / 4, "elapsed": 0.5 * s, "kl_exact": 0.1 * index, "entropy": 1.0}
            for s in (1, 2, 3)
        ]
        for record in records:
            store.add_step(run_id, record)
        store.finish_run(run_id, "finished", final={"success_rate": 0.8 + 0.1 * (index == 2)})
        outcome = run_outcome(store.run(run_id), store.steps(run_id))
        rows.append({"label": p.label, "algo": "grpo", **outcome})
    # seed 0 never reaches 90 % (3/4 at best), seed 1 at step 3 (4/4), seed 2 at step 2 (4/4)
    assert [r["steps_to_target"] for r in rows][1:] == [3, 2] and math.isnan(rows[0]["steps_to_target"])
    [summary] = summarise(rows)
    assert summary["seeds"] == 3 and summary["reached_target"] == 2
    assert summary["steps_to_target_mean"] == 2.5 and summary["seconds_to_target_mean"] == 1.25
    assert summary["final_success_mean"] == pytest.approx(0.8333, abs=1e-4)
    assert summary["kl_final_std"] == pytest.approx(0.1)
    table = format_table([summary]).splitlines()
    assert table[0].split()[:2] == ["group", "seeds"] and "2.5 ± 0.71 (2/3)" in table[2]


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--algos", "grpo,nope"], "algorithm 'nope' is unknown; allowed: pg, ppo"),
        (["--algos", "grpo", "--grid", "beta=-1,0"], "beta=-1.0 is out of range"),
        (["--algos", "grpo", "--grid", "bogus=1,2"], "unknown knob 'bogus'"),
        (["--algos", "grpo", "--grid", "beta"], "is not of the form knob=value1,value2"),
        (["--algos", "grpo", "--set", "beta=0.1", "--grid", "beta=0,0.1"], "beta is both set and swept"),
        (["--algos", "grpo", "--seeds", "0"], "--seeds 0 is out of range"),
        (["--algos", "grpo", "--workers", "0"], "workers=0 is out of range"),
        (["--algos", "grpo", "--task", "nope"], "task 'nope' is unknown"),
        (["--algos", "grpo", "--steps", "0"], "steps=0 is out of range"),
    ],
)
def test_bad_sweep_input_is_refused_with_exit_2(arguments, message, tmp_path, capsys):
    code = main(["sweep", "--db", str(tmp_path / "runs.sqlite"), "--out", str(tmp_path / "out"), *arguments])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out" / "summary.csv").exists()


def test_an_out_path_that_is_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "out").write_text("")
    code = main(["sweep", "--algos", "grpo", "--db", str(tmp_path / "runs.sqlite"), "--out", str(tmp_path / "out")])
    assert code == 2
    assert "is a file" in capsys.readouterr().err


def test_batches_group_the_runs_of_one_shape_over_seeds_whatever_the_workers():
    runs = lambda name, seeds=None: [a.planned.run for a in plan_experiment(get_experiment(name), seeds)]  # noqa: E731
    # 2 arms × 8 seeds whose critics differ (the reward model's shape, the policy's): one batch per arm.
    assert batches(dict(enumerate(runs("critic_from_rm")))) == [list(range(8)), list(range(8, 16))]
    assert batch_count(runs("critic_from_rm", [0])) == 2
    # A grid of two clip ranges × 5 seeds, one shape: 10 runs cut into 5 and 5, in plan order; PPO (G = 1, a
    # critic) apart.
    planned = plan_sweep(["grpo", "ppo"], [0, 1, 2, 3, 4], "caesar", 5, grid={"epsilon": [0.1, 0.2]})
    assert batches(dict(enumerate(p.run for p in planned))) == [
        [0, 1, 2, 3, 4],
        [5, 6, 7, 8, 9],
        [10, 11, 12, 13, 14],
        [15, 16, 17, 18, 19],
    ]
    assert batch_count([p.run for p in planned]) == 4


@pytest.mark.slow
def test_the_sweep_command_writes_csvs_and_prints_the_summary(tmp_path):
    result = sweep_command(tmp_path, "--algos", "grpo,rloo", "--seeds", "2", "--steps", "3", "--workers", "2", *QUICK)
    assert result.returncode == 0, result.stderr
    out = tmp_path / "out"
    for name in ("grpo-seed0", "grpo-seed1", "rloo-seed0", "rloo-seed1"):
        steps = read_csv(out / "runs" / f"{name}.csv")
        assert [row["step"] for row in steps] == ["1", "2", "3"] and "kl_exact" in steps[0] and "elapsed" in steps[0]
    assert [(r["label"], r["status"]) for r in read_csv(out / "runs.csv")] == [
        ("grpo", "finished"),
        ("grpo", "finished"),
        ("rloo", "finished"),
        ("rloo", "finished"),
    ]
    summary = read_csv(out / "summary.csv")
    assert [(r["label"], r["seeds"]) for r in summary] == [("grpo", "2"), ("rloo", "2")]
    assert all(0 <= float(r["final_success_mean"]) <= 1 and float(r["wall_time_mean"]) > 0 for r in summary)
    table = result.stdout.splitlines()
    assert table[0].split()[:3] == ["group", "seeds", "final"] and "KL at end" in table[0]
    assert [line.split()[0] for line in table[2:]] == ["grpo", "rloo"]
    assert result.stderr.count(": finished after 3 steps") == 4
    runs = RunStore(tmp_path / "runs.sqlite").runs()
    assert len(runs) == 4 and {r.owner_pid for r in runs} != {os.getpid()}
    # GRPO and RLOO with these knobs have one shape: their four runs, over both seeds, trained as one batch (one
    # program), named by its first run.
    assert {r.batch_id for r in runs} == {min(r.id for r in runs)}


@pytest.mark.slow
def test_a_grid_sweep_runs_every_value_of_the_knob(tmp_path):
    result = sweep_command(tmp_path, "--algos", "rloo", "--grid", "beta=0,0.3", "--seeds", "1", "--steps", "2", *QUICK)
    assert result.returncode == 0, result.stderr
    for value in ("0.0", "0.3"):
        steps = read_csv(tmp_path / "out" / "runs" / f"rloo_beta={value}-seed0.csv")
        assert {row["beta"] for row in steps} == {value}
    summary = read_csv(tmp_path / "out" / "summary.csv")
    assert [r["label"] for r in summary] == ["rloo · beta=0.0", "rloo · beta=0.3"]
    assert [line.split()[:3] for line in result.stdout.splitlines()[2:]] == [
        ["rloo", "·", "beta=0.0"],
        ["rloo", "·", "beta=0.3"],
    ]


@pytest.mark.slow
def test_stop_ends_every_run_between_steps(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    planned = plan_sweep(
        ["grpo", "rloo", "reinforce_pp"],
        range(1),
        "reverse",
        100_000,
        sft_steps=0,
        overrides={"prompts_per_step": 2, "num_generations": 2},
    )
    sweep = Sweep(planned, store, workers=2)
    thread = threading.Thread(target=sweep.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 300
    while sum(run.steps_done for run in store.runs(sweep.run_ids)) < 3:
        assert time.monotonic() < deadline and thread.is_alive(), [(r.status, r.error) for r in store.runs()]
        time.sleep(0.2)
    sweep.stop()
    thread.join(120)
    assert not thread.is_alive()
    runs = store.runs(sweep.run_ids)
    assert all(run.status == "stopped" for run in runs), [(r.status, r.error) for r in runs]
    assert all(run.steps_done < 100_000 for run in runs) and sum(run.steps_done for run in runs) >= 3


def test_workers_never_run_the_callers_main_script(tmp_path, monkeypatch):
    """Under Streamlit the page script being run is `__main__` (under AppTest a temporary file); a spawned worker
    would run it first. Here it fails if run, as AppTest's did; the sweep's worker must not run it."""
    script = tmp_path / "page.py"
    script.write_text("raise SystemExit('a worker ran the caller’s script')\n")
    page = types.ModuleType("__main__")
    page.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", page)
    store = RunStore(tmp_path / "runs.sqlite")
    planned = plan_sweep(
        ["grpo"], range(1), "reverse", 1, sft_steps=0, overrides={"prompts_per_step": 2, "num_generations": 2}
    )
    runs = Sweep(planned, store, workers=1).run()
    assert [(run.status, run.error) for run in runs] == [("finished", None)]
    assert sys.modules["__main__"] is page


# A sweep of one endless run in a daemon thread, as the app runs an experiment; the main thread returns once the run
# has trained a step, so the interpreter exits with the sweep still training.
EXIT_DURING_A_SWEEP = """
import sys, threading, time
from rl_core.runs.store import RunStore
from rl_core.runs.sweep import Sweep, plan_sweep
store = RunStore(sys.argv[1])
planned = plan_sweep(["grpo"], range(1), "reverse", 100_000, sft_steps=0,
                     overrides={"prompts_per_step": 2, "num_generations": 2, "ppo_epochs": 1, "num_minibatches": 1})
threading.Thread(target=Sweep(planned, store, workers=1).run, daemon=True).start()
while not any(run.steps_done for run in store.runs()):
    time.sleep(0.2)
"""


def test_a_process_that_exits_during_a_sweep_stops_its_runs_instead_of_training_them_out(tmp_path):
    db = tmp_path / "runs.sqlite"
    subprocess.run(
        [sys.executable, "-c", EXIT_DURING_A_SWEEP, str(db)],
        cwd=ROOT,
        check=True,
        timeout=180,
        env={**os.environ, "RLHF_LAB_CACHE": str(tmp_path / "cache")},
    )
    runs = RunStore(db).runs()
    assert [run.status for run in runs] == ["stopped"] and 0 < runs[0].steps_done < 100_000


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


# `python -m rl_core` with Ctrl+C at its default, as a terminal's foreground job has it: a suite run as a background
# job (`… &` in a script) starts every child with SIGINT ignored, and Python then installs no KeyboardInterrupt.
PYTHON_M_RL_CORE = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('rl_core', run_name='__main__', alter_sys=True)"
)


def start_endless_sweep(tmp_path: Path, db: Path, **popen) -> subprocess.Popen:
    """`python -m rl_core sweep` of two 100 000-step runs (grpo and rloo) on two workers, in the background."""
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            PYTHON_M_RL_CORE,
            "sweep",
            "--algos",
            "grpo,rloo",
            "--seeds",
            "1",
            "--steps",
            "100000",
            "--workers",
            "2",
            "--task",
            "reverse",
            "--db",
            str(db),
            "--out",
            str(tmp_path / "out"),
            *QUICK,
            "--sft-steps",
            "0",
        ],
        env={**os.environ, "RLHF_LAB_CACHE": str(tmp_path / "cache")},
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        **popen,
    )


def wait_until_both_runs_train(command: subprocess.Popen, db: Path) -> RunStore:
    """The sweep's store once both its runs have trained a step (at most 300 s, while the command lives)."""
    deadline = time.monotonic() + 300
    store = None
    while store is None or sum(run.steps_done > 0 for run in store.runs()) < 2:
        assert time.monotonic() < deadline and command.poll() is None
        time.sleep(0.5)
        store = RunStore(db, recover=False) if db.exists() else None
    return store


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc")
def test_workers_end_within_10_s_of_their_coordinator_being_killed(tmp_path):
    db = tmp_path / "runs.sqlite"
    coordinator = start_endless_sweep(tmp_path, db)
    try:
        store = wait_until_both_runs_train(coordinator, db)
        workers = [run.owner_pid for run in store.runs() if run.status == "running"]
        # The workers are the coordinator's children (spawned) or its fork server's (forked).
        family = children(coordinator.pid) + [pid for child in children(coordinator.pid) for pid in children(child)]
        assert len(workers) == 2 and set(workers) <= set(family)
    finally:
        coordinator.kill()  # SIGKILL: no handler, no finally, no atexit in the coordinator
        coordinator.wait()
    time.sleep(10)
    assert [pid for pid in workers if process_alive(pid)] == []
    runs = RunStore(db).runs()
    assert {run.status for run in runs} == {"interrupted"}
    assert {run.error for run in runs} == {"the sweep's coordinator process ended"}


@pytest.mark.parametrize(
    "argv, environ, expected",
    [
        (["experiment", "pg_baseline"], {}, True),
        (["sweep", "--algos", "grpo", "--out", "o"], {}, True),
        (["experiment", "--all", "--seeds", "0"], {}, True),
        (["experiment", "--list"], {}, False),
        (["sweep", "--help"], {}, False),
        (["experiment", "pg_baseline", "-h"], {}, False),
        (["experiment", "pg_baseline", "--ray-address", "head:6379"], {}, False),
        (["experiment", "pg_baseline", "--ray-address=head:6379"], {}, False),
        (["experiment", "pg_baseline"], {"RLHF_LAB_RAY_ADDRESS": "head:6379"}, False),
        (["experiment", "pg_baseline"], {"RLHF_LAB_RAY_ADDRESS": ""}, True),
        (["train", "--algo", "grpo"], {}, False),
        ([], {}, False),
    ],
)
def test_the_command_line_starts_a_fork_server_only_when_it_will_train_here(argv, environ, expected):
    assert trains_in_local_workers(argv, environ) is expected


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc")
def test_the_fork_server_started_ahead_imports_the_engine_before_any_sweep(tmp_path):
    # What `python -m rl_core experiment` does before importing the engine itself: the first experiment's workers
    # then fork from a server that has imported torch and the engine meanwhile.
    script = "import time; from rl_core.runs.workers import start_worker_server; start_worker_server(); time.sleep(300)"
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert time.monotonic() < deadline and parent.poll() is None
            servers = [
                pid for pid in children(parent.pid) if b"forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes()
            ]
            if servers and "libtorch" in Path(f"/proc/{servers[0]}/maps").read_text():
                break
            time.sleep(0.5)
    finally:
        parent.kill()
        parent.wait()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc")
def test_ctrl_c_stops_a_command_line_sweep_and_its_workers_end_their_runs_as_stopped(tmp_path):
    # Ctrl+C reaches every process of the terminal's group: the command line, its fork server (started before the
    # command line imports the engine) and the workers forked from it. Only the command line may act on it.
    db = tmp_path / "runs.sqlite"
    command = start_endless_sweep(tmp_path, db, start_new_session=True)  # a process group of its own
    try:
        wait_until_both_runs_train(command, db)
        os.killpg(command.pid, signal.SIGINT)  # what the terminal does on Ctrl+C
        command.wait(60)
    finally:
        if command.poll() is None:
            os.killpg(command.pid, signal.SIGKILL)
            command.wait()
    runs = RunStore(db).runs()
    assert {run.status for run in runs} == {"stopped"} and all(run.steps_done > 0 for run in runs)
