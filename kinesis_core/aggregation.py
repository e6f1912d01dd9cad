"""The KPL aggregated-record codec: many user records in one Kinesis record.

Wire format: ``MAGIC`` + protobuf ``AggregatedRecord`` + MD5 of the protobuf bytes (see
docs/aggregation.md). Encoding is hand-written with exact, incremental size accounting, so an
aggregate never goes over its configured size, nor over the 1 MiB record limit once the
container's partition key is counted. Decoding uses the upb-backed protobuf classes in
``_kpl_messages``. For each direction this is the faster of the two ways.

Everything here is sans-I/O and synchronous.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from hashlib import md5
from itertools import accumulate, count, repeat
from operator import add, attrgetter, methodcaller
from typing import Any, cast

from google.protobuf.message import DecodeError

from kinesis_core._kpl_messages import (
    AggregatedRecord,
    AggregatedRecordView,
    KplTag,
    RecordColumns,
    TagMessage,
)
from kinesis_core.errors import ValidationError
from kinesis_core.records import KinesisRecord, SubRecord, WireRecord, wire_records
from kinesis_core.shards.hashing import (
    LARGEST_RECORD_BYTES,
    hash_key,
    hash_keys,
    parse_explicit_hash_key,
)

MAGIC = b"\xf3\x89\x9a\xc2"
DIGEST_SIZE = 16
FRAMING_SIZE = len(MAGIC) + DIGEST_SIZE
DEFAULT_MAX_SIZE = 51_200
"""The KPL's AggregationMaxSize default."""

Tag = tuple[str, str | None]
"""A ``Record.tags`` entry (key, optional value). The KCL ignores tags; we decode past them."""
RECORD_ID_TAG = "kc.id"
"""The key of the tag that carries a user record's own id (its value is the id;
docs/effectively-once.md). Other tags are read past."""
RUN_TAG = "kc.run"
"""The key of the tag that starts a run of automatic ids: its value ``ORIGIN:FIRST`` is its
record's id, and each following record with no id tag of its own takes the next counter,
``ORIGIN:FIRST+1`` and so on, until the next ``RUN_TAG`` or ``RECORD_ID_TAG`` tag. Without a
value (or with one not shaped ``ORIGIN:COUNTER``) it closes the run: its record has no id."""
MAX_RECORD_ID_BYTES = 128
"""The longest record id, in UTF-8 bytes."""

_SMALL_VARINTS = [bytes((i,)) for i in range(0x80)]
_PK_FIELD_PREFIXES = [b"\x0a" + v for v in _SMALL_VARINTS]
"""Tag and length of a partition-key table entry, by UTF-8 length (below 128 bytes)."""
_pack_header1 = struct.Struct("6B").pack
"""A record header (``_record_header``) with a one-byte index and a one-byte data length."""
_pack_header2 = struct.Struct("7B").pack
"""The same with a two-byte index."""
_INDEX_LOW = bytes((i & 0x7F) | 0x80 for i in range(0x4000))
_INDEX_HIGH = bytes(i >> 7 for i in range(0x4000))
"""The two bytes of each key-table index of 128 to 16,383 as a varint (``_add_new``)."""
_COLUMNS_FROM = 8
"""``add_run`` takes a run of at least this many records column by column (``_add_new``)."""


def _varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative int."""
    if value < 0x80:
        return _SMALL_VARINTS[value]
    if value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string_field(tag: bytes, text: str) -> bytes:
    """A length-delimited string field: a key-table entry or a tag's key or value."""
    raw = text.encode("utf-8")
    return tag + _varint(len(raw)) + raw


def _record_header(
    pk_index: int, ehk_index: int | None, data_len: int, trailer_len: int = 0
) -> bytes:
    """The bytes of an ``AggregatedRecord.records`` entry that precede the record's data.

    ``trailer_len`` counts what follows the data inside the Record message (encoded tags).
    """
    inner = b"\x08" + _varint(pk_index)
    if ehk_index is not None:
        inner += b"\x10" + _varint(ehk_index)
    inner += b"\x1a" + _varint(data_len)
    return b"\x1a" + _varint(len(inner) + data_len + trailer_len) + inner


def _frame(body: bytes) -> bytes:
    return b"".join((MAGIC, body, md5(body).digest()))  # noqa: S324 (format checksum)


