"""The three payload formats of the Glue Schema Registry: Avro, JSON Schema, Protobuf.

A schema turns values into payload bytes and back (the header is :mod:`.wire`'s): Avro's binary
encoding compiled per schema (:mod:`.avro_codec`) or, for what that does not cover and for
schema resolution, with fastavro (compiled, the fastest general Avro codec for Python); JSON
as UTF-8 text checked against the schema with jsonschema on the way out; Protobuf with the
message class the user gives (the registry's ``.proto`` text is only registered and compared,
never compiled here: a message class says all that decoding needs). fastavro and jsonschema
are imported when a schema of their format is first made (the ``gsr`` extra installs them).
"""

from __future__ import annotations

import enum
import io
import json
import struct
from collections.abc import Callable, Mapping
from typing import Any

from kinesis_core.errors import ConfigurationError, ValidationError
from kinesis_schema_registry.avro_codec import compile_reader, compile_writer
from kinesis_schema_registry.wire import decode_varint, encode_varint, message_index


class DataFormat(str, enum.Enum):
    """The registry's ``DataFormat`` of a schema."""

    AVRO = "AVRO"
    JSON = "JSON"
    PROTOBUF = "PROTOBUF"


class Schema:
    """A schema definition and its codec. ``definition`` is the text registered in Glue."""

    data_format: DataFormat
    definition: str

    def encoder(self) -> Callable[[Any], bytes]:
        """value -> payload bytes."""
        raise NotImplementedError

    def decoder(self, reader: Schema | None = None) -> Callable[[bytes], Any]:
        """payload bytes -> value; ``reader`` (Avro): resolve to that schema."""
        raise NotImplementedError

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled as its definition (Beam ships schemas to workers), rebuilt there."""
        return type(self), (self.definition,)

    def __repr__(self) -> str:
        text = self.definition if len(self.definition) <= 60 else self.definition[:57] + "..."
        return f"{type(self).__name__}({text!r})"


def _definition(definition: str | Mapping[str, Any], field: str) -> tuple[str, Any]:
    if isinstance(definition, str):
        try:
            return definition, json.loads(definition)
        except ValueError as exc:
            raise ConfigurationError(field, f"is not JSON: {exc}") from exc
    if isinstance(definition, Mapping):
        return json.dumps(definition, separators=(",", ":")), dict(definition)
    raise ConfigurationError(
        field, f"must be a JSON string or a mapping, got {type(definition).__name__}"
    )


class AvroSchema(Schema):
    """An Avro schema (a JSON string or a parsed mapping); values are what fastavro reads and
    writes (records as dicts)."""

    data_format = DataFormat.AVRO

    def __init__(self, definition: str | Mapping[str, Any]) -> None:
        import fastavro

        self.definition, self.document = _definition(definition, "definition")
        try:
            self.parsed = fastavro.parse_schema(self.document)
        except Exception as exc:  # fastavro raises several kinds for a bad schema
            raise ConfigurationError("definition", f"is not a valid Avro schema: {exc}") from exc

    def encoder(self) -> Callable[[Any], bytes]:
        compiled = compile_writer(self.document)
        if compiled is None:
            from fastavro import schemaless_writer

            parsed = self.parsed
            bytes_io = io.BytesIO

            def with_fastavro(value: Any) -> bytes:
                out = bytes_io()
                schemaless_writer(out, parsed, value)
                return out.getvalue()

            compiled = with_fastavro
        write = compiled

        def encode(value: Any) -> bytes:
            try:
                return write(value)
            except (TypeError, ValueError, KeyError, AttributeError, struct.error) as exc:
                raise ValidationError("value", f"does not fit {self!r}: {exc!r}") from exc

        return encode

    def decoder(self, reader: Schema | None = None) -> Callable[[bytes], Any]:
        from fastavro import schemaless_reader

        parsed = self.parsed
        bytes_io = io.BytesIO
        resolving = isinstance(reader, AvroSchema) and reader.definition != self.definition
        compiled = None if resolving else compile_reader(self.document)
        if compiled is not None:
            return compiled
        if isinstance(reader, AvroSchema) and resolving:
            target = reader.parsed

            def resolve(payload: bytes) -> Any:
                return schemaless_reader(bytes_io(payload), parsed, target)

            return resolve

        def decode(payload: bytes) -> Any:
            return schemaless_reader(bytes_io(payload), parsed, None)

        return decode


class JsonSchema(Schema):
    """A JSON Schema (a JSON string or a parsed mapping); values are JSON values. Each value
    written is checked against the schema (the error names the path and the rule); records
    read are parsed, not checked (the writer checked them)."""

    data_format = DataFormat.JSON

    def __init__(self, definition: str | Mapping[str, Any]) -> None:
        import jsonschema
        import jsonschema.validators

        self.definition, self.document = _definition(definition, "definition")
        cls = jsonschema.validators.validator_for(self.document)
        try:
            cls.check_schema(self.document)
        except jsonschema.SchemaError as exc:
            raise ConfigurationError(
                "definition", f"is not a valid JSON Schema: {exc.message}"
            ) from exc
        self.validator = cls(self.document)

    def encoder(self) -> Callable[[Any], bytes]:
        validator = self.validator
        dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

        def encode(value: Any) -> bytes:
            error = next(iter(validator.iter_errors(value)), None)
            if error is not None:
                where = "/".join(str(p) for p in error.absolute_path) or "(the value)"
                raise ValidationError(
                    "value", f"{where}: {error.message} (rule {error.validator!r} of the schema)"
                )
            return dumps(value).encode()

        return encode

    def decoder(self, reader: Schema | None = None) -> Callable[[bytes], Any]:
        return json.loads


class ProtobufSchema(Schema):
    """A Protobuf message class and the ``.proto`` text registered for its file
    (``definition``). Records carry the message's index in that file before its bytes, as
    AWS's serde writes them; reading gives instances of ``message_class`` (the index must
    name it: the other types of the file need their own classes)."""

    data_format = DataFormat.PROTOBUF

    def __init__(self, message_class: type[Any], definition: str) -> None:
        descriptor = getattr(message_class, "DESCRIPTOR", None)
        if descriptor is None or not hasattr(message_class, "FromString"):
            raise ConfigurationError(
                "message_class",
                f"must be a generated Protobuf message class, got {message_class!r}",
            )
        if not isinstance(definition, str) or not definition.strip():
            raise ConfigurationError("definition", "must be the .proto text of the message's file")
        self.message_class = message_class
        self.definition = definition
        names: list[str] = []
        pending = list(descriptor.file.message_types_by_name.values())
        while pending:
            message = pending.pop()
            names.append(message.full_name)
            pending.extend(message.nested_types)
        self.index = message_index(names, descriptor.full_name)
        self.prefix = encode_varint(self.index)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return type(self), (self.message_class, self.definition)

    def encoder(self) -> Callable[[Any], bytes]:
        prefix = self.prefix
        cls = self.message_class

        def encode(value: Any) -> bytes:
            if not isinstance(value, cls):
                raise ValidationError(
                    "value", f"must be a {cls.__name__} message, got {type(value).__name__}"
                )
            data: bytes = value.SerializeToString()
            return prefix + data

        return encode

    def decoder(self, reader: Schema | None = None) -> Callable[[bytes], Any]:
        expected = self.index
        from_string = self.message_class.FromString
        name = self.message_class.DESCRIPTOR.full_name

        def decode(payload: bytes) -> Any:
            index, used = decode_varint(payload)
            if index != expected:
                raise ValidationError(
                    "data", f"message index {index} is not {name}'s ({expected}) in its file"
                )
            return from_string(payload[used:])

        return decode
