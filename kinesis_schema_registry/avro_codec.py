"""Avro's binary encoding for the common schemas, compiled to Python closures (sans-I/O).

fastavro does work on every call before it reads or writes a field (the schema checked, its
named types gathered, a writer made), as much as the fields of a record of a few fields cost.
A schema made of records, primitives, enums, fixed, arrays, maps and unions of null and one
type is compiled here once into one closure per node, which reads or writes the record's
fields directly: the same bytes as fastavro's and Java's (Avro's binary encoding is canonical;
arrays and maps are written as one block, and read in blocks of either sign). Any other schema
(logical types, named type references, unions of several types) returns None from
:func:`compile_writer` / :func:`compile_reader`, and :mod:`.formats` uses fastavro for it.
Bad values raise ``TypeError``, ``ValueError``, ``KeyError`` or ``AttributeError``; truncated
data ``IndexError`` or ``struct.error``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

Writer = Callable[[bytearray, Any], None]
Reader = Callable[[bytes, int], tuple[Any, int]]

_PACK_DOUBLE = struct.Struct("<d")
_PACK_FLOAT = struct.Struct("<f")
_INT_LIMIT = 1 << 31
_LONG_LIMIT = 1 << 63
_NO_DEFAULT = object()


class Unsupported(Exception):
    """The schema uses something this module does not compile."""


def write_long(buf: bytearray, n: int) -> None:
    if not -_LONG_LIMIT <= n < _LONG_LIMIT:
        raise ValueError(f"{n} is out of the range of an Avro long")
    n = (n << 1) ^ (n >> 63)
    while n > 0x7F:
        buf.append((n & 0x7F) | 0x80)
        n >>= 7
    buf.append(n)


def _write_int(buf: bytearray, n: int) -> None:
    if not -_INT_LIMIT <= n < _INT_LIMIT:
        raise ValueError(f"{n} is out of the range of an Avro int")
    write_long(buf, n)


def _write_string(buf: bytearray, value: str) -> None:
    data = value.encode()
    write_long(buf, len(data))
    buf += data


def _write_bytes(buf: bytearray, value: bytes) -> None:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise TypeError(f"expected bytes, got {type(value).__name__}")
    write_long(buf, len(value))
    buf += value


def _write_boolean(buf: bytearray, value: bool) -> None:
    if value is True:
        buf.append(1)
    elif value is False:
        buf.append(0)
    else:
        raise TypeError(f"expected a bool, got {type(value).__name__}")


def _write_null(buf: bytearray, value: None) -> None:
    if value is not None:
        raise TypeError(f"expected None, got {type(value).__name__}")


def _write_double(buf: bytearray, value: float) -> None:
    buf += _PACK_DOUBLE.pack(value)


def _write_float(buf: bytearray, value: float) -> None:
    buf += _PACK_FLOAT.pack(value)


_PRIMITIVE_WRITERS: Mapping[str, Writer] = {
    "null": _write_null,
    "boolean": _write_boolean,
    "int": _write_int,
    "long": write_long,
    "float": _write_float,
    "double": _write_double,
    "bytes": _write_bytes,
    "string": _write_string,
}


def read_long(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    pos += 1
    n = b & 0x7F
    shift = 7
    while b & 0x80:
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
    return (n >> 1) ^ -(n & 1), pos


def _read_string(data: bytes, pos: int) -> tuple[str, int]:
    n, pos = read_long(data, pos)
    end = pos + n
    if n < 0 or end > len(data):
        raise IndexError("a string runs past the end of the data")
    return data[pos:end].decode(), end


def _read_bytes(data: bytes, pos: int) -> tuple[bytes, int]:
    n, pos = read_long(data, pos)
    end = pos + n
    if n < 0 or end > len(data):
        raise IndexError("bytes run past the end of the data")
    return data[pos:end], end


def _read_boolean(data: bytes, pos: int) -> tuple[bool, int]:
    return data[pos] == 1, pos + 1


def _read_null(data: bytes, pos: int) -> tuple[None, int]:
    return None, pos


def _read_double(data: bytes, pos: int) -> tuple[float, int]:
    return _PACK_DOUBLE.unpack_from(data, pos)[0], pos + 8


def _read_float(data: bytes, pos: int) -> tuple[float, int]:
    return _PACK_FLOAT.unpack_from(data, pos)[0], pos + 4


_PRIMITIVE_READERS: Mapping[str, Reader] = {
    "null": _read_null,
    "boolean": _read_boolean,
    "int": read_long,
    "long": read_long,
    "float": _read_float,
    "double": _read_double,
    "bytes": _read_bytes,
    "string": _read_string,
}


def _node(schema: Any) -> tuple[str, Any]:
    """(type name, the node as a dict or None for a bare primitive)."""
    if isinstance(schema, str):
        return schema, None
    if isinstance(schema, list):
        return "union", schema
    if isinstance(schema, Mapping):
        if "logicalType" in schema:
            raise Unsupported("logical types")
        kind = schema.get("type")
        if isinstance(kind, list):
            return "union", kind
        if isinstance(kind, Mapping):
            return _node(kind)
        return str(kind), schema
    raise Unsupported(repr(schema))


def _nullable(branches: list[Any]) -> tuple[int, Any]:
    """(index of null, the other branch) of a union of null and one type."""
    if len(branches) != 2 or "null" not in branches:
        raise Unsupported("unions other than null and one type")
    null_at = branches.index("null")
    return null_at, branches[1 - null_at]


def _writer(schema: Any) -> Writer:
    kind, node = _node(schema)
    if kind in _PRIMITIVE_WRITERS:  # other attributes ("avro.java.string") change nothing
        return _PRIMITIVE_WRITERS[kind]
    if kind == "record":
        fields = [
            (f["name"], f.get("default", _NO_DEFAULT), _writer(f["type"])) for f in node["fields"]
        ]

        def write_record(buf: bytearray, value: Mapping[str, Any]) -> None:
            get = value.get
            for name, default, write in fields:
                item = get(name, default)
                if item is _NO_DEFAULT:
                    raise KeyError(f"no field {name!r} and no default for it")
                write(buf, item)

        return write_record
    if kind == "union":
        null_at, other = _nullable(node)
        write_other = _writer(other)
        null_index, other_index = (0, 2) if null_at == 0 else (2, 0)  # zig-zag of 0 and 1

        def write_union(buf: bytearray, value: Any) -> None:
            if value is None:
                buf.append(null_index)
            else:
                buf.append(other_index)
                write_other(buf, value)

        return write_union
    if kind in ("array", "map"):
        items = _writer(node["items"] if kind == "array" else node["values"])

        def write_array(buf: bytearray, value: Any) -> None:
            if isinstance(value, str | bytes | Mapping):
                raise TypeError(f"expected a list, got {type(value).__name__}")
            if value:
                write_long(buf, len(value))
                for item in value:
                    items(buf, item)
            buf.append(0)

        def write_map(buf: bytearray, value: Mapping[str, Any]) -> None:
            if value:
                write_long(buf, len(value))
                for key, item in value.items():
                    _write_string(buf, key)
                    items(buf, item)
            buf.append(0)

        return write_array if kind == "array" else write_map
    if kind == "enum":
        symbols = {s: i for i, s in enumerate(node["symbols"])}

        def write_enum(buf: bytearray, value: str) -> None:
            write_long(buf, symbols[value])

        return write_enum
    if kind == "fixed":
        size = node["size"]

        def write_fixed(buf: bytearray, value: bytes) -> None:
            if not isinstance(value, bytes) or len(value) != size:
                raise ValueError(f"expected {size} bytes for a fixed, got {value!r}")
            buf += value

        return write_fixed
    raise Unsupported(kind)


def _reader(schema: Any) -> Reader:
    kind, node = _node(schema)
    if kind in _PRIMITIVE_READERS:
        return _PRIMITIVE_READERS[kind]
    if kind == "record":
        fields = [(f["name"], _reader(f["type"])) for f in node["fields"]]

        def read_record(data: bytes, pos: int) -> tuple[dict[str, Any], int]:
            out = {}
            for name, read in fields:
                out[name], pos = read(data, pos)
            return out, pos

        return read_record
    if kind == "union":
        null_at, other = _nullable(node)
        read_other = _reader(other)
        other_at = 1 - null_at

        def read_union(data: bytes, pos: int) -> tuple[Any, int]:
            index, pos = read_long(data, pos)
            if index == other_at:
                return read_other(data, pos)
            if index == null_at:
                return None, pos
            raise ValueError(f"union branch {index} does not exist")

        return read_union
    if kind in ("array", "map"):
        items = _reader(node["items"] if kind == "array" else node["values"])
        is_map = kind == "map"

        def read_blocks(data: bytes, pos: int) -> tuple[Any, int]:
            out: Any = {} if is_map else []
            while True:
                count, pos = read_long(data, pos)
                if count == 0:
                    return out, pos
                if count < 0:  # a block with its size in bytes (skipped: it is read)
                    count = -count
                    _, pos = read_long(data, pos)
                for _ in range(count):
                    if is_map:
                        key, pos = _read_string(data, pos)
                        out[key], pos = items(data, pos)
                    else:
                        item, pos = items(data, pos)
                        out.append(item)

        return read_blocks
    if kind == "enum":
        symbols = list(node["symbols"])

        def read_enum(data: bytes, pos: int) -> tuple[str, int]:
            index, pos = read_long(data, pos)
            if not 0 <= index < len(symbols):
                raise ValueError(f"enum index {index} does not exist")
            return symbols[index], pos

        return read_enum
    if kind == "fixed":
        size = node["size"]

        def read_fixed(data: bytes, pos: int) -> tuple[bytes, int]:
            end = pos + size
            if end > len(data):
                raise IndexError("a fixed runs past the end of the data")
            return data[pos:end], end

        return read_fixed
    raise Unsupported(kind)


def compile_writer(schema: Any) -> Callable[[Any], bytes] | None:
    """value -> Avro binary for ``schema`` (the parsed JSON document), or None when the
    schema uses what is not compiled here."""
    try:
        write = _writer(schema)
    except (Unsupported, KeyError, TypeError):
        return None

    def encode(value: Any) -> bytes:
        buf = bytearray()
        write(buf, value)
        return bytes(buf)

    return encode


def compile_reader(schema: Any) -> Callable[[bytes], Any] | None:
    """Avro binary -> value for ``schema``, or None (see :func:`compile_writer`)."""
    try:
        read = _reader(schema)
    except (Unsupported, KeyError, TypeError):
        return None

    def decode(data: bytes) -> Any:
        return read(data, 0)[0]

    return decode
