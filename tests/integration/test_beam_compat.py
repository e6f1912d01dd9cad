"""beam_kinesis.compat on kinesis-mock: a pipeline written against Beam's cross-language
``apache_beam.io.kinesis`` names writes plain records with one partition key and reads the data
back as bytes, with no Java, and a record Kinesis refuses fails the job as in Java. Arguments as
a Java user passes them (keys, region, endpoint). Beam's own tests of that module, adapted:
test_beam_compat_upstream.py."""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from beam_kinesis import CredentialsInPipelineWarning
from beam_kinesis.compat import InitialPositionInStream, ReadDataFromKinesis, WriteToKinesis
from kinesis_core.local import DUMMY_ACCESS_KEY_ID, DUMMY_SECRET_ACCESS_KEY, LocalStream

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings(
        f"ignore::{CredentialsInPipelineWarning.__module__}.{CredentialsInPipelineWarning.__name__}"
    ),
]


def _connection(stream: LocalStream) -> dict[str, Any]:
    return {
        "aws_access_key": DUMMY_ACCESS_KEY_ID,
        "aws_secret_key": DUMMY_SECRET_ACCESS_KEY,
        "region": stream.client_config.region_name,
        "service_endpoint": stream.endpoint_url,
        "verify_certificate": False,
    }


def test_write_then_read_with_the_cross_language_names(kinesis_stream: Any) -> None:
    stream: LocalStream = kinesis_stream(shards=2)
    connection = _connection(stream)
    data = [f"event-{i}".encode() for i in range(40)]
    with beam.Pipeline(runner=FnApiRunner()) as p:
        _ = (
            p
            | beam.Create(data)
            | WriteToKinesis(stream.name, partition_key="one-key", **connection)
        )
    written = stream.records()
    assert {r["PartitionKey"] for r in written} == {"one-key"}
    # One plain Kinesis record per element, as Beam's write without aggregation_enabled.
    assert sorted(r["Data"] for r in written) == sorted(data)
    with beam.Pipeline(runner=FnApiRunner()) as p:
        read = p | ReadDataFromKinesis(
            stream.name,
            **connection,
            max_num_records=len(data),
            initial_position_in_stream=InitialPositionInStream.TRIM_HORIZON,
        )
        assert_that(read, equal_to(data))


def test_a_record_kinesis_refuses_fails_the_job(kinesis_stream: Any) -> None:
    """As the Java write, which has no output to read failures from: a record that fails for
    good fails the bundle (a runner may retry it) and the job, instead of vanishing."""
    stream: LocalStream = kinesis_stream(shards=1)
    over_the_limit = b"x" * (1024 * 1024)  # 1 MiB of data plus the partition key
    # The FnApiRunner wraps the DoFn's KinesisWriteError in a RuntimeError with its message.
    failed = r"KinesisWriteError: 1 record\(s\) failed for good"
    with pytest.raises(RuntimeError, match=failed), beam.Pipeline(runner=FnApiRunner()) as p:
        _ = (
            p
            | beam.Create([b"fine", over_the_limit])
            | WriteToKinesis(stream.name, partition_key="k", **_connection(stream))
        )
