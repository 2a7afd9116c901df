"""The run store: every run's configuration, per-step metrics and samples, status and timing in one SQLite file,
written as the run goes, so runs outlive the page that started them, an app restart, and the process that
trained them.

Concurrency: WAL mode (readers never block the writer), one connection per thread (a `threading.local`), a busy
timeout, and every write in a `BEGIN IMMEDIATE` transaction, which takes the write lock up front: a deferred
transaction that reads and then writes can fail at once with "database is locked" instead of waiting.
A process killed mid-write loses only its open transaction; the file stays consistent.

Interrupted runs. A queued run is owned by the process that queued it (the sweep's coordinator), a running one
by the process that trains it. Each owner keeps a heartbeat on its runs (`Heartbeat`, every few seconds). When a
store is opened, a run still queued or running is marked `interrupted` if

* its owner ran on this host and that process no longer exists (or is a zombie), or
* its heartbeat is older than `STALE_AFTER` seconds: the owner hangs, ran on another host, or its pid now
  belongs to another program.

Reuse. A run stored with its key (`rl_core.runs.reuse.run_key`) may answer a later identical request: that request's
row (its own, in its session) shows the finished run's records instead of training (`records_from`), or watches the
run while it is in flight and trains itself only if that run does not finish (`follow`). Steps are stored once,
with the run that trained them; deleting it hands them to a row that shows them.

Size. The file never grows past `RLHF_LAB_STORE_MAX_MB` (SQLite's `max_page_count`; its write-ahead log is
checkpointed and truncated well below that): a write that would pass it fails as a full disk would, with a
`StoreError` saying so. A new run is refused once the runs fill `ADMIT_BELOW` of it. Per-step scalars are always
kept; a run's token-level samples only for its latest `SAMPLE_WINDOW` steps (they are most of a step's bytes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from rl_core.config import RunConfig
from rl_core.messages import without_paths

STATUSES = ("queued", "running", "finished", "failed", "stopped", "interrupted")
ACTIVE_STATUSES = ("queued", "running")
BUSY_TIMEOUT = 60.0  # seconds a write waits for another process's transaction before giving up
HEARTBEAT_INTERVAL = 5.0
STALE_AFTER = 600.0
DEFAULT_MAX_MB = 500  # a laptop's spare disk: about 300,000 steps of scalars
ADMIT_BELOW = 0.9  # of the limit: the room a run admitted just under it still has to write its steps
SAMPLE_WINDOW = 100  # steps whose token-level samples a run keeps: its latest
CLAIM_POLL = 0.5  # seconds between a waiting run's looks at the store's running count
# The runs this process claimed and has not finished. A running row of this process that is not here is a ghost
# (its end could not be written, say on a full disk) and takes no place under the cap.
_TRAINING_HERE: set[int] = set()


def max_trainings(default: int = 2, variable: str = "RLHF_LAB_MAX_TRAININGS") -> int:
    """RLHF_LAB_MAX_TRAININGS: how many trainings of one store run at once, across every process that uses it (a
    batch of runs trained as one loop is one training). `variable` reads another such cap the same way."""
    text = os.environ.get(variable)
    try:
        cap = default if text is None else int(text)
    except ValueError:
        cap = 0
    if cap < 1:
        raise ValueError(f"{variable}={str(text)[:20]!r} is out of range; allowed: an integer ≥ 1")
    return cap


HOST = socket.gethostname()


def _sql_list(values) -> str:
    return f"({', '.join(repr(v) for v in values)})"


ACTIVE_SQL = _sql_list(ACTIVE_STATUSES)

# MIGRATIONS[v] takes a database from schema version v to v + 1 (`PRAGMA user_version`); version 0 is empty.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE sweeps (
            id INTEGER PRIMARY KEY,
            created_at REAL NOT NULL,
            spec TEXT NOT NULL                     -- JSON: what was swept, as asked for
        )""",
        f"""CREATE TABLE runs (
            id INTEGER PRIMARY KEY,
            sweep_id INTEGER REFERENCES sweeps(id) ON DELETE SET NULL,
            label TEXT NOT NULL,                   -- the comparison group: preset and grid values
            task TEXT NOT NULL,
            algo TEXT NOT NULL,
            seed INTEGER NOT NULL,
            variant TEXT NOT NULL,                 -- JSON: the grid values of this run
            config TEXT NOT NULL,                  -- JSON: the whole RunConfig
            status TEXT NOT NULL CHECK (status IN {_sql_list(STATUSES)}),
            steps_total INTEGER NOT NULL,
            steps_done INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            started_at REAL,
            finished_at REAL,
            heartbeat_at REAL NOT NULL,
            owner_pid INTEGER NOT NULL,
            owner_host TEXT NOT NULL,
            final TEXT,                            -- JSON: the evaluation after the last step
            error TEXT
        )""",
        "CREATE INDEX runs_by_status ON runs(status)",
        "CREATE INDEX runs_by_sweep ON runs(sweep_id)",
        """CREATE TABLE steps (
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            step INTEGER NOT NULL,
            metrics TEXT NOT NULL,                 -- JSON: the record's scalars
            samples TEXT NOT NULL,                 -- JSON: the record's token-level sample views
            PRIMARY KEY (run_id, step)
        ) WITHOUT ROWID""",
    ),
    # v1 → v2: the session that owns a run or sweep (NULL: the command line's, shared read-only with every page)
    (
        "ALTER TABLE sweeps ADD COLUMN session TEXT",
        "ALTER TABLE runs ADD COLUMN session TEXT",
        "CREATE INDEX runs_by_session ON runs(session)",
    ),
    # v2 → v3: reuse of finished runs. `run_key` (`rl_core.runs.reuse.run_key`) identifies the computation; a row that
    # answers from another run's records names that run in `records_from` (it holds no steps of its own).
    (
        "ALTER TABLE runs ADD COLUMN run_key TEXT",
        "ALTER TABLE runs ADD COLUMN records_from INTEGER",
        "CREATE INDEX runs_by_key ON runs(run_key)",
    ),
    # v3 → v4: teaching a class. A live-lab run names its page and its number there (`page` NULL: no page's run,
    # or one its learner reset away), so a restarted server shows a learner's page runs again; the learners'
    # answers to the pages' questions, when each learner was last seen, and the banner the instructor pins.
    (
        "ALTER TABLE runs ADD COLUMN page TEXT",
        "ALTER TABLE runs ADD COLUMN page_run INTEGER",
        "CREATE INDEX runs_by_page ON runs(page, session)",
        """CREATE TABLE predictions (
            session TEXT NOT NULL,                 -- the learner
            page TEXT NOT NULL,
            phase TEXT NOT NULL CHECK (phase IN ('before', 'after')),  -- predicted, or what the run showed
            question TEXT NOT NULL,
            options TEXT NOT NULL,                 -- JSON: the answers the question offers
            answer TEXT NOT NULL,
            answered_at REAL NOT NULL,
            PRIMARY KEY (session, page, phase)     -- a learner's latest answer counts
        ) WITHOUT ROWID""",
        "CREATE TABLE learners (session TEXT PRIMARY KEY, last_seen REAL NOT NULL) WITHOUT ROWID",
        """CREATE TABLE banner (
            id INTEGER PRIMARY KEY CHECK (id = 1), -- one banner at a time
            text TEXT NOT NULL,
            link TEXT NOT NULL,
            pinned_at REAL NOT NULL
        )""",
    ),
    # v4 → v5: runs trained as one batch (`rl_core.engine.run_batch`) name the batch's first run; a batch is one
    # process's loop, so it takes one place under the training cap (NULL: the run trains alone).
    ("ALTER TABLE runs ADD COLUMN batch_id INTEGER",),
    # v5 → v6: the Policy Gradient lab keeps its runs and answers under its page's name, `policy_gradient` (it used
    # `pg`, so an upgraded server showed none of them). The older `pg` runs keep their numbers; runs already made
    # under the new name move up past them, so no two runs of a learner share a number. Where a learner answered
    # under both names, the answer under the new name is the later one and wins.
    (
        """UPDATE runs SET page_run = page_run + (
               SELECT COALESCE(MAX(old.page_run), 0) FROM runs AS old
               WHERE old.page = 'pg' AND old.session IS runs.session)
           WHERE page = 'policy_gradient'""",
        "UPDATE runs SET page = 'policy_gradient' WHERE page = 'pg'",
        "UPDATE OR IGNORE predictions SET page = 'policy_gradient' WHERE page = 'pg'",
        "DELETE FROM predictions WHERE page = 'pg'",
    ),
    # v6 → v7: identities the server issued (a `?me=` or cookie it never issued is not taken), from which client
    # address (new ones are rate-limited per address), and whether the learner opened the class's join link. The
    # learners who already own runs keep their identity.
    (
        """CREATE TABLE identities (
            session TEXT PRIMARY KEY,
            address TEXT NOT NULL,                 -- the client address it was issued to ('' for the older ones)
            issued_at REAL NOT NULL,
            joined INTEGER NOT NULL DEFAULT 0      -- 1 once it opened the class's join link
        ) WITHOUT ROWID""",
        "CREATE INDEX identities_by_address ON identities(address, issued_at)",
        "INSERT INTO identities (session, address, issued_at) SELECT session, '', MIN(created_at) FROM runs "
        "WHERE session IS NOT NULL GROUP BY session",
    ),
)
PHASES = ("before", "after")
SCHEMA_VERSION = len(MIGRATIONS)