class AggregateBuilder:
    """One Kinesis record under construction, with its exact size known after every add.

    ``size`` is what the record will weigh against the record limit: the framed aggregate
    (or, for a single record, its raw data) plus the UTF-8 container partition key.
    ``max_size`` bounds aggregates; a record bigger than ``max_size`` (but within 10 MiB, the
    largest record a stream takes, with its partition key) is accepted only into an empty
    builder and goes out alone and raw, as the KPL sends records bigger than
    AggregationMaxSize. Inputs are assumed validated
    (``hashing.validate_record``). Use ``try_add`` in hot loops: ``fits`` then ``add`` does the
    arithmetic twice.
    """

    __slots__ = (
        "_body_size",
        "_ehk_entries",
        "_ehk_index",
        "_first",
        "_key_chars",
        "_limit",
        "_max_size",
        "_parts",
        "_pk_entries",
        "_pk_index",
        "_pk_runs",
        "_run_next",
        "_run_origin",
        "_tagged",
        "_trailer_size",
    )

    def __init__(self, max_size: int = DEFAULT_MAX_SIZE) -> None:
        if isinstance(max_size, bool) or not isinstance(max_size, int):
            raise ValidationError("max_size", f"must be an int, got {type(max_size).__name__}")
        if not 1 <= max_size <= LARGEST_RECORD_BYTES:
            raise ValidationError(
                "max_size",
                f"must lie in [1, {LARGEST_RECORD_BYTES}] bytes (the largest Kinesis record, "
                f"partition key included), got {max_size}",
            )
        self._max_size = max_size
        self._pk_index: dict[str, int] = {}
        self._pk_runs: list[tuple[Sequence[str], int, set[str]]] = []
        """Runs of keys ``_add_new`` put in the key table and not in ``_pk_index`` yet: their
        keys in order, the index of the first, and the run's keys as a set (``_keys``)."""
        self._ehk_index: dict[str, int] = {}
        self._pk_entries: list[bytes] = []
        self._ehk_entries: list[bytes] = []
        self._parts: list[bytes] = []
        self._body_size = 0
        self._key_chars = 0
        self._limit = 0
        self._first: SubRecord | None = None
        self._tagged = False
        """Whether its first record carries an id: then even one record goes framed."""
        self._run_origin: str | None = None
        """The origin of the run of automatic ids open at its last record (None: none)."""
        self._run_next = 0
        """The counter the open run gives the next record with no id tag of its own."""
        self._trailer_size = 0
        """The bytes of the tags that follow records' data in ``_parts``."""

    @property
    def max_size(self) -> int:
        return self._max_size

    @property
    def count(self) -> int:
        return len(self._parts) >> 1

    @property
    def data_size(self) -> int:
        """The data bytes of its records."""
        return sum(map(len, self._parts[1::2])) - self._trailer_size

    @property
    def payload(self) -> int:
        """Its records' data bytes and partition key code points (what a producer's memory
        budget counts for them), kept here because the records pass here one by one."""
        return self.data_size + self._key_chars

    @property
    def size(self) -> int:
        first = self._first
        if first is None:
            return 0
        if len(self._parts) == 2 and not self._tagged:
            return len(first.data) + len(first.partition_key.encode("utf-8"))
        return self._max_size - self._limit + self._body_size

    @property
    def container_partition_key(self) -> str:
        """Partition key to send the record with: the first user record's."""
        return self._require_first().partition_key

    @property
    def container_explicit_hash_key(self) -> str:
        """Explicit hash key to send the record with: the first user record's hash key.

        It routes the container to the first record's shard, the one every record in it was
        predicted for.
        """
        first = self._require_first()
        if first.explicit_hash_key is not None:
            return first.explicit_hash_key
        return str(hash_key(first.partition_key))

    def _require_first(self) -> SubRecord:
        if self._first is None:
            raise ValueError("the aggregate is empty")
        return self._first

    def _prepare(
        self, partition_key: str, explicit_hash_key: str | None, data: bytes, trailer: int = 0
    ) -> tuple[bytes | None, bytes | None, bytes, int]:
        """Encode one record against the current tables without changing them; ``trailer``
        is the size of its encoded tags.

        Returns (new pk-table entry, new ehk-table entry, record header, body growth in bytes).
        """
        n = len(data)
        growth = n
        pk_index = self._keys()
        i = pk_index.get(partition_key)
        pk_entry = None
        if i is None:
            i = len(pk_index)
            pk_entry = _string_field(b"\x0a", partition_key)
            growth += len(pk_entry)
        ehk_entry = None
        if explicit_hash_key is None:
            if i < 0x80 and n < 0x7C and not trailer:
                header = bytes((0x1A, n + 4, 0x08, i, 0x1A, n))
            else:
                header = _record_header(i, None, n, trailer)
        else:
            j = self._ehk_index.get(explicit_hash_key)
            if j is None:
                j = len(self._ehk_entries)
                ehk_entry = _string_field(b"\x12", explicit_hash_key)
                growth += len(ehk_entry)
            header = _record_header(i, j, n, trailer)
        return pk_entry, ehk_entry, header, growth + len(header) + trailer

    def fits(self, partition_key: str, explicit_hash_key: str | None, data: bytes) -> bool:
        """Whether ``add`` would accept this record now."""
        if self._first is None:
            return len(data) + len(partition_key.encode("utf-8")) <= LARGEST_RECORD_BYTES
        growth = self._prepare(partition_key, explicit_hash_key, data)[3]
        return self._body_size + growth <= self._limit

    def try_add(
        self,
        partition_key: str,
        explicit_hash_key: str | None,
        data: bytes,
        record_id: str | None = None,
        origin: str | None = None,
        counter: int = 0,
    ) -> bool:
        """Add the record if it fits; False (and nothing changed) if it does not.

        A record's id (docs/effectively-once.md) is ``record_id``, its own, which goes in its
        ``RECORD_ID_TAG`` tag; or else, with ``origin``, the automatic id ``origin:counter``,
        which goes with no tag when it is the next of the aggregate's open run (the same
        origin, the next counter) and otherwise starts a run with a ``RUN_TAG`` tag. A record
        with no id that follows a run closes it with a ``RUN_TAG`` tag without a value. An
        aggregate whose first record has an id is framed even when it holds that record alone,
        and only within ``max_size`` (a record that does not fit so is refused, not sent raw).
        """
        run_origin = self._run_origin
        if record_id is None and origin is None and run_origin is None:
            trailer = b""
        elif record_id is not None:
            trailer = _id_tag(record_id)
            origin = None
        elif origin is None:
            trailer = _END_RUN
        elif counter == self._run_next and origin == run_origin:
            trailer = b""
        else:
            trailer = _run_tag(origin, counter)
        if self._first is not None:
            if explicit_hash_key is not None:
                added = self._add_prepared(partition_key, explicit_hash_key, data, trailer=trailer)
            elif trailer:
                added = self._add_tagged(partition_key, data, trailer)
            else:
                added = self._add_plain(partition_key, data)
            if added and (origin is not None or run_origin is not None):
                self._run_origin = origin
                self._run_next = counter + 1
            return added
        pk_len = len(partition_key.encode("utf-8"))
        if len(data) + pk_len > LARGEST_RECORD_BYTES:
            return False
        self._limit = self._max_size - FRAMING_SIZE - pk_len
        if trailer:
            if not (
                self._add_tagged(partition_key, data, trailer)
                if explicit_hash_key is None
                else self._add_prepared(partition_key, explicit_hash_key, data, trailer=trailer)
            ):
                self._limit = 0
                return False
            self._tagged = True
            self._run_origin = origin
            self._run_next = counter + 1
        else:
            self._add_prepared(partition_key, explicit_hash_key, data, check=False)
        self._first = SubRecord(partition_key, explicit_hash_key, data)
        return True

    def _add_tagged(self, partition_key: str, data: bytes, trailer: bytes) -> bool:
        """``try_add`` for a record with tags (``trailer``, encoded) and no explicit hash key
        to a builder whose limit is set: the bytes ``_add_prepared`` would make, with fewer
        calls."""
        n = len(data)
        pk_index = self._pk_index if not self._pk_runs else self._keys()
        i = pk_index.get(partition_key)
        entry = None
        if i is None:
            i = len(pk_index)
            entry = _string_field(b"\x0a", partition_key)
        inner = b"\x08" + _varint(i) + b"\x1a" + _varint(n)
        header = b"\x1a" + _varint(len(inner) + n + len(trailer)) + inner
        body_size = self._body_size + len(header) + n + len(trailer)
        if entry is not None:
            body_size += len(entry)
        if body_size > self._limit:
            return False
        if entry is not None:
            pk_index[partition_key] = i
            self._pk_entries.append(entry)
        self._parts += (header, data + trailer)
        self._trailer_size += len(trailer)
        self._body_size = body_size
        self._key_chars += len(partition_key)
        return True

    def _add_prepared(
        self,
        partition_key: str,
        explicit_hash_key: str | None,
        data: bytes,
        check: bool = True,
        trailer: bytes = b"",
    ) -> bool:
        """``try_add`` for any record, through ``_prepare``; ``check=False`` adds the first
        record whatever its size; ``trailer`` is the record's encoded tags."""
        pk_entry, ehk_entry, header, growth = self._prepare(
            partition_key, explicit_hash_key, data, len(trailer)
        )
        body_size = self._body_size + growth
        if check and body_size > self._limit:
            return False
        if pk_entry is not None:
            pk_index = self._keys()
            pk_index[partition_key] = len(pk_index)
            self._pk_entries.append(pk_entry)
        if ehk_entry is not None and explicit_hash_key is not None:
            self._ehk_index[explicit_hash_key] = len(self._ehk_entries)
            self._ehk_entries.append(ehk_entry)
        if trailer:
            self._parts += (header, data + trailer)
            self._trailer_size += len(trailer)
        else:
            self._parts += (header, data)
        self._body_size = body_size
        self._key_chars += len(partition_key)
        return True

    def add_run(
        self, partition_keys: Sequence[str], datas: Sequence[bytes], start: int, stop: int
    ) -> int:
        """Add records ``start`` to ``stop`` of two columns (partition keys and data; no
        explicit hash keys, no tags) in order while they fit, to a builder that holds a record
        already; returns the index of the first record not added (``stop`` when all were).

        ``try_add``'s work for each record in one loop: the producer's aggregator adds a run
        of records bound for one shard with one call instead of one call per record. With a
        run of automatic ids open (``try_add`` with ``origin``), the records continue it: each
        takes the run's next counter, in order.
        """
        if self._first is None:
            raise ValueError("the aggregate is empty: add its first record with try_add")
        end = None
        if stop - start >= _COLUMNS_FROM:
            end = self._add_new(partition_keys, datas, start, stop)
        if end is None:
            add = self._add_plain
            end = start
            while end < stop and add(partition_keys[end], datas[end]):
                end += 1
        self._run_next += end - start
        return end

    def _add_plain(self, partition_key: str, data: bytes) -> bool:
        """``try_add`` for a record without an explicit hash key to a builder that holds a
        record already: the bytes ``_prepare`` would make, with table lookups and struct
        packing instead of its calls."""
        n = len(data)
        pk_index = self._pk_index if not self._pk_runs else self._keys()
        i = pk_index.get(partition_key)
        if n >= 0x7B or (i is not None and i >= 0x4000):
            return self._add_prepared(partition_key, None, data)
        if i is not None:
            header = (
                _pack_header1(0x1A, n + 4, 0x08, i, 0x1A, n)
                if i < 0x80
                else _pack_header2(0x1A, n + 5, 0x08, (i & 0x7F) | 0x80, i >> 7, 0x1A, n)
            )
            body_size = self._body_size + n + len(header)
            if body_size > self._limit:
                return False
        else:
            i = len(pk_index)
            raw = partition_key.encode("utf-8")
            if len(raw) >= 0x80 or i >= 0x4000:
                return self._add_prepared(partition_key, None, data)
            entry = _PK_FIELD_PREFIXES[len(raw)] + raw
            header = (
                _pack_header1(0x1A, n + 4, 0x08, i, 0x1A, n)
                if i < 0x80
                else _pack_header2(0x1A, n + 5, 0x08, (i & 0x7F) | 0x80, i >> 7, 0x1A, n)
            )
            body_size = self._body_size + len(entry) + n + len(header)
            if body_size > self._limit:
                return False
            pk_index[partition_key] = i
            self._pk_entries.append(entry)
        self._parts += (header, data)
        self._body_size = body_size
        self._key_chars += len(partition_key)
        return True

    def _add_new(
        self, partition_keys: Sequence[str], datas: Sequence[bytes], start: int, stop: int
    ) -> int | None:
        """``add_run`` column by column, the loops in C (``map``), for the usual run: keys
        new to the aggregate and distinct (random partition keys), each under 128 bytes in
        UTF-8, data under 123 bytes, and key-table indexes under 16,384. Each record then
        grows the body by its key-table entry (2 bytes and the key), its data and its header
        (6 bytes while its index is under 128, 7 from there). None, with nothing done, for
        any other run: the loop of ``add_run`` takes it."""
        keys = partition_keys[start:stop]
        m = len(keys)
        pk_index = self._pk_index
        runs = self._pk_runs
        first = runs[-1][1] + len(runs[-1][0]) if runs else len(pk_index)
        if first + m > 0x4000:
            return None
        distinct = set(keys)
        if (
            len(distinct) != m
            or not pk_index.keys().isdisjoint(distinct)
            or not all(map(distinct.isdisjoint, [seen for _, _, seen in runs]))
        ):
            return None
        raws = list(map(str.encode, keys))
        raw_lens = list(map(len, raws))
        run = datas[start:stop]
        lens = list(map(len, run))
        if max(raw_lens) >= 0x80 or max(lens) >= 0x7B:
            return None
        short = max(0, 0x80 - first)
        """How many of the run's indexes take one byte."""
        room = self._limit - self._body_size
        k = m
        growth = sum(raw_lens) + sum(lens) + 8 * m + max(0, m - short)
        if growth > room:
            sums: list[int] = list(accumulate(map(add, raw_lens, lens)))

            def growth_of(count: int) -> int:
                """What the run's first ``count`` records add to the body."""
                return sums[count - 1] + 8 * count + max(0, count - short)

            k = bisect_right(range(1, m + 1), room, key=growth_of)
            if not k:
                return start
            growth = growth_of(k)
            keys, raws, raw_lens, lens, run = keys[:k], raws[:k], raw_lens[:k], lens[:k], run[:k]
        one = min(short, k)
        headers = list(
            map(
                _pack_header1,
                repeat(0x1A),
                map(add, lens[:one], repeat(4)),
                repeat(0x08),
                range(first, first + one),
                repeat(0x1A),
                lens[:one],
            )
        )
        if one < k:
            headers += map(
                _pack_header2,
                repeat(0x1A),
                map(add, lens[one:], repeat(5)),
                repeat(0x08),
                _INDEX_LOW[first + one : first + k],
                _INDEX_HIGH[first + one : first + k],
                repeat(0x1A),
                lens[one:],
            )
        parts: list[bytes] = [b""] * (2 * k)
        parts[0::2] = headers
        parts[1::2] = run
        self._parts += parts
        entries: list[bytes] = parts[: 2 * k]
        entries[0::2] = list(map(_PK_FIELD_PREFIXES.__getitem__, raw_lens))
        entries[1::2] = raws
        self._pk_entries += entries
        runs.append((keys, first, distinct))  # not in pk_index: an aggregate is rarely asked
        self._body_size += growth
        self._key_chars += sum(map(len, keys))
        return start + k

    def _keys(self) -> dict[str, int]:
        """The index of every key in the key table, the runs of ``_add_new`` included."""
        pk_index = self._pk_index
        runs = self._pk_runs
        if runs:
            for keys, first, _ in runs:
                pk_index.update(zip(keys, range(first, first + len(keys)), strict=True))
            runs.clear()
        return pk_index

    def add(self, partition_key: str, explicit_hash_key: str | None, data: bytes) -> None:
        """Add the record; ValueError if it does not fit (check with ``fits`` first)."""
        if not self.try_add(partition_key, explicit_hash_key, data):
            raise ValueError(
                f"record of {len(data)} bytes does not fit: aggregate is {self.size} bytes, "
                f"max_size is {self._max_size}"
            )

    def build(self) -> bytes:
        """The Kinesis record's data: raw data for one record, a framed aggregate otherwise."""
        first = self._require_first()
        if len(self._parts) == 2 and not self._tagged:
            return bytes(first.data)
        return _frame(b"".join(self._pk_entries + self._ehk_entries + self._parts))

    def clear(self) -> None:
        self._pk_index.clear()
        self._pk_runs = []
        self._ehk_index.clear()
        self._pk_entries = []
        self._ehk_entries = []
        self._parts = []
        self._body_size = 0
        self._key_chars = 0
        self._limit = 0
        self._first = None
        self._tagged = False
        self._run_origin = None
        self._run_next = 0
        self._trailer_size = 0


