"""Turning an element into a producer record ``(data, partition_key[, explicit_hash_key])``.

Built once per DoFn (in ``setup``) into one function, so the per-element path is a single call
with no branching on the configuration. Anything wrong with an element (a type the serializer
cannot write, a user function that raises, a key of the wrong type) raises
:class:`~kinesis_core.errors.ValidationError` naming the culprit; limits on sizes and key
lengths are checked once, by the producer, which reports them per record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kinesis_core.errors import ValidationError, shape_problem
from kinesis_core.producer import field_getter, key_from, random_partition_key

Serializer = Callable[[Any], object]
"""Element -> bytes or str (anything else it returns is refused per element)."""
HashKeyFn = Callable[[Any], "int | str | None"]
RecordFn = Callable[[Any], tuple[Any, ...]]


def to_bytes(value: object) -> bytes:
    """The default serializer: bytes as they are, str as UTF-8; anything else is refused."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise ValidationError(
        "data",
        f"must be bytes or str, got {type(value).__name__}; pass serializer= to write "
        "other types (e.g. serializer=lambda e: json.dumps(e)), or data_field= to write one "
        "field of a row",
    )


def _named(fn: Callable[..., Any], default: str) -> str:
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or default)


def _wrap_serializer(serializer: Serializer) -> Callable[[Any], bytes]:
    name = f"serializer {_named(serializer, 'function')}"

    def serialize(value: Any) -> bytes:
        try:
            data = serializer(value)
        except ValidationError:
            raise
        except Exception as exc:
            raise ValidationError(name, f"raised {type(exc).__name__}: {exc}") from exc
        if isinstance(data, bytes):
            return data
        if isinstance(data, str):
            return data.encode("utf-8")
        if isinstance(data, (bytearray, memoryview)):
            return bytes(data)
        raise ValidationError(name, f"must return bytes or str, got {type(data).__name__}")

    return serialize


def _guard(fn: Callable[[Any], Any], name: str) -> Callable[[Any], Any]:
    """``fn`` with its exceptions turned into ValidationError (a bad element, not a bug)."""

    def guarded(element: Any) -> Any:
        try:
            return fn(element)
        except ValidationError:
            raise
        except Exception as exc:
            raise ValidationError(name, f"raised {type(exc).__name__}: {exc}") from exc

    return guarded


def _pair(element: Any) -> tuple[Any, Any]:
    if type(element) is tuple and len(element) == 2:
        return element
    try:
        key, value = element
    except (TypeError, ValueError) as exc:
        problem = shape_problem(element, ("key", "value"), 2)
        raise ValidationError(
            "element",
            f"keyed=True needs (key, value) pairs; {problem or f'{type(exc).__name__}: {exc}'}",
        ) from None
    return key, value


def key(element_key: object) -> object:
    """The key of a (key, value) element, as is (named so that errors read ``key: ...``)."""
    return element_key


def make_record_fn(
    *,
    serializer: Serializer | None,
    partition_key: str | Callable[[Any], object] | None,
    explicit_hash_key: HashKeyFn | None,
    keyed: bool,
    data_field: str | None = None,
    record_id: Callable[[Any], str] | None = None,
) -> RecordFn:
    """One function element -> producer record for this configuration; with ``record_id`` a
    ``(data, key, explicit hash key or None, record id)`` record.

    ``keyed``: elements are ``(key, value)`` pairs; the key (str, int or UTF-8 bytes) is the
    partition key and the value is serialized. Otherwise ``partition_key`` (a field name or a
    callable) gives the key, and without one every element gets a fresh random key, which
    spreads the load evenly over every shard. ``data_field``: the data is that field of the
    element (of the value, with ``keyed``), serialized.
    """
    record = _record_fn(serializer, partition_key, explicit_hash_key, keyed, data_field)
    if record_id is None:
        return record
    id_of = _guard(record_id, _named(record_id, "record_id_fn"))

    def with_id(element: Any) -> tuple[Any, ...]:
        fields = record(element)
        return (*fields, None, id_of(element)) if len(fields) == 2 else (*fields, id_of(element))

    return with_id


def _record_fn(
    serializer: Serializer | None,
    partition_key: str | Callable[[Any], object] | None,
    explicit_hash_key: HashKeyFn | None,
    keyed: bool,
    data_field: str | None,
) -> RecordFn:
    """``make_record_fn`` without record ids."""
    serialize = to_bytes if serializer is None else _wrap_serializer(serializer)
    if data_field is not None:
        get_data = field_getter(data_field)
        serialize_value = serialize

        def serialize(value: Any) -> bytes:
            return serialize_value(get_data(value))

    ehk = None
    if explicit_hash_key is not None:
        ehk = _guard(explicit_hash_key, _named(explicit_hash_key, "explicit_hash_key"))
    if keyed:
        key_of = key_from(key)

        def keyed_record(element: Any) -> tuple[Any, ...]:
            key, value = _pair(element)
            if ehk is None:
                return (serialize(value), key_of(key))
            return (serialize(value), key_of(key), ehk(element))

        return keyed_record
    if partition_key is None:
        if ehk is None:
            if serializer is None and data_field is None:
                return _default_record
            return lambda element: (serialize(element), random_partition_key())
        return lambda element: (serialize(element), random_partition_key(), ehk(element))
    name = partition_key if isinstance(partition_key, str) else _named(partition_key, "key")
    key_fn = _guard(key_from(partition_key), name)
    if ehk is None:
        return lambda element: (serialize(element), key_fn(element))
    return lambda element: (serialize(element), key_fn(element), ehk(element))


def _default_record(element: Any) -> tuple[Any, ...]:
    """Bytes or str elements, a random key each (the sink keys these a chunk at a time, see
    :func:`keys_in_bulk`; this is the one-element form)."""
    return (to_bytes(element), random_partition_key())


def keys_in_bulk(record_fn: RecordFn) -> bool:
    """Whether ``record_fn`` is the default configuration's: the data is the element itself
    and the key a fresh random one, so a caller may take the data alone and draw the keys for
    a whole chunk at once (:func:`~kinesis_core.producer.partitioning.random_partition_keys`)."""
    return record_fn is _default_record


def describe_key(partition_key: str | Callable[[Any], object] | None, keyed: bool) -> str:
    """How partition keys are chosen, for display data and logs."""
    if keyed:
        return "the key of each (key, value) element"
    if partition_key is None:
        return "random per element (spreads over all shards)"
    if isinstance(partition_key, str):
        return f"field {partition_key!r}"
    return _named(partition_key, "a function")