class StoreError(RuntimeError):
    """The database cannot be used (a newer schema, a full disk or size limit); the message says why, naming the
    file but never its folder."""


def max_store_bytes() -> int:
    """`RLHF_LAB_STORE_MAX_MB` (megabytes, default DEFAULT_MAX_MB) in bytes."""
    text = os.environ.get("RLHF_LAB_STORE_MAX_MB", str(DEFAULT_MAX_MB))
    try:
        megabytes = float(text)
    except ValueError:
        megabytes = math.nan
    if not 0.1 <= megabytes <= 10**6:
        raise StoreError(
            f"RLHF_LAB_STORE_MAX_MB={text[:20]!r} is out of range; allowed: a number of megabytes from 0.1 to 1000000"
        )
    return int(megabytes * 2**20)


def default_db_path() -> Path:
    """`RLHF_LAB_DB`, else runs.sqlite in the lab's cache directory: `RLHF_LAB_CACHE` or the user cache, the
    folder `rl_core.engine.sft.default_cache_dir` names (not imported, so the store loads without torch)."""
    if os.environ.get("RLHF_LAB_DB"):
        return Path(os.environ["RLHF_LAB_DB"])
    return Path(os.environ.get("RLHF_LAB_CACHE") or platformdirs.user_cache_dir("rlhf-lab")) / "runs.sqlite"


