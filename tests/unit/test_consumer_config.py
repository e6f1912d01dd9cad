"""ConsumerConfig, the one initial-position parser, and the Consumer's life cycle."""

from __future__ import annotations

import asyncio
import pickle
from datetime import datetime, timezone

import pytest

from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.consumer import (
    LATEST,
    TRIM_HORIZON,
    AtTimestamp,
    Consumer,
    ConsumerConfig,
    parse_initial_position,
)
from kinesis_core.errors import ConfigurationError
from kinesis_core.lease import LeaseConfig
from kinesis_core.lifecycle import LifecycleError
from kinesis_core.stream import StreamRef

T = datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (TRIM_HORIZON, TRIM_HORIZON),
        (LATEST, LATEST),
        ("TRIM_HORIZON", TRIM_HORIZON),
        ("trim_horizon", TRIM_HORIZON),
        (" Latest ", LATEST),
        ("latest", LATEST),
        (AtTimestamp(T), AtTimestamp(T)),
        (T, AtTimestamp(T)),
        (T.replace(tzinfo=None), AtTimestamp(T)),
    ],
)
def test_every_spelling_of_a_start_position(value: object, expected: object) -> None:
    assert parse_initial_position(value) == expected
    assert ConsumerConfig(initial_position=value).initial_position == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["AT_TIMESTAMP", "earliest", "", 42, None, 1.5])
def test_a_wrong_start_position_names_what_was_given_and_what_is_accepted(value: object) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_initial_position(value)
    message = str(info.value)
    assert message.startswith("initial_position: must be TRIM_HORIZON or LATEST")
    assert "AtTimestamp(t), or a datetime" in message
    assert f"got {value!r}" in message
    assert info.value.field == "initial_position"


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        (1e12, "1000000000000.0 (milliseconds? pass seconds: AtTimestamp(t / 1000))"),
        (1_700_000_000_000, "1700000000000 (milliseconds? pass seconds: AtTimestamp(t / 1000))"),
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        (-1.0, "-1.0"),
        (1e300, "1e+300"),
    ],
)
def test_an_epoch_timestamp_out_of_range_names_the_range(value: float, hint: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        AtTimestamp(value)
    assert info.value.field == "timestamp"
    assert str(info.value) == (
        "timestamp: AtTimestamp takes a datetime or epoch seconds from 0 to 253402300799 "
        f"(the years 1970 to 9999), got {hint}"
    )


def test_epoch_seconds_in_range_are_utc_datetimes() -> None:
    assert AtTimestamp(0).timestamp == datetime(1970, 1, 1, tzinfo=timezone.utc)
    assert AtTimestamp(T.timestamp()) == AtTimestamp(T)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("application_name", "", "must be a non-empty string"),
        ("checkpoint_interval", 0, "must be > 0 seconds"),
        ("shard_refresh_interval", -1, "must be > 0 seconds"),
        ("close_timeout", -0.5, "must be >= 0 seconds"),
        ("idle_interval", 0.1, "must be >= 0.2 seconds"),
        ("auto_ack", "yes", "must be True or False"),
        ("max_queued_batches", 0, r"must be an int >= 1"),
        ("max_records_per_call", 10_001, r"must be an int in \[1, 10000\]"),
        ("max_records_per_call", True, r"must be an int in \[1, 10000\]"),
        ("leases", "yes", "must be a LeaseConfig, True or False"),
        ("checkpoint_interval", "5", "must be > 0 seconds"),
        ("idle_interval", float("inf"), r"must be >= 0.2 seconds \(and finite\), got inf"),
        ("idle_interval", float("nan"), r"must be >= 0.2 seconds \(and finite\), got nan"),
        ("checkpoint_interval", float("inf"), r"must be > 0 seconds \(and finite\), got inf"),
        ("shard_refresh_interval", float("inf"), r"must be > 0 seconds \(and finite\)"),
        ("max_read_bytes_per_second", 0, "must be a number of bytes > 0"),
        ("max_read_bytes_per_second", "2MiB", "must be a number of bytes > 0"),
    ],
)
def test_bad_values_name_their_field(field: str, value: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=f"^{field}: {message}") as info:
        ConsumerConfig(**{field: value})  # type: ignore[arg-type]
    assert info.value.field == field


def test_defaults_and_lease_config() -> None:
    config = ConsumerConfig()
    assert config.initial_position == LATEST
    assert config.lease_config is None
    assert isinstance(ConsumerConfig(leases=True).lease_config, LeaseConfig)
    leases = LeaseConfig(worker_id="w1")
    assert ConsumerConfig(leases=leases).lease_config is leases
    assert config.polling.limit == 10_000
    assert config.polling.max_bytes_per_second == 2 * 1024 * 1024  # the shard's read limit
    fast = ConsumerConfig(max_read_bytes_per_second=float("inf"))
    assert fast.polling.max_bytes_per_second == float("inf")
    assert pickle.loads(pickle.dumps(ConsumerConfig(initial_position=T))) == ConsumerConfig(
        initial_position=AtTimestamp(T)
    )


def test_keyword_options_override_the_config() -> None:
    base = ConsumerConfig(application_name="app", checkpoint_interval=2.0)
    c = Consumer(
        "s",
        consumer_config=base,
        checkpoint_store=MemoryCheckpointStore(),
        initial_position="trim_horizon",
        auto_ack=True,
    )
    assert c.config == ConsumerConfig(
        application_name="app",
        checkpoint_interval=2.0,
        initial_position=TRIM_HORIZON,
        auto_ack=True,
    )
    with pytest.raises(
        ConfigurationError, match=r"Consumer got unknown option.*checkpoint_intervall"
    ):
        Consumer("s", checkpoint_intervall=2.0)


def test_the_stream_argument_is_checked() -> None:
    with pytest.raises(ConfigurationError, match=r"^stream: must be a stream name or ARN"):
        Consumer("", checkpoint_store=MemoryCheckpointStore())
    arn = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"
    assert Consumer(arn, checkpoint_store=MemoryCheckpointStore()).stream == StreamRef(
        "orders", arn
    )


def test_reading_before_start_and_starting_twice_say_what_to_do() -> None:
    async def main() -> None:
        c = Consumer("s", checkpoint_store=MemoryCheckpointStore())
        with pytest.raises(LifecycleError, match=r"Consumer\('s'\) is new: cannot read records"):
            await c.__anext__()
        await c.close()
        with pytest.raises(LifecycleError, match="is closed: cannot start"):
            await c.start()
        await c.close()  # closing twice is fine

    asyncio.run(main())