def encode_aggregate(
    records: Sequence[SubRecord], tags: Sequence[Sequence[Tag]] | None = None
) -> bytes:
    """Frame ``records`` as one aggregate (even a single record), with no size limit.

    ``tags``, when given, holds one sequence of tags per record. Few tools write tags; this
    exists so that decoding past them can be tested.
    """
    if not records:
        raise ValueError("an aggregate needs at least one record")
    if tags is not None and len(tags) != len(records):
        raise ValueError(f"got {len(tags)} tag lists for {len(records)} records")
    pk_index: dict[str, int] = {}
    ehk_index: dict[str, int] = {}
    pk_entries: list[bytes] = []
    ehk_entries: list[bytes] = []
    parts: list[bytes] = []
    for n, (partition_key, explicit_hash_key, data) in enumerate(records):
        i = pk_index.setdefault(partition_key, len(pk_index))
        if i == len(pk_entries):
            pk_entries.append(_string_field(b"\x0a", partition_key))
        j = None
        if explicit_hash_key is not None:
            j = ehk_index.setdefault(explicit_hash_key, len(ehk_index))
            if j == len(ehk_entries):
                ehk_entries.append(_string_field(b"\x12", explicit_hash_key))
        trailer = b"" if tags is None else b"".join(_tag_field(tag) for tag in tags[n])
        parts += (_record_header(i, j, len(data), len(trailer)), data, trailer)
    return _frame(b"".join(pk_entries + ehk_entries + parts))


