"""The embedded default checkpoint store: one SQLite file that survives restarts.

Several processes on one host may share the file: WAL mode lets readers run beside a writer,
a busy timeout waits out the other writers, and every write is a read-check-write inside
``BEGIN IMMEDIATE`` (the write lock is held from the read on), so the compare-and-set of
``apply_put`` and ``apply_lease`` (:mod:`kinesis_core.checkpoint.base`) holds across processes:
the rows serve as leases between the consumer processes of one host. The blocking sqlite3
calls run on one dedicated thread, never on the event loop.

Before every call the store checks that the path still names the file it opened (device and
inode): a file deleted or replaced under running workers would leave each on a table of its
own, every one of them reading every shard. So the call raises
:class:`~kinesis_core.checkpoint.base.CheckpointTableGoneError` instead, as does every later
one. A file the store creates is readable and writable by its owner only (0600; SQLite gives
its ``-wal`` and ``-shm`` files the same mode).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from kinesis_core.aws.backoff import Jitter
from kinesis_core.aws.classify import ErrorKind
from kinesis_core.aws.executor import SyncExecutor
from kinesis_core.aws.retry import RetryPolicy
from kinesis_core.checkpoint.base import (
    Checkpoint,
    CheckpointTableGoneError,
    CheckpointValue,
    Sentinel,
    apply_lease,
    apply_put,
)
from kinesis_core.errors import ConfigurationError
from kinesis_core.runtime.clock import SYSTEM_BLOCKING_CLOCK, BlockingClock

_T = TypeVar("_T")


def _locked(error: BaseException) -> ErrorKind | None:
    """Retried: "database is locked" (another connection has the file); other errors raise."""
    if isinstance(error, sqlite3.OperationalError) and "locked" in str(error):
        return ErrorKind.IN_USE
    return None


WAL_SWITCH = RetryPolicy(base=0.01, cap=0.2, jitter=Jitter.EQUAL, attempts=None, unknown=_locked)
"""The switch of a file to WAL, tried again while another connection has the file (the
deadline is the store's ``busy_timeout``)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kinesis_checkpoints (
    application TEXT NOT NULL,
    stream TEXT NOT NULL,
    shard_id TEXT NOT NULL,
    checkpoint TEXT NOT NULL,
    sub_sequence_number INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT,
    lease_counter INTEGER NOT NULL,
    parent_shard_ids TEXT NOT NULL DEFAULT '[]',
    updated_at REAL NOT NULL,
    child_shard_ids TEXT NOT NULL DEFAULT '[]',
    starting_hash_key TEXT,
    ending_hash_key TEXT,
    stream_created_ms INTEGER,
    checkpoint_owner TEXT,
    throughput_kbps REAL,
    dedup_window TEXT,
    PRIMARY KEY (application, stream, shard_id)
) WITHOUT ROWID
"""
_WORKERS_SCHEMA = """
CREATE TABLE IF NOT EXISTS kinesis_workers (
    application TEXT NOT NULL,
    stream TEXT NOT NULL,
    worker_id TEXT NOT NULL,
    counter INTEGER NOT NULL,
    PRIMARY KEY (application, stream, worker_id)
) WITHOUT ROWID
"""
# Columns added after the first release, for files made before them (hash keys are decimal
# text: they do not fit SQLite's 64-bit integers).
_ADDED_COLUMNS = {
    "child_shard_ids": "TEXT NOT NULL DEFAULT '[]'",
    "starting_hash_key": "TEXT",
    "ending_hash_key": "TEXT",
    "stream_created_ms": "INTEGER",
    "checkpoint_owner": "TEXT",
    "throughput_kbps": "REAL",
    "dedup_window": "TEXT",
}
_NULL_IF_MISSING = frozenset(
    {"stream_created_ms", "checkpoint_owner", "throughput_kbps", "dedup_window"}
)
"""Columns a read-only look at a file made before them reads as NULL (what the upgrade of
that file would hold) instead of refusing it."""
_COLUMN_NAMES = (
    "shard_id",
    "checkpoint",
    "sub_sequence_number",
    "lease_owner",
    "lease_counter",
    "parent_shard_ids",
    "child_shard_ids",
    "starting_hash_key",
    "ending_hash_key",
    "stream_created_ms",
    "checkpoint_owner",
    "throughput_kbps",
    "dedup_window",
)
_COLUMNS = ", ".join(_COLUMN_NAMES)
_Row = tuple[
    str,
    str,
    int,
    str | None,
    int,
    str,
    str,
    str | None,
    str | None,
    int | None,
    str | None,
    float | None,
    str | None,
]


_NOT_FILES = frozenset({"", ":memory:"})
"""Paths SQLite opens as a private in-memory or temporary database, not a file at the path."""
_ONE = "application = ? AND stream = ? AND shard_id = ?"


def _select(columns: str, where: str) -> str:
    return f"SELECT {columns} FROM kinesis_checkpoints WHERE {where}"  # noqa: S608 (constants)


def _decode(row: _Row) -> Checkpoint:
    shard_id, checkpoint, sub, owner, counter, parents, children, start, end = row[:9]
    created, handing, throughput, window = row[9:]
    value: CheckpointValue = (
        (int(checkpoint), sub) if checkpoint.isdigit() else Sentinel(checkpoint)
    )
    hash_range = None if start is None or end is None else (int(start), int(end))
    return Checkpoint(
        shard_id,
        value,
        counter,
        owner,
        tuple(json.loads(parents)),
        tuple(json.loads(children)),
        hash_range,
        created,
        handing,
        throughput,
        window,
    )


def _encode(value: CheckpointValue) -> tuple[str, int]:
    if isinstance(value, Sentinel):
        return value.value, 0
    return str(value[0]), value[1]


def _naming(exc: sqlite3.Error, path: str) -> sqlite3.Error:
    """``exc`` (same type, same SQLite error code) with the store's path in its message:
    "unable to open database file" alone does not say which file."""
    named = type(exc)(f"{exc} (SQLite checkpoint store {path!r})")
    for attribute in ("sqlite_errorcode", "sqlite_errorname"):
        if hasattr(exc, attribute):
            setattr(named, attribute, getattr(exc, attribute))
    return named


def _file_identity(path: str) -> tuple[int, int] | None:
    """The device and inode of the file at ``path``; None if there is none."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return None
    return status.st_dev, status.st_ino


