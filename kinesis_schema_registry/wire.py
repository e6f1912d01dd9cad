"""The AWS Glue Schema Registry wire format, both ways (sans-I/O).

A record AWS's Java serde writes (the KPL with a schema, the Kafka serializer) is an 18-byte
header and a payload:

=====  ===============================================================================
byte   meaning
=====  ===============================================================================
0      the header version, 3 (``AWSSchemaRegistryConstants.HEADER_VERSION_BYTE``)
1      the compression: 0 none (``COMPRESSION_DEFAULT_BYTE``), 5 zlib (``COMPRESSION_BYTE``)
2-17   the schema version id, a UUID, most significant bits first (``UUID.bytes``)
18-    the payload: Avro binary, JSON text in UTF-8, or Protobuf; zlib-compressed (a zlib
       stream, header and checksum included, as ``java.util.zip.Deflater`` writes it) when
       byte 1 is 5
=====  ===============================================================================

For Protobuf the payload starts with the message's index in its ``.proto`` file as a varint
(unsigned, not zig-zag; :func:`encode_varint`), then the message's bytes: what AWS's
``ProtobufWireFormatEncoder`` writes (the index is :func:`message_index`'s).
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Iterable

from kinesis_core.errors import ValidationError

HEADER_VERSION = 3
"""Byte 0 of every record in the format."""
COMPRESSION_NONE = 0
"""Byte 1: the payload as it is."""
COMPRESSION_ZLIB = 5
"""Byte 1: the payload zlib-compressed."""
SCHEMA_VERSION_ID_SIZE = 16
HEADER_SIZE = 2 + SCHEMA_VERSION_ID_SIZE
"""18: version, compression, schema version id."""
_COMPRESSIONS = frozenset({COMPRESSION_NONE, COMPRESSION_ZLIB})


class NotGlueRecordError(ValidationError):
    """The bytes are not a record in the Glue Schema Registry format (another serde's record,
    or a record written without a schema)."""


def header(version_id: uuid.UUID, *, compressed: bool = False) -> bytes:
    """The 18 bytes that start every record of schema version ``version_id``."""
    return bytes((HEADER_VERSION, COMPRESSION_ZLIB if compressed else COMPRESSION_NONE)) + (
        version_id.bytes
    )


def encode(payload: bytes, version_id: uuid.UUID, *, compressed: bool = False) -> bytes:
    """A record: the header, then ``payload`` (zlib-compressed with ``compressed``)."""
    if compressed:
        payload = zlib.compress(payload)
    return header(version_id, compressed=compressed) + payload


def is_glue_record(data: bytes) -> bool:
    """Whether ``data`` has the format's header (version 3, a known compression byte)."""
    return len(data) >= HEADER_SIZE and data[0] == HEADER_VERSION and data[1] in _COMPRESSIONS


def split(data: bytes) -> tuple[bytes, bytes]:
    """``(schema version id as 16 bytes, payload decompressed)``; raises
    :class:`NotGlueRecordError` naming what is wrong."""
    if len(data) < HEADER_SIZE:
        raise NotGlueRecordError(
            "data", f"{len(data)} bytes, shorter than the {HEADER_SIZE}-byte header"
        )
    if data[0] != HEADER_VERSION:
        raise NotGlueRecordError("data", f"header version byte is {data[0]}, not {HEADER_VERSION}")
    compression = data[1]
    payload = data[HEADER_SIZE:]
    if compression == COMPRESSION_ZLIB:
        try:
            payload = zlib.decompress(payload)
        except zlib.error as exc:
            raise NotGlueRecordError("data", f"zlib payload does not decompress: {exc}") from exc
    elif compression != COMPRESSION_NONE:
        raise NotGlueRecordError(
            "data",
            f"compression byte is {compression}, not {COMPRESSION_NONE} (none) or "
            f"{COMPRESSION_ZLIB} (zlib)",
        )
    return data[2:HEADER_SIZE], payload


def decode(data: bytes) -> tuple[uuid.UUID, bytes]:
    """``(schema version id, payload decompressed)`` of a record (:func:`split`)."""
    version, payload = split(data)
    return uuid.UUID(bytes=version), payload


def encode_varint(value: int) -> bytes:
    """``value`` (>= 0) as a Protobuf varint (what ``writeUInt32NoTag`` writes)."""
    if value < 0:
        raise ValidationError("message_index", f"must be >= 0, got {value}")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def decode_varint(data: bytes | memoryview) -> tuple[int, int]:
    """``(value, bytes it took)`` of the varint at the start of ``data``."""
    value = shift = 0
    for i, byte in enumerate(data[:10]):
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i + 1
        shift += 7
    raise ValidationError("data", "no complete varint message index at the start of the payload")


def message_index(full_names: Iterable[str], full_name: str) -> int:
    """The index AWS's serde writes before a Protobuf message: the message types of the
    ``.proto`` file, nested ones included, sorted by full name; ``full_name``'s place there."""
    ordered = sorted(full_names)
    try:
        return ordered.index(full_name)
    except ValueError:
        raise ValidationError(
            "message", f"{full_name} is not a message type of the schema ({', '.join(ordered)})"
        ) from None
