"""The Consumer against the in-memory Kinesis (tests/fakes/kinesis.py): how its unit tests make
one, and check the order of what it delivered (records are ``b"key:n"``)."""

from __future__ import annotations

from typing import Any

from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer
from kinesis_core.records import KinesisRecord
from tests.fakes.kinesis import FakeKinesis


def consumer(fake: FakeKinesis, store: MemoryCheckpointStore, **kwargs: Any) -> Consumer:
    options: dict[str, Any] = {
        "checkpoint_store": store,
        "initial_position": TRIM_HORIZON,
        "checkpoint_interval": 0.05,
        "shard_refresh_interval": 0.2,
        "idle_interval": 0.2,
        "close_timeout": 2.0,
    }
    options.update(kwargs)
    return Consumer("stream", client=fake, **options)


def keyed(record: KinesisRecord) -> tuple[str, int]:
    key, n = record.data.decode().split(":")
    return key, int(n)


def assert_in_order_per_key(records: list[KinesisRecord]) -> None:
    last: dict[str, int] = {}
    for record in records:
        key, n = keyed(record)
        assert n > last.get(key, -1), f"{key}: {n} after {last[key]}"
        last[key] = n