@dataclass(frozen=True)
class StoredRun:
    """One row of the runs table, JSON fields decoded."""

    id: int
    sweep_id: int | None
    label: str
    task: str
    algo: str
    seed: int
    variant: dict
    config: dict
    status: str
    steps_total: int
    steps_done: int
    created_at: float
    started_at: float | None
    finished_at: float | None
    heartbeat_at: float
    owner_pid: int
    owner_host: str
    final: dict | None
    error: str | None
    session: str | None  # the app session that owns it; None: shared (the command line's), read-only in the app
    run_key: str | None  # what it computes (`rl_core.runs.reuse.run_key`); None for runs stored without one
    records_from: int | None  # the run whose records it shows instead of training (itself: it holds them)
    page: str | None = None  # the lab page whose run it is (a live lab's), while its learner keeps it there
    page_run: int | None = None  # its number on that page (`#n`)
    batch_id: int | None = None  # the first run of the batch it trained in (`rl_core.engine.run_batch`); None: alone

    @property
    def reused(self) -> bool:
        """Whether it answers from a run trained for another request (or watches one train)."""
        return self.records_from is not None

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    @property
    def wall_time(self) -> float:
        """Seconds from the start of training (setup included) to its end, or to now while it runs."""
        if self.started_at is None:
            return math.nan
        return (self.finished_at or time.time()) - self.started_at


