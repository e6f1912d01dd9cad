"""Synchronous stream helpers for tests and tools: create, reshard, list, read, delete.

They take a botocore Kinesis client (``create_botocore_client``), so they work against any
Kinesis API (kinesis-mock, moto, AWS) and need nothing beyond the core's own dependencies.
Every resharding helper waits until the stream is ACTIVE again before it returns.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
import uuid
from types import TracebackType
from typing import TYPE_CHECKING, Any

from kinesis_core.aws.client import create_botocore_client
from kinesis_core.aws.config import ClientConfig
from kinesis_core.errors import ConfigurationError, EmulatorError, ValidationError

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "LocalStream",
    "StreamFactory",
    "create_stream",
    "delete_stream",
    "list_shards",
    "merge_shards",
    "read_records",
    "split_shard",
    "update_max_record_size",
    "update_shard_count",
    "wait_for_active",
    "wait_for_deleted",
]

DEFAULT_TIMEOUT = 60.0
# Control-plane calls on kinesis-mock fail fast with LimitExceededException when a few run at
# once; botocore's standard mode retries that, given enough attempts.
HELPER_MAX_ATTEMPTS = 8
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


def wait_for_active(client: Any, name: str, *, timeout: float = DEFAULT_TIMEOUT) -> None:
    """Poll DescribeStreamSummary until ``name`` is ACTIVE."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        summary = client.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
        status = summary["StreamStatus"]
        if status == "ACTIVE":
            return
        if time.monotonic() > deadline:
            raise EmulatorError(f"stream {name!r} is still {status} after {timeout:g} s")
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def create_stream(
    client: Any,
    name: str,
    shards: int = 4,
    *,
    max_record_size_kib: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> None:
    """Create a provisioned stream with ``shards`` shards and wait until it is ACTIVE.

    ``max_record_size_kib``: the stream's maximum record size (``MaxRecordSizeInKiB``, 1024 to
    10240; None: the service's default, 1 MiB). kinesis-mock takes it; moto ignores it."""
    if shards < 1:
        raise ConfigurationError("shards", f"must be >= 1, got {shards!r}")
    kwargs: dict[str, Any] = {"StreamName": name, "ShardCount": shards}
    if max_record_size_kib is not None:
        kwargs["MaxRecordSizeInKiB"] = _record_size_kib(max_record_size_kib)
    client.create_stream(**kwargs)
    wait_for_active(client, name, timeout=timeout)


def update_max_record_size(
    client: Any, name: str, max_record_size_kib: int, *, timeout: float = DEFAULT_TIMEOUT
) -> None:
    """UpdateMaxRecordSize of ``name`` (1024 to 10240 KiB) and wait until the stream reports
    it (and is ACTIVE)."""
    kib = _record_size_kib(max_record_size_kib)
    summary = client.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
    client.update_max_record_size(StreamARN=summary["StreamARN"], MaxRecordSizeInKiB=kib)
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        summary = client.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
        if summary["StreamStatus"] == "ACTIVE" and summary.get("MaxRecordSizeInKiB") == kib:
            return
        if time.monotonic() > deadline:
            raise EmulatorError(
                f"stream {name!r} still reports MaxRecordSizeInKiB "
                f"{summary.get('MaxRecordSizeInKiB')} ({summary['StreamStatus']}) after "
                f"{timeout:g} s, not {kib}"
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def _record_size_kib(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1024 <= value <= 10240:
        raise ConfigurationError(
            "max_record_size_kib", f"must be an int in [1024, 10240] (KiB), got {value!r}"
        )
    return value


def delete_stream(client: Any, name: str) -> None:
    """Delete ``name`` with its consumers; a stream that is already gone is fine."""
    with contextlib.suppress(client.exceptions.ResourceNotFoundException):
        client.delete_stream(StreamName=name, EnforceConsumerDeletion=True)


def wait_for_deleted(client: Any, name: str, *, timeout: float = DEFAULT_TIMEOUT) -> None:
    """Poll DescribeStreamSummary until ``name`` no longer exists (a deletion takes a while)."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        try:
            client.describe_stream_summary(StreamName=name)
        except client.exceptions.ResourceNotFoundException:
            return
        if time.monotonic() > deadline:
            raise EmulatorError(f"stream {name!r} still exists {timeout:g} s after its deletion")
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def list_shards(
    client: Any, name: str, *, shard_filter: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Every shard of ``name`` (ListShards, all pages), as botocore returns them."""
    kwargs: dict[str, Any] = {"StreamName": name}
    if shard_filter is not None:
        kwargs["ShardFilter"] = shard_filter
    shards: list[dict[str, Any]] = []
    while True:
        page = client.list_shards(**kwargs)
        shards.extend(page["Shards"])
        token = page.get("NextToken")
        if not token:
            return shards
        kwargs = {"NextToken": token}


def _shard(client: Any, name: str, shard_id: str) -> dict[str, Any]:
    for shard in list_shards(client, name):
        if shard["ShardId"] == shard_id:
            return shard
    raise ValidationError("shard_id", f"stream {name!r} has no shard {shard_id!r}")


def split_shard(
    client: Any,
    name: str,
    shard_id: str,
    new_starting_hash_key: int | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> list[str]:
    """Split ``shard_id`` (by default in the middle of its range); return the two children.

    The children are ordered by hash range: the first owns the lower half.
    """
    hash_range = _shard(client, name, shard_id)["HashKeyRange"]
    start, end = int(hash_range["StartingHashKey"]), int(hash_range["EndingHashKey"])
    if new_starting_hash_key is None:
        if start == end:
            raise ValidationError("shard_id", f"{shard_id} owns one hash key: it cannot split")
        new_starting_hash_key = start + (end - start + 1) // 2
    if not start < new_starting_hash_key <= end:
        raise ValidationError(
            "new_starting_hash_key",
            f"must be in ({start}, {end}] (the range of {shard_id}), got {new_starting_hash_key}",
        )
    client.split_shard(
        StreamName=name, ShardToSplit=shard_id, NewStartingHashKey=str(new_starting_hash_key)
    )
    wait_for_active(client, name, timeout=timeout)
    children = [s for s in list_shards(client, name) if s.get("ParentShardId") == shard_id]
    children.sort(key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))
    return [s["ShardId"] for s in children]


def merge_shards(
    client: Any,
    name: str,
    shard_id: str,
    adjacent_shard_id: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> str:
    """Merge two adjacent shards; return the child (ParentShardId=shard_id,
    AdjacentParentShardId=adjacent_shard_id)."""
    client.merge_shards(
        StreamName=name, ShardToMerge=shard_id, AdjacentShardToMerge=adjacent_shard_id
    )
    wait_for_active(client, name, timeout=timeout)
    for shard in list_shards(client, name):
        if (
            shard.get("ParentShardId") == shard_id
            and shard.get("AdjacentParentShardId") == adjacent_shard_id
        ):
            child: str = shard["ShardId"]
            return child
    raise EmulatorError(f"no child of {shard_id} and {adjacent_shard_id} after MergeShards")


def update_shard_count(
    client: Any, name: str, shard_count: int, *, timeout: float = DEFAULT_TIMEOUT
) -> list[dict[str, Any]]:
    """UpdateShardCount (UNIFORM_SCALING) to ``shard_count``; return the open shards."""
    if shard_count < 1:
        raise ConfigurationError("shard_count", f"must be >= 1, got {shard_count!r}")
    client.update_shard_count(
        StreamName=name, TargetShardCount=shard_count, ScalingType="UNIFORM_SCALING"
    )
    wait_for_active(client, name, timeout=timeout)
    return [s for s in list_shards(client, name) if _is_open(s)]


def read_records(client: Any, name: str) -> list[dict[str, Any]]:
    """Every record now in ``name``, shard by shard from TRIM_HORIZON, each with its ShardId.

    Records come back as GetRecords returns them (KPL aggregates stay aggregated).
    """
    records: list[dict[str, Any]] = []
    for shard in list_shards(client, name):
        shard_id = shard["ShardId"]
        iterator = client.get_shard_iterator(
            StreamName=name, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            page = client.get_records(ShardIterator=iterator, Limit=10_000)
            records.extend({**record, "ShardId": shard_id} for record in page["Records"])
            if not page["Records"] and page.get("MillisBehindLatest", 0) == 0:
                break  # at the tip of an open shard
            iterator = page.get("NextShardIterator")  # None after the end of a closed shard
    return records


def _is_open(shard: dict[str, Any]) -> bool:
    return "EndingSequenceNumber" not in shard["SequenceNumberRange"]


class LocalStream:
    """A stream on a local server: its name, a ClientConfig to reach it, and test helpers.

    ``boto_client()`` is a synchronous botocore client shared by the helpers; ``close()``
    closes it (the fixtures do). The helpers are safe to call from another thread, e.g.
    ``await asyncio.to_thread(stream.split, shard_id)`` while a consumer runs.
    """

    def __init__(self, name: str, client_config: ClientConfig) -> None:
        self.name = name
        self.client_config = client_config
        self._client: Any = None
        self._lock = threading.Lock()

    @property
    def endpoint_url(self) -> str:
        assert self.client_config.endpoint_url is not None
        return self.client_config.endpoint_url

    def boto_client(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = create_botocore_client(
                    self.client_config, "kinesis", max_attempts=HELPER_MAX_ATTEMPTS
                )
            return self._client

    def create(self, shards: int = 4, *, max_record_size_kib: int | None = None) -> None:
        create_stream(
            self.boto_client(), self.name, shards, max_record_size_kib=max_record_size_kib
        )

    def update_max_record_size(self, max_record_size_kib: int) -> None:
        """UpdateMaxRecordSize (1024 to 10240 KiB), returning once the stream reports it."""
        update_max_record_size(self.boto_client(), self.name, max_record_size_kib)

    def shards(self, *, open_only: bool = False) -> list[dict[str, Any]]:
        """ListShards entries (ShardId, ParentShardId, AdjacentParentShardId, HashKeyRange,
        SequenceNumberRange); closed shards too unless ``open_only``."""
        shards = list_shards(self.boto_client(), self.name)
        return [s for s in shards if _is_open(s)] if open_only else shards

    def split(self, shard_id: str, new_start: int | None = None) -> list[str]:
        """Split ``shard_id`` (in the middle by default); return the two children, low first."""
        return split_shard(self.boto_client(), self.name, shard_id, new_start)

    def merge(self, shard_id: str, adjacent_shard_id: str) -> str:
        """Merge two adjacent shards; return the child."""
        return merge_shards(self.boto_client(), self.name, shard_id, adjacent_shard_id)

    def scale(self, shard_count: int) -> list[dict[str, Any]]:
        """UpdateShardCount to ``shard_count`` (UNIFORM_SCALING); return the open shards."""
        return update_shard_count(self.boto_client(), self.name, shard_count)

    def put(
        self, data: bytes, partition_key: str, *, explicit_hash_key: int | None = None
    ) -> dict[str, Any]:
        """PutRecord; return its answer (ShardId, SequenceNumber)."""
        kwargs: dict[str, Any] = {
            "StreamName": self.name,
            "Data": data,
            "PartitionKey": partition_key,
        }
        if explicit_hash_key is not None:
            kwargs["ExplicitHashKey"] = str(explicit_hash_key)
        response: dict[str, Any] = self.boto_client().put_record(**kwargs)
        return response

    def records(self) -> list[dict[str, Any]]:
        """Every record now in the stream (see ``read_records``)."""
        return read_records(self.boto_client(), self.name)

    def delete(self) -> None:
        delete_stream(self.boto_client(), self.name)

    def recreate(self, shards: int = 4) -> None:
        """Delete the stream, wait until it is gone, and create it again under the same name:
        same shard ids, new sequence numbers, a new creation time (what a restarted emulator
        without persistence and a re-run setup script look like)."""
        client = self.boto_client()
        delete_stream(client, self.name)
        wait_for_deleted(client, self.name)
        create_stream(client, self.name, shards)

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def __repr__(self) -> str:
        return f"<LocalStream {self.name!r} at {self.endpoint_url}>"


class StreamFactory:
    """Makes fresh, uniquely named streams on one server: ``make(shards=4, name=None,
    max_record_size_kib=None)``.

    ``close()`` deletes every stream it made and closes their clients (the fixtures call it).
    """

    def __init__(self, client_config: ClientConfig, *, prefix: str = "stream") -> None:
        self.client_config = client_config
        self.prefix = _NAME_CHARS.sub("-", prefix).strip("-.")[:80] or "stream"
        self.streams: list[LocalStream] = []

    def __call__(
        self, shards: int = 4, name: str | None = None, *, max_record_size_kib: int | None = None
    ) -> LocalStream:
        stream = LocalStream(name or f"{self.prefix}-{uuid.uuid4().hex[:10]}", self.client_config)
        self.streams.append(stream)
        stream.create(shards, max_record_size_kib=max_record_size_kib)
        return stream

    def close(self, *, delete: bool = True) -> None:
        """Delete the streams (unless ``delete`` is False) and close their clients."""
        streams, self.streams = self.streams, []
        try:
            if delete:
                for stream in streams:
                    stream.delete()
        finally:
            for stream in streams:
                stream.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
