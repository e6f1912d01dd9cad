"""Choosing partition keys and explicit hash keys for the records of a producer.

- :func:`key_from` turns a field name or a callable into a function element -> partition key
  (route by a column, or by any expression over the element).
- :func:`random_partition_key` spreads records evenly over every shard when their order does
  not matter.
- :class:`BalancedHashKeys` gives each of a small set of entities (tenants, devices) its own
  explicit hash key from :class:`~kinesis_core.shards.allocator.BalancedKeyAllocator`, so N entities
  spread evenly over 2, 4, 8, ... uniform shards where the MD5 of N keys can pile them onto a few.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from kinesis_core.errors import ConfigurationError, ValidationError
from kinesis_core.shards.allocator import BalancedKeyAllocator
from kinesis_core.shards.hashing import validate_partition_key

KeyFn = Callable[[Any], str]


def _as_partition_key(value: object, source: str) -> str:
    if isinstance(value, str):
        key = value
    elif isinstance(value, int) and not isinstance(value, bool):
        key = str(value)
    elif isinstance(value, bytes):
        try:
            key = value.decode("utf-8")
        except UnicodeDecodeError:
            raise ValidationError(source, "bytes must be UTF-8 to be a partition key") from None
    else:
        raise ValidationError(
            source, f"must give a str, int or UTF-8 bytes partition key, got {type(value).__name__}"
        )
    return validate_partition_key(key, source)


def field_getter(name: str) -> Callable[[Any], Any]:
    """``element -> element[name]`` for a mapping, else ``element.name`` (a NamedTuple, a
    ``beam.Row``, any object); a missing field is a bad element."""

    def get(element: Any) -> Any:
        if isinstance(element, Mapping):
            if name not in element:
                raise ValidationError(name, "the element has no such field")
            return element[name]
        try:
            return getattr(element, name)
        except AttributeError:
            raise ValidationError(name, "the element has no such field") from None

    return get


def key_from(source: str | Callable[[Any], object]) -> KeyFn:
    """A function element -> partition key.

    ``source`` is a field name (looked up as ``element[name]`` in a mapping, else as an
    attribute) or a callable. Its value may be a str, an int or UTF-8 bytes; anything else, or
    a key out of Kinesis's limits, raises :class:`~kinesis_core.errors.ValidationError`.
    """
    if isinstance(source, str):
        field = source
        get = field_getter(field)

        def from_field(element: Any) -> str:
            return _as_partition_key(get(element), field)

        return from_field
    if callable(source):
        fn = source
        name = getattr(fn, "__name__", "partition key function")

        def from_callable(element: Any) -> str:
            return _as_partition_key(fn(element), name)

        return from_callable
    raise ConfigurationError("source", f"must be a field name or a callable, got {source!r}")


def random_partition_key(_element: object = None) -> str:
    """A fresh random 128-bit key (32 hex digits): records spread evenly over all shards.

    Takes and ignores one argument, so it can be passed wherever a :data:`KeyFn` is expected.
    """
    # The digits of f"{bits:032x}", made faster: the Beam sink's default configuration makes
    # one key per element.
    return random.getrandbits(128).to_bytes(16, "big").hex()


def random_partition_keys(count: int) -> list[str]:
    """``count`` fresh random keys, as :func:`random_partition_key` makes them, drawn at once:
    a fraction of the cost per key, for callers that key records a batch at a time."""
    if count <= 0:
        return []
    digits = random.getrandbits(128 * count).to_bytes(16 * count, "big").hex()
    return [digits[i : i + 32] for i in range(0, 32 * count, 32)]


class BalancedHashKeys:
    """Stable, balanced explicit hash keys for a set of entities (thread-safe).

    ``for_entity(x)`` returns the same decimal key for the same entity every time, allocating
    the next balanced key for a new one. ``existing`` (entity -> key) restores assignments
    saved from :attr:`assignments`, so a restarted producer keeps every entity where it was and
    balances new entities against the old ones.
    """

    def __init__(self, existing: Mapping[Hashable, int | str] | None = None) -> None:
        self._lock = threading.Lock()
        self._keys: dict[Hashable, str] = {}
        self._allocator = BalancedKeyAllocator()
        for entity, key in (existing or {}).items():
            if not self._allocator.add(key):
                raise ValidationError("existing", f"key {key} is given to two entities")
            self._keys[entity] = str(int(key))

    def for_entity(self, entity: Hashable) -> str:
        key = self._keys.get(entity)
        if key is None:
            with self._lock:
                key = self._keys.get(entity)
                if key is None:
                    key = self._keys[entity] = str(self._allocator.next_key())
        return key

    __call__ = for_entity

    @property
    def assignments(self) -> dict[Hashable, str]:
        """A copy of entity -> explicit hash key (decimal), to persist and pass back later."""
        with self._lock:
            return dict(self._keys)

    def __len__(self) -> int:
        return len(self._keys)