def use_wal(connection: sqlite3.Connection) -> None:
    """Put the file in WAL mode (persistent: once per file).

    When several processes open a new file at once, SQLite can refuse the switch with "database is locked" at
    once, without its busy wait (measured: 5 of 960 processes, twelve opening each fresh file together; none of
    1,680 with the retry), so a refusal is retried until BUSY_TIMEOUT.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT
    while True:
        try:
            if connection.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                connection.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class RunStore:
    """The runs in one SQLite file. Safe to share between threads; each process opens its own `RunStore`."""

    def __init__(self, path: str | Path | None = None, recover: bool = True, create: bool = True):
        """`create=False` (a command that only reads) refuses a file that does not exist instead of making one."""
        self.path = Path(path) if path is not None else default_db_path()
        self.max_bytes = max_store_bytes()
        self._local = threading.local()
        if not create and not self.path.is_file():
            raise StoreError(f"there is no run store {self.path.name} there; give an existing file")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._migrate(self._connection())
            if recover:
                self.recover()
        except (OSError, sqlite3.Error) as error:
            raise StoreError(f"cannot open the run store {self.path.name}: {without_paths(str(error))}") from error

    # ------------------------------------------------------------------ connections
    def _connection(self) -> sqlite3.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            # isolation_level=None: no implicit transactions; `_write` opens them explicitly.
            connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, isolation_level=None)
            connection.row_factory = sqlite3.Row
            connection.execute("PRAGMA foreign_keys = ON")
            use_wal(connection)
            # In WAL mode NORMAL never corrupts the file; a power cut may lose the last commits, a crash none.
            connection.execute("PRAGMA synchronous = NORMAL")
            # The size limit, and a log checkpointed at SQLite's default 1000 pages, or an eighth of the limit if
            # that is less, and cut back to that size afterwards.
            page = connection.execute("PRAGMA page_size").fetchone()[0]
            checkpoint = max(min(1000, self.max_bytes // page // 8), 8)
            connection.execute(f"PRAGMA max_page_count = {max(self.max_bytes // page, 16)}")
            connection.execute(f"PRAGMA wal_autocheckpoint = {checkpoint}")
            connection.execute(f"PRAGMA journal_size_limit = {checkpoint * page}")
            self._local.connection = connection
        return connection

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        connection = self._connection()
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield connection
        except BaseException as error:
            if connection.in_transaction:  # SQLite rolls back by itself after some errors (a full disk)
                connection.execute("ROLLBACK")
            if isinstance(error, sqlite3.OperationalError) and "full" in str(error):
                raise StoreError(self._full_message()) from error
            raise
        connection.execute("COMMIT")

    def used_bytes(self) -> int:
        """Bytes the runs take in the file (pages in use; a deleted run's pages are reused before the file grows)."""
        connection = self._connection()
        pages = (
            connection.execute("PRAGMA page_count").fetchone()[0]
            - connection.execute("PRAGMA freelist_count").fetchone()[0]
        )
        return pages * connection.execute("PRAGMA page_size").fetchone()[0]

    def _full_message(self) -> str:
        megabytes = self.max_bytes / 2**20
        if shutil.disk_usage(self.path.parent).free < 2**20:  # else it was the limit: one record can take pages
            return "the disk that holds the run store is full; the server's operator must free space on it"
        return (
            f"the run store is full ({self.used_bytes() / 2**20:.1f} of RLHF_LAB_STORE_MAX_MB={megabytes:.4g} MB): "
            "delete old runs on the Compare page (Stored runs), or raise the limit"
        )

    def _migrate(self, connection: sqlite3.Connection) -> None:
        if self._version(connection) == SCHEMA_VERSION:
            return
        with self._write():
            version = self._version(connection)  # another process may have migrated while we waited
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path.name} has schema version {version}, newer than this code's {SCHEMA_VERSION}; "
                    "update the lab or point RLHF_LAB_DB at another file"
                )
            for migration in MIGRATIONS[version:]:
                for statement in migration:
                    connection.execute(statement)
            connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @staticmethod
    def _version(connection: sqlite3.Connection) -> int:
        return connection.execute("PRAGMA user_version").fetchone()[0]

    def close(self) -> None:
        """Close this thread's connection (others close when their thread ends)."""
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None

    # ------------------------------------------------------------------ writing
    def create_sweep(self, spec: dict, session: str | None = None) -> int:
        with self._write() as db:
            return db.execute(
                "INSERT INTO sweeps (created_at, spec, session) VALUES (?, ?, ?)",
                (time.time(), json.dumps(spec), session),
            ).lastrowid

    def add_run(
        self,
        run: RunConfig,
        label: str,
        variant: dict | None = None,
        sweep_id: int | None = None,
        session: str | None = None,
        key: str | None = None,
        reuse: bool = False,
        page: str | None = None,
        page_run: int | None = None,
    ) -> int:
        """A queued run owned by this process (and by app session `session`, if given); returns its id. A live
        lab's run names its `page` and its number there (`page_run`).

        `key` is the run's `rl_core.runs.reuse.run_key`. With `reuse`, in the same transaction (so two requests never
        both train one key): a finished run of that key makes the new row a finished one that shows its records; a
        run of that key queued or training, its owner alive, makes it a queued row that watches that one
        (`follow`); otherwise the row is queued to train. Either way the row is the caller's own (its session),
        and only the records are shared.

        StoreError once the runs fill ADMIT_BELOW of the size limit."""
        if self.used_bytes() >= ADMIT_BELOW * self.max_bytes:
            raise StoreError(self._full_message())
        now = time.time()
        with self._write() as db:
            source = _reusable_run(db, key, now) if reuse and key is not None else None
            run_id = db.execute(
                "INSERT INTO runs (sweep_id, label, task, algo, seed, variant, config, status, steps_total, "
                "created_at, heartbeat_at, owner_pid, owner_host, session, run_key, page, page_run) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    sweep_id,
                    label,
                    run.task,
                    run.algo.name,
                    run.seed,
                    json.dumps(variant or {}),
                    json.dumps(dataclasses.asdict(run)),
                    run.steps,
                    now,
                    now,
                    os.getpid(),
                    HOST,
                    session,
                    key,
                    page,
                    page_run,
                ),
            ).lastrowid
            if source is not None:
                _link(db, run_id, source)
            return run_id

    def follow(self, run_id: int) -> str:
        """A watching row's look at the run it watches, in one transaction: "waiting" while that run is queued or
        training (its step count copied, so progress shows), "finished" once it has finished (this row finishes
        with it, showing its records), "train" if it failed, stopped, was interrupted or deleted, or its owner is
        gone: the row is then an ordinary queued run, for its caller to train."""
        now = time.time()
        with self._write() as db:
            watched = db.execute("SELECT records_from FROM runs WHERE id = ?", (run_id,)).fetchone()["records_from"]
            source = None if watched is None else db.execute("SELECT * FROM runs WHERE id = ?", (watched,)).fetchone()
            if source is not None and (
                source["status"] == "finished" or source["status"] in ACTIVE_STATUSES and _lost(source, now) is None
            ):
                _link(db, run_id, source)
                return "finished" if source["status"] == "finished" else "waiting"
            db.execute("UPDATE runs SET records_from = NULL, steps_done = 0 WHERE id = ?", (run_id,))
            return "train"

    def start_run(self, run_id: int) -> None:
        """This process now trains the run."""
        with self._write() as db:
            _start(db, run_id)

    def claim(
        self, run_ids: int | Sequence[int], cap: int, stopped: Callable[[], bool], join: Collection[int] = ()
    ) -> bool:
        """Start the run, or every run of a batch trained as one (`rl_core.engine.run_batch`), once fewer than `cap`
        trainings of this store are under way, in any process; False, without starting them, if `stopped()` turns
        true first. A batch is one training: one loop in one process, whatever its number of runs.

        `join`: runs this process trains in one loop whose set of runs changes (`rl_core.runs.run_loop`); while one of
        them trains, the run joins their batch at once, taking no further place under the cap.

        The count and the start are one write transaction, so two processes never both take the last place. A
        running row counts while its owner lives and its heartbeat is fresh (the recovery rule); this process's
        own rows count while it trains them."""
        run_ids = [run_ids] if isinstance(run_ids, int) else list(run_ids)
        batch_id = run_ids[0] if len(run_ids) > 1 else None
        while not stopped():
            now = time.time()
            with self._write() as db:
                rows = db.execute(
                    "SELECT id, batch_id, owner_pid, owner_host, heartbeat_at FROM runs WHERE status = 'running'"
                )
                training = [row for row in rows if _training(row, now)]
                trainings = {row["batch_id"] or row["id"] for row in training}
                joined = next((row["batch_id"] or row["id"] for row in training if row["id"] in join), None)
                if joined is not None or len(trainings) < cap:
                    for run_id in run_ids:
                        _start(db, run_id, batch_id if joined is None else joined)
                        _TRAINING_HERE.add(run_id)
                    return True
            time.sleep(CLAIM_POLL)
        return False

    def add_step(self, run_id: int, record: dict) -> None:
        """One trainer record: its scalars and its samples, and the run's step count, in one transaction.

        Python's JSON writes NaN as a bare NaN token and reads it back: a metric such as the length of correct
        responses is NaN on a step without any, and comes back as NaN rather than null."""
        metrics = {k: v for k, v in record.items() if k != "samples"}
        with self._write() as db:
            db.execute(
                "INSERT INTO steps (run_id, step, metrics, samples) VALUES (?, ?, ?, ?)",
                (run_id, record["step"], json.dumps(metrics), json.dumps(record.get("samples", []))),
            )
            db.execute(
                "UPDATE runs SET steps_done = ?, heartbeat_at = ? WHERE id = ?", (record["step"], time.time(), run_id)
            )
            db.execute(
                "UPDATE steps SET samples = '[]' WHERE run_id = ? AND step = ?",
                (run_id, record["step"] - SAMPLE_WINDOW),
            )

    def finish_run(self, run_id: int, status: str, final: dict | None = None, error: str | None = None) -> None:
        if status in ACTIVE_STATUSES or status not in STATUSES:
            raise ValueError(f"status={status!r} does not end a run; allowed: finished, failed, stopped, interrupted")
        _TRAINING_HERE.discard(run_id)  # first: if the write below fails, the run still frees its place
        with self._write() as db:
            db.execute(
                "UPDATE runs SET status = ?, finished_at = ?, final = ?, error = ? WHERE id = ?",
                (status, time.time(), None if final is None else json.dumps(final), error, run_id),
            )

    def settle(self, run_ids: Iterable[int], status: str, error: str | None = None) -> list[int]:
        """End those of `run_ids` that are still queued or running; returns the ids it ended."""
        ended = [run.id for run in self.runs(list(run_ids)) if run.active]
        for run_id in ended:
            self.finish_run(run_id, status, error=error)
        return ended

    def heartbeat(self) -> None:
        """Refresh the heartbeat of every active run this process owns."""
        with self._write() as db:
            db.execute(
                f"UPDATE runs SET heartbeat_at = ? WHERE owner_pid = ? AND owner_host = ? AND status IN {ACTIVE_SQL}",
                (time.time(), os.getpid(), HOST),
            )

    def recover(self) -> list[int]:
        """Mark the active runs whose owner is gone as interrupted (the rule is in the module docstring)."""
        now = time.time()
        with self._write() as db:
            rows = db.execute(
                f"SELECT id, owner_pid, owner_host, heartbeat_at FROM runs WHERE status IN {ACTIVE_SQL}"
            ).fetchall()
            lost = {row["id"]: reason for row in rows if (reason := _lost(row, now)) is not None}
            for run_id, reason in lost.items():
                db.execute(
                    "UPDATE runs SET status = 'interrupted', finished_at = ?, error = ? WHERE id = ?",
                    (now, reason, run_id),
                )
        return list(lost)

    def delete(self, run_ids: Iterable[int], session: str | None = None) -> int:
        """Delete these runs and their steps, except any still queued or running; returns how many went.

        With `session`, only that session's own runs go: shared runs and other sessions' are never touched. Records
        that other runs show (reuse) stay with the first of those that finished."""
        ids = list(run_ids)
        with self._write() as db:
            going = [
                row["id"]
                for row in db.execute(
                    f"SELECT id FROM runs WHERE id IN ({', '.join('?' * len(ids))}) AND status NOT IN {ACTIVE_SQL}"
                    + ("" if session is None else " AND session = ?"),
                    ids + ([] if session is None else [session]),
                )
            ]
            for run_id in going:
                _hand_down(db, run_id, going)
            db.execute(f"DELETE FROM runs WHERE id IN ({', '.join('?' * len(going))})", going)
            return len(going)

    # ------------------------------------------------------------------ reading
    def runs(
        self,
        run_ids: list[int] | None = None,
        sweep_id: int | None = None,
        visible_to: str | None = None,
        labels: Sequence[str] | None = None,
        page: str | None = None,
    ) -> list[StoredRun]:
        """Runs in the order they were created: all of them, the listed ids, or one sweep's; with `visible_to`,
        only those that session may see (its own and the shared ones); with `labels`, only runs so labelled; with
        `page`, only the live-lab runs their learners keep on that page."""
        clauses, parameters = [], []
        if page is not None:
            clauses.append("page = ?")
            parameters.append(page)
        if run_ids is not None:
            clauses.append(f"id IN ({', '.join('?' * len(run_ids))})")
            parameters += list(run_ids)
        elif sweep_id is not None:
            clauses.append("sweep_id = ?")
            parameters.append(sweep_id)
        if labels is not None:
            clauses.append(f"label IN ({', '.join('?' * len(labels))})")
            parameters += list(labels)
        if visible_to is not None:
            clauses.append("(session = ? OR session IS NULL)")
            parameters.append(visible_to)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        return [
            _stored_run(row) for row in self._connection().execute(f"SELECT * FROM runs{where} ORDER BY id", parameters)
        ]

    def run(self, run_id: int) -> StoredRun:
        found = self.runs([run_id])
        if not found:
            raise KeyError(f"no run {run_id} in {self.path.name}")
        return found[0]

    def steps(self, run_id: int, after: int = 0) -> list[dict]:
        """The scalar metrics of the run's steps after step `after`, in step order (a reused run's: those of the run
        it shows)."""
        rows = self._connection().execute(
            f"SELECT metrics FROM steps WHERE run_id = {RECORDS_OF} AND step > ? ORDER BY step", (run_id, run_id, after)
        )
        return [json.loads(row["metrics"]) for row in rows]

    def samples(self, run_id: int, step: int | None = None) -> list[dict]:
        """The sample views recorded at `step` (default: the run's latest step)."""
        row = (
            self._connection()
            .execute(
                f"SELECT samples FROM steps WHERE run_id = {RECORDS_OF} AND (? IS NULL OR step = ?) "
                "ORDER BY step DESC LIMIT 1",
                (run_id, run_id, step, step),
            )
            .fetchone()
        )
        return json.loads(row["samples"]) if row else []

    def training_seconds(self, session: str, since: float) -> float:
        """Seconds the runs of `session` trained after time `since` (until now for those still training); a reused
        run trained for someone else and counts for no one."""
        now = time.time()
        rows = self._connection().execute(
            "SELECT started_at, finished_at FROM runs WHERE session = ? AND started_at IS NOT NULL "
            "AND records_from IS NULL "
            "AND (finished_at IS NULL OR finished_at > ?)",
            (session, since),
        )
        return sum(max(min(row["finished_at"] or now, now) - max(row["started_at"], since), 0.0) for row in rows)

    def reusable(self, keys: Iterable[str]) -> set[str]:
        """Those of `keys` that `add_run(…, reuse=True)` would not train: a run of the key finished, or one in
        flight (queued or training, its owner alive)."""
        now = time.time()
        return {key for key in set(keys) if _reusable_run(self._connection(), key, now) is not None}

    def sweep_spec(self, sweep_id: int) -> dict:
        """What sweep `sweep_id` was started with (an experiment's sweep names the experiment)."""
        row = self._connection().execute("SELECT spec FROM sweeps WHERE id = ?", (sweep_id,)).fetchone()
        if row is None:
            raise KeyError(f"no sweep {sweep_id}")
        return json.loads(row["spec"])

    def latest_sweep(self, session: str | None = None) -> int | None:
        """The newest sweep (of `session`, if given)."""
        if session is None:
            return self._connection().execute("SELECT MAX(id) FROM sweeps").fetchone()[0]
        return self._connection().execute("SELECT MAX(id) FROM sweeps WHERE session = ?", (session,)).fetchone()[0]

    def leave_page(self, session: str, page: str) -> None:
        """The learner's runs of `page` are no longer that page's (Reset): they stay in the store, off the page."""
        with self._write() as db:
            db.execute("UPDATE runs SET page = NULL WHERE session = ? AND page = ?", (session, page))

    # ------------------------------------------------------------------ a class: predictions, learners, banner
    def answer(self, session: str, page: str, phase: str, question: str, options: Sequence[str], answer: str) -> None:
        """A learner's answer to a page's question: `before` the run (their prediction) or `after` it (what their
        run showed). It replaces their earlier answer of that phase on that page."""
        if phase not in PHASES:
            raise ValueError(f"phase={phase!r} is not a phase of an answer; allowed: {', '.join(PHASES)}")
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO predictions (session, page, phase, question, options, answer, "
                "answered_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (session, page, phase, question, json.dumps(list(options)), answer, time.time()),
            )

    def answer_counts(self) -> list[AnswerCount]:
        """Per page and question: how many learners gave each answer before and after their runs (each learner's
        latest answer of each phase counts once), in page order."""
        rows = self._connection().execute(
            "SELECT page, question, phase, answer, COUNT(*) AS learners, MAX(options) AS options FROM predictions "
            "GROUP BY page, question, phase, answer ORDER BY page, question"
        )
        counts: dict[tuple[str, str], AnswerCount] = {}
        for row in rows:
            entry = counts.setdefault(
                (row["page"], row["question"]),
                AnswerCount(
                    row["page"], row["question"], tuple(json.loads(row["options"])), {phase: {} for phase in PHASES}
                ),
            )
            entry.counts[row["phase"]][row["answer"]] = row["learners"]
        return list(counts.values())

    def seen(self, session: str, when: float | None = None) -> None:
        """The learner has just opened or redrawn a page."""
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO learners (session, last_seen) VALUES (?, ?)",
                (session, time.time() if when is None else when),
            )

    def active_learners(self, since: float) -> int:
        """How many learners were seen at or after time `since`."""
        return self._connection().execute("SELECT COUNT(*) FROM learners WHERE last_seen >= ?", (since,)).fetchone()[0]

    def issue_identity(self, session: str, address: str, per_address: int, since: float) -> bool:
        """Record `session` as issued to client `address`, unless `per_address` identities were issued to that
        address after time `since` (then False, and nothing is recorded): the count and the insert are one
        transaction, so two sessions never both take the last one."""
        with self._write() as db:
            issued = db.execute(
                "SELECT COUNT(*) FROM identities WHERE address = ? AND issued_at >= ?", (address, since)
            ).fetchone()[0]
            if issued >= per_address:
                return False
            db.execute(
                "INSERT INTO identities (session, address, issued_at) VALUES (?, ?, ?)", (session, address, time.time())
            )
            return True

    def issued(self, session: str) -> bool:
        """Whether this server issued `session`: recorded as issued, or owning runs or sweeps (only the app, for
        an identity of its own, stores a run or sweep with a session)."""
        return (
            self._connection()
            .execute(
                "SELECT EXISTS (SELECT 1 FROM identities WHERE session = ?) OR EXISTS (SELECT 1 FROM runs WHERE "
                "session = ?) OR EXISTS (SELECT 1 FROM sweeps WHERE session = ?)",
                (session,) * 3,
            )
            .fetchone()[0]
            == 1
        )

    def join_class(self, session: str) -> None:
        """The learner opened the class's join link."""
        with self._write() as db:
            db.execute(
                "INSERT INTO identities (session, address, issued_at, joined) VALUES (?, '', ?, 1) "
                "ON CONFLICT (session) DO UPDATE SET joined = 1",
                (session, time.time()),
            )

    def joined(self, session: str) -> bool:
        """Whether the learner has opened the class's join link."""
        row = self._connection().execute("SELECT joined FROM identities WHERE session = ?", (session,)).fetchone()
        return row is not None and bool(row["joined"])

    def pin(self, text: str, link: str) -> None:
        """Pin the banner every learner's page shows (it replaces the one pinned before)."""
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO banner (id, text, link, pinned_at) VALUES (1, ?, ?, ?)",
                (text, link, time.time()),
            )

    def unpin(self) -> None:
        with self._write() as db:
            db.execute("DELETE FROM banner")

    def pinned(self) -> tuple[str, str] | None:
        """The pinned banner's (text, link), or None."""
        row = self._connection().execute("SELECT text, link FROM banner").fetchone()
        return None if row is None else (row["text"], row["link"])


