"""Record ids: their shapes, the automatic ones a producer gives, and the ones derived from an
input record's position (docs/effectively-once.md).

An id is a str of 1 to ``MAX_RECORD_ID_BYTES`` UTF-8 bytes. An id shaped ``ORIGIN:COUNTER``
(a counter in canonical decimal) is one of a family: the dedup window
(:mod:`kinesis_core.consumer.dedup`) keeps a family's consecutive counters as one range.

- automatic: ``SESSION.SHARD:COUNTER``, a producer's random session id, the shard it predicted
  for the record (``shardId-000000000003`` as ``3``) and a counter per session and shard, so a
  shard's window sees consecutive counters;
- derived: ``INCARNATION.SHARD.SEQUENCE:SUBSEQUENCE`` for the first output of an input record,
  ``INCARNATION.SHARD.SEQUENCE.SUBSEQUENCE:INDEX`` for its ``INDEX``-th (from 1): the input
  record's stream creation time (epoch ms), shard, sequence number (base 36) and sub-sequence
  number; the same input gives the same ids on every run, and the first outputs of the
  records of one input aggregate are consecutive counters of one origin.

Everything here is sans-I/O.
"""

from __future__ import annotations

from kinesis_core.aggregation import MAX_RECORD_ID_BYTES, split_counter, validate_record_id
from kinesis_core.errors import ValidationError

__all__ = [
    "MAX_RECORD_ID_BYTES",
    "automatic_origin",
    "derived_partition_key",
    "derived_record_id",
    "split_counter",
    "validate_record_id",
]

_SHARD_PREFIX = "shardId-"
_DIGITS36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def shard_tag(shard_id: str | None) -> str:
    """A shard id as ids carry it: ``shardId-000000000003`` as ``3``, another id as it is,
    no shard as ``-``."""
    if shard_id is None:
        return "-"
    number = shard_id[len(_SHARD_PREFIX) :]
    if shard_id.startswith(_SHARD_PREFIX) and number.isascii() and number.isdigit():
        return str(int(number))
    return shard_id


def automatic_origin(session: str, shard_id: str | None) -> str:
    """The origin of a producer session's automatic ids for the records it predicted for
    ``shard_id`` (their counters follow a ``:``)."""
    return f"{session}.{shard_tag(shard_id)}"


def _base36(value: int) -> str:
    if value == 0:
        return "0"
    digits = []
    while value:
        value, digit = divmod(value, 36)
        digits.append(_DIGITS36[digit])
    return "".join(reversed(digits))


def derived_record_id(
    incarnation: int,
    shard_id: str,
    sequence_number: str | int,
    sub_sequence_number: int,
    index: int = 0,
) -> str:
    """The id of the ``index``-th output (from 0) made from the input record at
    (``sequence_number``, ``sub_sequence_number``) of ``shard_id``, in the stream created at
    ``incarnation`` (epoch milliseconds, DescribeStreamSummary's ``StreamCreationTimestamp``).
    Deterministic: re-processing the same input gives the same ids. ValidationError for a
    negative number or an id over ``MAX_RECORD_ID_BYTES``."""
    sequence = int(sequence_number)
    for name, value in (
        ("incarnation", incarnation),
        ("sequence_number", sequence),
        ("sub_sequence_number", sub_sequence_number),
        ("index", index),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValidationError(name, f"must be an int >= 0, got {value!r}")
    origin = f"{incarnation}.{shard_tag(shard_id)}.{_base36(sequence)}"
    if index:
        return validate_record_id(f"{origin}.{sub_sequence_number}:{index}")
    return validate_record_id(f"{origin}:{sub_sequence_number}")


def derived_partition_key(record_id: str) -> str:
    """The partition key for an output with the derived id ``record_id``: its input record's
    ``INCARNATION.SHARD.SEQUENCE``, so the outputs of one input aggregate go to one shard,
    where their ids make one range of the reader's window, and a copy goes where the first
    went. Another id is its own key."""
    parts = record_id.split(".", 3)
    if len(parts) < 3:
        return record_id
    return ".".join(parts[:3]).partition(":")[0]
