"""The Kinesis sink of Spark: a task writes its rows through the core's
:class:`~kinesis_core.producer.BlockingProducer` (shard prediction, KPL aggregation per shard,
the per-shard limiter, retries; one per worker process and configuration, kept between tasks)
and returns only once every record of it is written, so a
committed task means written records. A record that fails for good fails the task with the
records and the reasons (Spark retries the task, then fails the query); nothing is dropped.
A task retried by Spark writes its records again: the sink is at-least-once.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, StringType, StructType

from kinesis_core.errors import ConfigurationError, KinesisConnectorError
from kinesis_core.producer import (
    BlockingProducer,
    ProducerClosedError,
    ProducerConfig,
    ProducerCrashedError,
)
from kinesis_core.producer.result import BatchResult
from spark_kinesis._cache import forget, shared
from spark_kinesis.options import SinkSpec

logger = logging.getLogger(__name__)

CHUNK = 1000
"""Records handed to the producer at a time."""
SHOWN_FAILURES = 5
"""Failed records quoted in a task's error (all are counted)."""


@dataclass(frozen=True)
class FailedRecord:
    """A record that was not written: its partition key, its data's size, and why."""

    partition_key: str
    data_bytes: int
    error_code: str
    error_message: str
    attempts: int


class KinesisWriteError(KinesisConnectorError):
    """Records of a task failed for good; ``failures`` has every one of them."""

    def __init__(self, message: str, failures: list[FailedRecord]) -> None:
        super().__init__(message)
        self.failures = failures


@dataclass(frozen=True)
class KinesisCommitMessage(WriterCommitMessage):
    """What a task wrote."""

    records: int


def _columns(spec: SinkSpec, schema: StructType) -> None:
    """Refuse a schema without the named columns, or with columns of the wrong types."""
    fields = {f.name: f.dataType for f in schema.fields}
    wanted = [
        ("dataColumn", spec.data_column, (BinaryType, StringType)),
        ("partitionKeyColumn", spec.partition_key_column, (StringType,)),
    ]
    if spec.explicit_hash_key_column is not None:
        wanted.append(("explicitHashKeyColumn", spec.explicit_hash_key_column, (StringType,)))
    for option, column, types in wanted:
        if column not in fields:
            raise ConfigurationError(
                option,
                f"names column {column!r}, which the DataFrame does not have "
                f"(its columns: {', '.join(fields)})",
            )
        if not isinstance(fields[column], types):
            names = " or ".join(t.typeName() for t in types)
            raise ConfigurationError(
                option, f"column {column!r} must be {names}, got {fields[column].simpleString()}"
            )


class _Task:
    """One task's writing: chunks handed to the producer, settled as they finish."""

    def __init__(self, spec: SinkSpec, producer: BlockingProducer) -> None:
        self.spec = spec
        self.producer = producer
        self.pending: deque[tuple[list[tuple[bytes, str, str | None]], Future[BatchResult]]] = (
            deque()
        )
        self.written = 0
        self.failures: list[FailedRecord] = []

    def hand(self, records: list[tuple[bytes, str, str | None]]) -> None:
        self.pending.append((records, self.producer.submit_many(records)))
        while self.pending and self.pending[0][1].done():
            self._settle(*self.pending.popleft())

    def finish(self) -> None:
        self.producer.flush()
        while self.pending:
            self._settle(*self.pending.popleft())

    def _settle(
        self, records: list[tuple[bytes, str, str | None]], future: Future[BatchResult]
    ) -> None:
        result = future.result()
        self.written += result.succeeded_count
        for index, rr in result.failures:
            data, key, _ = records[index]
            self.failures.append(
                FailedRecord(
                    key,
                    len(data),
                    rr.error_code or "Unknown",
                    rr.error_message or "",
                    len(rr.attempts),
                )
            )


def write_batches(spec: SinkSpec, batches: Iterator[pa.RecordBatch]) -> KinesisCommitMessage:
    """Write the rows of ``batches``; return once all are written, or raise
    :class:`KinesisWriteError` with those that failed."""
    config = ProducerConfig(
        aggregation_enabled=spec.aggregation,
        preserve_order=spec.preserve_order,
        record_ttl=spec.record_ttl,
    )
    key = ("sink", spec.stream, spec.client_config, config)
    producer = shared(
        key,
        lambda: BlockingProducer(
            spec.stream, client_config=spec.client_config, producer_config=config
        ),
    )
    task = _Task(spec, producer)
    try:
        for batch in batches:
            data = batch.column(spec.data_column).to_pylist()
            if data and pa.types.is_string(batch.schema.field(spec.data_column).type):
                data = [None if d is None else d.encode() for d in data]
            keys = batch.column(spec.partition_key_column).to_pylist()
            column = spec.explicit_hash_key_column
            hashes = batch.column(column).to_pylist() if column else [None] * len(keys)
            records = list(zip(data, keys, hashes, strict=True))
            for at in range(0, len(records), CHUNK):
                task.hand(records[at : at + CHUNK])
        task.finish()
    except (ProducerClosedError, ProducerCrashedError):
        forget(key)
        raise
    if task.failures:
        raise KinesisWriteError(_message(spec, task.failures, task.written), task.failures)
    return KinesisCommitMessage(task.written)


def _message(spec: SinkSpec, failures: list[FailedRecord], written: int) -> str:
    counts = Counter(f.error_code for f in failures)
    by_code = ", ".join(f"{code}: {n}" for code, n in counts.most_common())
    shown = "; ".join(
        f"partition key {f.partition_key!r} ({f.data_bytes} bytes): {f.error_code} "
        f"{f.error_message} after {f.attempts} attempt(s)"
        for f in failures[:SHOWN_FAILURES]
    )
    return (
        f"{len(failures)} record(s) of this task could not be written to "
        f"{spec.stream.name!r} ({by_code}; {written} written); the task fails so that Spark "
        f"retries it. First failures: {shown}"
    )


class KinesisArrowWriter(DataSourceArrowWriter):
    """``df.write.format("kinesis")``: each task writes its rows and waits for them."""

    def __init__(self, spec: SinkSpec, schema: StructType) -> None:
        _columns(spec, schema)
        self.spec = spec

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KinesisCommitMessage:
        return write_batches(self.spec, iterator)

    def abort(self, messages: list[Any]) -> None:
        _aborted(self.spec, messages, None)


class KinesisStreamArrowWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("kinesis")``: each micro-batch's tasks write their rows and
    wait for them before the batch commits."""

    def __init__(self, spec: SinkSpec, schema: StructType) -> None:
        _columns(spec, schema)
        self.spec = spec

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KinesisCommitMessage:
        return write_batches(self.spec, iterator)

    def commit(self, messages: list[Any], batchId: int) -> None:
        """Nothing to do: each task's records were written before it returned."""

    def abort(self, messages: list[Any], batchId: int) -> None:
        _aborted(self.spec, messages, batchId)


def _aborted(spec: SinkSpec, messages: list[Any], batch_id: int | None) -> None:
    written = sum(m.records for m in messages if isinstance(m, KinesisCommitMessage))
    logger.warning(
        "writing to %r aborted%s: %d record(s) of the finished tasks are in the stream; "
        "Spark writes the batch again (at-least-once)",
        spec.stream.name,
        "" if batch_id is None else f" in batch {batch_id}",
        written,
    )
