"""ProducerConfig: the KPL's defaults, and every bad value refused with its field's name."""

from __future__ import annotations

from typing import Any

import pytest

from kinesis_core.errors import ConfigurationError
from kinesis_core.producer import ProducerConfig
from kinesis_core.producer.config import request_body_bytes


def test_defaults_are_the_kpls() -> None:
    config = ProducerConfig()
    assert config.aggregation_enabled is True
    assert config.aggregation_max_size == 51_200
    assert config.aggregation_max_count == 4_294_967_295
    assert config.collection_max_count == 500
    assert config.collection_max_size == 5 * 1024 * 1024
    assert config.record_max_buffered_time == pytest.approx(0.1)
    assert config.record_ttl == pytest.approx(30.0)
    assert config.rate_limit == 150
    assert config.fail_if_throttled is False
    assert config.max_connections == 24
    assert config.request_timeout == pytest.approx(6.0)
    assert config.max_record_bytes == 10 * 1024 * 1024  # no cap below the stream's own limit


def test_large_records_and_requests_are_allowed_up_to_the_kinesis_limits() -> None:
    mib = 1024 * 1024
    config = ProducerConfig(
        aggregation_max_size=10 * mib, collection_max_size=10 * mib, max_record_bytes=10 * mib
    )
    assert config.aggregation_max_size == config.collection_max_size == 10 * mib
    with pytest.raises(ConfigurationError, match=r"max_record_bytes.*10 MiB"):
        ProducerConfig(max_record_bytes=10 * mib + 1)


def test_the_request_timeout_grows_with_the_request_body_which_carries_the_data_in_base64() -> None:
    config = ProducerConfig(request_timeout=6.0, request_timeout_per_mib=2.0)
    mib = 1024 * 1024
    assert config.request_timeout_for(0) == config.request_timeout_for(3 * mib // 4) == 6.0
    # 3 MiB of data is a 4 MiB body: 3 MiB beyond the first.
    assert config.request_timeout_for(3 * mib) == pytest.approx(12.0)
    # The largest request, 10 MiB: a 13.3 MiB body, which a 4 Mbit/s link takes 28 s to send.
    assert config.request_timeout_for(10 * mib) == pytest.approx(6.0 + (40 / 3 - 1) * 2.0)
    assert 13.3 * mib * 8 / 4e6 < config.request_timeout_for(10 * mib)


def test_a_request_body_is_the_base64_of_its_data_and_keys() -> None:
    assert request_body_bytes(0) == 0
    assert request_body_bytes(1) == request_body_bytes(3) == 4
    assert request_body_bytes(3 * 1024 * 1024) == 4 * 1024 * 1024


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("aggregation_max_size", 63),
        ("aggregation_max_size", 10 * 1024 * 1024 + 1),
        ("aggregation_max_count", 0),
        ("collection_max_count", 0),
        ("collection_max_count", 501),
        ("collection_max_size", 1000),
        ("collection_max_size", 10 * 1024 * 1024 + 1),
        ("request_timeout_per_mib", -1.0),
        ("rate_limit", 0),
        ("max_outstanding_records", 0),
        ("max_outstanding_bytes", 1000),
        ("max_record_bytes", 10),
        ("max_connections", 0),
        ("max_connections", 257),
        ("record_ttl", 0.01),
        ("record_max_buffered_time", -1.0),
        ("record_max_buffered_time", float("nan")),
        ("request_timeout", 0.0),
        ("connect_timeout", 1e9),
        ("metrics_interval", 0),
        ("rate_limit", 1.5),
        ("rate_limit", True),
        ("max_connections", "24"),
        ("request_timeout", "6"),
        ("aggregation_enabled", 1),
        ("fail_if_throttled", "no"),
    ],
)
def test_bad_values_are_refused_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(ConfigurationError, match=field):
        ProducerConfig(**{field: value})


def test_inconsistent_values_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="record_ttl"):
        ProducerConfig(record_ttl=0.5, record_max_buffered_time=1.0)
    with pytest.raises(ConfigurationError, match="collection_max_size"):
        ProducerConfig(collection_max_size=60_000, aggregation_max_size=100_000)


def test_config_is_immutable() -> None:
    config = ProducerConfig()
    with pytest.raises(AttributeError):
        config.rate_limit = 10  # type: ignore[misc]
