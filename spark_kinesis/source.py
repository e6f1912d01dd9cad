"""The Kinesis data source of Spark (``pyspark.sql.datasource``): the stream reader of
Structured Streaming, the batch reader, and the writers of :mod:`spark_kinesis.sink`.

Streaming: the driver fixes each micro-batch's end per shard, before a record that a probe
found near the shard's tip or after the last Kinesis record it read ahead
(:class:`~spark_kinesis._shards.Fetcher`), and writes it in the offset; a task per shard reads
from the start mark through the end mark (:func:`~spark_kinesis._shards.read_slice`), so a batch
replayed after a failure gives the same records. :mod:`spark_kinesis.offsets` has the offset
rules (parents before children, the read limit).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from operator import attrgetter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BinaryType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kinesis_core.consumer.lineage import ShardNode
from kinesis_core.consumer.positions import InitialPosition
from kinesis_core.records import KinesisRecord
from spark_kinesis._cache import shared
from spark_kinesis._shards import Fetcher, Shards, read_slice
from spark_kinesis.offsets import (
    SHARD_END,
    StreamOffset,
    admit,
    allot,
    initial_offset,
    prune,
    resolve_initial,
    slices,
    start_mark,
    unknown_children,
)
from spark_kinesis.options import SinkSpec, SourceSpec
from spark_kinesis.sink import KinesisArrowWriter, KinesisStreamArrowWriter

SCHEMA = StructType(
    [
        StructField("data", BinaryType(), False),
        StructField("partition_key", StringType(), False),
        StructField("explicit_hash_key", StringType(), True),
        StructField("sequence_number", StringType(), False),
        StructField("sub_sequence_number", LongType(), False),
        StructField("shard_id", StringType(), False),
        StructField("approximate_arrival_timestamp", TimestampType(), True),
        StructField("stream", StringType(), False),
    ]
)
"""The columns of a read: a record's data and where it was in the stream."""

_ARROW = pa.schema(
    [
        pa.field("data", pa.binary(), False),
        pa.field("partition_key", pa.string(), False),
        pa.field("explicit_hash_key", pa.string(), True),
        pa.field("sequence_number", pa.string(), False),
        pa.field("sub_sequence_number", pa.int64(), False),
        pa.field("shard_id", pa.string(), False),
        pa.field("approximate_arrival_timestamp", pa.timestamp("us", tz="UTC"), True),
        pa.field("stream", pa.string(), False),
    ]
)
""":data:`SCHEMA` in Arrow's terms, nullability included (Spark checks both)."""


_DATA = attrgetter("data")
_KEY = attrgetter("partition_key")
_HASH_KEY = attrgetter("explicit_hash_key")
_SEQUENCE = attrgetter("sequence_number")
_SUB_SEQUENCE = attrgetter("sub_sequence_number")
_ARRIVAL = attrgetter("approximate_arrival_seconds")


def record_batch(records: Sequence[KinesisRecord], stream: str) -> pa.RecordBatch:
    """The records (of one shard) as an Arrow batch of :data:`SCHEMA`'s columns. The columns
    are made with C loops (``map`` over attribute getters, Arrow's compute for the times,
    which the reader's parser gives in epoch seconds, repeated scalars for the shard and the
    stream): a Python loop per record and column costs more than the rest of the read."""
    count = len(records)
    seconds = pa.array(list(map(_ARRIVAL, records)), pa.float64())
    micros = pc.cast(pc.round(pc.multiply(seconds, 1e6)), pa.int64())
    return pa.RecordBatch.from_arrays(
        [
            pa.array(list(map(_DATA, records)), pa.binary()),
            pa.array(list(map(_KEY, records)), pa.string()),
            pa.array(list(map(_HASH_KEY, records)), pa.string()),
            pa.array(list(map(_SEQUENCE, records)), pa.string()),
            pa.array(list(map(_SUB_SEQUENCE, records)), pa.int64()),
            pa.repeat(pa.scalar(records[0].shard_id, pa.string()), count),
            micros.cast(pa.timestamp("us", tz="UTC")),
            pa.repeat(pa.scalar(stream, pa.string()), count),
        ],
        schema=_ARROW,
    )


LISTING_INTERVAL = 5.0
"""Seconds between two listings while a shard at SHARD_END has no known child (its children
may be gone past retention; Spark asks for offsets every few milliseconds when idle)."""


class ShardPartition(InputPartition):
    """One task: a shard (its lineage node) from the ``start`` mark through the ``end`` mark
    (None: until caught up)."""

    def __init__(
        self, node: ShardNode, start: str, end: str | None, created_ms: int | None
    ) -> None:
        super().__init__(node.shard_id)
        self.node = node
        self.start = start
        self.end = end
        self.created_ms = created_ms