def _id_tag(record_id: str) -> bytes:
    """The encoded ``RECORD_ID_TAG`` tag of a record."""
    raw = record_id.encode("utf-8")
    if len(raw) > MAX_RECORD_ID_BYTES:
        return _tag_field((RECORD_ID_TAG, record_id))
    return _ID_TAG_PREFIXES[len(raw)] + raw


def _run_tag(origin: str, counter: int) -> bytes:
    """The encoded ``RUN_TAG`` tag that starts a run at the automatic id ``origin:counter``;
    ValidationError if that is no record id of the ``ORIGIN:COUNTER`` shape."""
    value = f"{origin}:{counter}"
    if split_counter(value) != (origin, counter):
        raise ValidationError(
            "origin", f"an automatic id must be ORIGIN:COUNTER, counter >= 0, got {value!r}"
        )
    return _tag_field((RUN_TAG, validate_record_id(value)))


def split_counter(record_id: str) -> tuple[str, int] | None:
    """``(origin, counter)`` of an ``ORIGIN:COUNTER`` id whose counter is canonical decimal
    (so the pair gives the id back exactly), else None."""
    origin, colon, digits = record_id.rpartition(":")
    if (
        not colon
        or not origin
        or not digits.isascii()
        or not digits.isdigit()
        or (digits[0] == "0" and len(digits) > 1)
    ):
        return None
    return origin, int(digits)