@dataclass(frozen=True)
class AnswerCount:
    """The class's answers to one page's question: phase (`before`, `after`) → answer → learners."""

    page: str
    question: str
    options: tuple[str, ...]
    counts: dict[str, dict[str, int]]


# The run whose steps run `?` shows: the one it reuses, or itself.
RECORDS_OF = "COALESCE((SELECT records_from FROM runs WHERE id = ?), ?)"


def _lost(row: sqlite3.Row, now: float) -> str | None:
    """Why a queued or running row's owner is taken to be gone (the rule in the module docstring); None if not."""
    if row["owner_host"] == HOST and not process_alive(row["owner_pid"]):
        return f"its process (pid {row['owner_pid']}) ended before the run did"
    if now - row["heartbeat_at"] > STALE_AFTER:
        return f"no sign of life from its process for {now - row['heartbeat_at']:.0f} s"
    return None


def _reusable_run(db: sqlite3.Connection, key: str, now: float) -> sqlite3.Row | None:
    """The run a request of `key` reuses: the first finished one, else the first in flight that trains for itself
    (not one that watches another) and whose owner lives; None if there is none."""
    finished = db.execute(
        "SELECT * FROM runs WHERE run_key = ? AND status = 'finished' ORDER BY id LIMIT 1", (key,)
    ).fetchone()
    if finished is not None:
        return finished
    flying = db.execute(
        f"SELECT * FROM runs WHERE run_key = ? AND status IN {ACTIVE_SQL} AND records_from IS NULL ORDER BY id", (key,)
    )
    return next((row for row in flying if _lost(row, now) is None), None)


