"""kinesis_schema_registry.avro_codec writes the bytes fastavro writes and reads what it reads,
for values drawn from each schema (hypothesis); schemas it does not compile say so (None) and
fastavro serves them."""

from __future__ import annotations

import io
import math
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings, strategies as st

from kinesis_schema_registry.avro_codec import compile_reader, compile_writer, write_long
from kinesis_schema_registry.formats import AvroSchema

EVERYTHING = {
    "type": "record",
    "name": "Everything",
    "fields": [
        {"name": "flag", "type": "boolean"},
        {"name": "small", "type": "int"},
        {"name": "big", "type": "long"},
        {"name": "ratio", "type": "float"},
        {"name": "amount", "type": "double"},
        {"name": "raw", "type": "bytes"},
        {"name": "name", "type": {"type": "string", "avro.java.string": "String"}},
        {"name": "nothing", "type": "null"},
        {"name": "maybe", "type": ["null", "long"]},
        {"name": "maybe_last", "type": ["string", "null"]},
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["R", "G", "B"]}},
        {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 4}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "counts", "type": {"type": "map", "values": "int"}},
        {
            "name": "inner",
            "type": {
                "type": "record",
                "name": "Inner",
                "fields": [
                    {"name": "points", "type": {"type": "array", "items": ["null", "double"]}}
                ],
            },
        },
    ],
}


def values(schema: Any) -> st.SearchStrategy[Any]:
    if isinstance(schema, list):
        (other,) = [b for b in schema if b != "null"]
        return st.none() | values(other)
    if isinstance(schema, dict) and schema["type"] not in (
        "record",
        "enum",
        "fixed",
        "array",
        "map",
    ):
        return values(schema["type"])
    if isinstance(schema, str):
        return {
            "null": st.none(),
            "boolean": st.booleans(),
            "int": st.integers(-(2**31), 2**31 - 1),
            "long": st.integers(-(2**63), 2**63 - 1),
            "float": st.floats(width=32, allow_nan=False),
            "double": st.floats(allow_nan=False),
            "bytes": st.binary(max_size=20),
            "string": st.text(max_size=20),
        }[schema]
    kind = schema["type"]
    if kind == "record":
        return st.fixed_dictionaries({f["name"]: values(f["type"]) for f in schema["fields"]})
    if kind == "enum":
        return st.sampled_from(schema["symbols"])
    if kind == "fixed":
        return st.binary(min_size=schema["size"], max_size=schema["size"])
    if kind == "array":
        return st.lists(values(schema["items"]), max_size=5)
    return st.dictionaries(st.text(max_size=5), values(schema["values"]), max_size=5)


def fastavro_bytes(schema: Any, value: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


def same(a: Any, b: Any) -> bool:
    """Equal, with a NaN equal to a NaN (floats' round trip through 32 bits included)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_the_same_bytes_and_values_as_fastavro(data: st.DataObject) -> None:
    value = data.draw(values(EVERYTHING))
    write = compile_writer(EVERYTHING)
    read = compile_reader(EVERYTHING)
    assert write is not None
    assert read is not None
    expected = fastavro_bytes(EVERYTHING, value)
    assert write(value) == expected
    theirs = fastavro.schemaless_reader(io.BytesIO(expected), fastavro.parse_schema(EVERYTHING))
    assert same(read(expected), theirs)


def test_blocks_with_their_size_are_read() -> None:
    schema = {"type": "array", "items": "long"}
    buf = bytearray()
    write_long(buf, -2)  # two items, then the block's size in bytes
    write_long(buf, 2)
    write_long(buf, 5)
    write_long(buf, -6)
    write_long(buf, 1)
    write_long(buf, 7)
    buf.append(0)
    read = compile_reader(schema)
    assert read is not None
    assert read(bytes(buf)) == [5, -6, 7]


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "long", "logicalType": "timestamp-millis"},
        ["null", "string", "long"],
        {
            "type": "record",
            "name": "Node",
            "fields": [{"name": "next", "type": ["null", "Node"]}],
        },
    ],
    ids=["logical type", "union of three", "named reference"],
)
def test_what_it_does_not_compile_goes_to_fastavro(schema: Any) -> None:
    assert compile_writer(schema) is None
    assert compile_reader(schema) is None
    record = {"type": "record", "name": "R", "fields": [{"name": "f", "type": schema}]}
    value = {"f": None} if isinstance(schema, list) else {"f": 5}
    if isinstance(schema, dict) and schema.get("type") == "record":
        value = {"f": {"next": None}}
    avro = AvroSchema(record)
    data = avro.encoder()(value)
    assert data == fastavro_bytes(record, value)
    assert avro.decoder()(data) == fastavro.schemaless_reader(io.BytesIO(data), avro.parsed)


def test_bad_values_are_refused() -> None:
    write = compile_writer(EVERYTHING)
    assert write is not None
    with pytest.raises(KeyError, match="no field 'flag'"):
        write({})
    write_small = compile_writer({"type": "int"})
    write_flag = compile_writer({"type": "boolean"})
    assert write_small is not None
    assert write_flag is not None
    with pytest.raises(ValueError, match="out of the range of an Avro int"):
        write_small(2**31)
    with pytest.raises(TypeError, match="expected a bool"):
        write_flag(1)