def validate_record_id(record_id: object) -> str:
    """``record_id`` if it is a valid record id: a str of 1 to ``MAX_RECORD_ID_BYTES`` bytes
    in UTF-8; ValidationError naming ``record_id`` and the limit otherwise."""
    if type(record_id) is not str:
        raise ValidationError("record_id", f"must be a str, got {type(record_id).__name__}")
    try:
        size = len(record_id.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValidationError("record_id", "must be encodable as UTF-8") from None
    if not 1 <= size <= MAX_RECORD_ID_BYTES:
        raise ValidationError(
            "record_id", f"must be 1 to {MAX_RECORD_ID_BYTES} bytes in UTF-8, got {size}"
        )
    return record_id


def _tag_field(tag: Tag) -> bytes:
    key, value = tag
    message = _string_field(b"\x0a", key)
    if value is not None:
        message += _string_field(b"\x12", value)
    return b"\x22" + _varint(len(message)) + message


_ID_TAG_PREFIXES = [
    _tag_field((RECORD_ID_TAG, "x" * size))[: -size or None]
    for size in range(MAX_RECORD_ID_BYTES + 1)
]
"""The bytes of an id tag before the id's, by the id's length in UTF-8 (``_id_tag``)."""
_END_RUN = _tag_field((RUN_TAG, None))
"""A ``RUN_TAG`` tag without a value: its record has no id and closes the open run."""


def is_aggregated(blob: bytes) -> bool:
    """Whether ``blob`` is framed as an aggregate: magic, room for a body, matching MD5.

    The protobuf inside is not parsed; ``decode_aggregate`` may still refuse it.
    """
    return _body(blob) is not None


def _body(blob: bytes) -> bytes | None:
    """The protobuf bytes of an aggregate whose framing checks out, else None (a plain record)."""
    if len(blob) <= FRAMING_SIZE or not blob.startswith(MAGIC):
        return None
    body = blob[4:-DIGEST_SIZE]
    if md5(body).digest() != blob[-DIGEST_SIZE:]:  # noqa: S324
        return None
    return body


def _table(entries: Sequence[str | bytes]) -> list[str]:
    """A proto2 string table as the KCL's Java protobuf reads it: bad UTF-8 becomes U+FFFD.

    upb hands back ``bytes`` for an entry that is not valid UTF-8.
    """
    table = list(entries)
    if bytes in set(map(type, table)):
        return [e if isinstance(e, str) else e.decode("utf-8", "replace") for e in table]
    return cast("list[str]", table)


def _check_ehks(ehks: list[str]) -> bool:
    """A table EHK that is not a 128-bit decimal makes the aggregate corrupt: no reader could
    route or range-check it."""
    try:
        for ehk in ehks:
            parse_explicit_hash_key(ehk)
    except ValidationError:
        return False
    return True


_Run = tuple[str, int]
"""A run of ids as records carry it (``KinesisRecord.id_run``): ``(ORIGIN:, counter)``, the
id of sub-record ``k`` being ``ORIGIN:`` and counter + ``k``; one object for the run."""
_Ids = list[str | _Run | None] | _Run | None
"""An aggregate's record ids: one per record (a run's records share its :data:`_Run`), or a
run when every record belongs to the run its first starts, or None when no record has one."""
_Columns = tuple[list[str], list[str | None] | None, list[bytes], _Ids]
"""An aggregate's user records column-wise: partition keys, EHKs (None: no record has one),
data, record ids. Columns let ``map`` build the output objects without a Python-level loop."""


def _columns(body: bytes) -> _Columns | None:
    """The user records of an aggregate body; None if it does not check out.

    Fast path: the two column views (see ``_kpl_messages``) give every Record field as one list,
    with no Python object per record. It applies when every record holds exactly one partition
    key index and one data field, either no EHK index or exactly one each, and no tags, which is
    what every KPL-compatible encoder writes, or one tag on the first record only, which is
    what our producer writes with record ids (a ``RUN_TAG``, whose run the other records
    continue). Anything else takes ``_columns_by_record``.
    """
    view = AggregatedRecordView()
    try:
        view.ParseFromString(body)
        columns = RecordColumns()
        columns.ParseFromString(b"".join(view.records))
    except DecodeError:
        return None
    n = len(view.records)
    n_ehk = len(columns.explicit_hash_key_index)
    tags = columns.tags
    if (
        len(columns.partition_key_index) != n
        or len(columns.data) != n
        or len(tags) > 1
        or n_ehk not in (0, n)
    ):
        return _columns_by_record(body)
    ids = None
    if tags:
        first = RecordColumns()
        tag = KplTag()
        try:
            first.ParseFromString(view.records[0])
            tag.ParseFromString(tags[0])
        except DecodeError:
            return _columns_by_record(body)
        if len(first.tags) != 1 or not tag.IsInitialized():
            return _columns_by_record(body)  # the tag is another record's, or corrupt
        ids = _first_tag_ids(tag, n)
    pks = _table(view.partition_key_table)
    ehks = _table(view.explicit_hash_key_table)
    if ehks and not _check_ehks(ehks):
        return None
    try:
        keys = list(map(pks.__getitem__, columns.partition_key_index))
        explicit: list[str | None] | None = (
            list(map(ehks.__getitem__, columns.explicit_hash_key_index)) if n_ehk else None
        )
    except IndexError:
        return None
    return keys, explicit, list(columns.data), ids


_get_pk_index = attrgetter("partition_key_index")
_get_ehk_index = attrgetter("explicit_hash_key_index")
_get_data = attrgetter("data")
_has_ehk_index = methodcaller("HasField", "explicit_hash_key_index")
_get_tags = attrgetter("tags")


def _text(value: str | bytes) -> str:
    """A tag's string as the KCL's Java protobuf reads it: bad UTF-8 becomes U+FFFD."""
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def _record_ids(tag_lists: Iterable[Sequence[TagMessage]]) -> list[str | _Run | None]:
    """Each record's id, in order, from the records' tags: its own (the value of its first
    ``RECORD_ID_TAG`` tag that has one), else the one its first ``RUN_TAG`` tag starts (none
    if that has no ``ORIGIN:COUNTER`` value), else the open run's next, else none. A record
    with an id of its own, or a ``RUN_TAG`` tag with no run in it, closes the open run. The
    records of a run get the run (:data:`_Run`), one object, not their ids' strings."""
    ids: list[str | _Run | None] = []
    open_run: _Run | None = None
    for tags in tag_lists:
        own = None
        has_run = False
        run = None
        for tag in tags:
            key = tag.key
            if key == RECORD_ID_TAG:
                if tag.HasField("value"):
                    own = _text(tag.value)
                    break
            elif key == RUN_TAG and not has_run:
                has_run = True
                if tag.HasField("value"):
                    run = _text(tag.value)
        if own is not None:
            ids.append(own)
            open_run = None
        elif has_run:
            split = None if run is None else split_counter(run)
            open_run = None if split is None else (split[0] + ":", split[1] - len(ids))
            ids.append(open_run)
        else:
            ids.append(open_run)
    return ids


def _first_tag_ids(tag: TagMessage, n: int) -> _Ids:
    """``_record_ids`` of ``n`` records when the first holds ``tag`` and the others no tag:
    the run it starts as ``(ORIGIN:, first counter)``, or its own id."""
    if not tag.HasField("value") or tag.key not in (RECORD_ID_TAG, RUN_TAG):
        return None
    value = _text(tag.value)
    if tag.key == RECORD_ID_TAG:
        return [value, *repeat(None, n - 1)]
    split = split_counter(value)
    if split is None:
        return None
    origin, first = split
    return origin + ":", first


def _columns_by_record(body: bytes) -> _Columns | None:
    """The general path: the official schema, one upb object per record.

    Missing required fields count as a protobuf failure, as they do for the KCL's parser. EHK
    indexes are read with HasField semantics: a record without one has no EHK, whatever index 0
    of the table holds.
    """
    message = AggregatedRecord()
    try:
        message.ParseFromString(body)
    except DecodeError:
        return None
    if not message.IsInitialized():
        return None
    records = list(message.records)
    pks = _table(message.partition_key_table)
    ehks = _table(message.explicit_hash_key_table)
    if ehks and not _check_ehks(ehks):
        return None
    try:
        keys = list(map(pks.__getitem__, map(_get_pk_index, records)))
        explicit = [
            ehks[index] if has else None
            for has, index in zip(
                map(_has_ehk_index, records), map(_get_ehk_index, records), strict=True
            )
        ]
    except IndexError:
        return None
    tags = list(map(_get_tags, records))
    ids = _record_ids(tags) if any(tags) else None
    return keys, explicit, list(map(_get_data, records)), ids


def decode_aggregate(blob: bytes) -> list[SubRecord] | None:
    """The user records of an aggregate, or None: not an aggregate, or a corrupt one.

    A corrupt aggregate (bad magic, MD5 or protobuf, a key index out of its table, an EHK that
    is not a 128-bit decimal) is what the caller passes through as a plain record. Tags are
    skipped (``deaggregate`` reads the record id's).
    """
    body = _body(blob)
    columns = None if body is None else _columns(body)
    if columns is None:
        return None
    keys, explicit, datas, _ = columns
    # tuple.__new__ builds the NamedTuple in C, twice as fast as calling SubRecord.
    rows = zip(keys, explicit or repeat(None), datas, strict=False)
    return list(map(tuple.__new__, repeat(SubRecord), rows))


def _in_range(columns: _Columns, start: int, end: int, in_range: set[str]) -> bool:
    """Whether every sub-record's effective hash key lies in [start, end].

    Each distinct partition key found in range is hashed once per ``in_range`` memo (one
    deaggregate call); the keys not seen yet are hashed together, the loop in C.
    """
    keys, explicit, _, _ = columns
    if explicit is None:
        hashed = set(keys)
    else:
        hashed = {key for key, ehk in zip(keys, explicit, strict=True) if ehk is None}
        if not all(start <= int(ehk) <= end for ehk in set(explicit) if ehk is not None):
            return False
    new = hashed.difference(in_range)
    if new:
        hashes = hash_keys(map(str.encode, new))
        if min(hashes) < start or max(hashes) > end:
            return False
        in_range.update(new)
    return True


def as_records(
    records: Sequence[WireRecord], shard_id: str, ack: Callable[[KinesisRecord], None] | None = None
) -> list[KinesisRecord]:
    """GetRecords ``Records`` as they are, with no deaggregation: one :class:`KinesisRecord`
    each, sub-sequence number 0 (an aggregate's data is its KPL bytes)."""
    return [
        KinesisRecord(
            record.data,
            record.partition_key,
            None,
            record.sequence_number,
            0,
            shard_id,
            record.approximate_arrival_timestamp,
            False,
            ack,
        )
        for record in records
    ]


def deaggregate(
    records: Sequence[WireRecord | Mapping[str, Any]],
    shard_id: str,
    hash_range: tuple[int, int] | None = None,
    ack: Callable[[KinesisRecord], None] | None = None,
) -> list[KinesisRecord]:
    """Turn GetRecords ``Records`` entries (botocore's dicts or the fast parser's
    :class:`WireRecord` s) into user records, as the KCL does.

    Sub-records get sub-sequence numbers 0, 1, 2, ...; a plain (or corrupt) record comes out
    as it is, with sub-sequence 0 and ``aggregated=False``. With ``hash_range`` (the shard's
    [start, end]), an aggregate holding ANY sub-record whose effective hash key is outside it is
    dropped whole: the producer retried those records elsewhere, and the KCL drops them the same
    way, so both readers see the same records. Plain records are never filtered. A user
    record's ``record_id`` is its own (its ``RECORD_ID_TAG`` tag's value) or its run's
    (``RUN_TAG``), None without one; ids are worked out over the whole aggregate, so they do
    not depend on what a reader then skips.
    """
    out: list[KinesisRecord] = []
    in_range: set[str] = set()
    for record in wire_records(records):
        data = record.data
        sequence_number = record.sequence_number
        sequence = int(sequence_number)
        arrival = record.approximate_arrival_timestamp
        body = _body(data)
        columns = None if body is None else _columns(body)
        if columns is None:
            out.append(
                KinesisRecord(
                    data,
                    record.partition_key,
                    None,
                    sequence_number,
                    0,
                    shard_id,
                    arrival,
                    False,
                    ack,
                    sequence,
                )
            )
        elif hash_range is None or _in_range(columns, *hash_range, in_range):
            keys, explicit, datas, ids = columns
            fields: list[Iterable[Any]] = [
                datas,
                keys,
                explicit or repeat(None),
                repeat(sequence_number),
                count(),
                repeat(shard_id),
                repeat(arrival),
                repeat(True),
                repeat(ack),
                repeat(sequence),
            ]
            if ids is not None:
                fields.append(repeat(ids) if type(ids) is tuple else ids)
            out += map(KinesisRecord, *fields)
    return out
