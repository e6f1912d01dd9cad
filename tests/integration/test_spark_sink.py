"""The Spark sink's task, driven as a Spark task drives it (Arrow batches in, a commit message
out), without Spark: against kinesis-mock, and behind a proxy that fails every PutRecords
entry, where the task must fail with the records and the reasons. And the columns it refuses
when a query starts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from kinesis_core.aggregation import deaggregate
from kinesis_core.errors import ConfigurationError
from kinesis_core.local import StreamFactory
from kinesis_core.local.faults import FaultConfig
from spark_kinesis.options import SinkSpec
from spark_kinesis.sink import KinesisArrowWriter, KinesisCommitMessage, KinesisWriteError
from tests.helpers.spark import options

pytestmark = pytest.mark.integration


def rows(count: int) -> list[pa.RecordBatch]:
    table = pa.table(
        {
            "data": [f"v{i}" for i in range(count)],
            "partition_key": [f"k{i % 7}" for i in range(count)],
        }
    )
    return table.to_batches(max_chunksize=50)


SCHEMA = StructType([StructField("data", StringType()), StructField("partition_key", StringType())])


def test_a_task_returns_once_its_records_are_written(kinesis_stream: StreamFactory) -> None:
    stream = kinesis_stream(2)
    spec = SinkSpec.parse(options(stream.name, stream.client_config))
    message = KinesisArrowWriter(spec, SCHEMA).write(iter(rows(120)))
    assert message == KinesisCommitMessage(120)
    written = []
    for record in stream.records():
        entry = {
            "Data": record["Data"],
            "PartitionKey": record["PartitionKey"],
            "SequenceNumber": record["SequenceNumber"],
        }
        written += deaggregate([entry], record["ShardId"])
    assert sorted(r.data.decode() for r in written) == sorted(f"v{i}" for i in range(120))


def test_a_task_fails_with_the_records_that_failed_and_why(
    kinesis_stream: StreamFactory, fault_proxy: Callable[..., Any]
) -> None:
    stream = kinesis_stream(1)
    faults = FaultConfig.from_rates(put_record_internal_error=1.0, operations=["PutRecords"])
    proxy = fault_proxy(stream.endpoint_url, faults)
    spec = SinkSpec.parse(
        {
            **options(stream.name, stream.client_config),
            "endpointUrl": proxy.endpoint_url,
            "recordTtlSeconds": "1",
            "aggregation": "false",
        }
    )
    with pytest.raises(KinesisWriteError) as caught:
        KinesisArrowWriter(spec, SCHEMA).write(iter(rows(20)))
    failures = caught.value.failures
    assert sorted(f.partition_key for f in failures) == sorted(f"k{i % 7}" for i in range(20))
    assert all(f.attempts >= 1 and f.error_code for f in failures)
    message = str(caught.value)
    assert "20 record(s) of this task could not be written" in message
    assert "partition key" in message
    assert stream.records() == []


@pytest.mark.parametrize(
    ("schema", "extra", "named"),
    [
        (StructType([StructField("value", BinaryType())]), {}, "dataColumn"),
        (
            StructType(
                [StructField("data", LongType()), StructField("partition_key", StringType())]
            ),
            {},
            "dataColumn",
        ),
        (
            StructType([StructField("data", BinaryType()), StructField("user", StringType())]),
            {},
            "partitionKeyColumn",
        ),
        (SCHEMA, {"explicitHashKeyColumn": "ehk"}, "explicitHashKeyColumn"),
    ],
)
def test_a_query_with_columns_the_sink_cannot_write_is_refused(
    schema: StructType, extra: dict[str, str], named: str
) -> None:
    spec = SinkSpec.parse({"streamName": "events", "region": "us-east-1", **extra})
    with pytest.raises(ConfigurationError) as caught:
        KinesisArrowWriter(spec, schema)
    assert caught.value.field == named
