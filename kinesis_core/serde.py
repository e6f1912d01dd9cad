"""The hooks that let a codec sit between the application and the records (sans-I/O).

``Producer(..., serializer=)`` turns the values given to ``put``/``submit``/``put_many``/
``submit_many`` into record bytes; ``Consumer(..., deserializer=)`` decodes each batch before
it is delivered, replacing its records in place (same positions, same acks) with records that
carry the decoded values. :mod:`kinesis_schema_registry` implements both for the AWS Glue
Schema Registry. Both are awaited on the caller's event loop, so a codec may ask a registry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kinesis_core.consumer.frontier import RecordBatch


class RecordSerializer(Protocol):
    """Values -> record bytes, in order."""

    async def serialize(self, values: Sequence[Any]) -> Sequence[bytes]: ...


class RecordDeserializer(Protocol):
    """Decodes a batch before delivery: may replace ``batch.records[i]`` (for i below
    ``len(batch)``) with a record of the same position (a subclass of ``KinesisRecord`` made
    from the original's fields, its ack included)."""

    async def deserialize(self, batch: RecordBatch) -> None: ...


async def serialized(serializer: RecordSerializer, records: Sequence[Any]) -> list[Any]:
    """``(value, partition_key[, explicit_hash_key])`` entries with each value serialized."""
    data = await serializer.serialize([entry[0] for entry in records])
    return [(value, *entry[1:]) for value, entry in zip(data, records, strict=True)]
