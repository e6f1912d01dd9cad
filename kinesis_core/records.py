"""The record types that cross module boundaries.

A consumed record is a plain slotted class rather than a dataclass: the consumer makes hundreds
of thousands of them per second, and a slotted ``__init__`` is the cheapest object Python has
that can still carry a method (``ack``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import NamedTuple

from kinesis_core.errors import NotAckableError

Position = tuple[int, int]
"""(sequence_number, sub_sequence_number): compared as integers, never as strings."""


class SubRecord(NamedTuple):
    """One user record inside (or outside) a KPL aggregate, as the codec sees it."""

    partition_key: str
    explicit_hash_key: str | None
    data: bytes


class KinesisRecord:
    """A user record read from a shard, after deaggregation.

    ``sequence_number`` is the decimal string the service sends (as in the KCL, and in
    ``beam_kinesis.KinesisRecord``, Beam's schema'd form of this record: the same fields, the
    same types); ``position`` gives (sequence number, sub-sequence number) as ints, the order
    of records in a shard. ``sequence``, when the caller already has the sequence number as an
    int, saves converting it again."""

    __slots__ = (
        "_ack",
        "_sequence",
        "aggregated",
        "approximate_arrival_timestamp",
        "data",
        "explicit_hash_key",
        "partition_key",
        "sequence_number",
        "shard_id",
        "sub_sequence_number",
    )

    def __init__(
        self,
        data: bytes,
        partition_key: str,
        explicit_hash_key: str | None,
        sequence_number: str,
        sub_sequence_number: int,
        shard_id: str,
        approximate_arrival_timestamp: datetime | None,
        aggregated: bool,
        ack: Callable[[KinesisRecord], None] | None = None,
        sequence: int | None = None,
    ) -> None:
        self.data = data
        self.partition_key = partition_key
        self.explicit_hash_key = explicit_hash_key
        self.sequence_number = sequence_number
        self._sequence = int(sequence_number) if sequence is None else sequence
        self.sub_sequence_number = sub_sequence_number
        self.shard_id = shard_id
        self.approximate_arrival_timestamp = approximate_arrival_timestamp
        self.aggregated = aggregated
        self._ack = ack

    @property
    def position(self) -> Position:
        return (self._sequence, self.sub_sequence_number)

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
        return hash((self.shard_id, self._sequence, self.sub_sequence_number))