def _create_private(path: str) -> None:
    """Create an empty file at ``path`` with mode 0600 unless one exists (an empty file is an
    empty SQLite database). Checkpoints name the application's streams and shards; other users
    of the host have no business reading or changing them. A file that cannot be made here is
    left to SQLite, whose error names it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return
    os.close(fd)


def _migrate(conn: sqlite3.Connection) -> None:
    """Create the table, or add the columns a file made by an older version lacks."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(_SCHEMA)
        conn.execute(_WORKERS_SCHEMA)
        present = {row[1] for row in conn.execute("PRAGMA table_info(kinesis_checkpoints)")}
        for name, kind in _ADDED_COLUMNS.items():
            if name not in present:
                conn.execute(f"ALTER TABLE kinesis_checkpoints ADD COLUMN {name} {kind}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class SQLiteCheckpointStore:
    """Checkpoints in a SQLite file, keyed by (application, stream, shard).

    ``busy_timeout`` (seconds) is how long a write waits for another process's write lock.
    The sequence number is kept as a decimal string (the KCL's ``checkpoint`` attribute) and
    the sub-sequence number beside it, so the rows read like a KCL lease table.

    ``read_only=True`` opens an existing file for reading only (``kinesis-connectors status``
    beside running consumers): no file, table or column is created, and writes raise.
    ``clock`` is what the store's waits for the file run on.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 30.0,
        read_only: bool = False,
        clock: BlockingClock = SYSTEM_BLOCKING_CLOCK,
    ) -> None:
        if busy_timeout <= 0:
            raise ConfigurationError("busy_timeout", f"must be > 0 seconds, got {busy_timeout}")
        self.path = os.fspath(path)
        self.read_only = read_only
        self._busy_timeout = busy_timeout
        self._calls = SyncExecutor(None, clock=clock)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-checkpoints")
        self._conn: sqlite3.Connection | None = None
        self._columns = _COLUMNS
        """What reads select: every column, or NULL for one a read-only file lacks."""
        self._closed = False
        self._identity: tuple[int, int] | None = None
        """Device and inode of the file the connection has open (None: none open yet)."""
        self._gone: CheckpointTableGoneError | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = self._open_read_only() if self.read_only else self._open()
            self._conn = conn
            self._identity = _file_identity(self.path)
        self._check_same_file(self._conn)
        return self._conn

    def _check_same_file(self, conn: sqlite3.Connection) -> None:
        """Raise CheckpointTableGoneError if the path no longer names the file ``conn`` has
        open (deleted, or another file put in its place); the store stays unusable."""
        if self.path in _NOT_FILES:
            return
        if self._gone is None:
            now = _file_identity(self.path)
            if now is not None and now == self._identity:
                return
            what = "deleted" if now is None else "replaced by another file"
            self._gone = CheckpointTableGoneError(
                self.path,
                f"SQLite checkpoint file {self.path!r} was {what} while this store had it "
                "open: its checkpoints and leases are gone (a worker starting on a new file "
                "reads every shard again); stop every consumer of a file before deleting or "
                "moving it",
            )
            # Closing the last connection of a WAL file checkpoints it and deletes the -wal
            # and -shm files by name: those may now be the new file's.
            no_checkpoint = getattr(sqlite3, "SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE", None)
            setconfig = getattr(conn, "setconfig", None)
            if no_checkpoint is not None and setconfig is not None:
                setconfig(no_checkpoint, True)
        raise self._gone

    def _open(self) -> sqlite3.Connection:
        if self.path not in _NOT_FILES:
            _create_private(self.path)
        conn = sqlite3.connect(
            self.path,
            timeout=self._busy_timeout,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
            self._use_wal(conn)
            # NORMAL is durable against a process crash in WAL mode (not against power loss).
            conn.execute("PRAGMA synchronous = NORMAL")
            _migrate(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _use_wal(self, conn: sqlite3.Connection) -> None:
        """Switch the file to WAL, waiting up to ``busy_timeout`` (:data:`WAL_SWITCH`) for the
        other connections opening it at the same moment: the switch needs the file to itself,
        and SQLite answers "database is locked" to all but one of them at once, without its
        busy handler."""
        self._calls.attempt(
            lambda: conn.execute("PRAGMA journal_mode = WAL"),
            dataclasses.replace(WAL_SWITCH, deadline=self._busy_timeout),
            f"the switch of SQLite checkpoint store {self.path!r} to WAL",
        )

    def _open_read_only(self) -> sqlite3.Connection:
        if os.path.isdir(self.path):
            raise ConfigurationError(
                "path",
                f"checkpoint file {self.path!r} is a directory, not a checkpoint file "
                "(give the SQLite file the consumers write)",
            )
        if not os.path.isfile(self.path):
            raise ConfigurationError("path", f"checkpoint file {self.path!r} does not exist")
        uri = f"file:{urllib.parse.quote(os.path.abspath(self.path))}?mode=ro"
        conn = sqlite3.connect(
            uri,
            uri=True,
            timeout=self._busy_timeout,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
            present = {row[1] for row in conn.execute("PRAGMA table_info(kinesis_checkpoints)")}
            missing = {"checkpoint", *_ADDED_COLUMNS} - present - _NULL_IF_MISSING
            if missing:
                what = "no checkpoint table" if "checkpoint" in missing else "an older table"
                raise ConfigurationError(
                    "path",
                    f"checkpoint file {self.path!r} has {what} "
                    f"(missing {', '.join(sorted(missing))}); "
                    "a consumer opening it read-write creates or upgrades it",
                )
        except BaseException:
            conn.close()
            raise
        self._columns = ", ".join(
            "NULL" if name in _NULL_IF_MISSING and name not in present else name
            for name in _COLUMN_NAMES
        )
        return conn

    async def _run(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        if self._closed:
            raise RuntimeError("SQLiteCheckpointStore is closed")

        def call() -> _T:
            try:
                return fn(self._connection())
            except sqlite3.Error as exc:
                raise _naming(exc, self.path) from exc

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, call)

    async def get(self, application: str, stream: str, shard_id: str) -> Checkpoint | None:
        def read(conn: sqlite3.Connection) -> Checkpoint | None:
            query = _select(self._columns, _ONE)
            row = conn.execute(query, (application, stream, shard_id)).fetchone()
            return None if row is None else _decode(row)

        return await self._run(read)

    async def list(self, application: str, stream: str) -> list[Checkpoint]:
        def read(conn: sqlite3.Connection) -> list[Checkpoint]:
            rows = conn.execute(
                _select(self._columns, "application = ? AND stream = ? ORDER BY shard_id"),
                (application, stream),
            ).fetchall()
            return [_decode(row) for row in rows]

        return await self._run(read)

    async def put(
        self,
        application: str,
        stream: str,
        shard_id: str,
        value: CheckpointValue,
        *,
        expected: Checkpoint | None,
        parent_shard_ids: Sequence[str] = (),
        child_shard_ids: Sequence[str] = (),
        hash_range: tuple[int, int] | None = None,
        stream_created_ms: int | None = None,
        dedup_window: str | None = None,
    ) -> Checkpoint:
        return await self._write(
            (application, stream, shard_id),
            lambda current: apply_put(
                current,
                shard_id,
                value,
                expected,
                parent_shard_ids,
                child_shard_ids,
                hash_range,
                stream_created_ms,
                dedup_window,
            ),
        )

    async def update_lease(
        self,
        application: str,
        stream: str,
        shard_id: str,
        *,
        expected: Checkpoint,
        owner: str | None,
        checkpoint_owner: str | None = None,
        throughput_kbps: float | None = None,
    ) -> Checkpoint:
        return await self._write(
            (application, stream, shard_id),
            lambda current: apply_lease(
                current, shard_id, expected, owner, checkpoint_owner, throughput_kbps
            ),
        )

    async def heartbeat(
        self, application: str, stream: str, worker_id: str, *, leaving: bool = False
    ) -> None:
        if self.read_only:
            raise ConfigurationError("path", f"checkpoint file {self.path!r} is open read-only")
        key = (application, stream, worker_id)

        def write(conn: sqlite3.Connection) -> None:
            if leaving:
                conn.execute(
                    "DELETE FROM kinesis_workers "
                    "WHERE application = ? AND stream = ? AND worker_id = ?",
                    key,
                )
            else:
                conn.execute(
                    "INSERT INTO kinesis_workers (application, stream, worker_id, counter) "
                    "VALUES (?, ?, ?, 1) ON CONFLICT (application, stream, worker_id) "
                    "DO UPDATE SET counter = counter + 1",
                    key,
                )

        await self._run(write)

    async def forget_worker(
        self, application: str, stream: str, worker_id: str, counter: int
    ) -> None:
        if self.read_only:
            raise ConfigurationError("path", f"checkpoint file {self.path!r} is open read-only")

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "DELETE FROM kinesis_workers "
                "WHERE application = ? AND stream = ? AND worker_id = ? AND counter = ?",
                (application, stream, worker_id, counter),
            )

        await self._run(write)

    async def workers(self, application: str, stream: str) -> dict[str, int]:
        def read(conn: sqlite3.Connection) -> dict[str, int]:
            try:
                rows = conn.execute(
                    "SELECT worker_id, counter FROM kinesis_workers "
                    "WHERE application = ? AND stream = ?",
                    (application, stream),
                ).fetchall()
            except sqlite3.OperationalError:
                if self.read_only:  # a file made before worker rows
                    return {}
                raise
            return dict(rows)

        return await self._run(read)

    async def _write(
        self,
        key: tuple[str, str, str],
        rule: Callable[[Checkpoint | None], Checkpoint],
    ) -> Checkpoint:
        """Read the row, apply the compare-and-set rule and write the result, all under the
        write lock, so that the check holds across processes."""

        if self.read_only:
            raise ConfigurationError("path", f"checkpoint file {self.path!r} is open read-only")

        def write(conn: sqlite3.Connection) -> Checkpoint:
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute(_select(_COLUMNS, _ONE), key).fetchone()
                new = rule(None if row is None else _decode(row))
                checkpoint, sub = _encode(new.value)
                start, end = (None, None) if new.hash_range is None else new.hash_range
                conn.execute(
                    "INSERT OR REPLACE INTO kinesis_checkpoints (application, stream, shard_id, "
                    "checkpoint, sub_sequence_number, lease_owner, lease_counter, "
                    "parent_shard_ids, updated_at, child_shard_ids, starting_hash_key, "
                    "ending_hash_key, stream_created_ms, checkpoint_owner, throughput_kbps, "
                    "dedup_window) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        *key,
                        checkpoint,
                        sub,
                        new.owner,
                        new.counter,
                        json.dumps(list(new.parent_shard_ids)),
                        time.time(),
                        json.dumps(list(new.child_shard_ids)),
                        None if start is None else str(start),
                        None if end is None else str(end),
                        new.stream_created_ms,
                        new.checkpoint_owner,
                        new.throughput_kbps,
                        new.dedup_window,
                    ),
                )
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return new

        return await self._run(write)

    async def close(self) -> None:
        """Close the connection on its own thread, then stop the thread."""
        if self._closed:
            return

        def shut(conn: sqlite3.Connection | None) -> None:
            if conn is not None:
                conn.close()

        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, shut, self._conn)
        self._conn = None
        self._closed = True
        self._executor.shutdown(wait=True)

    def __repr__(self) -> str:
        return f"SQLiteCheckpointStore({self.path!r})"

    async def __aenter__(self) -> SQLiteCheckpointStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