def _read(spec: SourceSpec, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    assert isinstance(partition, ShardPartition)
    shards = shared(("source", spec), lambda: Shards(spec))
    for records in read_slice(
        shards, partition.node, partition.start, partition.end, partition.created_ms
    ):
        yield record_batch(records, spec.stream.name)


class KinesisStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Structured Streaming's reader: offsets per shard, a task per shard and batch."""

    def __init__(self, spec: SourceSpec) -> None:
        self.spec = spec
        self._started = datetime.now(timezone.utc)
        self._shards: Shards | None = None
        self._fetcher: Fetcher | None = None
        self._nodes: dict[str, ShardNode] = {}
        self._listed = -LISTING_INTERVAL

    def __getstate__(self) -> dict[str, Any]:
        # The tasks get the spec only: clients and readers stay on the driver.
        return {"spec": self.spec}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["spec"])  # type: ignore[misc]

    def _driver(self) -> tuple[Shards, Fetcher]:
        if self._shards is None or self._fetcher is None:
            self._shards = Shards(self.spec)
            self._fetcher = Fetcher(self._shards, self._shards.created_ms())
        return self._shards, self._fetcher

    def _initial(self) -> InitialPosition:
        return resolve_initial(self.spec.initial_position, self._started)

    def _list(self) -> None:
        shards, _ = self._driver()
        self._nodes.update((node.shard_id, node) for node in shards.nodes())

    def initialOffset(self) -> dict[str, Any]:
        _, fetcher = self._driver()
        self._list()
        offset = initial_offset(
            self.spec.stream.name, fetcher.created_ms, self._nodes.values(), self._initial()
        )
        return offset.to_json()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: the query takes the records that arrived until now (children
        of shards that end included), in as many batches as the read limit makes, and stops."""
        _, fetcher = self._driver()
        fetcher.until = time.time()

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.spec.max_records_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        _, fetcher = self._driver()
        offset = StreamOffset.from_json(start)
        offset.check(self.spec.stream.name, fetcher.created_ms)
        now = time.monotonic()
        if any(s not in self._nodes for s in offset.shards) or (
            unknown_children(offset, self._nodes.values())
            and now - self._listed >= LISTING_INTERVAL
        ):
            self._list()
            self._listed = now
        joining = admit(offset, self._nodes.values(), self.spec.initial_position)
        reading = {s: m for s, m in offset.shards.items() if m != SHARD_END}
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        probing = self.spec.probe_ends and cap is None and fetcher.until is None
        probed = fetcher.probe(reading, self._nodes) if probing else {}
        looking = {s: m for s, m in reading.items() if s not in probed}
        peeks = fetcher.look(looking, self._nodes, cap)
        counts = allot({s: len(p.positions) for s, p in peeks.items()}, cap)
        marks = {shard_id: fetcher.take(shard_id, n) for shard_id, n in counts.items()}
        for peek in peeks.values():
            if peek.ended is not None:
                self._nodes.update((c.shard_id, c) for c in peek.ended.children)
        return prune(
            offset.with_marks({**marks, **probed, **joining}), self._nodes.values()
        ).to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[ShardPartition]:
        first, last = StreamOffset.from_json(start), StreamOffset.from_json(end)
        missing = [s for s in last.shards if s not in self._nodes]
        if missing:
            self._list()
        return [
            ShardPartition(self._nodes[piece.shard_id], piece.start, piece.end, last.created_ms)
            for piece in slices(first, last)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.spec, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the offsets in Spark's checkpoint are the source's only state."""

    def stop(self) -> None:
        if self._fetcher is not None:
            self._fetcher.close()
        if self._shards is not None:
            self._shards.close()
        self._fetcher = self._shards = None


class KinesisBatchReader(DataSourceReader):
    """A batch read: every shard, a task each, from the initial position to its tip (or its
    end) at the time the task reads it."""

    def __init__(self, spec: SourceSpec) -> None:
        self.spec = spec

    def partitions(self) -> list[ShardPartition]:
        shards = Shards(self.spec)
        try:
            nodes = shards.nodes()
        finally:
            shards.close()
        start = start_mark(resolve_initial(self.spec.initial_position, datetime.now(timezone.utc)))
        return [ShardPartition(node, start, None, None) for node in nodes]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.spec, partition)


class KinesisDataSource(DataSource):
    """``format("kinesis")``: Amazon Kinesis Data Streams as a source and a sink."""

    @classmethod
    def name(cls) -> str:
        return "kinesis"

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> KinesisStreamReader:
        return KinesisStreamReader(SourceSpec.parse(self.options))

    def reader(self, schema: StructType) -> KinesisBatchReader:
        return KinesisBatchReader(SourceSpec.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return KinesisArrowWriter(SinkSpec.parse(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        return KinesisStreamArrowWriter(SinkSpec.parse(self.options), schema)


def register(spark: Any) -> None:
    """Make ``format("kinesis")`` name this data source in ``spark``'s session."""
    spark.dataSource.register(KinesisDataSource)
