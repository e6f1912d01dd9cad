"""The element ``ReadFromKinesis`` outputs: one user record, with a Beam schema.

``KinesisRecord`` is a NamedTuple so Beam infers a schema (a row type) from it and encodes it
with a deterministic ``RowCoder``; it works with ``beam.Select``, SQL and cross-language
transforms. Sequence numbers have up to 56 digits, more than a schema INT64 holds, so
``sequence_number`` is the decimal string: compare positions with ``position`` (ints), never
as strings.

This module must keep real (not postponed) annotations: Beam reads the field types at runtime,
and ``Optional[str]`` rather than ``str | None``, which Beam 2.77 does not map to a nullable
string.
"""

from typing import NamedTuple, Optional

from apache_beam.coders.row_coder import RowCoder
from apache_beam.coders.typecoders import registry
from apache_beam.utils.timestamp import Timestamp


class KinesisRecord(NamedTuple):
    """A user record read from a shard (a KPL aggregate's sub-records come out one by one)."""

    data: bytes
    partition_key: str
    explicit_hash_key: Optional[str]  # noqa: UP045 (Beam maps Optional, not X | None)
    shard_id: str
    sequence_number: str
    sub_sequence_number: int
    approximate_arrival_timestamp: Timestamp

    @property
    def position(self) -> tuple[int, int]:
        """(sequence number, sub-sequence number) as ints: the order of records in a shard."""
        return (int(self.sequence_number), self.sub_sequence_number)


registry.register_coder(KinesisRecord, RowCoder)