def _link(db: sqlite3.Connection, run_id: int, source: sqlite3.Row) -> None:
    """Make run `run_id` show the records of `source` (of the run that holds them, if `source` shows another's):
    finished as it finished (steps, times, evaluation), or watching it while it is in flight."""
    holder = source["records_from"] if source["records_from"] is not None else source["id"]
    if source["status"] == "finished":
        db.execute(
            "UPDATE runs SET status = 'finished', records_from = ?, steps_done = ?, started_at = ?, "
            "finished_at = ?, final = ? WHERE id = ?",
            (holder, source["steps_done"], source["started_at"], source["finished_at"], source["final"], run_id),
        )
    else:
        db.execute(
            "UPDATE runs SET records_from = ?, steps_done = ? WHERE id = ?", (holder, source["steps_done"], run_id)
        )


def _hand_down(db: sqlite3.Connection, run_id: int, going: list[int]) -> None:
    """Before run `run_id` is deleted: its steps go to the first finished run that shows them and stays, which then
    holds them (it names itself), and the others that show them show that one's; with no such heir they show
    nothing, and a watching run trains for itself (`follow`)."""
    heir = db.execute(
        f"SELECT id FROM runs WHERE records_from = ? AND status = 'finished' AND id NOT IN "
        f"({', '.join('?' * len(going))}) ORDER BY id LIMIT 1",
        [run_id, *going],
    ).fetchone()
    if heir is not None:
        db.execute("UPDATE steps SET run_id = ? WHERE run_id = ?", (heir["id"], run_id))
    db.execute(
        "UPDATE runs SET records_from = ? WHERE records_from = ?", (None if heir is None else heir["id"], run_id)
    )


