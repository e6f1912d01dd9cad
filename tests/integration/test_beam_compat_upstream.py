"""Beam's own tests of ``apache_beam.io.kinesis``, run against ``beam_kinesis.compat`` on
kinesis-mock.

Where they come from: ``apache_beam/io/external/xlang_kinesisio_it_test.py`` as the apache-beam
2.77.0 wheel ships it (sha256 62d293950712019a031dc454b8e270a147b782be683e725713b0c945e9772061;
``sdks/python/apache_beam/io/external/xlang_kinesisio_it_test.py`` at tag v2.77.0 of
apache/beam), Apache License 2.0. It is the only test Beam has of that module (there is no
``kinesis_test.py``). Its two tests:

- ``test_kinesis_write`` is ``CrossLanguageKinesisIOTest.test_kinesis_write``: a write with the
  defaults, then a write of the same records with ``aggregation_enabled=True``; the first
  ``NUM_RECORDS`` records of the shard, read by one plain GetRecords (which does not
  deaggregate), must be the records of the first write, one Kinesis record each.
- ``test_kinesis_io_roundtrip`` is ``CrossLanguageKinesisIOTest.test_kinesis_io_roundtrip``
  (``run_kinesis_write`` then ``run_kinesis_read``), which Beam runs on real AWS only
  (apache/beam#20416: its Java read fails on localstack): ``ReadDataFromKinesis`` with every
  read argument the test passes must give back the records written.

What was adapted: the transforms and constants come from ``beam_kinesis.compat`` instead of
``apache_beam.io.kinesis``. The stream is the ``kinesis_stream`` fixture's (kinesis-mock on
loopback, one shard as Beam's helper creates) instead of a localstack Docker container started
with testcontainers: no Docker, no Java, no expansion service. The endpoint and the region are
the fixture's; the keys are the test's defaults (``accesskey``/``secretkey``, which kinesis-mock
accepts), with ``verify_certificate=False`` as the test passes for localstack. The pipelines run
on the FnApiRunner (``beam.Pipeline``, as tests/integration/test_beam_compat.py) instead of the
runner of ``--test-pipeline-options``, without ``not_use_test_runner_api`` (a cross-language
setting). The unittest class became pytest functions: its skip conditions (real AWS or
localstack) and its setUp/tearDown (argument parsing, container, stream creation and deletion)
went; ``KinesisHelper.read_from_stream`` is :func:`read_from_stream`, on the fixture's botocore
client. The constants, the pipelines' steps and arguments, and the assertions are Beam's.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from beam_kinesis import CredentialsInPipelineWarning
from beam_kinesis.compat import (
    InitialPositionInStream,
    ReadDataFromKinesis,
    WatermarkPolicy,
    WriteToKinesis,
)
from kinesis_core.local import LocalStream

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings(
        f"ignore::{CredentialsInPipelineWarning.__module__}.{CredentialsInPipelineWarning.__name__}"
    ),
]

NUM_RECORDS = 10
MAX_READ_TIME = 5 * 60 * 1000  # 5min
NOW_SECONDS = time.time()
NOW_MILLIS = NOW_SECONDS * 1000
REQUEST_RECORDS_LIMIT = 1000
RECORD = b"record" + str(uuid.uuid4()).encode()


def _aws(stream: LocalStream) -> dict[str, Any]:
    """The connection arguments every pipeline of the test passes."""
    return {
        "stream_name": stream.name,
        "aws_access_key": "accesskey",
        "aws_secret_key": "secretkey",
        "region": stream.client_config.region_name,
        "service_endpoint": stream.endpoint_url,
        "verify_certificate": False,
    }


def run_kinesis_write(stream: LocalStream, **aggregation: Any) -> None:
    with beam.Pipeline(runner=FnApiRunner()) as p:
        _ = (
            p
            | "Impulse" >> beam.Impulse()
            | "Generate" >> beam.FlatMap(lambda x: range(NUM_RECORDS))
            | "Map to bytes"
            >> beam.Map(lambda x: RECORD + str(x).encode()).with_output_types(bytes)
            | "WriteToKinesis" >> WriteToKinesis(**_aws(stream), partition_key="1", **aggregation)
        )


def run_kinesis_read(stream: LocalStream) -> None:
    records = [RECORD + str(i).encode() for i in range(NUM_RECORDS)]
    with beam.Pipeline(runner=FnApiRunner()) as p:
        result = p | "ReadFromKinesis" >> ReadDataFromKinesis(
            **_aws(stream),
            max_num_records=NUM_RECORDS,
            max_read_time=MAX_READ_TIME,
            request_records_limit=REQUEST_RECORDS_LIMIT,
            watermark_policy=WatermarkPolicy.ARRIVAL_TIME,
            watermark_idle_duration_threshold=MAX_READ_TIME,
            initial_position_in_stream=InitialPositionInStream.AT_TIMESTAMP,
            initial_timestamp_in_stream=NOW_MILLIS,
        ).with_output_types(bytes)
        assert_that(result, equal_to(records))


def read_from_stream(stream: LocalStream) -> list[bytes]:
    """The first ``NUM_RECORDS`` records of the first shard, from ``NOW_SECONDS``, as one
    GetRecords returns them (aggregates stay aggregated)."""
    client = stream.boto_client()
    description = client.describe_stream(StreamName=stream.name)["StreamDescription"]
    shard_iterator = client.get_shard_iterator(
        StreamName=stream.name,
        ShardId=description["Shards"][0]["ShardId"],
        ShardIteratorType=InitialPositionInStream.AT_TIMESTAMP,
        Timestamp=str(NOW_SECONDS),
    )
    result = client.get_records(ShardIterator=shard_iterator["ShardIterator"], Limit=NUM_RECORDS)
    return [record["Data"] for record in result["Records"]]


def test_kinesis_write(kinesis_stream: Any) -> None:
    stream: LocalStream = kinesis_stream(shards=1)
    run_kinesis_write(stream)
    run_kinesis_write(stream, aggregation_enabled=True)
    records = read_from_stream(stream)
    assert sorted(records) == sorted([RECORD + str(i).encode() for i in range(NUM_RECORDS)])


def test_kinesis_io_roundtrip(kinesis_stream: Any) -> None:
    stream: LocalStream = kinesis_stream(shards=1)
    run_kinesis_write(stream)
    run_kinesis_read(stream)
