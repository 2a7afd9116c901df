"""CPU seconds of processes, read from /proc: one process, or this process and every process below it."""

from __future__ import annotations

import os
import resource
import threading
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def _fields(stat: Path) -> list[str]:
    """A /proc `stat` file's fields after the command name (which may hold spaces): state, ppid, …"""
    return stat.read_text().rsplit(")", 1)[1].split()


def _cpu(fields: list[str]) -> float:
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def stat_cpu_seconds(stat: Path) -> float:
    """User + system CPU seconds from a /proc `stat` file (a process's counts include its ended threads)."""
    return _cpu(_fields(stat))


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    return stat_cpu_seconds(Path(f"/proc/{pid}/stat"))


def _processes() -> dict[int, tuple[int, int, float]]:
    """Every process now: pid → (parent pid, start time in ticks, CPU seconds)."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = _fields(stat)
        except OSError:  # it ended while we looked
            continue
        found[int(stat.parent.name)] = (int(fields[1]), int(fields[19]), _cpu(fields))
    return found


class TreeCPU:
    """CPU seconds of this process and of every process below it, between entering and leaving the block.

    `getrusage` counts only the children this process reaped itself. A sweep's workers forked by a fork server
    are the server's children, not ours, so while they live their counts are read from /proc every `interval`
    seconds; what a worker spends after the last reading before it exits is missed. Without /proc the count is
    rusage's alone."""

    def __init__(self, interval: float = 0.1):
        self.interval = interval
        self.seconds = 0.0
        self._latest: dict[tuple[int, int], float] = {}  # (pid, start time) → CPU seconds at the last reading
        self._at_start: dict[tuple[int, int], float] = {}
        self._children: set[tuple[int, int]] = set()  # direct children: rusage counts those that end
        self._done = threading.Event()
        self._procfs = Path("/proc/self/stat").exists()

    def _rusage(self) -> float:
        return sum(
            u.ru_utime + u.ru_stime for u in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
        )

    def _read(self) -> set[tuple[int, int]]:
        """Update the descendants' counts; the keys of those alive now."""
        processes = _processes()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in processes.items():
            children.setdefault(ppid, []).append(pid)
        alive, frontier = set(), [os.getpid()]
        while frontier:
            parent = frontier.pop()
            for pid in children.get(parent, []):
                _, started, cpu = processes[pid]
                key = (pid, started)
                alive.add(key)
                self._latest[key] = cpu
                if parent == os.getpid():
                    self._children.add(key)
                frontier.append(pid)
        return alive

    def _poll(self) -> None:
        while not self._done.wait(self.interval):
            self._read()

    def __enter__(self) -> TreeCPU:
        self._start = self._rusage()
        if self._procfs:
            self._read()
            self._at_start = dict(self._latest)
            self._thread = threading.Thread(target=self._poll, name="tree-cpu", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = self._rusage() - self._start
        if not self._procfs:
            return
        self._done.set()
        self._thread.join()
        alive = self._read()
        for key, cpu in self._latest.items():
            if key in self._children and key not in alive:
                continue  # an ended child of ours: its whole count is in rusage's
            self.seconds += cpu - self._at_start.get(key, 0.0)
