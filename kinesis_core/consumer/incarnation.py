"""Which incarnation of a stream stored positions belong to, and what a refused position means
(sans-I/O).

A stream deleted and created again under the same name has the same shard ids and new sequence
numbers: a position stored for the old stream means nothing in the new one (the service
refuses it, or worse, accepts it and skips records). The stream's creation time
(DescribeStreamSummary ``StreamCreationTimestamp``) tells the incarnations apart, as the KCL's
multi-stream identifier ``account:stream:creationEpoch`` does; every checkpoint row keeps it
(:attr:`~kinesis_core.checkpoint.Checkpoint.stream_created_ms`).

Two decisions live here, both pure, shared by the core consumer, the Faust channel (which runs
it) and the Beam source:

- at start, :func:`stale_rows` finds the stored rows of another incarnation; the policy
  ``on_stream_recreated`` makes that a :class:`StreamRecreatedError` ("fail", the default) or
  resets them to the initial position ("reset", with :func:`reset_message` logged);
- in a reader, when the service refuses a stored position (GetShardIterator answers
  ResourceNotFound or InvalidArgument) or a shard seems to vanish, :func:`judge_refusal` reads a
  fresh listing: the shard is gone for real (no longer listed: past retention), the position
  belongs to another incarnation, or it is older than the shard's trim horizon (read from
  TRIM_HORIZON, with a warning). A listed shard is never taken for gone.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from kinesis_core.checkpoint.base import Checkpoint, same_incarnation
from kinesis_core.errors import KinesisConnectorError
from kinesis_core.shards.info import ShardInfo

OnStreamRecreated = Literal["fail", "reset"]
ON_STREAM_RECREATED: tuple[OnStreamRecreated, ...] = ("fail", "reset")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MILLISECOND = timedelta(milliseconds=1)


def epoch_ms(when: datetime) -> int:
    """Epoch milliseconds of an aware datetime (naive: UTC), rounded to the nearest."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return round((when - _EPOCH) / _MILLISECOND)


def timestamp_text(ms: int) -> str:
    """An epoch-milliseconds time as ISO 8601 UTC, for messages."""
    return (_EPOCH + ms * _MILLISECOND).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class StreamFacts:
    """What DescribeStreamSummary says of a stream that the checks need."""

    created_ms: int
    """``StreamCreationTimestamp`` in epoch milliseconds: the incarnation."""
    retention_hours: int | None = None

    @classmethod
    def from_response(cls, response: Mapping[str, Any]) -> StreamFacts:
        """From a DescribeStreamSummary response."""
        summary = response["StreamDescriptionSummary"]
        created = epoch_ms(summary["StreamCreationTimestamp"])
        return cls(created, summary.get("RetentionPeriodHours"))


class StreamRecreatedError(KinesisConnectorError):
    """Stored positions belong to another incarnation of the stream (deleted and created again
    under the same name): they were not used. ``stored_created_ms`` are the creation times the
    positions were stored for, ``created_ms`` the stream's now."""

    def __init__(
        self, message: str, *, stream: str, stored_created_ms: tuple[int, ...], created_ms: int
    ) -> None:
        super().__init__(message)
        self.stream = stream
        self.stored_created_ms = stored_created_ms
        self.created_ms = created_ms


def _outside(info: ShardInfo, sequence_number: int) -> bool:
    """Whether ``sequence_number`` cannot be one of the shard's: before its first sequence
    number, or after its last (a closed shard)."""
    ending = info.ending_sequence_number
    return sequence_number < info.starting_sequence_number or (
        ending is not None and sequence_number > ending
    )


def stale_rows(
    rows: Iterable[Checkpoint], created_ms: int, shards: Sequence[ShardInfo] = ()
) -> list[Checkpoint]:
    """The rows whose position belongs to another incarnation than the stream created at
    ``created_ms``: stored for another creation time, or (rows that carry none) a position
    outside the sequence-number range of the listed shard of that id."""
    listed = {info.shard_id: info for info in shards}
    stale = []
    for row in rows:
        info = listed.get(row.shard_id)
        position = row.position
        if not same_incarnation(row, created_ms) or (
            row.stream_created_ms is None
            and info is not None
            and position is not None
            and _outside(info, position[0])
        ):
            stale.append(row)
    return stale


def _stored_times(stale: Sequence[Checkpoint]) -> tuple[int, ...]:
    return tuple(sorted({row.stream_created_ms for row in stale if row.stream_created_ms}))


def _describe_stale(stale: Sequence[Checkpoint]) -> str:
    times = _stored_times(stale)
    when = (
        "created " + " and ".join(timestamp_text(ms) for ms in times)
        if times
        else "written before stream identities were kept, outside the shards' ranges now"
    )
    shards = ", ".join(row.shard_id for row in stale[:3]) + (", ..." if len(stale) > 3 else "")
    return f"{when} ({len(stale)} shard rows: {shards})"


