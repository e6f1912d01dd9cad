"""Checkpoint stores: one protocol, compare-and-set, never backwards, SQLite across processes."""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import os
import shutil
import sqlite3
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kinesis_core.checkpoint import (
    SHARD_END,
    Checkpoint,
    CheckpointConflictError,
    CheckpointStore,
    CheckpointTableGoneError,
    MemoryCheckpointStore,
    Sentinel,
    SQLiteCheckpointStore,
    checkpoint_order,
)
from kinesis_core.checkpoint.base import apply_put
from kinesis_core.errors import ConfigurationError, ValidationError

BIG = 49_680_446_358_758_688_350_039_136_273_873_520_000_000_000_000_000_002  # 56 digits

StoreFactory = Callable[[Path], CheckpointStore]


@pytest.fixture(params=["memory", "sqlite"])
def make_store(request: pytest.FixtureRequest) -> StoreFactory:
    if request.param == "memory":
        return lambda _: MemoryCheckpointStore()
    return lambda path: SQLiteCheckpointStore(path / "checkpoints.sqlite3")


def test_compare_and_set_round_trip(make_store: StoreFactory, tmp_path: Path) -> None:
    async def main() -> None:
        store = make_store(tmp_path)
        assert await store.get("app", "s", "shard-1") is None
        first = await store.put(
            "app", "s", "shard-1", Sentinel.TRIM_HORIZON, expected=None, parent_shard_ids=["p"]
        )
        assert first == Checkpoint("shard-1", Sentinel.TRIM_HORIZON, 1, None, ("p",))
        second = await store.put("app", "s", "shard-1", (BIG, 7), expected=first)
        assert second.position == (BIG, 7)
        assert second.counter == 2
        assert second.parent_shard_ids == ("p",)
        assert await store.get("app", "s", "shard-1") == second
        third = await store.put("app", "s", "shard-1", SHARD_END, expected=second)
        assert third.is_shard_end
        assert third.position is None
        await store.close()

    asyncio.run(main())


def test_conflicts_carry_the_stored_row(make_store: StoreFactory, tmp_path: Path) -> None:
    async def main() -> None:
        store = make_store(tmp_path)
        first = await store.put("app", "s", "shard-1", (10, 0), expected=None)
        with pytest.raises(CheckpointConflictError) as exists:
            await store.put("app", "s", "shard-1", (11, 0), expected=None)
        assert exists.value.current == first
        second = await store.put("app", "s", "shard-1", (20, 0), expected=first)
        with pytest.raises(CheckpointConflictError) as stale:
            await store.put("app", "s", "shard-1", (30, 0), expected=first)
        assert stale.value.current == second
        with pytest.raises(CheckpointConflictError, match="behind"):
            await store.put("app", "s", "shard-1", (19, 9), expected=second)
        with pytest.raises(CheckpointConflictError, match="does not exist"):
            await store.put("app", "s", "shard-2", (1, 0), expected=second)
        assert await store.get("app", "s", "shard-1") == second
        await store.close()

    asyncio.run(main())


