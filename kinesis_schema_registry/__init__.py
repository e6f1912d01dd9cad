"""The AWS Glue Schema Registry for Kinesis records written and read in Python.

Records in the registry's wire format (:mod:`.wire`) with Avro, JSON Schema or Protobuf
payloads (:mod:`.formats`), a cached registry client (:class:`SchemaRegistry`), and a
serializer and deserializer pair (:class:`GlueSerializer`, :class:`GlueDeserializer`) for the
core's ``Producer(serializer=)`` and ``Consumer(deserializer=)``, Faust's codecs
(``faust_kinesis.schema_registry``) and Beam's Rows (``beam_kinesis.schema_registry``).
See docs/schema-registry.md. Needs the ``gsr`` extra (fastavro, jsonschema).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kinesis_core._lazy import lazy_exports

if TYPE_CHECKING:
    from kinesis_schema_registry.errors import (
        SchemaCompatibilityError as SchemaCompatibilityError,
        SchemaNotRegisteredError as SchemaNotRegisteredError,
        SchemaRegistryError as SchemaRegistryError,
        SchemaVersionUnavailableError as SchemaVersionUnavailableError,
    )
    from kinesis_schema_registry.formats import (
        AvroSchema as AvroSchema,
        DataFormat as DataFormat,
        JsonSchema as JsonSchema,
        ProtobufSchema as ProtobufSchema,
        Schema as Schema,
    )
    from kinesis_schema_registry.registry import (
        RegistryConfig as RegistryConfig,
        SchemaRegistry as SchemaRegistry,
        SchemaVersion as SchemaVersion,
    )
    from kinesis_schema_registry.serde import (
        Decoded as Decoded,
        DecodeStats as DecodeStats,
        GlueDeserializer as GlueDeserializer,
        GlueRecord as GlueRecord,
        GlueSerializer as GlueSerializer,
    )
    from kinesis_schema_registry.wire import NotGlueRecordError as NotGlueRecordError

_EXPORTS = {
    "AvroSchema": "kinesis_schema_registry.formats",
    "DataFormat": "kinesis_schema_registry.formats",
    "DecodeStats": "kinesis_schema_registry.serde",
    "Decoded": "kinesis_schema_registry.serde",
    "GlueDeserializer": "kinesis_schema_registry.serde",
    "GlueRecord": "kinesis_schema_registry.serde",
    "GlueSerializer": "kinesis_schema_registry.serde",
    "JsonSchema": "kinesis_schema_registry.formats",
    "NotGlueRecordError": "kinesis_schema_registry.wire",
    "ProtobufSchema": "kinesis_schema_registry.formats",
    "RegistryConfig": "kinesis_schema_registry.registry",
    "Schema": "kinesis_schema_registry.formats",
    "SchemaCompatibilityError": "kinesis_schema_registry.errors",
    "SchemaNotRegisteredError": "kinesis_schema_registry.errors",
    "SchemaRegistry": "kinesis_schema_registry.registry",
    "SchemaRegistryError": "kinesis_schema_registry.errors",
    "SchemaVersion": "kinesis_schema_registry.registry",
    "SchemaVersionUnavailableError": "kinesis_schema_registry.errors",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
