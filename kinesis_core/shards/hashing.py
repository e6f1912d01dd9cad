"""Partition keys, hash keys and the per-record limits of Kinesis.

A record's hash key decides its shard: the MD5 of the UTF-8 partition key read as a big-endian
128-bit integer, unless an explicit hash key (a decimal string) overrides it. Validation lives
here too, so every entry point refuses bad input with the same messages.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from hashlib import md5
from itertools import repeat
from typing import Any

from kinesis_core.errors import RecordTooLargeError, ValidationError

try:
    # CPython's bundled MD5 hashes a short key in half the time of OpenSSL's (whose context set-up
    # dominates below a few hundred bytes), and the producer hashes every partition key.
    from _md5 import md5 as _md5  # type: ignore[import-not-found]
except ImportError:  # a Python built without it
    _md5 = md5
_from_bytes = int.from_bytes
_digest = type(_md5(b"")).digest
_BIG_ENDIAN: Iterable[Any] = repeat("big")
"""``int.from_bytes``'s byte order for ``map`` (a keyword through ``partial`` costs a third
more)."""

MAX_HASH_KEY = 2**128 - 1
MAX_RECORD_BYTES = 1024 * 1024
"""Data plus partition key (UTF-8) of one record: a stream's maximum record size unless it was
raised (``CreateStream(MaxRecordSizeInKiB)``, ``UpdateMaxRecordSize``)."""
LARGEST_RECORD_BYTES = 10 * 1024 * 1024
"""The largest maximum record size a stream can have (``MaxRecordSizeInKiB`` 10240)."""
MAX_PARTITION_KEY_CHARS = 256
"""Partition key length limit, in UTF-16 code units (what Kinesis counts; see utf16_length)."""
MAX_PUT_RECORDS_COUNT = 500
MAX_PUT_RECORDS_BYTES = 10 * 1024 * 1024
"""Data plus partition keys of one PutRecords request (5 MiB before late 2025)."""
SHARD_RECORDS_PER_SECOND = 1000
SHARD_BYTES_PER_SECOND = 1024 * 1024
_MAX_EHK_DIGITS = len(str(MAX_HASH_KEY))
_EHK_PATTERN = re.compile(r"0|[1-9][0-9]{0,38}")


def hash_key(partition_key: str) -> int:
    """The 128-bit hash key Kinesis derives from a partition key."""
    return _from_bytes(_md5(partition_key.encode("utf-8")).digest(), "big")


def hash_keys(encoded_keys: Iterable[bytes]) -> list[int]:
    """The hash keys of many UTF-8 encoded partition keys, the loop in C (``map``)."""
    return list(map(_from_bytes, map(_digest, map(_md5, encoded_keys)), _BIG_ENDIAN))


def parse_explicit_hash_key(value: str | int, field: str = "explicit_hash_key") -> int:
    """Parse and check an explicit hash key: a decimal integer in [0, 2**128 - 1]."""
    if isinstance(value, bool):
        raise ValidationError(field, f"must be a decimal string or int, got {type(value).__name__}")
    if isinstance(value, int):
        key = value
    elif isinstance(value, str):
        if _EHK_PATTERN.fullmatch(value) is None:
            raise ValidationError(
                field,
                f"must be a decimal integer of 1 to {_MAX_EHK_DIGITS} digits with no sign and no"
                f" leading zero (AWS pattern 0|([1-9]\\d{{0,38}})), got {value!r:.60}",
            )
        key = int(value)
    else:
        raise ValidationError(field, f"must be a decimal string or int, got {type(value).__name__}")
    if not 0 <= key <= MAX_HASH_KEY:
        raise ValidationError(field, f"must lie in [0, 2**128 - 1], got {key}")
    return key


def utf16_length(text: str) -> int:
    """How many UTF-16 code units ``text`` takes: how Kinesis counts a partition key's length.

    AWS documents "256 Unicode characters"; kinesis-mock 0.6.2 refuses a key longer than 256
    UTF-16 code units (``String.length``: 128 emoji pass, 129 fail, 256 "é" pass), and so does
    the KPL's Java front end. A character of the Basic Multilingual Plane is one unit, one
    outside it (an emoji) two.
    """
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def validate_partition_key(partition_key: object, field: str = "partition_key") -> str:
    """Check a partition key: a str of 1 to 256 characters as Kinesis counts them (UTF-16
    code units: an emoji counts twice), and valid Unicode (no lone surrogate)."""
    if not isinstance(partition_key, str):
        raise ValidationError(field, f"must be str, got {type(partition_key).__name__}")
    if not partition_key:
        raise ValidationError(field, "must not be empty (1 to 256 characters)")
    _check_unicode(partition_key, field)
    if len(partition_key) > MAX_PARTITION_KEY_CHARS // 2:
        n = utf16_length(partition_key)
        if n > MAX_PARTITION_KEY_CHARS:
            raise ValidationError(
                field,
                f"has {n} characters as Kinesis counts them (UTF-16 code units: an emoji counts "
                f"as 2), the limit is {MAX_PARTITION_KEY_CHARS}",
            )
    return partition_key


def _check_unicode(text: str, field: str) -> None:
    """Refuse a lone surrogate: it is no Unicode character, so it has no UTF-8 form to send
    or to hash."""
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        raise ValidationError(
            field,
            f"holds a lone surrogate {text[exc.start]!r} at index {exc.start}: not valid "
            "Unicode, so it has no UTF-8 form to send or to hash",
        ) from None


def validate_record(
    data: object,
    partition_key: object,
    explicit_hash_key: str | int | None = None,
    max_record_bytes: int = MAX_RECORD_BYTES,
) -> int:
    """Check one user record and return its hash key.

    Raises ValidationError naming the field and the limit. Data must be bytes-like; data plus
    the UTF-8 partition key must fit ``max_record_bytes`` (1 MiB by default), or
    :class:`~kinesis_core.errors.RecordTooLargeError` says by how much it does not.
    """
    # The hot path of every producer: one type check per argument, the key encoded once. A key
    # of at most 128 code points is at most 256 UTF-16 units, whatever its characters.
    pk = (
        partition_key
        if type(partition_key) is str and 0 < len(partition_key) <= MAX_PARTITION_KEY_CHARS // 2
        else validate_partition_key(partition_key)
    )
    if type(data) is bytes:
        data_bytes = len(data)
    elif isinstance(data, (bytearray, memoryview)):
        data_bytes = data.nbytes if isinstance(data, memoryview) else len(data)
    else:
        raise ValidationError("data", f"must be bytes, got {type(data).__name__}")
    try:
        pk_utf8 = pk.encode()
    except UnicodeEncodeError:
        _check_unicode(pk, "partition_key")
        raise
    size = data_bytes + len(pk_utf8)
    if size > max_record_bytes:
        raise RecordTooLargeError(size, max_record_bytes)
    if explicit_hash_key is not None:
        return parse_explicit_hash_key(explicit_hash_key)
    return _from_bytes(_md5(pk_utf8).digest(), "big")
