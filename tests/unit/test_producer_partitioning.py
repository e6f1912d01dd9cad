"""Partitioning helpers: keys from fields or callables, random keys, balanced explicit hash keys."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest

from kinesis_core.errors import ConfigurationError, ValidationError
from kinesis_core.producer import (
    BalancedHashKeys,
    key_from,
    random_partition_key,
    random_partition_keys,
)
from kinesis_core.shards.hashing import hash_key
from kinesis_core.shards.info import uniform_shards
from kinesis_core.shards.shard_map import ShardTable


@dataclass
class Order:
    customer: str
    amount: int


def test_key_from_a_field_of_a_mapping_or_an_object() -> None:
    by_customer = key_from("customer")
    assert by_customer({"customer": "c-1"}) == "c-1"
    assert by_customer(Order("c-2", 5)) == "c-2"
    assert key_from("amount")(Order("c", 42)) == "42"
    assert key_from("raw")({"raw": "é".encode()}) == "é"


def test_key_from_a_callable() -> None:
    fn = key_from(lambda o: f"{o.customer}/{o.amount % 2}")
    assert fn(Order("c", 3)) == "c/1"


@pytest.mark.parametrize(
    ("source", "element", "field"),
    [
        ("customer", {"other": 1}, "customer"),
        ("customer", object(), "customer"),
        ("customer", {"customer": ""}, "customer"),
        ("customer", {"customer": "x" * 257}, "customer"),
        ("customer", {"customer": 1.5}, "customer"),
        ("customer", {"customer": b"\xff"}, "customer"),
        ("customer", {"customer": True}, "customer"),
    ],
)
def test_bad_keys_are_refused_naming_the_source(source: str, element: object, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        key_from(source)(element)
    assert info.value.field == field


def test_key_from_refuses_a_non_callable() -> None:
    with pytest.raises(ConfigurationError):
        key_from(3)  # type: ignore[arg-type]


def test_random_keys_spread_evenly_over_shards() -> None:
    table = ShardTable(uniform_shards(8))
    counts = Counter(table.owner(hash_key(random_partition_key())) for _ in range(8000))
    assert len(counts) == 8
    assert max(counts.values()) < 1.25 * min(counts.values())
    assert len(random_partition_key({"ignored": 1})) == 32


@pytest.mark.parametrize("bits", [0, 0xFF, 2**128 - 1])
def test_random_keys_are_32_lowercase_hex_digits(
    monkeypatch: pytest.MonkeyPatch, bits: int
) -> None:
    monkeypatch.setattr("random.getrandbits", lambda n: bits)
    assert random_partition_key() == f"{bits:032x}"


def test_balanced_hash_keys_are_stable_and_spread_a_few_entities_evenly() -> None:
    keys = BalancedHashKeys()
    tenants = [f"tenant-{i}" for i in range(16)]
    assigned = [keys(t) for t in tenants]
    assert [keys.for_entity(t) for t in tenants] == assigned
    assert len(set(assigned)) == 16
    for shards in (2, 4, 8, 16):
        table = ShardTable(uniform_shards(shards))
        counts = Counter(table.owner(int(k)) for k in assigned)
        assert set(counts.values()) == {16 // shards}


def test_balanced_hash_keys_restore_saved_assignments() -> None:
    first = BalancedHashKeys()
    for t in ("a", "b", "c"):
        first(t)
    again = BalancedHashKeys(first.assignments)
    assert again.assignments == first.assignments
    assert again("d") not in first.assignments.values()
    assert len(again) == 4
    with pytest.raises(ValidationError, match="two entities"):
        BalancedHashKeys({"x": 5, "y": "5"})


def test_random_partition_keys_drawn_at_once_look_like_single_ones() -> None:
    keys = random_partition_keys(1_000)
    assert len(keys) == 1_000
    assert len(set(keys)) == 1_000
    single = random_partition_key()
    assert all(len(k) == len(single) == 32 for k in keys)
    assert all(int(k, 16) >= 0 for k in keys)
    assert random_partition_keys(0) == []
    # Every hex digit position varies: the keys spread over the whole hash space.
    assert {k[0] for k in keys} == set("0123456789abcdef")