def recreated_at_start(
    store: str,
    application: str,
    stream: str,
    stale: Sequence[Checkpoint],
    created_ms: int,
    initial: str,
) -> StreamRecreatedError:
    """The error of a start that found positions of another incarnation (policy "fail")."""
    return StreamRecreatedError(
        f"checkpoint store {store} holds positions of application {application!r} in an "
        f"earlier stream {stream!r} {_describe_stale(stale)}, but stream {stream!r} was "
        f"created {timestamp_text(created_ms)}: it was deleted and created again, and those "
        "positions mean nothing in it. None was used. To read the new stream from the "
        f"initial position ({initial}), set on_stream_recreated='reset' (ConsumerConfig); or "
        "give this reader another application_name or store.",
        stream=stream,
        stored_created_ms=_stored_times(stale),
        created_ms=created_ms,
    )


def reset_message(
    store: str,
    application: str,
    stream: str,
    stale: Sequence[Checkpoint],
    created_ms: int,
    initial: str,
) -> str:
    """The WARNING of a start that resets positions of another incarnation (policy "reset")."""
    return (
        f"checkpoint store {store} held positions of application {application!r} in an "
        f"earlier stream {stream!r} {_describe_stale(stale)}; stream {stream!r} was created "
        f"{timestamp_text(created_ms)}. on_stream_recreated='reset': those rows now start "
        f"over at the initial position {initial}."
    )


def recreated_while_read(
    where: str, stream: str, incarnation: int, created_ms: int
) -> StreamRecreatedError:
    """The error of a reader that finds its stream created again since it started."""
    return StreamRecreatedError(
        f"{where}: stream {stream!r} was deleted and created again while it was read "
        f"(created {timestamp_text(incarnation)}, now {timestamp_text(created_ms)}); its "
        "positions mean nothing in the new stream. Start again: on_stream_recreated "
        "(ConsumerConfig) then says whether to fail or to read the new stream from the "
        "initial position.",
        stream=stream,
        stored_created_ms=(incarnation,),
        created_ms=created_ms,
    )


class Refusal(enum.Enum):
    """What a fresh look at the stream says of a refused position or a vanished shard."""

    GONE = "gone"
    """The shard is no longer listed: past the retention period. It ends, unread."""
    RECREATED = "recreated"
    """The position belongs to another incarnation of the stream: raise."""
    TRIMMED = "trimmed"
    """The position is older than the shard's trim horizon: read from TRIM_HORIZON."""
    RETRY = "retry"
    """The shard is listed and no position was refused: connect again."""


@dataclass(frozen=True, slots=True)
class Verdict:
    refusal: Refusal
    message: str
    error: StreamRecreatedError | None = None
    """What to raise (RECREATED)."""


def judge_refusal(
    shard_id: str,
    sequence_number: int | None,
    shards: Sequence[ShardInfo],
    facts: StreamFacts,
    incarnation: int | None,
    stream: str,
) -> Verdict:
    """Decide after the service refused a position of a shard at or after ``sequence_number``
    (None: no position was refused, the shard itself was not found), from a complete listing
    and the stream's facts, both looked up after the refusal.

    ``incarnation`` is the creation time of the stream this reader started on (None: unknown).
    """
    where = f"shard {shard_id} of {stream}"
    if incarnation is not None and facts.created_ms != incarnation:
        error = recreated_while_read(where, stream, incarnation, facts.created_ms)
        return Verdict(Refusal.RECREATED, str(error), error)
    info = next((s for s in shards if s.shard_id == shard_id), None)
    if info is None:
        return Verdict(
            Refusal.GONE, f"{where} is no longer listed (past the retention period); not reading it"
        )
    if sequence_number is None:
        return Verdict(Refusal.RETRY, f"{where} is listed; connecting again")
    if _outside(info, sequence_number):
        message = (
            f"{where}: the stored position {sequence_number} lies outside the shard's sequence "
            "numbers: it was stored for an earlier stream of this name. Start again with "
            "on_stream_recreated='reset' (ConsumerConfig) to read the shard from the initial "
            "position."
        )
        error = StreamRecreatedError(
            message, stream=stream, stored_created_ms=(), created_ms=facts.created_ms
        )
        return Verdict(Refusal.RECREATED, message, error)
    retention = facts.retention_hours
    behind = f"more than the stream's retention of {retention} h" if retention else "too far"
    return Verdict(
        Refusal.TRIMMED,
        f"{where}: the service refused the checkpoint {sequence_number} though the shard is "
        f"listed: it is older than the shard's trim horizon ({behind} behind). Reading from "
        "TRIM_HORIZON: the records between the checkpoint and the oldest record kept are "
        "lost to retention.",
    )