def test_rows_are_keyed_by_application_stream_and_shard(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    async def main() -> None:
        store = make_store(tmp_path)
        await store.put("app", "s", "shard-1", (1, 0), expected=None)
        await store.put("app", "s", "shard-2", SHARD_END, expected=None)
        await store.put("other-app", "s", "shard-1", (9, 0), expected=None)
        await store.put("app", "other-stream", "shard-1", (8, 0), expected=None)
        rows = sorted(await store.list("app", "s"), key=lambda r: r.shard_id)
        assert [(r.shard_id, r.value) for r in rows] == [
            ("shard-1", (1, 0)),
            ("shard-2", SHARD_END),
        ]
        assert isinstance(store, CheckpointStore)
        await store.close()

    asyncio.run(main())


def test_bad_values_are_refused(make_store: StoreFactory, tmp_path: Path) -> None:
    async def main() -> None:
        store = make_store(tmp_path)
        for bad in ("123", (1,), (1, -1), (1.0, 0), None):
            with pytest.raises(ValidationError, match="checkpoint"):
                await store.put("app", "s", "shard-1", bad, expected=None)  # type: ignore[arg-type]
        await store.close()

    asyncio.run(main())


def test_lease_writes_keep_the_hand_off_marker_and_the_throughput(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    async def main() -> None:
        store = make_store(tmp_path)
        assert isinstance(store, (MemoryCheckpointStore, SQLiteCheckpointStore))
        row = await store.put("app", "s", "shard-1", Sentinel.TRIM_HORIZON, expected=None)
        held = await store.update_lease(
            "app", "s", "shard-1", expected=row, owner="a", throughput_kbps=12.5
        )
        assert held.throughput_kbps == 12.5
        asked = await store.update_lease(
            "app", "s", "shard-1", expected=held, owner="b", checkpoint_owner="a"
        )
        assert (asked.owner, asked.checkpoint_owner, asked.throughput_kbps) == ("b", "a", 12.5)
        with pytest.raises(CheckpointConflictError):  # the marker is part of the condition
            await store.put("app", "s", "shard-1", (5, 0), expected=held)
        final = await store.put("app", "s", "shard-1", (5, 0), expected=asked)
        assert (final.owner, final.checkpoint_owner, final.value) == ("b", None, (5, 0))
        assert await store.get("app", "s", "shard-1") == final

    asyncio.run(main())


def test_order_of_values() -> None:
    ordered = [Sentinel.LATEST, (1, 0), (1, 5), (2, 0), (BIG, 0), SHARD_END]
    keys = [checkpoint_order(v) for v in ordered]
    assert keys == sorted(keys)
    assert checkpoint_order(Sentinel.TRIM_HORIZON) == checkpoint_order(Sentinel.AT_TIMESTAMP)


def test_sqlite_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"

    async def write() -> None:
        async with SQLiteCheckpointStore(path) as store:
            await store.put(
                "app", "s", "shard-1", (BIG, 3), expected=None, parent_shard_ids=["a", "b"]
            )

    async def read() -> Checkpoint | None:
        async with SQLiteCheckpointStore(path) as store:
            return await store.get("app", "s", "shard-1")

    asyncio.run(write())
    assert asyncio.run(read()) == Checkpoint("shard-1", (BIG, 3), 1, None, ("a", "b"))


def test_sqlite_refuses_use_after_close_and_bad_timeout(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError):
        SQLiteCheckpointStore(tmp_path / "x", busy_timeout=0)

    async def main() -> None:
        store = SQLiteCheckpointStore(tmp_path / "x")
        await store.close()
        await store.close()
        with pytest.raises(RuntimeError, match="closed"):
            await store.get("app", "s", "shard-1")

    asyncio.run(main())


def test_sqlite_errors_name_the_file(tmp_path: Path) -> None:
    """sqlite3 says "unable to open database file" or "file is not a database", never which."""
    missing_dir = tmp_path / "no-such-dir" / "c.sqlite3"
    not_a_database = tmp_path / "notes.txt"
    not_a_database.write_bytes(b"these are my notes, not a database" * 100)

    async def first_read(path: Path) -> None:
        async with SQLiteCheckpointStore(path) as store:
            await store.get("app", "s", "shard-1")

    cases = [
        (missing_dir, sqlite3.OperationalError, "unable to open database file"),
        (not_a_database, sqlite3.DatabaseError, "file is not a database"),
    ]
    for path, kind, said in cases:
        with pytest.raises(kind) as info:
            asyncio.run(first_read(path))
        message = str(info.value)
        assert said in message
        assert str(path) in message
        assert isinstance(info.value.__cause__, sqlite3.Error)
        for attribute in ("sqlite_errorcode", "sqlite_errorname"):  # Python 3.11+
            assert getattr(info.value, attribute, None) == getattr(
                info.value.__cause__, attribute, None
            )


def test_sqlite_read_only_reads_beside_a_writer_and_never_writes(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"

    async def main() -> None:
        async with SQLiteCheckpointStore(path) as writer:  # open, as a running consumer's is
            row = await writer.put("app", "s", "shard-1", (BIG, 3), expected=None)
            await writer.update_lease("app", "s", "shard-1", expected=row, owner="w1")
            async with SQLiteCheckpointStore(path, read_only=True) as reader:
                rows = await reader.list("app", "s")
                assert rows == [Checkpoint("shard-1", (BIG, 3), 2, "w1")]
                with pytest.raises(ConfigurationError, match="read-only"):
                    await reader.put("app", "s", "shard-2", (1, 0), expected=None)
                with pytest.raises(ConfigurationError, match="read-only"):
                    await reader.update_lease("app", "s", "shard-1", expected=rows[0], owner=None)
            assert await writer.list("app", "s") == rows

    asyncio.run(main())


def test_sqlite_read_only_creates_nothing(tmp_path: Path) -> None:
    missing, empty = tmp_path / "missing.sqlite3", tmp_path / "empty.sqlite3"
    sqlite3.connect(empty).close()
    size = empty.stat().st_size

    async def main() -> None:
        for path, error in ((missing, "does not exist"), (empty, "no checkpoint table")):
            async with SQLiteCheckpointStore(path, read_only=True) as store:
                with pytest.raises(ConfigurationError, match=error):
                    await store.list("app", "s")

    asyncio.run(main())
    assert not missing.exists()
    assert empty.stat().st_size == size


def _increment(path: str, rounds: int, worker: int) -> None:
    """Move the checkpoint one sequence number forward ``rounds`` times, racing the others."""

    async def main() -> None:
        async with SQLiteCheckpointStore(path) as store:
            done = 0
            while done < rounds:
                row = await store.get("app", "s", "shard-1")
                assert row is not None
                assert row.position is not None
                step = (row.position[0] + 1, worker)
                try:
                    await store.put("app", "s", "shard-1", step, expected=row)
                except CheckpointConflictError:
                    continue
                done += 1

    asyncio.run(main())


@pytest.mark.slow
def test_sqlite_compare_and_set_holds_across_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.sqlite3")

    async def seed() -> None:
        async with SQLiteCheckpointStore(path) as store:
            await store.put("app", "s", "shard-1", (0, 0), expected=None)

    asyncio.run(seed())
    ctx = multiprocessing.get_context("spawn")
    workers, rounds = 3, 40
    procs = [ctx.Process(target=_increment, args=(path, rounds, w)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0

    async def read() -> Checkpoint | None:
        async with SQLiteCheckpointStore(path) as store:
            return await store.get("app", "s", "shard-1")

    row = asyncio.run(read())
    assert row is not None
    assert row.position is not None
    # No lost update: every successful compare-and-set moved it exactly one step.
    assert row.position[0] == workers * rounds
    assert row.counter == workers * rounds + 1


NOW = 1_700_000_000_000
BEFORE = NOW - 3_600_000


def test_rows_keep_the_incarnation_and_a_row_without_one_adopts_it(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    async def main() -> None:
        store = make_store(tmp_path)
        legacy = await store.put("app", "s", "shard-1", (10, 0), expected=None)
        assert legacy.stream_created_ms is None
        adopted = await store.put(
            "app", "s", "shard-1", (20, 0), expected=legacy, stream_created_ms=NOW
        )
        assert adopted.stream_created_ms == NOW
        kept = await store.put("app", "s", "shard-1", (30, 0), expected=adopted)
        assert kept.stream_created_ms == NOW
        assert await store.get("app", "s", "shard-1") == kept
        with pytest.raises(CheckpointConflictError, match="behind"):
            await store.put("app", "s", "shard-1", (5, 0), expected=kept, stream_created_ms=NOW)
        await store.close()

    asyncio.run(main())


def test_a_write_for_another_incarnation_starts_the_row_over(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    async def main() -> None:
        store = make_store(tmp_path)
        old = await store.put(
            "app",
            "s",
            "shard-1",
            (BIG, 0),
            expected=None,
            parent_shard_ids=["p"],
            hash_range=(0, 9),
            stream_created_ms=BEFORE,
        )
        old = await store.put("app", "s", "shard-1", SHARD_END, expected=old, child_shard_ids=["c"])
        new = await store.put(
            "app", "s", "shard-1", Sentinel.TRIM_HORIZON, expected=old, stream_created_ms=NOW
        )
        assert new == Checkpoint(
            "shard-1", Sentinel.TRIM_HORIZON, old.counter + 1, None, stream_created_ms=NOW
        )
        assert await store.get("app", "s", "shard-1") == new
        assert (await store.list("app", "s")) == [new]
        await store.close()

    asyncio.run(main())


WINDOW = '[1,1700000000000,1700000000500,["AbCdEfGhIjKl.3"],[[0,0,99,500]]]'
LATER_WINDOW = '[1,1700000000000,1700000000900,["AbCdEfGhIjKl.3"],[[0,0,149,900]]]'


def test_a_put_replaces_the_dedup_window_when_given_and_keeps_it_otherwise() -> None:
    new = apply_put(None, "shard-1", (10, 0), None, (), dedup_window=WINDOW)
    assert new.dedup_window == WINDOW
    assert apply_put(None, "shard-1", (10, 0), None, ()).dedup_window is None
    kept = apply_put(new, "shard-1", (20, 0), new, ())
    assert kept.dedup_window == WINDOW
    replaced = apply_put(kept, "shard-1", (30, 0), kept, (), dedup_window=LATER_WINDOW)
    assert replaced.dedup_window == LATER_WINDOW
    of_this_stream = apply_put(
        replaced, "shard-1", (40, 0), replaced, (), stream_created_ms=NOW
    )  # a row without an incarnation adopts it: the same stream, the window stays
    assert of_this_stream.dedup_window == LATER_WINDOW


def test_a_put_for_another_incarnation_clears_the_dedup_window_unless_given() -> None:
    old = apply_put(
        None, "shard-1", (BIG, 0), None, (), stream_created_ms=BEFORE, dedup_window=WINDOW
    )
    cleared = apply_put(old, "shard-1", Sentinel.TRIM_HORIZON, old, (), stream_created_ms=NOW)
    assert cleared.dedup_window is None
    given = apply_put(
        old, "shard-1", (5, 0), old, (), stream_created_ms=NOW, dedup_window=LATER_WINDOW
    )
    assert given.dedup_window == LATER_WINDOW


def test_rows_keep_the_dedup_window_through_puts_and_lease_writes(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    async def main() -> None:
        store = make_store(tmp_path)
        assert isinstance(store, (MemoryCheckpointStore, SQLiteCheckpointStore))
        row = await store.put(
            "app",
            "s",
            "shard-1",
            (10, 0),
            expected=None,
            stream_created_ms=BEFORE,
            dedup_window=WINDOW,
        )
        assert row.dedup_window == WINDOW
        assert await store.get("app", "s", "shard-1") == row
        held = await store.update_lease(
            "app", "s", "shard-1", expected=row, owner="a", throughput_kbps=3.0
        )
        asked = await store.update_lease(
            "app", "s", "shard-1", expected=held, owner="b", checkpoint_owner="a"
        )
        assert (held.dedup_window, asked.dedup_window) == (WINDOW, WINDOW)
        kept = await store.put("app", "s", "shard-1", (20, 0), expected=asked)
        assert kept.dedup_window == WINDOW
        replaced = await store.put(
            "app", "s", "shard-1", (30, 0), expected=kept, dedup_window=LATER_WINDOW
        )
        assert replaced.dedup_window == LATER_WINDOW
        assert await store.list("app", "s") == [replaced]
        other = await store.put(
            "app", "s", "shard-1", Sentinel.TRIM_HORIZON, expected=replaced, stream_created_ms=NOW
        )
        assert other.dedup_window is None
        assert await store.get("app", "s", "shard-1") == other
        await store.close()

    asyncio.run(main())


_SCHEMA_BEFORE_INCARNATIONS = """
CREATE TABLE kinesis_checkpoints (
    application TEXT NOT NULL, stream TEXT NOT NULL, shard_id TEXT NOT NULL,
    checkpoint TEXT NOT NULL, sub_sequence_number INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT, lease_counter INTEGER NOT NULL,
    parent_shard_ids TEXT NOT NULL DEFAULT '[]', updated_at REAL NOT NULL,
    child_shard_ids TEXT NOT NULL DEFAULT '[]', starting_hash_key TEXT, ending_hash_key TEXT,
    PRIMARY KEY (application, stream, shard_id)
) WITHOUT ROWID
"""


_SCHEMA_BEFORE_DEDUP_WINDOWS = _SCHEMA_BEFORE_INCARNATIONS.replace(
    "    PRIMARY KEY",
    "    stream_created_ms INTEGER, checkpoint_owner TEXT, throughput_kbps REAL,\n    PRIMARY KEY",
)


@pytest.mark.parametrize(
    ("schema", "columns", "values", "legacy", "change"),
    [
        (
            _SCHEMA_BEFORE_INCARNATIONS,
            "",
            "",
            Checkpoint("shard-1", (42, 0), 3),
            {"stream_created_ms": NOW},
        ),
        (
            _SCHEMA_BEFORE_DEDUP_WINDOWS,
            ", lease_owner, stream_created_ms, throughput_kbps",
            f", 'w', {NOW}, 2.5",
            Checkpoint("shard-1", (42, 0), 3, "w", stream_created_ms=NOW, throughput_kbps=2.5),
            {"dedup_window": WINDOW},
        ),
    ],
    ids=["before incarnations", "before dedup windows"],
)
def test_sqlite_files_made_by_older_versions_read_and_upgrade(
    tmp_path: Path,
    schema: str,
    columns: str,
    values: str,
    legacy: Checkpoint,
    change: dict[str, Any],
) -> None:
    """A read-only look reads the columns a file lacks as NULL; a store opening it read-write
    adds them, and its writes fill them."""
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute(schema)
        conn.execute(
            "INSERT INTO kinesis_checkpoints (application, stream, shard_id, checkpoint, "
            f"lease_counter, updated_at{columns}) "
            f"VALUES ('app', 's', 'shard-1', '42', 3, 0{values})"
        )
    conn.close()

    async def main() -> None:
        async with SQLiteCheckpointStore(path, read_only=True) as reader:
            assert await reader.list("app", "s") == [legacy]
        async with SQLiteCheckpointStore(path) as store:
            assert await store.get("app", "s", "shard-1") == legacy
            row = await store.put("app", "s", "shard-1", (43, 0), expected=legacy, **change)
            assert row == dataclasses.replace(legacy, value=(43, 0), counter=4, **change)
        async with SQLiteCheckpointStore(path, read_only=True) as reader:
            assert await reader.list("app", "s") == [row]

    asyncio.run(main())


def _open_at_once(
    store: SQLiteCheckpointStore, start: threading.Barrier, errors: list[BaseException]
) -> None:
    start.wait()
    try:
        asyncio.run(store.list("app", "stream"))
    except BaseException as exc:
        errors.append(exc)


def test_stores_opening_a_new_file_at_the_same_moment_all_open_it(tmp_path: Path) -> None:
    """Switching a file to WAL needs it to itself, and SQLite refused all but one of several
    connections doing it at once with "database is locked", without waiting (two channels of
    one Faust worker crashed on a new file so): each now waits for the others, up to its
    ``busy_timeout``."""
    for trial in range(40):
        path = tmp_path / f"new-{trial}.sqlite3"
        stores = [SQLiteCheckpointStore(path) for _ in range(4)]
        start = threading.Barrier(len(stores))
        errors: list[BaseException] = []
        threads = [
            threading.Thread(target=_open_at_once, args=(store, start, errors)) for store in stores
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for store in stores:
            asyncio.run(store.close())
        assert errors == [], f"trial {trial}"


class _BlockingTime:
    """A blocking clock whose waits pass at once (and are kept)."""

    def __init__(self) -> None:
        self.at = 0.0
        self.waits: list[float] = []

    def now(self) -> float:
        return self.at

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.at += seconds


class _Switching:
    """A connection whose switch to WAL fails with ``error`` ``times`` times."""

    def __init__(self, times: int, error: str = "database is locked") -> None:
        self.times = times
        self.error = error
        self.tries = 0

    def execute(self, sql: str) -> None:
        assert sql == "PRAGMA journal_mode = WAL"
        self.tries += 1
        if self.times:
            self.times -= 1
            raise sqlite3.OperationalError(self.error)


def _switch(connection: _Switching, clock: _BlockingTime, tmp_path: Path) -> None:
    store = SQLiteCheckpointStore(tmp_path / "wal.sqlite3", busy_timeout=2.0, clock=clock)
    try:
        store._use_wal(connection)  # type: ignore[arg-type]
    finally:
        asyncio.run(store.close())


def test_sqlite_the_switch_to_wal_waits_on_the_stores_clock_while_the_file_is_locked(
    tmp_path: Path,
) -> None:
    connection, clock = _Switching(3), _BlockingTime()
    _switch(connection, clock, tmp_path)
    assert connection.tries == 4
    assert len(clock.waits) == 3
    assert all(0 < wait <= 0.2 for wait in clock.waits)


def test_sqlite_a_file_locked_past_busy_timeout_raises_with_the_tries(tmp_path: Path) -> None:
    connection, clock = _Switching(10_000), _BlockingTime()
    with pytest.raises(sqlite3.OperationalError, match="database is locked") as info:
        _switch(connection, clock, tmp_path)
    assert sum(clock.waits) == pytest.approx(2.0)  # busy_timeout: the last wait ends there
    notes = getattr(info.value, "__notes__", [])
    assert any(f"{connection.tries} failed attempts" in note for note in notes), notes


def test_sqlite_another_error_of_the_switch_to_wal_raises_at_once(tmp_path: Path) -> None:
    connection, clock = _Switching(1, "disk I/O error"), _BlockingTime()
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        _switch(connection, clock, tmp_path)
    assert connection.tries == 1
    assert clock.waits == []


@pytest.mark.parametrize("fault", ["deleted", "replaced"])
def test_sqlite_a_file_deleted_or_replaced_under_the_store_stops_it(
    tmp_path: Path, fault: str
) -> None:
    """A worker must not go on with a file nobody else sees (deleted), nor write a file that
    is no longer the one at the path (replaced, e.g. restored from a copy): every call raises,
    naming the file, and keeps raising."""
    path = tmp_path / "checkpoints.sqlite3"

    async def main() -> None:
        async with SQLiteCheckpointStore(path) as store:
            row = await store.put("app", "s", "shard-1", (1, 0), expected=None)
            if fault == "deleted":
                for suffix in ("", "-wal", "-shm"):
                    (tmp_path / f"checkpoints.sqlite3{suffix}").unlink(missing_ok=True)
            else:
                shutil.copy(path, tmp_path / "copy.sqlite3")
                os.replace(tmp_path / "copy.sqlite3", path)
            for call in (
                store.update_lease("app", "s", "shard-1", expected=row, owner="a"),
                store.list("app", "s"),
            ):
                with pytest.raises(CheckpointTableGoneError, match=fault) as gone:
                    await call
                assert gone.value.table == str(path)
                assert str(path) in str(gone.value)
        # A file put back at the path is left alone by the store that gave up on the old one.
        if fault == "replaced":
            async with SQLiteCheckpointStore(path) as again:
                assert [r.value for r in await again.list("app", "s")] == [(1, 0)]

    asyncio.run(main())


def test_sqlite_files_the_store_creates_are_private(tmp_path: Path) -> None:
    path = tmp_path / "checkpoints.sqlite3"
    existing = tmp_path / "shared.sqlite3"
    existing.touch(mode=0o664)
    existing.chmod(0o664)

    def modes(where: Path) -> dict[str, int]:
        return {
            f.name: stat.S_IMODE(f.stat().st_mode)
            for f in tmp_path.iterdir()
            if f.name.startswith(where.name)
        }

    async def main() -> None:
        for where in (path, existing):
            async with SQLiteCheckpointStore(where) as store:
                await store.put("app", "s", "shard-1", (1, 0), expected=None)
                expected = 0o600 if where == path else 0o664
                # SQLite gives the -wal and -shm files the mode of the database file.
                assert modes(where) == {
                    where.name: expected,
                    f"{where.name}-wal": expected,
                    f"{where.name}-shm": expected,
                }
        # In memory: no file of that name is made.
        async with SQLiteCheckpointStore(":memory:") as memory:
            await memory.put("app", "s", "shard-1", (1, 0), expected=None)
            assert await memory.get("app", "s", "shard-1")

    asyncio.run(main())
    assert not Path(":memory:").exists()
