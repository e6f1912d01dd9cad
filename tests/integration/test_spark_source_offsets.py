"""The Spark source's stream reader driven as Spark drives it, without Spark (no JVM), against
kinesis-mock: a batch's partitions read again give the same records, whatever arrived since;
the read limit holds; a split's children join only after their parent's end is in a batch."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from kinesis_core.aggregation import decode_aggregate, encode_aggregate
from kinesis_core.local import LocalStream, StreamFactory
from kinesis_core.records import SubRecord
from spark_kinesis import _shards
from spark_kinesis.offsets import SHARD_END
from spark_kinesis.options import SourceSpec
from spark_kinesis.source import KinesisStreamReader
from tests.helpers.spark import options

pytestmark = pytest.mark.integration


def reader_of(stream: LocalStream, **extra: str) -> KinesisStreamReader:
    """The stream reader of ``stream``; without probes unless ``extra`` turns them on (a
    probe may end a batch before records written just before it: the tests say when)."""
    return KinesisStreamReader(
        SourceSpec.parse(
            {**options(stream.name, stream.client_config), "probeEnds": "false", **extra}
        )
    )


def batch(reader: KinesisStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[str]:
    """The data of a batch's records, read as Spark's tasks read its partitions."""
    values = []
    for partition in reader.partitions(start, end):
        for arrow in reader.read(partition):
            values += [bytes(d).decode() for d in arrow.column("data").to_pylist()]
    return values


def offsets_from(
    reader: KinesisStreamReader, start: dict[str, Any], limit: ReadLimit, most: int = 6
) -> list[dict[str, Any]]:
    """``start`` and the offsets Spark would ask for after it, until one is the same as the one
    before (nothing new) or ``most`` were asked."""
    offsets = [start]
    for _ in range(most):
        offsets.append(reader.latestOffset(offsets[-1], limit))
        if offsets[-1] == offsets[-2]:
            break
    return offsets


def read_all(reader: KinesisStreamReader, offsets: list[dict[str, Any]]) -> list[str]:
    """The data of every batch between ``offsets``, batch after batch."""
    return [v for a, b in itertools.pairwise(offsets) for v in batch(reader, a, b)]


def test_a_batch_read_again_gives_the_same_records(kinesis_stream: StreamFactory) -> None:
    stream = kinesis_stream(2)
    for i in range(30):
        stream.put(f"r{i}".encode(), f"k{i % 5}")
    reader = reader_of(stream, maxRecordsPerTrigger="20")
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        first = batch(reader, start, end)
        assert len(first) == 20
        for i in range(30, 40):
            stream.put(f"r{i}".encode(), f"k{i % 5}")
        # A replay (a retried task, a restarted driver) reads the same offsets: same records.
        assert batch(reader_of(stream), start, end) == first
        # A shard the driver found caught up is read again after its idle interval: ask, as
        # Spark does, until the new records are in a batch.
        rest, later = end, []
        deadline = time.monotonic() + 30
        while len(first) + len(later) < 40 and time.monotonic() < deadline:
            offset = reader.latestOffset(rest, ReadAllAvailable())
            later += batch(reader, rest, offset)
            rest = offset
        assert sorted(first + later) == sorted(f"r{i}" for i in range(40))
        assert reader.latestOffset(rest, ReadAllAvailable()) == rest
    finally:
        reader.stop()


def test_batches_end_through_whole_aggregates_and_the_limit_counts_kinesis_records(
    kinesis_stream: StreamFactory,
) -> None:
    stream = kinesis_stream(1)
    for a in range(3):
        subs = [SubRecord(f"k{i}", None, f"a{a}-{i}".encode()) for i in range(5)]
        stream.put(encode_aggregate(subs), "k0")
    reader = reader_of(stream, maxRecordsPerTrigger="2")
    try:
        offsets = offsets_from(reader, reader.initialOffset(), reader.getDefaultReadLimit())
        batches = [batch(reader, a, b) for a, b in itertools.pairwise(offsets)]
        # A replay from a new reader (a restarted driver) gives the same records.
        assert batch(reader_of(stream), offsets[0], offsets[1]) == batches[0]
    finally:
        reader.stop()
    assert [len(b) for b in batches] == [10, 5, 0]
    assert [v for b in batches for v in b] == [f"a{a}-{i}" for a in range(3) for i in range(5)]
    (mark,) = offsets[1]["shards"].values()
    assert mark.isdigit()  # through every sub-record of the second aggregate


def test_a_busy_shard_gets_its_end_from_a_probe_at_its_tip_not_from_a_look(
    moto_stream: StreamFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wide window, so that a slow machine still finds the records just written in it.
    monkeypatch.setattr(_shards, "PROBE_WINDOW", 1.0)
    stream = moto_stream(1)

    def put(prefix: str) -> None:
        for i in range(5):
            stream.put(f"{prefix}{i}".encode(), f"k{i}")

    put("a")
    time.sleep(1.5)  # out of the probe's window: nothing new there, so the driver looks
    reader = reader_of(stream, probeEnds="true")
    try:
        offsets = [reader.initialOffset()]
        offsets.append(reader.latestOffset(offsets[-1], ReadAllAvailable()))
        put("b")
        time.sleep(1.5)
        put("c")
        # The first record in the window is c0: the batch ends before it, with no look.
        offsets.append(reader.latestOffset(offsets[-1], ReadAllAvailable()))
        time.sleep(1.5)
        offsets.append(reader.latestOffset(offsets[-1], ReadAllAvailable()))
        batches = [batch(reader, a, b) for a, b in itertools.pairwise(offsets)]
        assert batch(reader_of(stream), offsets[1], offsets[2]) == batches[1]
    finally:
        reader.stop()
    marks = [next(iter(o["shards"].values())) for o in offsets[1:]]
    assert [m.isdigit() for m in marks] == [True, False, True], marks
    assert marks[1].startswith("before:")
    assert batches == [[f"{p}{i}" for i in range(5)] for p in "abc"]


def test_a_backlog_gets_its_end_from_a_probe_near_the_tip_and_the_tail_from_a_look(
    moto_stream: StreamFactory,
) -> None:
    stream = moto_stream(1)
    for prefix in "ab":
        for i in range(5):
            stream.put(f"{prefix}{i}".encode(), f"k{i}")
        time.sleep(1.2)  # the backlog spans more than a second; the last write is not recent
    reader = reader_of(stream, probeEnds="true")
    try:
        offsets = offsets_from(reader, reader.initialOffset(), ReadAllAvailable())
        batches = [batch(reader, a, b) for a, b in itertools.pairwise(offsets)]
        assert batch(reader_of(stream), offsets[0], offsets[1]) == batches[0]
    finally:
        reader.stop()
    marks = [next(iter(o["shards"].values())) for o in offsets[1:]]
    assert marks[0].startswith("before:"), marks  # the backlog but its last 0.1 s: no look
    assert marks[1].isdigit(), marks  # the tail: a look
    assert batches[0][:5] == [f"a{i}" for i in range(5)]
    assert [v for b in batches for v in b] == [f"{p}{i}" for p in "ab" for i in range(5)]


def test_children_join_the_offsets_only_after_their_parent_ended_in_a_batch(
    kinesis_stream: StreamFactory,
) -> None:
    stream = kinesis_stream(1)
    (parent,) = [s["ShardId"] for s in stream.shards()]
    for i in range(10):
        stream.put(f"before{i}".encode(), f"k{i}")
    children = stream.split(parent)
    for i in range(10):
        stream.put(f"after{i}".encode(), f"k{i}")
    reader = reader_of(stream)
    try:
        offsets = offsets_from(reader, reader.initialOffset(), ReadMaxRows(100))
        marks = [o["shards"] for o in offsets]
        ended_at = next(i for i, m in enumerate(marks) if m.get(parent) == SHARD_END)
        joined_at = next(i for i, m in enumerate(marks) if children[0] in m)
        assert joined_at == ended_at + 1, marks
        assert set(children) <= set(marks[joined_at])
        values = read_all(reader, offsets)
        assert sorted(values) == sorted(
            [f"before{i}" for i in range(10)] + [f"after{i}" for i in range(10)]
        )
        assert all(v.startswith("before") for v in values[:10]), values
    finally:
        reader.stop()


def test_a_restarted_query_started_at_latest_reads_children_whole(
    kinesis_stream: StreamFactory,
) -> None:
    stream = kinesis_stream(1)
    (parent,) = [s["ShardId"] for s in stream.shards()]
    first = reader_of(stream, initialPosition="LATEST")
    start = first.initialOffset()
    first.stop()
    for i in range(5):
        stream.put(f"parent{i}".encode(), f"k{i}")
    stream.split(parent)
    for i in range(5):
        stream.put(f"child{i}".encode(), f"k{i}")
    time.sleep(1.1)  # the restart comes later than every record (arrival times in seconds)
    restarted = reader_of(stream, initialPosition="LATEST")
    try:
        values = read_all(restarted, offsets_from(restarted, start, ReadAllAvailable()))
    finally:
        restarted.stop()
    assert sorted(values) == sorted(
        [f"parent{i}" for i in range(5)] + [f"child{i}" for i in range(5)]
    )


def test_available_now_takes_what_arrived_before_it_in_batches_of_the_limit(
    kinesis_stream: StreamFactory,
) -> None:
    stream = kinesis_stream(2)
    for i in range(30):
        stream.put(f"early{i}".encode(), f"k{i}")
    time.sleep(1.1)  # arrival times come in seconds
    reader = reader_of(stream, maxRecordsPerTrigger="10")
    try:
        start = reader.initialOffset()
        reader.prepareForTriggerAvailableNow()
        time.sleep(1.1)
        for i in range(10):
            stream.put(f"late{i}".encode(), f"k{i}")
        offsets = offsets_from(reader, start, reader.getDefaultReadLimit(), most=10)
        sizes = [len(batch(reader, a, b)) for a, b in itertools.pairwise(offsets)]
        values = read_all(reader, offsets)
    finally:
        reader.stop()
    assert sizes == [10, 10, 10, 0], sizes
    assert sorted(values) == sorted(f"early{i}" for i in range(30))


def test_an_offset_of_another_incarnation_is_refused(kinesis_stream: StreamFactory) -> None:
    from kinesis_core.consumer.incarnation import StreamRecreatedError

    stream = kinesis_stream(1)
    reader = reader_of(stream)
    start = reader.initialOffset()
    reader.stop()
    stream.recreate(1)
    again = reader_of(stream)
    try:
        with pytest.raises(StreamRecreatedError, match="deleted and created again"):
            again.latestOffset(start, ReadAllAvailable())
    finally:
        again.stop()


def test_without_deaggregation_a_row_is_a_kinesis_record(kinesis_stream: StreamFactory) -> None:
    stream = kinesis_stream(1)
    for a in range(2):
        subs = [SubRecord(f"k{i}", None, f"a{a}-{i}".encode()) for i in range(5)]
        stream.put(encode_aggregate(subs), "k0")
    stream.put(b"plain", "k9")
    reader = reader_of(stream, deaggregate="false", maxRecordsPerTrigger="2")
    try:
        offsets = offsets_from(reader, reader.initialOffset(), reader.getDefaultReadLimit())
        rows = [
            row
            for a, b in itertools.pairwise(offsets)
            for partition in reader.partitions(a, b)
            for arrow in reader.read(partition)
            for row in arrow.to_pylist()
        ]
    finally:
        reader.stop()
    assert [r["partition_key"] for r in rows] == ["k0", "k0", "k9"]
    assert {r["sub_sequence_number"] for r in rows} == {0}
    assert rows[2]["data"] == b"plain"
    # The aggregates' rows are their KPL bytes, which a reader deaggregates itself.
    assert [[s.data for s in decode_aggregate(r["data"]) or []] for r in rows[:2]] == [
        [f"a{a}-{i}".encode() for i in range(5)] for a in range(2)
    ]


def test_tasks_read_through_a_stream_consumer_the_records_polling_reads(
    kinesis_stream: StreamFactory,
) -> None:
    stream = kinesis_stream(2)
    for i in range(40):
        stream.put(f"r{i}".encode(), f"k{i % 7}")
    reader = reader_of(stream, consumerName="spark-tasks", maxRecordsPerTrigger="25")
    try:
        offsets = offsets_from(reader, reader.initialOffset(), reader.getDefaultReadLimit())
        by_subscription = read_all(reader, offsets)
    finally:
        reader.stop()
    consumers = stream.boto_client().list_stream_consumers(
        StreamARN=stream.boto_client().describe_stream_summary(StreamName=stream.name)[
            "StreamDescriptionSummary"
        ]["StreamARN"]
    )["Consumers"]
    assert [c["ConsumerName"] for c in consumers] == ["spark-tasks"]
    assert sorted(by_subscription) == sorted(f"r{i}" for i in range(40))
    # The same offsets read by GetRecords give the same batches.
    polling = reader_of(stream)
    try:
        assert read_all(polling, offsets) == by_subscription
    finally:
        polling.stop()


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"consumerName": "a", "consumerARN": "arn:x"}, "not both"),
        ({"consumerName": " "}, "must not be empty"),
        ({"deaggregate": "yes"}, "must be true or false"),
    ],
)
def test_bad_fan_out_and_deaggregate_options_are_refused(
    given: dict[str, str], message: str
) -> None:
    from kinesis_core.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=message):
        SourceSpec.parse({"streamName": "s", **given})


def test_a_shards_next_slice_reads_on_with_the_reader_of_the_last(
    kinesis_stream: StreamFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[str] = []
    task_reader = _shards.Shards.task_reader

    def counted(self: _shards.Shards, node: Any, *args: Any) -> Any:
        made.append(node.shard_id)
        return task_reader(self, node, *args)

    monkeypatch.setattr(_shards.Shards, "task_reader", counted)
    stream = kinesis_stream(1)
    for i in range(30):
        stream.put(f"r{i}".encode(), "k")
    reader = reader_of(stream, maxRecordsPerTrigger="10")
    try:
        offsets = offsets_from(reader, reader.initialOffset(), reader.getDefaultReadLimit())
        batches = [batch(reader, a, b) for a, b in itertools.pairwise(offsets)]
        assert len(made) == 1  # one reader for every batch of the shard
        # A batch read again (a retried task) starts elsewhere: a reader of its own, same rows.
        assert batch(reader, offsets[1], offsets[2]) == batches[1]
        assert len(made) == 2
    finally:
        reader.stop()
    assert [v for b in batches for v in b] == [f"r{i}" for i in range(30)]
