"""beam_kinesis.compat against Beam's cross-language apache_beam.io.kinesis: the same names in
the same order, and each argument mapped, ignored with a warning, or refused."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from datetime import datetime, timezone

import pytest
from apache_beam.io import kinesis as xlang

from beam_kinesis import CredentialsInPipelineWarning, compat
from kinesis_core.aws.config import ClientConfig
from kinesis_core.consumer.positions import LATEST, TRIM_HORIZON, AtTimestamp
from kinesis_core.errors import ConfigurationError
from kinesis_core.producer import ProducerConfig


@pytest.mark.parametrize("name", ["ReadDataFromKinesis", "WriteToKinesis"])
def test_the_same_arguments_in_the_same_order(name: str) -> None:
    theirs = list(inspect.signature(getattr(xlang, name).__init__).parameters)
    ours = list(inspect.signature(getattr(compat, name).__init__).parameters)
    assert ours == theirs


def _constants(cls: type) -> dict[str, str]:
    return {k: v for k, v in vars(cls).items() if k.isupper()}


def test_the_same_constants() -> None:
    for cls in ("InitialPositionInStream", "WatermarkPolicy"):
        assert _constants(getattr(compat, cls)) == _constants(getattr(xlang, cls))


def _outcome(validate: Callable[[object], None], param: object) -> tuple[str, str] | None:
    try:
        validate(param)
    except Exception as error:
        return type(error).__name__, str(error)
    return None


@pytest.mark.parametrize("cls", ["InitialPositionInStream", "WatermarkPolicy"])
def test_validate_param_accepts_and_refuses_what_beams_does(cls: str) -> None:
    theirs, ours = getattr(xlang, cls), getattr(compat, cls)
    refused = ["EARLIEST", "latest", "PROCESSING_TIME"]
    for param in [None, "", *_constants(theirs).values(), *refused]:
        assert _outcome(ours.validate_param, param) == _outcome(theirs.validate_param, param)
    for param in refused:
        assert _outcome(ours.validate_param, param) is not None


def test_read_arguments_map_onto_read_from_kinesis() -> None:
    with pytest.warns(CredentialsInPipelineWarning):
        read = compat.ReadDataFromKinesis(
            "clicks",
            "AKIA",
            "secret",
            "eu-west-1",
            service_endpoint="http://127.0.0.1:4567",
            verify_certificate=False,
            max_num_records=500,
            max_read_time=30_000,
            initial_position_in_stream=compat.InitialPositionInStream.AT_TIMESTAMP,
            initial_timestamp_in_stream=1_700_000_000_000,
            request_records_limit=1000,
            watermark_policy=compat.WatermarkPolicy.ARRIVAL_TIME,
            watermark_idle_duration_threshold=5_000,
            rate_limit=500,
        )
    spec = read._read._spec
    assert spec.stream == "clicks"
    assert spec.client_config == ClientConfig(
        aws_access_key_id="AKIA",
        aws_secret_access_key="secret",
        region_name="eu-west-1",
        endpoint_url="http://127.0.0.1:4567",
        verify=False,
    )
    assert spec.with_metadata is False  # bytes, as the Java read outputs
    assert (spec.max_records, spec.max_read_time) == (500, 30.0)
    assert spec.initial_position == AtTimestamp(
        datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone.utc)
    )
    assert (spec.max_records_per_call, spec.idle_threshold, spec.idle_interval) == (1000, 5.0, 0.5)
    bare = compat.ReadDataFromKinesis("clicks")._read._spec
    assert bare.client_config == ClientConfig()  # the workers' default chain
    assert bare.initial_position == LATEST
    assert bare.idle_threshold == 120.0  # the Java read's watermark idle threshold, 2 min
    trim = compat.ReadDataFromKinesis("c", initial_position_in_stream="TRIM_HORIZON")
    assert trim._read._spec.initial_position == TRIM_HORIZON
    # The Java registrar sets the position, then the timestamp: the timestamp wins.
    both = compat.ReadDataFromKinesis(
        "c", initial_position_in_stream="TRIM_HORIZON", initial_timestamp_in_stream=1.7e12 + 0.9
    )
    assert both._read._spec.initial_position == AtTimestamp(
        datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone.utc)
    )
    # Beam's wrapper takes a timestamp of 0 for none.
    zero = compat.ReadDataFromKinesis("c", initial_timestamp_in_stream=0)
    assert zero._read._spec.initial_position == LATEST
    # Below Kinesis's 5 GetRecords calls per second per shard: the reader's 200 ms.
    fast = compat.ReadDataFromKinesis("c", rate_limit=10)
    assert fast._read._spec.idle_interval == 0.2


def test_read_arguments_without_a_meaning_here_warn_or_are_refused() -> None:
    with pytest.warns(compat.IgnoredArgumentWarning) as caught:
        compat.ReadDataFromKinesis(
            "c",
            expansion_service="localhost:8097",
            up_to_date_threshold=1,
            max_capacity_per_shard=1,
        )
    assert sorted(str(w.message).split(":")[1].strip() for w in caught) == [
        "expansion_service is ignored",
        "max_capacity_per_shard is ignored",
        "up_to_date_threshold is ignored",
    ]
    with pytest.raises(ConfigurationError, match="watermark_policy: only ARRIVAL_TIME"):
        compat.ReadDataFromKinesis("c", watermark_policy=compat.WatermarkPolicy.PROCESSING_TYPE)
    with pytest.raises(ConfigurationError, match="AT_TIMESTAMP needs the timestamp"):
        compat.ReadDataFromKinesis("c", initial_position_in_stream="AT_TIMESTAMP")
    with pytest.raises(RuntimeError, match=r"^Invalid initial position in stream: EARLIEST$"):
        compat.ReadDataFromKinesis("c", initial_position_in_stream="EARLIEST")
    with pytest.raises(RuntimeError, match=r"^Invalid watermark policy: PROCESSING_TIME$"):
        compat.ReadDataFromKinesis("c", watermark_policy="PROCESSING_TIME")
    with pytest.raises(ConfigurationError, match="initial_position_in_stream: must be"):
        compat.ReadDataFromKinesis("c", initial_position_in_stream="")
    with pytest.raises(ConfigurationError, match="rate_limit: must be a number of milliseconds"):
        compat.ReadDataFromKinesis("c", rate_limit=-1)
    with pytest.raises(ConfigurationError, match="give both or neither"):
        compat.ReadDataFromKinesis("c", aws_access_key="AKIA")


def test_write_arguments_map_onto_write_to_kinesis() -> None:
    write = compat.WriteToKinesis(
        "clicks",
        region="eu-west-1",
        partition_key="all",
        aggregation_enabled=False,
        aggregation_max_bytes=4096,
        aggregation_max_buffered_time=250,
    )
    spec = write._write._spec
    assert spec.stream == "clicks"
    assert spec.client_config == ClientConfig(region_name="eu-west-1")
    assert spec.partition_key(b"anything") == "all"
    assert spec.producer_config == ProducerConfig(
        aggregation_enabled=False, aggregation_max_size=4096, record_max_buffered_time=0.25
    )
    assert spec.on_failure == "raise"  # as the Java write: a failed record fails the bundle
    defaults = compat.WriteToKinesis("c", partition_key="k")._write._spec.producer_config
    # Plain records, as Beam's (aggregationEnabled != null && aggregationEnabled); its other
    # defaults (51,200 bytes, 100 ms) are ours.
    assert defaults == ProducerConfig(aggregation_enabled=False)
    on = compat.WriteToKinesis("c", partition_key="k", aggregation_enabled=True)
    assert on._write._spec.producer_config == ProducerConfig(aggregation_enabled=True)
    with pytest.raises(ValueError, match="producer_properties is no longer supported"):
        compat.WriteToKinesis("c", partition_key="k", producer_properties={"a": "b"})
    with pytest.raises(ConfigurationError, match="partition_key: the one partition key"):
        compat.WriteToKinesis("c")
    with pytest.raises(ConfigurationError, match=r"partition_key: .* the limit is 256"):
        compat.WriteToKinesis("c", partition_key="k" * 257)
    with pytest.warns(compat.IgnoredArgumentWarning, match="aggregation_shard_refresh_interval"):
        compat.WriteToKinesis("c", partition_key="k", aggregation_shard_refresh_interval=5)
    with pytest.warns(compat.IgnoredArgumentWarning, match="expansion_service"):
        compat.WriteToKinesis("c", partition_key="k", expansion_service="localhost:8097")
