"""The status view's pure part: lineage order, progress, lag requests, JSON and text."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone
from typing import Any

import pytest
from botocore.exceptions import ClientError

from kinesis_core.checkpoint import SHARD_END, Checkpoint, Sentinel
from kinesis_core.consumer.dedup import DedupWindow
from kinesis_core.shards.hashing import MAX_HASH_KEY
from kinesis_core.shards.info import ShardInfo
from kinesis_core.status import Lag, build_status, lag_iterator, measure_lag

HALF = (MAX_HASH_KEY + 1) // 2
QUARTER = HALF // 2
BIG = 49_680_446_358_758_688_350_039_136_273_873_520_000_000_000_000_000_002  # 56 digits
AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def shard(shard_id: str, lo: int, hi: int, *parents: str, closed: bool = False) -> ShardInfo:
    return ShardInfo(
        shard_id,
        lo,
        hi,
        parents[0] if parents else None,
        parents[1] if len(parents) > 1 else None,
        ending_sequence_number=99 if closed else None,
    )


# s0 split into s2 (low) and s3; s3 merged with s1 into s4.
LINEAGE = [
    shard("s0", 0, HALF - 1, closed=True),
    shard("s1", HALF, MAX_HASH_KEY, closed=True),
    shard("s2", 0, QUARTER - 1, "s0"),
    shard("s3", QUARTER, HALF - 1, "s0", closed=True),
    shard("s4", QUARTER, MAX_HASH_KEY, "s3", "s1"),
]


def test_lag_is_measured_just_after_a_position_or_from_a_start_sentinel() -> None:
    assert lag_iterator(Checkpoint("s", (BIG, 3))) == {
        "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
        "StartingSequenceNumber": str(BIG),
    }
    assert lag_iterator(Checkpoint("s", Sentinel.TRIM_HORIZON)) == {
        "ShardIteratorType": "TRIM_HORIZON"
    }
    assert lag_iterator(Checkpoint("s", Sentinel.LATEST)) == {"ShardIteratorType": "LATEST"}
    assert lag_iterator(Checkpoint("s", SHARD_END)) is None
    assert lag_iterator(Checkpoint("s", Sentinel.AT_TIMESTAMP)) is None
    assert lag_iterator(None) is None


def test_tree_order_progress_and_children() -> None:
    rows = [
        Checkpoint("s0", SHARD_END, 4, None, (), ("s2", "s3")),
        Checkpoint("s2", (BIG, 3), 9, "worker-a", ("s0",)),
        Checkpoint("s3", (7, 0), 2, "worker-b", ("s0",)),
    ]
    status = build_status("orders", "app", "SQLite file x", LINEAGE, rows, {}, AT)
    assert [view.shard_id for view in status.shards] == ["s0", "s2", "s3", "s4", "s1"]
    progress = {view.shard_id: view.progress for view in status.shards}
    assert progress == {
        "s0": "finished",
        "s1": "ready",  # no row, no parent
        "s2": "reading",
        "s3": "reading",
        "s4": "waiting_for_parent",  # s3 and s1 not finished
    }
    children = {view.shard_id: view.children for view in status.shards}
    assert children == {"s0": ("s2", "s3"), "s1": ("s4",), "s2": (), "s3": ("s4",), "s4": ()}
    assert status.workers() == {"worker-a": ["s2"], "worker-b": ["s3"]}


def test_a_parent_whose_row_was_deleted_is_finished_when_a_child_started() -> None:
    """The KCL deletes the leases of finished shards: the lineage rules still say finished."""
    rows = [Checkpoint("s2", (5, 0)), Checkpoint("s4", (6, 0))]
    status = build_status("orders", "app", "store", LINEAGE, rows, {}, AT)
    progress = {view.shard_id: view.progress for view in status.shards}
    assert progress["s0"] == progress["s1"] == progress["s3"] == "finished"
    assert progress["s4"] == "reading"


def test_rows_of_unlisted_shards_are_kept_apart() -> None:
    rows = [Checkpoint("gone", (1, 0)), Checkpoint("s2@0-10", (2, 0)), Checkpoint("s2", (3, 0))]
    status = build_status("orders", "app", "store", LINEAGE, rows, {}, AT)
    assert [row.shard_id for row in status.unlisted_rows] == ["gone", "s2@0-10"]
    assert "rows of shards the stream does not list:" in status.format_text()


def test_json_document() -> None:
    rows = [Checkpoint("s0", SHARD_END, 4), Checkpoint("s2", (BIG, 3), 9, "worker-a", ("s0",))]
    lags = {"s2": Lag(1500, False)}
    document = build_status("orders", "app", "store", LINEAGE, rows, lags, AT).to_json()
    json.dumps(document)  # plain JSON types only
    assert document["schema_version"] == 1
    assert document["taken_at"] == "2026-01-02T03:04:05+00:00"
    by_id = {s["shard_id"]: s for s in document["shards"]}
    assert by_id["s2"] == {
        "shard_id": "s2",
        "open": True,
        "hash_range": ["0", str(QUARTER - 1)],
        "parents": ["s0"],
        "children": [],
        "progress": "reading",
        "checkpoint": {"sequence_number": str(BIG), "sub_sequence_number": 3},
        "lease_owner": "worker-a",
        "lease_counter": 9,
        "dedup_window": None,
        "lag": {"millis_behind_latest": 1500, "caught_up": False, "error": None},
    }
    assert by_id["s0"]["checkpoint"] == {"sentinel": "SHARD_END"}
    assert by_id["s4"]["checkpoint"] is None
    assert by_id["s4"]["lag"] is None
    assert by_id["s4"]["parents"] == ["s3", "s1"]
    assert document["workers"] == {"worker-a": ["s2"]}


def test_text_view() -> None:
    rows = [Checkpoint("s0", SHARD_END, 4), Checkpoint("s2", (BIG, 3), 9, "worker-a")]
    lags = {
        "s2": Lag(0, True),
        "s4": Lag(12_345, False),
        "s1": Lag(None, None, "ProvisionedThroughputExceededException"),
    }
    rows.append(Checkpoint("s4", (11, 0), 2, "worker-b"))
    rows.append(Checkpoint("s1", Sentinel.TRIM_HORIZON, 1))
    text = build_status("orders", "app", "SQLite file c.db", LINEAGE, rows, lags, AT)
    lines = text.format_text().splitlines()
    assert lines[0] == "stream orders, application app, rows from SQLite file c.db"
    assert lines[1].startswith("2026-01-02 03:04:05 UTC: 5 shards (2 open); lag: ")
    assert lines[3].split() == [
        "shard",
        "state",
        "hash",
        "keys",
        "progress",
        "checkpoint",
        "lease",
        "owner",
        "counter",
        "lag",
    ]
    body = [line.split() for line in lines[4:10]]
    assert body == [
        ["s0", "closed", "0-50%", "finished", "SHARD_END", "-", "4", "-"],
        [
            "+--",
            "s2",
            "open",
            "0-25%",
            "reading",
            f"...{str(BIG)[-12:]}.3",
            "worker-a",
            "9",
            "caught",
            "up",
        ],
        # s3 has no row, but its child s4 started: finished (the KCL deletes finished leases)
        ["`--", "s3", "closed", "25-50%", "finished", "-", "-", "-", "-"],
        [
            "`--",
            "s4",
            "open",
            "25-100%",
            "waiting",
            "for",
            "parent",
            "11.0",
            "worker-b",
            "2",
            "12.3",
            "s",
        ],
        [
            "s1",
            "closed",
            "50-100%",
            "ready",
            "TRIM_HORIZON",
            "-",
            "1",
            "?",
            "(ProvisionedThroughputExceededException)",
        ],
        ["`--", "s4", "(merge", "child:", "see", "above)"],
    ]
    assert lines[-1] == "leases: worker-a holds 1, worker-b holds 1"


def test_a_stored_dedup_window_shows_its_ids_and_bytes() -> None:
    window = DedupWindow()
    window.seen_run("session.2", 0, 999, 1_700_000_000.0)
    window.seen("order-17", 1_700_000_000.0)
    text = window.dumps()
    rows = [
        Checkpoint("s0", SHARD_END, 4),
        Checkpoint("s2", (BIG, 3), 9, "worker-a", ("s0",), dedup_window=text),
        Checkpoint("s1", (BIG, 1), 2, dedup_window="not a window"),
    ]
    status = build_status("orders", "app", "store", LINEAGE, rows, {}, AT)
    by_id = {s["shard_id"]: s for s in status.to_json()["shards"]}
    assert by_id["s2"]["dedup_window"] == {"ids": 1001, "bytes": len(text)}
    assert by_id["s1"]["dedup_window"] == {"ids": -1, "bytes": 12}
    assert by_id["s0"]["dedup_window"] is None
    lines = status.format_text().splitlines()
    assert lines[3].endswith("dedup window")
    assert any(line.endswith(f"1,001 ids, {len(text)} B") for line in lines)
    assert any(line.endswith("unreadable, 12 B") for line in lines)


def test_text_without_a_store_shows_the_shards_only() -> None:
    status = build_status("orders", "default", None, LINEAGE, [], {}, AT)
    lines = status.format_text().splitlines()
    assert lines[0] == "stream orders, application default, no checkpoint store given"
    assert lines[1] == "2026-01-02 03:04:05 UTC: 5 shards (2 open)"
    assert lines[3].split() == ["shard", "state", "hash", "keys"]
    assert lines[4].split() == ["s0", "closed", "0-50%"]
    assert all(view.progress is None for view in status.shards)


class FakeClient:
    def __init__(self, answer: dict[str, Any] | Exception) -> None:
        self.answer = answer
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def get_shard_iterator(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("GetShardIterator", kwargs))
        return {"ShardIterator": "it"}

    async def get_records(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("GetRecords", kwargs))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    ("answer", "lag"),
    [
        ({"Records": [], "MillisBehindLatest": 0}, Lag(0, True)),
        ({"Records": [{"SequenceNumber": "1"}], "MillisBehindLatest": 250}, Lag(250, False)),
        (
            ClientError({"Error": {"Code": "ExpiredIteratorException"}}, "GetRecords"),
            Lag(None, None, "ExpiredIteratorException"),
        ),
    ],
)
def test_measure_lag(answer: dict[str, Any] | Exception, lag: Lag) -> None:
    client = FakeClient(answer)
    iterator = {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": "7"}
    assert asyncio.run(measure_lag(client, "orders", "s2", iterator)) == lag
    assert client.calls == [
        (
            "GetShardIterator",
            {"StreamName": "orders", "ShardId": "s2", **iterator},
        ),
        ("GetRecords", {"ShardIterator": "it", "Limit": 1}),
    ]


def test_the_watched_text_view_shows_how_each_lag_moved() -> None:
    rows = [
        Checkpoint("s2", (11, 0), 2),
        Checkpoint("s4", (12, 0), 2),
        Checkpoint("s1", SHARD_END, 3),
    ]

    def view(lags: dict[str, Lag]) -> Any:
        return build_status("orders", "app", "SQLite file c.db", LINEAGE, rows, lags, AT)

    def lag_column(text: str) -> dict[str, str]:
        out = {}
        for line in text.splitlines()[4:]:
            words = line.replace("`--", "").replace("+--", "").split()
            if words and words[0] in ("s2", "s4") and "(merge" not in words:
                out[words[0]] = " ".join(words[words.index("2") + 1 :])
        return out

    first = view({"s2": Lag(1_864, False), "s4": Lag(2_100, False)})
    second = view({"s2": Lag(2_184, False), "s4": Lag(0, True)})
    third = view({"s2": Lag(15_000, False), "s4": Lag(0, True)})
    assert lag_column(first.format_text()) == {"s2": "1864 ms", "s4": "2100 ms"}
    assert lag_column(second.format_text(first)) == {
        "s2": "2184 ms (+320 ms)",
        "s4": "caught up (was 2100 ms)",
    }
    assert lag_column(third.format_text(second)) == {"s2": "15.0 s (+12.8 s)", "s4": "caught up"}


def test_rows_of_an_earlier_stream_are_shown_as_such_and_block_nothing() -> None:
    """A row stored for another creation time of the stream is an earlier stream's, not a
    position being read, and no lag is measured from it. Without the creation time nothing
    is checked."""
    created = 1_700_000_000_000
    rows = [
        Checkpoint("s0", SHARD_END, 3, stream_created_ms=created - 1),
        Checkpoint("s1", (12, 0), 2, stream_created_ms=created - 1),
        Checkpoint("s2", (11, 0), 2, stream_created_ms=created),
    ]
    status = build_status("orders", "app", "c.db", LINEAGE, rows, {}, AT, created)
    progress = {view.shard_id: view.progress for view in status.shards}
    assert progress == {
        "s0": "earlier_stream",
        "s1": "earlier_stream",
        "s2": "reading",
        "s3": "ready",
        "s4": "waiting_for_parent",
    }
    assert "earlier stream: rows written for a stream of this name" in status.format_text()
    unchecked = build_status("orders", "app", "c.db", LINEAGE, rows, {}, AT)
    assert {view.shard_id: view.progress for view in unchecked.shards}["s1"] == "reading"
