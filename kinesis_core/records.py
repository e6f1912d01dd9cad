"""The record types that cross module boundaries.

Records are ``msgspec`` structs made without the cyclic garbage collector's tracking
(``gc=False``): a consumer makes hundreds of thousands of them per second and the application
holds them until it acks them, so every collection would walk them all. Neither kind can be in
a reference cycle: their fields are bytes, strings, numbers, datetimes and the consumer's ack
callback, which holds its batch weakly (``RecordAck``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, NamedTuple

import msgspec

from kinesis_core.errors import NotAckableError

Position = tuple[int, int]
"""(sequence_number, sub_sequence_number): compared as integers, never as strings."""


class SubRecord(NamedTuple):
    """One user record inside (or outside) a KPL aggregate, as the codec sees it."""

    partition_key: str
    explicit_hash_key: str | None
    data: bytes


class WireRecord(msgspec.Struct, gc=False, rename="pascal"):
    """A record as GetRecords and SubscribeToShard send it, before deaggregation: what the
    fast parser decodes a response's ``Records`` into (``Data`` from base64 to bytes, the
    arrival time as epoch seconds or, from botocore's parser, a datetime)."""

    sequence_number: str
    data: bytes
    partition_key: str
    approximate_arrival_timestamp: float | datetime | None = None
    encryption_type: str | None = None


def wire_records(records: Sequence[WireRecord | Mapping[str, Any]]) -> Sequence[WireRecord]:
    """``records`` as :class:`WireRecord` s: a botocore-shaped list of dicts (``Data`` bytes,
    ``SequenceNumber``, ``PartitionKey``) is converted, a parsed one is returned as it is."""
    if not records or isinstance(records[0], WireRecord):
        return records  # type: ignore[return-value]
    return [
        r
        if isinstance(r, WireRecord)
        else WireRecord(
            r["SequenceNumber"], r["Data"], r["PartitionKey"], r.get("ApproximateArrivalTimestamp")
        )
        for r in records
    ]


class KinesisRecord(msgspec.Struct, gc=False, eq=False):
    """A user record read from a shard, after deaggregation.

    ``sequence_number`` is the decimal string the service sends (as in the KCL, and in
    ``beam_kinesis.KinesisRecord``, Beam's schema'd form of this record: the same fields, the
    same types); ``position`` gives (sequence number, sub-sequence number) as ints, the order
    of records in a shard. The arrival time is given as the service sends it (epoch seconds)
    or as a datetime, and made into the other form only when asked for. The last two arguments
    are the consumer's: the ack callback, and the sequence number as an int when the caller
    already has it (it saves converting it again). The id its producer gave it in the KPL
    aggregate's tags (docs/effectively-once.md) is ``record_id``, made when first asked for
    from ``id_run``: the id as the tags carry it, the id, or for a record of a run of
    ``ORIGIN:COUNTER`` ids ``(ORIGIN:, c)`` (sub-record ``k``'s counter is ``c + k``), one
    object shared by the run's records (so a deduplicating reader takes a run at once), until
    ``record_id`` is first read (then the id); None: no id."""

    data: bytes
    partition_key: str
    explicit_hash_key: str | None
    sequence_number: str
    sub_sequence_number: int
    shard_id: str
    _arrival: float | datetime | None
    aggregated: bool
    _ack: Callable[[KinesisRecord], None] | None = None
    _sequence: int | None = None
    id_run: str | tuple[str, int] | None = None

    @property
    def record_id(self) -> str | None:
        """The id its producer gave it, None when it has none."""
        record_id = self.id_run
        if isinstance(record_id, tuple):
            prefix, counter = record_id
            record_id = self.id_run = f"{prefix}{counter + self.sub_sequence_number}"
        return record_id

    @property
    def approximate_arrival_timestamp(self) -> datetime | None:
        """When the record reached the stream, as an aware UTC datetime."""
        arrival = self._arrival
        if arrival is None or isinstance(arrival, datetime):
            return arrival
        stamp = self._arrival = datetime.fromtimestamp(arrival, timezone.utc)
        return stamp

    @property
    def approximate_arrival_seconds(self) -> float | None:
        """The same instant in epoch seconds, with no datetime made: what engines that keep
        time as numbers (Beam, Faust) want. An aggregate's user records share the value."""
        arrival = self._arrival
        if isinstance(arrival, datetime):
            return arrival.timestamp()
        return arrival

    @property
    def position(self) -> Position:
        sequence = self._sequence
        if sequence is None:
            sequence = self._sequence = int(self.sequence_number)
        return (sequence, self.sub_sequence_number)

    def ack(self) -> None:
        """Tell the consumer this record is processed; its checkpoint may move past it.

        Raises :class:`~kinesis_core.errors.NotAckableError` for a record no consumer
        delivered."""
        if self._ack is None:
            raise NotAckableError(
                f"{self!r} was not delivered by a Consumer (it was made by hand, or by "
                "deaggregate() without an ack): no checkpoint waits for it, nothing to ack"
            )
        self._ack(self)

    def __repr__(self) -> str:
        return (
            f"KinesisRecord(shard_id={self.shard_id!r}, position={self.position}, "
            f"partition_key={self.partition_key!r}, data={self.data[:32]!r}"
            f"{'...' if len(self.data) > 32 else ''})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KinesisRecord):
            return NotImplemented
        return (
            self.shard_id == other.shard_id
            and self.position == other.position
            and self.data == other.data
            and self.partition_key == other.partition_key
            and self.explicit_hash_key == other.explicit_hash_key
        )

    def __hash__(self) -> int:
        return hash((self.shard_id, *self.position))
