"""beam_kinesis.compat on kinesis-mock: a pipeline written against Beam's cross-language
``apache_beam.io.kinesis`` names writes with one partition key and reads the data back as
bytes, with no Java. Arguments as a Java user passes them (keys, region, endpoint)."""

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


def test_write_then_read_with_the_cross_language_names(kinesis_stream: Any) -> None:
    stream: LocalStream = kinesis_stream(shards=2)
    connection = {
        "aws_access_key": DUMMY_ACCESS_KEY_ID,
        "aws_secret_key": DUMMY_SECRET_ACCESS_KEY,
        "region": stream.client_config.region_name,
        "service_endpoint": stream.endpoint_url,
        "verify_certificate": False,
    }
    data = [f"event-{i}".encode() for i in range(40)]
    with beam.Pipeline(runner=FnApiRunner()) as p:
        _ = (
            p
            | beam.Create(data)
            | WriteToKinesis(stream.name, partition_key="one-key", **connection)
        )
    keys = {r["PartitionKey"] for r in stream.records()}
    assert keys == {"one-key"}  # KPL aggregates carry the key too
    with beam.Pipeline(runner=FnApiRunner()) as p:
        read = p | ReadDataFromKinesis(
            stream.name,
            **connection,
            max_num_records=len(data),
            initial_position_in_stream=InitialPositionInStream.TRIM_HORIZON,
        )
        assert_that(read, equal_to(data))
