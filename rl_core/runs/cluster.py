"""Runs on a Ray cluster, when one machine is not enough.

With `RLHF_LAB_RAY_ADDRESS` set (or `--ray-address` on `sweep` and `experiment`) every training runs as a Ray task
on the cluster: sweeps and experiments through `RayPool` (the `Sweep`'s pool), the app's live-lab jobs through
`remote_stream`. The task is `rl_core.runs.run_stream.batch_training_stream(runs)`, a batch of runs trained as one (a
live-lab job is a batch of one), as a Ray streaming generator: its items (setup progress, each step's record, the
end, each tagged with its run) come back to the coordinator as they are made, and the coordinator writes them to
its run store with `store_batch`, the function a local worker writes its own batch with, so the store, the pages
and the records do not know where a run trained. A batch holds one CPU of the cluster; the training cap becomes
the cluster's CPUs.

Ray is imported here only, on first use: without the variable the lab never imports it. It is not in
requirements.txt but in requirements-cluster.txt (Ray is some 80 MB, and a laptop never needs it); `./lab.sh`
installs that for the tests and for `run` with the variable set.

The code travels with the job: the coordinator ships its `rl_core` and `toy_tasks` (Ray's `py_modules`), so the
workers train with the coordinator's engine; their Python needs the lab's requirements. A node trains an SFT
checkpoint it lacks into its own cache (once per node, as on one machine).

Faults: a task whose worker process or node dies mid-run raises `RunInterrupted` in the coordinator, so that run
ends as interrupted (its steps so far kept) and can be trained again; the other runs go on. A cluster that cannot
be reached, or Ray missing, is a `ClusterError` naming the address, `--ray-address` and `RLHF_LAB_RAY_ADDRESS`.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import rl_core
import toy_tasks
from rl_core.config import RunConfig
from rl_core.engine.trainer import TrainingStopped
from rl_core.messages import brief
from rl_core.runs.run_stream import RunInterrupted, batch_training_stream, one_run, store_batch
from rl_core.runs.store import RunStore
from rl_core.runs.workers import RAY_ADDRESS_VARIABLE

CONNECT_TIMEOUT = 5.0  # seconds to wait for the head's port to answer before saying it does not
POLL = 0.5  # seconds between a coordinator thread's looks at its task and at the stop request
NAMESPACE = "rlhf-lab"
_lock = threading.Lock()  # one connection per process, made once even when several threads ask at once
_connected: str | None = None  # the address this process joined
logger = logging.getLogger(__name__)


class ClusterError(RuntimeError):
    """The Ray cluster cannot be used (not reachable, no CPUs, Ray not installed); the message says what to do."""


def ray_address(given: str | None = None) -> str | None:
    """The cluster to train on: `given` (`--ray-address`), else RLHF_LAB_RAY_ADDRESS; None: this machine."""
    return given or os.environ.get(RAY_ADDRESS_VARIABLE) or None


def _where(address: str) -> str:
    return f"the Ray cluster at {address} (--ray-address or {RAY_ADDRESS_VARIABLE})"


def _ray():
    try:
        import ray
    except ImportError as error:
        raise ClusterError(
            f"training on a Ray cluster needs Ray: pip install -r requirements-cluster.txt "
            f"(./lab.sh does it when {RAY_ADDRESS_VARIABLE} is set), or unset {RAY_ADDRESS_VARIABLE} "
            "to train on this machine"
        ) from error
    return ray


def check_reachable(address: str) -> None:
    """ClusterError unless `address` is host:port and something answers there (Ray's own connection attempt
    retries for a minute before it gives up)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(
            f"{_where(address)}: the address is not host:port; give the head's address, as "
            "`ray start --head` printed it (e.g. 10.0.0.5:6379)"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT).close()
    except OSError as error:
        raise ClusterError(
            f"cannot reach {_where(address)}: {error.strerror or error}. Start the head there "
            "(ray start --head), or unset the address to train on this machine"
        ) from error


def exposed(address: str) -> str | None:
    """Why joining the head at `address` is unsafe, when it resolves to an address neither private nor loopback:
    Ray has no authentication, so whoever reaches its ports can run code on every node. None otherwise (or when
    the name does not resolve: `check_reachable` says so)."""
    host = address.rpartition(":")[0].strip("[]")
    try:
        resolved = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return None
    public = sorted(
        ip
        for ip in resolved
        if not (ipaddress.ip_address(ip.split("%")[0]).is_private or ipaddress.ip_address(ip.split("%")[0]).is_loopback)
    )
    if not public:
        return None
    return (
        f"the Ray head {address} is at {', '.join(public)}, neither a private nor a loopback address: Ray has "
        "no authentication, so anyone who reaches its ports can run code on the cluster. Bind the head to a "
        "private address and firewall its ports (README, More than one machine)"
    )


