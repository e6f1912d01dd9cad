"""The record types that cross module boundaries.

A consumed record is a plain slotted class rather than a dataclass: the consumer makes hundreds
of thousands of them per second, and a slotted ``__init__`` is the cheapest object Python has
that can still carry a method (``ack``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import NamedTuple

Position = tuple[int, int]
"""(sequence_number, sub_sequence_number): compared as integers, never as strings."""


class SubRecord(NamedTuple):
    """One user record inside (or outside) a KPL aggregate, as the codec sees it."""

    partition_key: str
    explicit_hash_key: str | None
    data: bytes


class KinesisRecord:
    """A user record read from a shard, after deaggregation."""

    __slots__ = (
        "_ack",
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
        sequence_number: int,
        sub_sequence_number: int,
        shard_id: str,
        approximate_arrival_timestamp: datetime | None,
        aggregated: bool,
        ack: Callable[[KinesisRecord], None] | None = None,
    ) -> None:
        self.data = data
        self.partition_key = partition_key
        self.explicit_hash_key = explicit_hash_key
        self.sequence_number = sequence_number
        self.sub_sequence_number = sub_sequence_number
        self.shard_id = shard_id
        self.approximate_arrival_timestamp = approximate_arrival_timestamp
        self.aggregated = aggregated
        self._ack = ack

    @property
    def position(self) -> Position:
        return (self.sequence_number, self.sub_sequence_number)

    def ack(self) -> None:
        """Tell the consumer this record is processed; its checkpoint may move past it."""
        if self._ack is None:
            raise RuntimeError("this record was not delivered by a Consumer: nothing to ack")
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
        return hash((self.shard_id, self.sequence_number, self.sub_sequence_number))
