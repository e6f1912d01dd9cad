"""The operator's view of a stream and of one consumer application on it.

``kinesis-connectors status STREAM`` prints it: the shards as a lineage tree (open or closed,
hash ranges, parents and children), and per shard the stored checkpoint, the lease owner and
counter, where the application is (finished, reading, waiting for a parent) and its lag, and
the stored dedup window's size when the application deduplicates.

The lag is the ``MillisBehindLatest`` of one GetRecords call (``Limit=1``) with an iterator
just after the checkpoint: the figure the consumer itself would see on its next read, and the
one the KCL reports. It is a time, not a record count: Kinesis has no call that counts the
records after a position, and sequence numbers are not dense. ``caught_up`` says whether that
call found a record at all (a record written in the same millisecond as the newest one is
0 ms behind but still unread). Rows of an earlier incarnation of the stream (deleted and
created again under its name) show as ``earlier_stream``, with no lag: their positions are of
a stream that no longer exists, and a consumer refuses them at start.

Nothing here writes: shards come from ListShards, rows from the store's ``list`` (open a
SQLite store with ``read_only=True``, a DynamoDB one with ``create_table=False``), and the
GetRecords call moves no checkpoint. :func:`build_status` is the pure part, :func:`read_status`
the I/O around it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from kinesis_core.aws.classify import error_details
from kinesis_core.aws.executor import list_all_shards
from kinesis_core.checkpoint.base import Checkpoint, CheckpointStore, CheckpointValue, Sentinel
from kinesis_core.consumer.dedup import MAX_WINDOW_BYTES, DedupWindow
from kinesis_core.consumer.incarnation import StreamFacts, stale_rows
from kinesis_core.consumer.lineage import Lineage, ShardNode, ShardState
from kinesis_core.consumer.positions import TRIM_HORIZON
from kinesis_core.shards.hashing import MAX_HASH_KEY
from kinesis_core.shards.info import ShardInfo
from kinesis_core.stream import StreamRef

JSON_SCHEMA_VERSION = 1
LAG_METHOD = "MillisBehindLatest of a GetRecords(Limit=1) after the checkpoint"

FINISHED = "finished"
READING = "reading"
READY = "ready"
WAITING_FOR_PARENT = "waiting_for_parent"
EARLIER_STREAM = "earlier_stream"


@dataclass(frozen=True, slots=True)
class Lag:
    """What one GetRecords call after the checkpoint found (or why it could not tell)."""

    millis_behind_latest: int | None
    caught_up: bool | None
    """True if no record follows the checkpoint; None when the call failed."""
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ShardView:
    """One shard as the operator sees it."""

    shard_id: str
    is_open: bool
    hash_range: tuple[int, int]
    parents: tuple[str, ...]
    children: tuple[str, ...]
    progress: str | None
    """None without a store; else earlier_stream (the row is of an earlier incarnation of the
    stream), finished (SHARD_END stored, or implied by a child that started), reading (a
    position is stored), ready (no position yet, every parent finished) or
    waiting_for_parent."""
    row: Checkpoint | None
    lag: Lag | None


@dataclass(frozen=True)
class StreamStatus:
    """A snapshot of a stream's shards and an application's rows, taken at ``taken_at``."""

    stream: str
    application: str
    store: str | None
    """Where the rows come from (None: no store given, shards only)."""
    taken_at: datetime
    shards: tuple[ShardView, ...]
    """Parents before children."""
    unlisted_rows: tuple[Checkpoint, ...]
    """Rows of shards the stream does not list (trimmed shards, Beam's per-range rows)."""

    def shard(self, shard_id: str) -> ShardView | None:
        return next((view for view in self.shards if view.shard_id == shard_id), None)

    def workers(self) -> dict[str, list[str]]:
        """Lease owner -> the shards it holds."""
        held: dict[str, list[str]] = {}
        for view in self.shards:
            if view.row is not None and view.row.owner is not None:
                held.setdefault(view.row.owner, []).append(view.shard_id)
        return held

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document (schema version :data:`JSON_SCHEMA_VERSION`, see
        docs/operations.md). Sequence numbers and hash keys are decimal strings: they have
        up to 56 and 39 digits, more than a JSON number keeps."""
        return {
            "schema_version": JSON_SCHEMA_VERSION,
            "stream": self.stream,
            "application": self.application,
            "store": self.store,
            "taken_at": self.taken_at.isoformat(),
            "lag_method": LAG_METHOD,
            "shards": [_shard_json(view) for view in self.shards],
            "workers": self.workers(),
            "unlisted_rows": [_row_json(row) for row in self.unlisted_rows],
        }

    def format_text(self, previous: StreamStatus | None = None) -> str:
        """The text view; with the ``previous`` status (``--watch``), each shard's lag says
        how it moved since then (``1864 ms (+320 ms)``, ``caught up (was 2.1 s)``)."""
        return "\n".join(_text_lines(self, previous))


def lag_iterator(row: Checkpoint | None) -> dict[str, str] | None:
    """GetShardIterator arguments that start just after a stored row, or None where a lag
    means nothing (no row, SHARD_END, AT_TIMESTAMP of an unknown time)."""
    if row is None:
        return None
    if isinstance(row.value, tuple):
        return {
            "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
            "StartingSequenceNumber": str(row.value[0]),
        }
    if row.value in (Sentinel.TRIM_HORIZON, Sentinel.LATEST):
        return {"ShardIteratorType": row.value.value}
    return None


def build_status(
    stream: str,
    application: str,
    store: str | None,
    shards: Sequence[ShardInfo],
    rows: Iterable[Checkpoint],
    lags: Mapping[str, Lag],
    taken_at: datetime,
    stream_created_ms: int | None = None,
) -> StreamStatus:
    """Put listed shards, stored rows and measured lags together (no I/O). ``store`` None:
    no store was read, and the view has the shards only. ``stream_created_ms``: the stream's
    creation time, against which each row's incarnation is checked (None: not checked)."""
    by_id = {row.shard_id: row for row in rows}
    listed = {info.shard_id: info for info in shards}
    children: dict[str, list[str]] = {}
    for info in shards:
        for parent in info.parents:
            children.setdefault(parent, []).append(info.shard_id)
    for row in by_id.values():
        for child in row.child_shard_ids:
            if child not in children.setdefault(row.shard_id, []):
                children[row.shard_id].append(child)
    earlier = earlier_rows(by_id.values(), stream_created_ms, shards)
    progress = _progress(shards, by_id, earlier) if store is not None else {}
    views = tuple(
        ShardView(
            shard_id=info.shard_id,
            is_open=info.is_open,
            hash_range=info.hash_range,
            parents=info.parents,
            children=tuple(sorted(children.get(info.shard_id, ()))),
            progress=progress.get(info.shard_id),
            row=by_id.get(info.shard_id),
            lag=lags.get(info.shard_id),
        )
        for info in _parents_first(shards)
    )
    unlisted = tuple(row for shard_id, row in sorted(by_id.items()) if shard_id not in listed)
    return StreamStatus(stream, application, store, taken_at, views, unlisted)


def earlier_rows(
    rows: Iterable[Checkpoint], stream_created_ms: int | None, shards: Sequence[ShardInfo]
) -> set[str]:
    """The shards whose rows belong to an earlier incarnation of the stream (the consumer's
    rule at start: another creation time, or a position outside the listed shard)."""
    if stream_created_ms is None:
        return set()
    return {row.shard_id for row in stale_rows(rows, stream_created_ms, shards)}


def _progress(
    shards: Sequence[ShardInfo], rows: Mapping[str, Checkpoint], earlier: set[str]
) -> dict[str, str]:
    """Where the application is on each shard, by the consumer's own lineage rules (a shard
    without a row whose child has started was finished, its row since deleted, as the KCL
    deletes finished leases). A row of an earlier stream says nothing of this one."""
    lineage = Lineage(TRIM_HORIZON)
    lineage.update(
        [ShardNode.from_shard_info(info) for info in shards],
        {shard_id: row.value for shard_id, row in rows.items() if shard_id not in earlier},
    )
    lineage.take_ready()
    result = {}
    for info in shards:
        state = lineage.state(info.shard_id)
        row = rows.get(info.shard_id)
        if info.shard_id in earlier:
            result[info.shard_id] = EARLIER_STREAM
        elif state is ShardState.ENDED:
            result[info.shard_id] = FINISHED
        elif state is ShardState.WAITING_FOR_PARENT:
            result[info.shard_id] = WAITING_FOR_PARENT
        elif row is not None and isinstance(row.value, tuple):
            result[info.shard_id] = READING
        else:
            result[info.shard_id] = READY
    return result


def _parents_first(shards: Sequence[ShardInfo]) -> list[ShardInfo]:
    """Depth-first from the roots (shards without a listed parent), children after their
    first listed parent, in hash-key order."""
    listed = {info.shard_id: info for info in shards}
    children: dict[str, list[ShardInfo]] = {}
    roots = []
    for info in sorted(shards, key=lambda i: (i.start_hash_key, i.shard_id)):
        first_parent = next((p for p in info.parents if p in listed), None)
        if first_parent is None:
            roots.append(info)
        else:
            children.setdefault(first_parent, []).append(info)
    ordered: list[ShardInfo] = []

    def visit(info: ShardInfo) -> None:
        ordered.append(info)
        for child in children.get(info.shard_id, ()):
            visit(child)

    for root in roots:
        visit(root)
    return ordered


# -- I/O -----------------------------------------------------------------------------------------


async def measure_lag(client: Any, stream: str, shard_id: str, iterator: Mapping[str, str]) -> Lag:
    """One GetShardIterator and one GetRecords(Limit=1); errors become a Lag that says so."""
    try:
        response = await client.get_shard_iterator(
            **StreamRef.of(stream).params(), ShardId=shard_id, **iterator
        )
        records = await client.get_records(ShardIterator=response["ShardIterator"], Limit=1)
    except Exception as exc:
        return Lag(None, None, error_details(exc)[0] or type(exc).__name__)
    millis = records.get("MillisBehindLatest")
    return Lag(None if millis is None else int(millis), not records.get("Records"))


async def read_status(
    stream: str,
    *,
    client: Any,
    store: CheckpointStore | None,
    application: str,
    store_label: str | None = None,
    measure_lags: bool = True,
) -> StreamStatus:
    """Describe the stream, list the shards, read the rows and measure the lags
    (concurrently, one GetRecords per shard), then :func:`build_status`. ``client`` is an
    aiobotocore Kinesis client."""
    ref = StreamRef.of(stream)
    summary = await client.describe_stream_summary(**ref.params())
    created_ms = StreamFacts.from_response(summary).created_ms
    shards = await list_all_shards(client, stream)
    # Rows are stored under the stream's name, whether it was given by name or by ARN.
    rows = await store.list(application, ref.name) if store is not None else []
    taken_at = datetime.now(timezone.utc)
    listed = {info.shard_id for info in shards} - earlier_rows(rows, created_ms, shards)
    targets = {
        row.shard_id: iterator
        for row in rows
        if row.shard_id in listed and (iterator := lag_iterator(row)) is not None
    }
    lags: dict[str, Lag] = {}
    if measure_lags and targets:
        measured = await asyncio.gather(
            *(measure_lag(client, stream, shard, it) for shard, it in targets.items())
        )
        lags = dict(zip(targets, measured, strict=True))
    return build_status(stream, application, store_label, shards, rows, lags, taken_at, created_ms)


# -- output --------------------------------------------------------------------------------------


def _value_json(value: CheckpointValue) -> dict[str, Any]:
    if isinstance(value, tuple):
        return {"sequence_number": str(value[0]), "sub_sequence_number": value[1]}
    return {"sentinel": value.value}


def _row_json(row: Checkpoint) -> dict[str, Any]:
    return {
        "shard_id": row.shard_id,
        "checkpoint": _value_json(row.value),
        "lease_owner": row.owner,
        "lease_counter": row.counter,
    }


def _window_json(row: Checkpoint) -> dict[str, int] | None:
    """The stored dedup window's ids and bytes (-1 ids: it does not parse)."""
    text = row.dedup_window
    if text is None:
        return None
    try:
        ids = len(DedupWindow.loads(text, max_ids=100_000_000, max_bytes=MAX_WINDOW_BYTES))
    except ValueError:
        ids = -1
    return {"ids": ids, "bytes": len(text.encode())}


def _window_text(row: Checkpoint | None) -> str:
    window = None if row is None else _window_json(row)
    if window is None:
        return "-"
    ids = "unreadable" if window["ids"] < 0 else f"{window['ids']:,} ids"
    return f"{ids}, {window['bytes']:,} B"


def _shard_json(view: ShardView) -> dict[str, Any]:
    lag = view.lag
    return {
        "shard_id": view.shard_id,
        "open": view.is_open,
        "hash_range": [str(view.hash_range[0]), str(view.hash_range[1])],
        "parents": list(view.parents),
        "children": list(view.children),
        "progress": view.progress,
        "checkpoint": None if view.row is None else _value_json(view.row.value),
        "lease_owner": None if view.row is None else view.row.owner,
        "lease_counter": None if view.row is None else view.row.counter,
        "dedup_window": None if view.row is None else _window_json(view.row),
        "lag": None
        if lag is None
        else {
            "millis_behind_latest": lag.millis_behind_latest,
            "caught_up": lag.caught_up,
            "error": lag.error,
        },
    }


def _percent(hash_key: int) -> str:
    return f"{100 * hash_key / (MAX_HASH_KEY + 1):.4g}"


def _hash_keys_text(hash_range: tuple[int, int]) -> str:
    """The share of the key space, e.g. ``25-50%`` (``--json`` has the exact keys)."""
    return f"{_percent(hash_range[0])}-{_percent(hash_range[1] + 1)}%"


def _checkpoint_text(row: Checkpoint | None) -> str:
    if row is None:
        return "-"
    if isinstance(row.value, tuple):
        sequence, sub = row.value
        text = str(sequence)
        return f"...{text[-12:]}.{sub}" if len(text) > 12 else f"{text}.{sub}"
    return row.value.value


def _lag_text(lag: Lag | None, before: Lag | None = None) -> str:
    if lag is None:
        return "-"
    if lag.error is not None:
        return f"? ({lag.error})"
    now = _lag_millis(lag)
    if now is None:
        return "?"
    text = "caught up" if lag.caught_up else _millis_text(now)
    was = None if before is None or before.error is not None else _lag_millis(before)
    if was is None or was == now:
        return text
    if not now:
        return f"{text} (was {_millis_text(was)})"
    change = now - was
    return f"{text} ({'+' if change > 0 else '-'}{_millis_text(abs(change))})"


def _lag_millis(lag: Lag) -> int | None:
    """The lag in milliseconds (0 when caught up), None when unknown."""
    return 0 if lag.caught_up else lag.millis_behind_latest


def _millis_text(millis: int) -> str:
    return f"{millis} ms" if millis < 10_000 else f"{millis / 1000:.1f} s"


def _text_lines(status: StreamStatus, previous: StreamStatus | None) -> list[str]:
    open_count = sum(view.is_open for view in status.shards)
    source = f"rows from {status.store}" if status.store else "no checkpoint store given"
    lines = [
        f"stream {status.stream}, application {status.application}, {source}",
        f"{status.taken_at:%Y-%m-%d %H:%M:%S} UTC: {len(status.shards)} shards "
        f"({open_count} open)" + (f"; lag: {LAG_METHOD}" if status.store else ""),
        "",
    ]
    header: tuple[str, ...] = ("shard", "state", "hash keys")
    if status.store is not None:
        header += ("progress", "checkpoint", "lease owner", "counter", "lag")
        if any(view.row is not None and view.row.dedup_window for view in status.shards):
            header += ("dedup window",)
    table: list[tuple[str, ...]] = []
    drawn: set[str] = set()
    by_id = {view.shard_id: view for view in status.shards}
    lags_before = {} if previous is None else {v.shard_id: v.lag for v in previous.shards}

    def add(view: ShardView, prefix: str, last: bool, depth: int) -> None:
        branch = "" if depth == 0 else ("`-- " if last else "+-- ")
        name = prefix + branch + view.shard_id
        if view.shard_id in drawn:
            table.append((name, "(merge child: see above)"))
            return
        drawn.add(view.shard_id)
        row = view.row
        table.append(
            (
                name,
                "open" if view.is_open else "closed",
                _hash_keys_text(view.hash_range),
                (view.progress or "-").replace("_", " "),
                _checkpoint_text(row),
                "-" if row is None or row.owner is None else row.owner,
                "-" if row is None else str(row.counter),
                _lag_text(view.lag, lags_before.get(view.shard_id)),
                _window_text(row),
            )[: len(header)]
        )
        shown = [by_id[child] for child in view.children if child in by_id]
        inner = "" if depth == 0 else prefix + ("    " if last else "|   ")
        for index, kid in enumerate(shown):
            add(kid, inner, index == len(shown) - 1, depth + 1)

    for view in status.shards:
        if not any(parent in by_id for parent in view.parents):
            add(view, "", True, 0)
    full = [header, *(cells for cells in table if len(cells) == len(header))]
    widths = [max(len(cells[i]) for cells in full) for i in range(len(header))]
    widths[0] = max(len(cells[0]) for cells in [header, *table])
    for cells in [header, *table]:
        # not strict: a merge child's second line is its name and a note
        padded = (cell.ljust(width) for cell, width in zip(cells, widths, strict=False))
        lines.append("  ".join(padded).rstrip())
    workers = status.workers()
    if workers:
        held = ", ".join(
            f"{owner} holds {len(shards)}" for owner, shards in sorted(workers.items())
        )
        lines += ["", f"leases: {held}"]
    if any(view.progress == EARLIER_STREAM for view in status.shards):
        lines += [
            "",
            "earlier stream: rows written for a stream of this name that was deleted and "
            "created again since; a consumer refuses them at start (on_stream_recreated)",
        ]
    if status.unlisted_rows:
        lines += ["", "rows of shards the stream does not list:"]
        for row in status.unlisted_rows:
            lines.append(f"  {row.shard_id}  {_checkpoint_text(row)}  owner {row.owner or '-'}")
    return lines
