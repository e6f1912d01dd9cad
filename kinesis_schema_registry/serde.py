"""Serializers and deserializers of Glue Schema Registry records, for every engine.

:class:`GlueSerializer` turns values of one schema into records (the header with the schema
version id, then the payload); :class:`GlueDeserializer` turns records of any schema version
back into values. Both are plain synchronous codecs once the registry answered (one call per
schema version per process, :class:`~.registry.SchemaRegistry`), with async faces for the
core's ``Producer(serializer=)`` and ``Consumer(deserializer=)``.

A record that is not in the format, whose schema version the registry does not have, or whose
payload does not decode, is never dropped and never stops a read: like the KCL's decoder, the
deserializer passes it through undecoded (its value is the record's bytes as they are), logs a
warning (the first of each kind and version, then one in every ``WARN_EVERY``) and counts it in
:class:`DecodeStats`.
"""

from __future__ import annotations

import logging
import uuid
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from kinesis_core.errors import ConfigurationError
from kinesis_core.records import KinesisRecord
from kinesis_schema_registry import wire
from kinesis_schema_registry.errors import SchemaRegistryError
from kinesis_schema_registry.formats import (
    AvroSchema,
    DataFormat,
    JsonSchema,
    ProtobufSchema,
    Schema,
)
from kinesis_schema_registry.registry import SchemaRegistry, SchemaVersion

if TYPE_CHECKING:
    from kinesis_core.consumer.frontier import RecordBatch

logger = logging.getLogger(__name__)

WARN_EVERY = 1000
"""After the first warning of a kind (and schema version), one in this many is logged."""

NOT_GLUE = "not_glue"
"""Why a record was passed through: it is not in the Glue Schema Registry format."""
UNAVAILABLE = "unavailable"
"""Its schema version could not be fetched (deleted, another registry's, the registry down)."""
UNDECODABLE = "undecodable"
"""Its payload does not decode with its schema version (or no Protobuf class was given)."""


class GlueSerializer:
    """Values of ``schema`` -> records of the version of ``schema_name`` with that definition.

    ``compressed`` zlib-compresses the payloads (compression byte 5). The version is looked up
    (registered, with ``auto_register``) on the first record; :meth:`prepare` does it up
    front. ``dumps(value)`` is the synchronous codec; ``await serialize(values)`` the
    core producer's hook (``Producer(..., serializer=GlueSerializer(...))``).
    """

    def __init__(
        self,
        registry: SchemaRegistry,
        schema: Schema,
        schema_name: str,
        *,
        compressed: bool = False,
    ) -> None:
        if not isinstance(schema, Schema):
            raise ConfigurationError(
                "schema", f"must be an AvroSchema, JsonSchema or ProtobufSchema, got {schema!r}"
            )
        if not isinstance(schema_name, str) or not 1 <= len(schema_name) <= 255:
            raise ConfigurationError(
                "schema_name", f"must be 1 to 255 characters, got {schema_name!r}"
            )
        self.registry = registry
        self.schema = schema
        self.schema_name = schema_name
        self.compressed = compressed
        self.version: SchemaVersion | None = None
        self._encode = schema.encoder()
        self._header = b""

    async def prepare(self) -> SchemaVersion:
        """The schema version the records will name (asked for once)."""
        if self.version is None:
            self._set(await self.registry.version_of(self.schema, self.schema_name))
        assert self.version is not None
        return self.version

    def prepare_blocking(self) -> SchemaVersion:
        if self.version is None:
            self._set(self.registry.version_of_blocking(self.schema, self.schema_name))
        assert self.version is not None
        return self.version

    def _set(self, version: SchemaVersion) -> None:
        self._header = wire.header(version.version_id, compressed=self.compressed)
        self.version = version

    def dumps(self, value: Any) -> bytes:
        """One record's bytes (looks the version up first, blocking, if not yet done)."""
        if self.version is None:
            self.prepare_blocking()
        payload = self._encode(value)
        if self.compressed:
            return self._header + zlib.compress(payload)
        return self._header + payload

    async def serialize(self, values: Sequence[Any]) -> list[bytes]:
        """The records of ``values`` (the core Producer's ``serializer`` hook)."""
        if self.version is None:
            await self.prepare()
        dumps = self.dumps
        return [dumps(value) for value in values]


