"""Runs on a Ray cluster: a sweep and an experiment trained on a local cluster this module starts on 127.0.0.1, a
worker killed mid-run, the message for a cluster that is not there, and no Ray without the address.

`python -m rl_core experiment NAME --ray-address …` is this experiment's path from the command line; the command's
flag is tested with the unreachable cluster."""

import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rl_core.algorithms import get_preset
from rl_core.cli import main
from rl_core.config import RunConfig
from rl_core.experiments import get_experiment
from rl_core.experiments.runner import ExperimentRun
from rl_core.runs import cluster
from rl_core.runs.cluster import ClusterError
from rl_core.runs.store import RunStore
from rl_core.runs.sweep import Sweep, plan_sweep
from ui.jobs import Job, LiveLoop

ROOT = Path(__file__).resolve().parents[1]
# Two prompts × two responses, one update per step, a short warm start: a step takes a fraction of a second.
QUICK = {"prompts_per_step": 2, "num_generations": 2, "ppo_epochs": 1, "num_minibatches": 1}
TRAINING_TASK = "ray::_training_task"  # a Ray worker's process title while it runs rl_core.runs.cluster's training task


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def ray_cluster():
    """A head with 2 CPUs on 127.0.0.1 (its workers inherit this process's environment, the test model cache
    included); stopped afterwards however the tests end."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -r requirements-cluster.txt)")
    port, temp = free_port(), Path(f"/tmp/ray-{os.getpid()}")  # a short path: Ray's socket names must stay short
    command = [sys.executable, "-m", "ray.scripts.scripts"]
    subprocess.run(
        [
            *command,
            "start",
            "--head",
            "--num-cpus",
            "2",
            "--port",
            str(port),
            "--node-ip-address",
            "127.0.0.1",
            "--temp-dir",
            str(temp),
            "--include-dashboard=false",
            "--disable-usage-stats",
        ],
        check=True,
        capture_output=True,
        timeout=180,
    )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        ray.shutdown()
        subprocess.run([*command, "stop", "--force"], capture_output=True, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)


def training_workers() -> list[int]:
    """The pids of the Ray workers running a training task now (from /proc)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if cmdline.read_bytes().startswith(TRAINING_TASK.encode()):
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="finds the Ray workers in /proc")
def test_a_sweep_on_the_cluster_stores_every_run_and_a_killed_worker_interrupts_only_its_run(ray_cluster, tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    # A run too long to end during the test and two short ones: once the short ones have finished, the one training
    # task left is the long run's, in whichever order the cluster ran them.
    long, short = 100_000, 20
    planned = [
        *plan_sweep(["grpo"], range(1), "reverse", long, overrides=QUICK, sft_steps=20),
        *plan_sweep(["rloo", "reinforce_pp"], range(1), "reverse", short, overrides=QUICK, sft_steps=20),
    ]
    sweep = Sweep(planned, store, ray_address=ray_cluster)
    assert (sweep.workers, sweep.cap) == (2, 2)  # the cluster's CPUs
    thread = threading.Thread(target=sweep.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 300
    while True:
        first, *others = store.runs(sweep.run_ids)
        if [run.status for run in others] == ["finished"] * 2 and first.steps_done >= 2:
            workers = training_workers()
            if len(workers) == 1:
                break
        assert time.monotonic() < deadline and thread.is_alive(), [(r.status, r.steps_done) for r in store.runs()]
        time.sleep(0.1)
    os.kill(workers[0], signal.SIGKILL)
    thread.join(300)
    assert not thread.is_alive()
    killed, *others = store.runs(sweep.run_ids)
    assert killed.status == "interrupted" and "Ray worker went away" in killed.error, (killed.status, killed.error)
    assert 2 <= killed.steps_done < long
    assert len(store.steps(killed.id)) == killed.steps_done  # what it trained before the kill is kept
    for run in others:
        assert run.status == "finished" and run.final is not None, (run.status, run.error)
        assert [record["step"] for record in store.steps(run.id)] == list(range(1, short + 1))
        assert store.samples(run.id)  # the latest step's samples came back with its record
    # Run again: the finished runs answer from the store, the interrupted one trains again (stopped here, as its
    # length asks).
    again = Sweep(planned, store, ray_address=ray_cluster)
    thread = threading.Thread(target=again.run, daemon=True)
    thread.start()
    while store.run(again.run_ids[0]).steps_done < 2:
        assert time.monotonic() < deadline and thread.is_alive(), [(r.status, r.error) for r in store.runs()]
        time.sleep(0.1)
    again.stop()
    thread.join(120)
    rerun = store.runs(again.run_ids)
    assert [(run.status, run.reused) for run in rerun] == [("stopped", False), ("finished", True), ("finished", True)]
    assert len(store.steps(rerun[0].id)) == rerun[0].steps_done >= 2


@pytest.mark.slow
def test_an_experiment_on_the_cluster_trains_and_stores_every_run(ray_cluster, tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    run = ExperimentRun(
        get_experiment("gspo_clipping"),
        tmp_path / "out",
        store,
        seeds=[0, 1],
        steps=3,
        sft_steps=20,
        ray_address=ray_cluster,
    )
    summary = run.run()
    assert [(row["status"], row["steps"]) for row in summary["runs"]] == [("finished", 3)] * 4
    assert [len(store.steps(row["run_id"])) for row in summary["runs"]] == [3] * 4
    assert all(len((tmp_path / "out" / row["records"]).read_text().splitlines()) == 3 for row in summary["runs"])
    # Every arm of both seeds finished on the cluster, so each seed has an effect (NaN otherwise).
    assert set(summary["effects"]) == {"0", "1"} and all(math.isfinite(e) for e in summary["effects"].values())


@pytest.mark.slow
def test_a_live_lab_job_trains_on_the_cluster_and_is_stored(ray_cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("RLHF_LAB_RAY_ADDRESS", ray_cluster)
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    slots = LiveLoop.from_env()
    assert slots.limit == 2  # the cluster's CPUs
    run = RunConfig(algo=get_preset("grpo", **QUICK), task="reverse", steps=4, sft_steps=20)
    job = Job(run, slots, label="grpo · live lab").start()
    assert job.join(300)
    snapshot = job.snapshot()
    assert (snapshot.status, snapshot.error, snapshot.steps_done) == ("finished", None, 4)
    assert snapshot.samples  # the samples came back with the records, for the token view
    store = RunStore(tmp_path / "runs.sqlite")
    [stored] = store.runs()
    assert stored.status == "finished" and [record["step"] for record in store.steps(stored.id)] == [1, 2, 3, 4]


def test_a_cluster_that_is_not_there_is_a_clear_message(tmp_path, capsys, monkeypatch):
    store = RunStore(tmp_path / "runs.sqlite")
    planned = plan_sweep(["grpo"], range(1), "reverse", 3, overrides=QUICK, sft_steps=0)
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(
        ClusterError,
        match=f"cannot reach the Ray cluster at {address} "
        r"\(--ray-address or RLHF_LAB_RAY_ADDRESS\)",
    ):
        Sweep(planned, store, ray_address=address)
    monkeypatch.setenv("RLHF_LAB_RAY_ADDRESS", address)  # the variable alone sends a sweep to the cluster
    with pytest.raises(ClusterError, match="cannot reach"):
        Sweep(planned, store)
    assert store.runs() == [] and store.latest_sweep() is None  # refused before anything was queued
    with pytest.raises(ClusterError, match="is not host:port"):
        cluster.connect("headnode")
    # A live-lab job ends as failed with the same message; the server keeps its local cap meanwhile.
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    job = Job(planned[0].run, LiveLoop.from_env()).start()
    assert job.join(60)
    assert job.snapshot().status == "failed" and f"cannot reach the Ray cluster at {address}" in job.snapshot().error
    code = main(
        [
            "sweep",
            "--algos",
            "grpo",
            "--seeds",
            "1",
            "--steps",
            "3",
            "--task",
            "reverse",
            "--ray-address",
            address,
            "--db",
            str(tmp_path / "runs.sqlite"),
            "--out",
            str(tmp_path / "out"),
        ]
    )
    error = capsys.readouterr().err
    assert code == 1 and error.startswith(f"error: cannot reach the Ray cluster at {address}")
    assert len(error.strip().splitlines()) == 1 and "Traceback" not in error


def test_without_the_address_ray_is_never_imported(tmp_path):
    script = (
        "import sys\n"
        "from rl_core.runs.store import RunStore\n"
        "from rl_core.runs.sweep import Sweep, plan_sweep\n"
        "import rl_core.cli, ui.jobs\n"
        f"planned = plan_sweep(['grpo'], range(1), 'reverse', 1, sft_steps=0)\n"
        f"Sweep(planned, RunStore({str(tmp_path / 'runs.sqlite')!r}))\n"
        "print('ray' in sys.modules)\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "RLHF_LAB_RAY_ADDRESS"}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.stdout.strip() == "False", result.stderr[-2000:]


def test_joining_a_head_on_a_public_address_warns_in_the_log_and_a_private_one_does_not(monkeypatch, caplog):
    assert cluster.exposed("10.0.0.5:6379") is None and cluster.exposed("192.168.1.20:6379") is None
    assert cluster.exposed("127.0.0.1:6379") is None and cluster.exposed("[::1]:6379") is None
    assert "8.8.8.8, neither a private nor a loopback address: Ray has no authentication" in cluster.exposed(
        "8.8.8.8:6379"
    )
    monkeypatch.setattr(cluster, "check_reachable", lambda address: None)  # as if a head answered there

    def no_ray():
        raise ClusterError("Ray is not installed here")

    monkeypatch.setattr(cluster, "_ray", no_ray)
    for address in ("10.0.0.5:6379", "8.8.8.8:6379"):
        with caplog.at_level("WARNING", logger="rl_core.runs.cluster"), pytest.raises(ClusterError):
            cluster.connect(address)
    assert [record.getMessage()[:28] for record in caplog.records] == ["the Ray head 8.8.8.8:6379 is"]