def connect(address: str) -> int:
    """Join the cluster at `address` (once per process); returns its CPUs, the number of runs it trains at once.
    A head on a public address is joined, with a warning in the log (`exposed`)."""
    global _connected
    with _lock:
        if _connected != address or not _ray().is_initialized():
            check_reachable(address)
            if (warning := exposed(address)) is not None:
                logger.warning(warning)
            ray = _ray()
            if ray.is_initialized():  # joined another cluster before
                ray.shutdown()
            modules = [str(Path(module.__file__).parent) for module in (rl_core, toy_tasks)]
            try:
                ray.init(
                    address=address,
                    namespace=NAMESPACE,
                    logging_level=logging.WARNING,
                    log_to_driver=False,
                    runtime_env={"py_modules": modules, "excludes": ["__pycache__"]},
                )
            except Exception as error:  # noqa: BLE001 - Ray raises several kinds; the message says which
                raise ClusterError(
                    f"cannot join {_where(address)}: {brief(f'{type(error).__name__}: {error}')}"
                ) from error
            _connected = address
        return cluster_cpus(address)


def cluster_cpus(address: str) -> int:
    """The CPUs of the joined cluster, all nodes together."""
    cpus = int(_ray().cluster_resources().get("CPU", 0))
    if cpus < 1:
        raise ClusterError(f"{_where(address)} has no CPUs now; start a worker there (ray start --address {address})")
    return cpus


@functools.cache
def _tasks():
    """The two Ray tasks, made remote on first use (so that importing this module does not import Ray).

    One CPU each; never retried by Ray: a run whose worker died is marked interrupted and the learner decides."""
    remote = _ray().remote(num_cpus=1, max_retries=0)
    return remote(_warm_start_task), remote(_training_task)


def _warm_start_task(runs: list[RunConfig], cache_dir: Path | None) -> Iterator[dict]:
    """`rl_core.runs.sweep.warm_starts` on a worker; a generator like the training task (it yields nothing), so one
    loop awaits and stops both."""
    from rl_core.runs.sweep import warm_starts  # the sweep imports this module

    warm_starts(runs, cache_dir)
    yield from ()


def _training_task(runs: list[RunConfig], cache_dir: Path | None) -> Iterator[tuple[int, dict]]:
    yield from batch_training_stream(runs, cache_dir)


def _items(generator, stopped: Callable[[], bool]) -> Iterator:
    """A task's items as they arrive. `stopped()` cancels the task (TrainingStopped); the task's own exception is
    raised again as itself; a worker or node that went away is RunInterrupted."""
    ray = _ray()
    try:
        while True:
            ready, _ = ray.wait([generator], timeout=POLL)
            if stopped():
                ray.cancel(generator)
                raise TrainingStopped("stopped on the Ray cluster")
            if not ready:
                continue
            try:
                reference = next(generator)
            except StopIteration:
                return
            yield ray.get(reference)
    except ray.exceptions.RayTaskError as error:
        if isinstance(error.cause, Exception):
            raise error.cause from None
        raise RuntimeError(str(error).splitlines()[0]) from None
    except ray.exceptions.RayError as error:
        raise RunInterrupted(f"its Ray worker went away mid-run ({type(error).__name__}); run it again") from None


def remote_stream(
    run: RunConfig, cache_dir: Path | None = None, stopped: Callable[[], bool] = lambda: False
) -> Iterator[dict]:
    """One run trained as a task on the joined cluster (a batch of one), its items as they come."""
    return one_run(_items(_tasks()[1].remote([run], cache_dir), stopped))


class RayPool:
    """A sweep's pool on the cluster: each warm start and each run is a Ray task, driven by a thread of the
    coordinator that claims the run in the store (the cap holds across processes, as for a local worker) and
    writes its stream there."""

    def __init__(self, stack: ExitStack, workers: int, stop_event, store: RunStore, cap: int):
        self.threads = stack.enter_context(ThreadPoolExecutor(workers, thread_name_prefix="ray-run"))
        self.stop_event, self.store, self.cap = stop_event, store, cap

    def warm_start(self, runs: list[RunConfig], cache_dir: Path | None) -> Future:
        return self.threads.submit(self._warm_start, runs, cache_dir)

    def train(self, run_ids: list[int], runs: list[RunConfig], cache_dir: Path | None) -> Future:
        """Train the runs as one batch; their outcomes are their statuses in the store, the future only says when
        the batch ended."""
        return self.threads.submit(self._train, run_ids, runs, cache_dir)

    def _warm_start(self, runs: list[RunConfig], cache_dir: Path | None) -> None:
        for _ in _items(_tasks()[0].remote(runs, cache_dir), self.stop_event.is_set):
            pass

    def _train(self, run_ids: list[int], runs: list[RunConfig], cache_dir: Path | None) -> None:
        try:
            if not self.store.claim(run_ids, self.cap, self.stop_event.is_set):
                self.store.settle(run_ids, "stopped")
                return
            store_batch(self.store, run_ids, _items(_tasks()[1].remote(runs, cache_dir), self.stop_event.is_set))
        finally:
            self.store.close()  # this thread's connection