@dataclass
class DecodeStats:
    """What a deserializer did, record by record: its metric."""

    decoded: int = 0
    not_glue: int = 0
    unavailable: int = 0
    undecodable: int = 0

    @property
    def passed_through(self) -> int:
        """Records handed on undecoded."""
        return self.not_glue + self.unavailable + self.undecodable


class Decoded(NamedTuple):
    """One record decoded: ``value`` (the record's bytes when it was passed through),
    its schema version (None when passed through) and why it was passed through (None when
    decoded: :data:`NOT_GLUE`, :data:`UNAVAILABLE` or :data:`UNDECODABLE`, then a colon and
    the detail)."""

    value: Any
    version: SchemaVersion | None
    failure: str | None


class GlueRecord(KinesisRecord, gc=False):
    """A :class:`~kinesis_core.records.KinesisRecord` the consumer's deserializer decoded:
    ``value``, its ``schema_version`` and, for a record passed through undecoded, the
    ``failure`` (``value`` is then ``data``). Acked like any record."""

    value: Any = None
    schema_version: SchemaVersion | None = None
    failure: str | None = None


class GlueDeserializer:
    """Records of any schema version of the registry -> values.

    ``reader_schema`` (Avro) resolves every writer version to that schema (Avro's schema
    resolution: new fields take their defaults, removed ones are skipped), so every value has
    one shape. ``protobuf`` gives the message class of Protobuf records: one class, or a
    mapping from schema name to class. ``loads(data)`` is the synchronous codec (the value,
    or ``data`` itself when passed through); :meth:`decode` says why; ``await
    deserialize(batch)`` is the core Consumer's hook. ``stats`` counts every outcome.
    """

    def __init__(
        self,
        registry: SchemaRegistry,
        *,
        reader_schema: Schema | None = None,
        protobuf: type[Any] | Mapping[str, type[Any]] | None = None,
    ) -> None:
        if reader_schema is not None and not isinstance(reader_schema, Schema):
            raise ConfigurationError("reader_schema", f"must be a Schema, got {reader_schema!r}")
        self.registry = registry
        self.reader_schema = reader_schema
        self._protobuf = protobuf
        self.stats = DecodeStats()
        self._decoders: dict[bytes, tuple[Callable[[bytes], Any], SchemaVersion]] = {}
        self._warned: dict[tuple[str, bytes], int] = {}

    def _decoder(self, version: SchemaVersion) -> Callable[[bytes], Any]:
        if version.data_format is DataFormat.AVRO:
            return AvroSchema(version.definition).decoder(self.reader_schema)
        if version.data_format is DataFormat.JSON:
            return JsonSchema(version.definition).decoder()
        message_class = self._protobuf
        if isinstance(message_class, Mapping):
            message_class = message_class.get(version.schema_name or "")
        if message_class is None:
            raise SchemaRegistryError(
                f"no Protobuf message class for schema {version.schema_name} (version "
                f"{version.version_id}): pass GlueDeserializer(protobuf=...)"
            )
        return ProtobufSchema(message_class, version.definition).decoder()

    def _remember(self, key: bytes, version: SchemaVersion) -> tuple[Callable[[bytes], Any], Any]:
        entry = self._decoders[key] = (self._decoder(version), version)
        return entry

    def _pass(self, data: bytes, kind: str, detail: str, key: bytes = b"") -> Decoded:
        stats = self.stats
        setattr(stats, kind, getattr(stats, kind) + 1)
        seen = self._warned.get((kind, key), 0)
        self._warned[(kind, key)] = seen + 1
        if seen % WARN_EVERY == 0:
            logger.warning(
                "passing a record through undecoded (%s: %s)%s",
                kind,
                detail,
                f"; {seen} more like it so far" if seen else "",
            )
        return Decoded(data, None, f"{kind}: {detail}")

    def _payload(self, data: bytes, entry: tuple[Callable[[bytes], Any], SchemaVersion]) -> Decoded:
        try:
            payload = data[wire.HEADER_SIZE :]
            if data[1] == wire.COMPRESSION_ZLIB:
                payload = zlib.decompress(payload)
            value = entry[0](payload)
        except Exception as exc:  # any codec's error: the record is passed through, not lost
            return self._pass(data, UNDECODABLE, f"{exc!r}", data[2 : wire.HEADER_SIZE])
        self.stats.decoded += 1
        return Decoded(value, entry[1], None)

    def _known(self, data: bytes) -> Decoded | bytes:
        """``data`` decoded if its version is known or it is not in the format; else the
        16 bytes of the version id to ask the registry for."""
        if wire.is_glue_record(data):
            entry = self._decoders.get(data[2 : wire.HEADER_SIZE])
            if entry is not None:
                return self._payload(data, entry)
        else:
            try:
                wire.split(data)
            except wire.NotGlueRecordError as exc:
                return self._pass(data, NOT_GLUE, exc.reason)
        return bytes(data[2 : wire.HEADER_SIZE])

    def _with(self, data: bytes, key: bytes, version: SchemaVersion | Exception) -> Decoded:
        """``data`` decoded with ``version`` (the registry's answer for ``key``)."""
        if isinstance(version, Exception):
            return self._pass(data, UNAVAILABLE, str(version), key)
        try:
            entry = self._remember(key, version)
        except (SchemaRegistryError, ConfigurationError) as exc:  # no class, a bad definition
            return self._pass(data, UNDECODABLE, str(exc), key)
        return self._payload(data, entry)

    def decode(self, data: bytes) -> Decoded:
        """``data`` decoded (fetching its schema version, blocking, on first sight)."""
        known = self._known(data)
        if isinstance(known, Decoded):
            return known
        try:
            version: SchemaVersion | Exception = self.registry.version_blocking(known)
        except SchemaRegistryError as exc:
            version = exc
        return self._with(data, known, version)

    async def decode_async(self, data: bytes) -> Decoded:
        """:meth:`decode` on an event loop (the registry asked without blocking)."""
        known = self._known(data)
        if isinstance(known, Decoded):
            return known
        try:
            version: SchemaVersion | Exception = await self.registry.version(known)
        except SchemaRegistryError as exc:
            version = exc
        return self._with(data, known, version)

    def loads(self, data: bytes) -> Any:
        """The value of ``data``, or ``data`` itself when it is passed through."""
        entry = self._decoders.get(data[2:18])
        if entry is not None and data[0] == 3 and data[1] == 0:  # the common case, inline
            try:
                value = entry[0](data[18:])
            except Exception:  # noqa: S110 - decode() below reports it
                pass
            else:
                self.stats.decoded += 1
                return value
        return self.decode(data).value

    async def deserialize(self, batch: RecordBatch) -> None:
        """The core Consumer's hook: each record of ``batch`` becomes a :class:`GlueRecord`
        (same position, same ack)."""
        records = batch.records
        astuple = msgspec.structs.astuple
        for i in range(len(batch)):
            record = records[i]
            decoded = await self.decode_async(record.data)
            glue = records[i] = GlueRecord(*astuple(record))
            glue.value, glue.schema_version, glue.failure = decoded


def version_id_of(data: bytes) -> uuid.UUID | None:
    """The schema version id a record names, or None if it is not in the format."""
    return uuid.UUID(bytes=data[2 : wire.HEADER_SIZE]) if wire.is_glue_record(data) else None