def _training(row: sqlite3.Row, now: float) -> bool:
    """Whether a running row takes a place under the training cap (`RunStore.claim`)."""
    if now - row["heartbeat_at"] > STALE_AFTER:
        return False
    if row["owner_host"] != HOST:
        return True
    if row["owner_pid"] == os.getpid():
        return row["id"] in _TRAINING_HERE
    return process_alive(row["owner_pid"])


def _start(db: sqlite3.Connection, run_id: int, batch_id: int | None = None) -> None:
    """Mark the run as trained by this process from now on (in the batch of run `batch_id`, if one)."""
    now = time.time()
    db.execute(
        "UPDATE runs SET status = 'running', started_at = ?, heartbeat_at = ?, owner_pid = ?, owner_host = ?, "
        "batch_id = ? WHERE id = ?",
        (now, now, os.getpid(), HOST, batch_id, run_id),
    )


def _stored_run(row: sqlite3.Row) -> StoredRun:
    fields = dict(row)
    for name in ("variant", "config", "final"):
        if fields[name] is not None:
            fields[name] = json.loads(fields[name])
    return StoredRun(**fields)


def process_alive(pid: int) -> bool:
    """Whether process `pid` on this host still exists and is not a zombie."""
    if os.name != "posix":
        return True  # os.kill(pid, 0) would end the process on Windows; the heartbeat rule decides there
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    try:
        # /proc/<pid>/stat: "pid (name) state …"; a killed child its parent has not reaped yet is in state Z.
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no procfs (macOS): the signal test is all there is


class Heartbeat:
    """A daemon thread refreshing the heartbeat of this process's active runs until `stop()`."""

    def __init__(self, store: RunStore, interval: float = HEARTBEAT_INTERVAL):
        self.store = store
        self.interval = interval
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="run-store-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _beat(self) -> None:
        while not self._stopped.wait(self.interval):
            # a missed beat is harmless: the next one comes long before STALE_AFTER
            with contextlib.suppress(sqlite3.Error):
                self.store.heartbeat()
        self.store.close()
