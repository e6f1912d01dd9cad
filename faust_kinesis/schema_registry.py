"""Faust codecs for AWS Glue Schema Registry records (docs/schema-registry.md).

``value_serializer=glue_codec(serializer=..., deserializer=...)`` on a
:class:`~faust_kinesis.KinesisChannel` decodes what agents read; on a
:class:`~faust_kinesis.KinesisSink` it encodes what they yield. Values are what
:mod:`kinesis_schema_registry` reads and writes (Avro records as dicts, JSON values, Protobuf
messages). A record the deserializer cannot decode reaches the agent as its bytes, unchanged,
with a warning and a count in ``deserializer.stats`` (the KCL's pass-through). The registry is
asked once per schema version per process, from the process's event-loop thread, so a codec
call on Faust's loop blocks only for that first call.

kinesis_schema_registry is imported when a codec is made (the ``gsr`` extra).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from faust.serializers.codecs import Codec

from kinesis_core.errors import ConfigurationError

if TYPE_CHECKING:
    from kinesis_schema_registry import GlueDeserializer, GlueSerializer

__all__ = ["GlueCodec", "glue_codec"]


class GlueCodec(Codec):
    """A Faust codec on a :class:`~kinesis_schema_registry.GlueSerializer` (writing) and a
    :class:`~kinesis_schema_registry.GlueDeserializer` (reading); either may be None for a
    codec used one way only."""

    def _dumps(self, obj: Any) -> bytes:
        serializer: GlueSerializer | None = self.kwargs.get("serializer")
        if serializer is None:
            raise ConfigurationError(
                "serializer", "this Glue codec only reads: give glue_codec(serializer=...)"
            )
        return serializer.dumps(obj)

    def _loads(self, s: bytes) -> Any:
        deserializer: GlueDeserializer | None = self.kwargs.get("deserializer")
        if deserializer is None:
            raise ConfigurationError(
                "deserializer", "this Glue codec only writes: give glue_codec(deserializer=...)"
            )
        return deserializer.loads(s)


def glue_codec(
    *, serializer: GlueSerializer | None = None, deserializer: GlueDeserializer | None = None
) -> GlueCodec:
    """A codec for ``value_serializer=`` (or ``key_serializer=``)."""
    if serializer is None and deserializer is None:
        raise ConfigurationError("serializer", "give a serializer, a deserializer or both")
    return GlueCodec(serializer=serializer, deserializer=deserializer)
