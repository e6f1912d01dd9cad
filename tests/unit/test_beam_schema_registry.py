"""beam_kinesis.schema_registry without a pipeline: the Beam row types derived from Avro and
JSON schemas, values shaped into Rows, the DoFn's outputs (Rows, GlueBytes, the failed output)
and a picklable serializer. Pipelines on kinesis-mock:
tests/integration/test_schema_registry_live.py."""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import apache_beam as beam
import pytest
from apache_beam import pvalue
from apache_beam.utils.timestamp import Timestamp

from beam_kinesis import KinesisRecord
from beam_kinesis.schema_registry import (
    FAILED,
    GlueBytes,
    GlueRowSerializer,
    UndecodedRecord,
    _DecodeFn,
    _plain,
    row_type_of,
)
from kinesis_core.errors import ConfigurationError
from kinesis_schema_registry import (
    AvroSchema,
    GlueDeserializer,
    JsonSchema,
    RegistryConfig,
    SchemaRegistry,
)
from kinesis_schema_registry.formats import DataFormat
from tests.fakes.glue import FakeGlue
from tests.helpers.glue import (
    AVRO_GOLDEN,
    AVRO_USER,
    AVRO_ZLIB_GOLDEN,
    JSON_USER,
    VERSION_ID,
    ProtoUser,
)

NESTED = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "counts", "type": {"type": "map", "values": "int"}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {
            "name": "buyer",
            "type": {"type": "record", "name": "Buyer", "fields": [{"name": "age", "type": "int"}]},
        },
    ],
}


def test_avro_and_json_schemas_give_beam_row_types() -> None:
    row = row_type_of(AvroSchema(NESTED))
    fields = dict(row._fields)
    assert fields["id"] is int
    assert fields["note"] == Optional[str]  # noqa: UP045 (what Beam maps)
    assert fields["tags"] == Sequence[str]
    assert fields["counts"] == Mapping[str, int]
    assert fields["kind"] is str
    assert dict(fields["buyer"]._fields) == {"age": int}
    json_row = row_type_of(JsonSchema(JSON_USER.replace(',"age"]', "]")))
    assert dict(json_row._fields) == {"name": str, "age": Optional[int]}  # noqa: UP045
    with pytest.raises(ConfigurationError, match="must be an Avro record or a JSON Schema object"):
        row_type_of(AvroSchema('"string"'))
    with pytest.raises(ConfigurationError, match="only unions of null and one type"):
        row_type_of(AvroSchema({**NESTED, "fields": [{"name": "x", "type": ["int", "string"]}]}))


def registry_knowing_avro() -> SchemaRegistry:
    fake = FakeGlue()
    fake.schemas[("r", "users")] = {"format": "AVRO", "compatibility": "BACKWARD", "versions": []}
    fake.versions[str(VERSION_ID)] = {
        "SchemaVersionId": str(VERSION_ID),
        "SchemaDefinition": AVRO_USER,
        "DataFormat": "AVRO",
        "SchemaArn": "arn:aws:glue:us-east-1:123456789012:schema/r/users",
        "Status": "AVAILABLE",
    }
    return SchemaRegistry(RegistryConfig(registry_name="r"), client=fake)


def record(data: bytes) -> KinesisRecord:
    return KinesisRecord(data, "k", None, "shardId-000000000000", "1", 0, Timestamp(0))


@pytest.mark.parametrize("reader", [None, AvroSchema(AVRO_USER)], ids=["bytes", "rows"])
def test_the_decode_fn_outputs_rows_or_bytes_and_fails_what_it_cannot_decode(reader: Any) -> None:
    fn = _DecodeFn(RegistryConfig(registry_name="r"), reader, None)
    registry = registry_knowing_avro()
    fn.setup()
    fn._deserializer = GlueDeserializer(registry, reader_schema=reader)  # on the fake Glue
    outputs = [out for data in (AVRO_GOLDEN, AVRO_ZLIB_GOLDEN) for out in fn.process(record(data))]
    if reader is None:  # the payload decompressed
        bytes_out = GlueBytes(AVRO_GOLDEN[18:], str(VERSION_ID), DataFormat.AVRO.value)
        assert outputs == [bytes_out, bytes_out]
    else:
        assert outputs == [beam.Row(name="Ann", age=30)] * 2
    (failed,) = fn.process(record(b"plain"))
    assert isinstance(failed, pvalue.TaggedOutput)
    assert failed.tag == FAILED
    assert isinstance(failed.value, UndecodedRecord)
    assert failed.value.reason.startswith("not_glue: ")
    registry.close()


def test_the_row_serializer_pickles_without_its_registry_and_takes_rows() -> None:
    config = RegistryConfig(registry_name="r")
    serializer = GlueRowSerializer(config, AvroSchema(AVRO_USER), "users")
    serializer._serializer = object()  # type: ignore[assignment]  # what a worker made
    copy = pickle.loads(pickle.dumps(serializer))
    assert copy._serializer is None
    assert (copy.config, copy.schema.definition, copy.schema_name) == (config, AVRO_USER, "users")
    row = beam.Row(name="Ann", tags=[beam.Row(k="a")], meta={"x": beam.Row(k="b")})
    assert _plain(row) == {"name": "Ann", "tags": [{"k": "a"}], "meta": {"x": {"k": "b"}}}
    assert _plain(ProtoUser(name="Ann", age=30)).name == "Ann"  # messages as they are
