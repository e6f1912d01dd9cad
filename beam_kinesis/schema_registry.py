"""Beam transforms for AWS Glue Schema Registry records (docs/schema-registry.md).

``ReadFromKinesis(...) | DecodeGlueRecords(config, reader_schema=AvroSchema(...))`` gives
``beam.Row`` s whose Beam schema is derived from the Avro record or JSON Schema object given
(a schema-aware PCollection: ``beam.Select``, ``GroupBy`` on fields, DataFrames, SQL);
every writer version of the schema is read into that shape (Avro's schema resolution; JSON
properties the reader schema lacks are dropped, missing ones are None). Without a reader
schema the output is :class:`GlueBytes`: the payload and its schema version id. A record that
is not in the format, whose schema version the registry does not have, or that does not fit
the row type goes to the ``failed`` output as :class:`UndecodedRecord` (the record and why)
and is counted (the ``gsr_passed_through`` counter): nothing is dropped.

``WriteToKinesis(..., serializer=GlueRowSerializer(config, schema, "orders"))`` writes rows,
dicts or Protobuf messages as records of that schema's version (registered first with
``RegistryConfig(auto_register=True)``).

The registry is asked once per schema version per worker process. kinesis_schema_registry is
imported when a DoFn starts or a row type is derived (the ``gsr`` extra).
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Optional

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.coders.row_coder import RowCoder
from apache_beam.coders.typecoders import registry as coders
from apache_beam.metrics.metric import Metrics
from apache_beam.typehints.row_type import RowTypeConstraint

from beam_kinesis._metrics import NAMESPACE
from beam_kinesis.record import KinesisRecord
from kinesis_core.errors import ConfigurationError

if TYPE_CHECKING:
    from kinesis_schema_registry import (
        GlueDeserializer,
        GlueSerializer,
        RegistryConfig,
        Schema,
        SchemaRegistry,
    )

__all__ = [
    "FAILED",
    "DecodeGlueRecords",
    "GlueBytes",
    "GlueRowSerializer",
    "UndecodedRecord",
    "row_type_of",
]

FAILED = "failed"
"""The tag of the output of records passed through undecoded."""


class GlueBytes(NamedTuple):
    """A record decoded without a reader schema: its payload and schema version id."""

    payload: bytes
    schema_version_id: str
    data_format: str


class UndecodedRecord(NamedTuple):
    """A record passed through undecoded, and why."""

    record: KinesisRecord
    reason: str


coders.register_coder(GlueBytes, RowCoder)

_AVRO_ATOMS: Mapping[str, Any] = {
    "boolean": bool,
    "int": int,
    "long": int,
    "float": float,
    "double": float,
    "string": str,
    "bytes": bytes,
    "fixed": bytes,
    "enum": str,
}
_JSON_ATOMS: Mapping[str, Any] = {
    "boolean": bool,
    "integer": int,
    "number": float,
    "string": str,
}


def _avro_type(node: Any, where: str) -> Any:
    if isinstance(node, list):
        branches = [b for b in node if b != "null"]
        if len(branches) != 1:
            raise ConfigurationError(
                "reader_schema", f"{where}: only unions of null and one type map to a Beam field"
            )
        return Optional[_avro_type(branches[0], where)]  # noqa: UP045 (Beam maps Optional)
    if isinstance(node, str):
        if node in _AVRO_ATOMS:
            return _AVRO_ATOMS[node]
        raise ConfigurationError("reader_schema", f"{where}: no Beam type for {node!r}")
    kind = node.get("type")
    if kind == "record":
        return RowTypeConstraint.from_fields(
            [(f["name"], _avro_type(f["type"], f"{where}.{f['name']}")) for f in node["fields"]]
        )
    if kind == "array":
        return Sequence[_avro_type(node["items"], f"{where}[]")]  # type: ignore[misc]
    if kind == "map":
        return Mapping[str, _avro_type(node["values"], f"{where}{{}}")]  # type: ignore[misc]
    return _avro_type(kind, where)


def _json_type(node: Mapping[str, Any], where: str, required: bool) -> Any:
    kind = node.get("type")
    nullable = not required
    if isinstance(kind, list):
        nullable = nullable or "null" in kind
        kinds = [k for k in kind if k != "null"]
        if len(kinds) != 1:
            raise ConfigurationError(
                "reader_schema", f"{where}: only one type (and null) maps to a Beam field"
            )
        kind = kinds[0]
    if kind == "object":
        needed = set(node.get("required", ()))
        beam_type: Any = RowTypeConstraint.from_fields(
            [
                (name, _json_type(sub, f"{where}.{name}", name in needed))
                for name, sub in node.get("properties", {}).items()
            ]
        )
    elif kind == "array":
        beam_type = Sequence[_json_type(node.get("items", {}), f"{where}[]", True)]  # type: ignore[misc]
    elif isinstance(kind, str) and kind in _JSON_ATOMS:
        beam_type = _JSON_ATOMS[kind]
    else:
        raise ConfigurationError("reader_schema", f"{where}: no Beam type for {kind!r}")
    return Optional[beam_type] if nullable else beam_type  # noqa: UP045


def row_type_of(schema: Schema) -> RowTypeConstraint:
    """The Beam row type of an Avro record schema or a JSON Schema object."""
    from kinesis_schema_registry import AvroSchema, JsonSchema

    document = getattr(schema, "document", None)
    kind = document.get("type") if isinstance(document, dict) else None
    if isinstance(schema, AvroSchema) and kind == "record":
        row: RowTypeConstraint = _avro_type(document, schema.document["name"])
        return row
    if isinstance(schema, JsonSchema) and kind == "object":
        row = _json_type(schema.document, "$", True)
        return row
    raise ConfigurationError(
        "reader_schema", f"must be an Avro record or a JSON Schema object, got {schema!r}"
    )


def _to_row(value: Any, beam_type: Any) -> Any:
    """``value`` (dicts, lists, Protobuf messages) in the shape of ``beam_type`` (Rows for
    row types)."""
    if value is None:
        return None
    if typing.get_origin(beam_type) is typing.Union:
        (beam_type,) = [t for t in typing.get_args(beam_type) if t is not type(None)]
    if isinstance(beam_type, RowTypeConstraint):
        descriptor = getattr(value, "DESCRIPTOR", None)
        if descriptor is not None:  # a Protobuf message: its fields by name
            value = {f.name: getattr(value, f.name) for f in descriptor.fields}
        if not isinstance(value, Mapping):
            raise TypeError(f"expected an object, got {type(value).__name__}")
        fields = {name: _to_row(value.get(name), t) for name, t in beam_type._fields}
        return beam.Row(**fields)  # type: ignore[attr-defined,no-untyped-call]
    origin = typing.get_origin(beam_type)
    if origin is not None and origin.__name__ == "Sequence":
        (item,) = typing.get_args(beam_type)
        return [_to_row(v, item) for v in value]
    if origin is not None and origin.__name__ == "Mapping":
        item = typing.get_args(beam_type)[1]
        return {k: _to_row(v, item) for k, v in value.items()}
    if beam_type is float and isinstance(value, int):
        return float(value)
    if not isinstance(value, beam_type):
        raise TypeError(f"expected {beam_type.__name__}, got {type(value).__name__}")
    return value


def _plain(value: Any) -> Any:
    """Rows and NamedTuples as dicts, all the way down (what the serializers take)."""
    as_dict = getattr(value, "as_dict", None) or getattr(value, "_asdict", None)
    if as_dict is not None:
        return {k: _plain(v) for k, v in as_dict().items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class _DecodeFn(beam.DoFn):
    def __init__(self, config: RegistryConfig, reader_schema: Schema | None, protobuf: Any) -> None:
        self._config = config
        self._reader = reader_schema
        self._protobuf = protobuf
        self._row_type = row_type_of(reader_schema) if reader_schema is not None else None
        self._decoded: Any = Metrics.counter(NAMESPACE, "gsr_decoded")
        self._passed: Any = Metrics.counter(NAMESPACE, "gsr_passed_through")
        self._deserializer: GlueDeserializer | None = None
        self._split: Callable[[bytes], tuple[bytes, bytes]] | None = None

    def setup(self) -> None:
        from kinesis_schema_registry import GlueDeserializer, SchemaRegistry, wire

        self._split = wire.split

        self._deserializer = GlueDeserializer(
            SchemaRegistry.shared(self._config),
            reader_schema=self._reader,
            protobuf=self._protobuf,
        )

    def process(self, element: KinesisRecord) -> Iterator[Any]:
        assert self._deserializer is not None
        assert self._split is not None
        value, version, failure = self._deserializer.decode(element.data)
        if failure is None and version is not None:
            try:
                if self._row_type is None:
                    _, payload = self._split(element.data)
                    out: Any = GlueBytes(
                        payload, str(version.version_id), version.data_format.value
                    )
                else:
                    out = _to_row(value, self._row_type)
            except (TypeError, ValueError) as exc:
                failure = f"undecodable: does not fit the row type: {exc}"
            else:
                self._decoded.inc()
                yield out
                return
        self._passed.inc()
        yield pvalue.TaggedOutput(FAILED, UndecodedRecord(element, failure or "unknown"))


class DecodeGlueRecords(beam.PTransform[Any, Any]):
    """``KinesisRecord`` s -> Rows of ``reader_schema`` (or :class:`GlueBytes` without one),
    with the records passed through undecoded in the ``failed`` output:
    ``result = records | DecodeGlueRecords(config, reader_schema=...)``, then
    ``result.rows`` and ``result.failed``. ``protobuf``: the message class(es) of Protobuf
    records (their fields fill the rows by name)."""

    def __init__(
        self,
        config: RegistryConfig,
        *,
        reader_schema: Schema | None = None,
        protobuf: Any = None,
    ) -> None:
        super().__init__()
        self._fn = _DecodeFn(config, reader_schema, protobuf)

    def expand(self, records: Any) -> Any:
        decode = beam.ParDo(self._fn)  # type: ignore[no-untyped-call]
        out = records | decode.with_outputs(FAILED, main="rows")  # type: ignore[no-untyped-call]
        out.rows.element_type = self._fn._row_type or GlueBytes
        return out


class GlueRowSerializer:
    """A picklable ``serializer=`` for ``WriteToKinesis``: an element (a ``beam.Row``, a
    NamedTuple, a dict, or a Protobuf message) -> a record of ``schema``'s version of
    ``schema_name``, zlib-compressed with ``compressed``."""

    def __init__(
        self,
        config: RegistryConfig,
        schema: Schema,
        schema_name: str,
        *,
        compressed: bool = False,
    ) -> None:
        self.config = config
        self.schema = schema
        self.schema_name = schema_name
        self.compressed = compressed
        from kinesis_schema_registry import ProtobufSchema

        self._messages = isinstance(schema, ProtobufSchema)
        self._serializer: GlueSerializer | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_serializer": None}

    def __call__(self, element: Any) -> bytes:
        serializer = self._serializer
        if serializer is None:
            from kinesis_schema_registry import GlueSerializer, SchemaRegistry

            registry: SchemaRegistry = SchemaRegistry.shared(self.config)
            serializer = self._serializer = GlueSerializer(
                registry, self.schema, self.schema_name, compressed=self.compressed
            )
        return serializer.dumps(element if self._messages else _plain(element))
