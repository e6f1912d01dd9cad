"""kinesis_core.shards.allocator: balanced explicit hash keys (seed 001)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from kinesis_core.errors import ValidationError
from kinesis_core.shards.allocator import BalancedKeyAllocator
from kinesis_core.shards.skew import skew_report


def segment_counts(keys: list[int], bits: int, k: int) -> list[int]:
    """Keys per segment when [0, 2**bits) is cut into 2**k equal segments."""
    counts = Counter(key >> (bits - k) for key in keys)
    return [counts[i] for i in range(2**k)]


def test_seed_sequence_in_a_7_bit_space() -> None:
    assert BalancedKeyAllocator(bits=7).allocate(7) == [64, 32, 96, 16, 80, 48, 112]


def test_the_next_level_is_filled_in_bit_reversed_order() -> None:
    # The seed's closed-form nextKey prints 8, 40, 72, ... here; its tree walk (this one)
    # alternates halves at every node, which keeps every power-of-two split balanced.
    assert BalancedKeyAllocator(bits=7).allocate(15)[7:] == [8, 72, 40, 104, 24, 88, 56, 120]


def test_seed_rehydration_example() -> None:
    allocator = BalancedKeyAllocator([0, 32, 9, 57], bits=7)
    assert allocator.allocate(8) == [64, 96, 80, 112, 72, 48, 104, 16]


def test_128_bit_keys_are_the_halvings_of_the_kinesis_key_space() -> None:
    keys = BalancedKeyAllocator().allocate(3)
    assert keys == [2**127, 2**126, 3 * 2**126]
    assert keys[0] == 170141183460469231731687303715884105728


def test_every_key_of_a_small_space_is_handed_out_once() -> None:
    allocator = BalancedKeyAllocator(bits=3)
    assert allocator.allocate(8) == [4, 2, 6, 1, 5, 3, 7, 0]
    with pytest.raises(ValidationError, match="all 8 keys of 2\\*\\*3 are used"):
        allocator.next_key()
    full = BalancedKeyAllocator(bits=7)
    assert sorted(full.allocate(128)) == list(range(128))


def test_deterministic() -> None:
    existing = [5, 2**100, 2**127 + 3, 12345678901234567890]
    assert BalancedKeyAllocator(existing).allocate(50) == BalancedKeyAllocator(
        reversed(existing)
    ).allocate(50)


@settings(deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=2**12 - 1), max_size=60, unique=True), st.randoms()
)
def test_order_of_existing_keys_does_not_matter(existing: list[int], rnd: random.Random) -> None:
    shuffled = list(existing)
    rnd.shuffle(shuffled)
    a = BalancedKeyAllocator(existing, bits=12)
    b = BalancedKeyAllocator(bits=12)
    for key in shuffled:
        b.add(key)
    assert a.allocate(40) == b.allocate(40)


def test_existing_keys_may_be_decimal_strings() -> None:
    a = BalancedKeyAllocator(["0", "32", "9", "57"], bits=7)
    assert a.allocate(2) == [64, 96]
    assert "57" not in a
    assert 57 in a


def test_add_and_len_and_contains() -> None:
    a = BalancedKeyAllocator(bits=7)
    assert a.add(10)
    assert not a.add(10)
    assert not a.add("10")
    key = a.next_key()
    assert not a.add(key)
    assert len(a) == 2
    assert 10 in a
    assert key in a


def test_allocated_keys_never_repeat_existing_ones() -> None:
    existing = list(range(0, 128, 3))
    a = BalancedKeyAllocator(existing, bits=7)
    new = a.allocate(128 - len(existing))
    assert sorted(existing + new) == list(range(128))


def test_discard_frees_a_key_for_reuse() -> None:
    a = BalancedKeyAllocator(bits=7)
    a.allocate(7)
    assert a.discard(32)
    assert not a.discard(32)
    assert 32 not in a
    assert len(a) == 6
    assert a.next_key() == 32  # the left half was the lighter one


def test_discard_of_a_rehydrated_key_in_an_unsplit_bucket() -> None:
    a = BalancedKeyAllocator([3, 9, 57], bits=7)
    assert a.discard(9)
    assert a.allocate(4) == [64, 96, 80, 32]


@pytest.mark.parametrize("key", [128, -1, "1.5", "", True])
def test_keys_outside_the_space_are_refused(key: object) -> None:
    with pytest.raises(ValidationError) as info:
        BalancedKeyAllocator([key], bits=7)  # type: ignore[list-item]
    assert info.value.field == "key"


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValidationError, match="bits"):
        BalancedKeyAllocator(bits=0)
    with pytest.raises(ValidationError, match="bits"):
        BalancedKeyAllocator(bits=129)
    with pytest.raises(ValidationError, match="n: must be >= 0"):
        BalancedKeyAllocator().allocate(-1)
    with pytest.raises(ValidationError):
        BalancedKeyAllocator([2**128])


# The balance property: from an empty allocator, after any number n of keys, the 2**k equal
# segments of the key space hold counts that differ by at most one, for every k at once.


def test_balance_of_every_prefix_in_a_small_space() -> None:
    a = BalancedKeyAllocator(bits=7)
    keys: list[int] = []
    for _ in range(129):
        for k in range(8):
            counts = segment_counts(keys, 7, k)
            assert max(counts) - min(counts) <= 1, (len(keys), k, counts)
        if len(keys) < 128:
            keys.append(a.next_key())


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([9, 16, 128]), st.integers(min_value=0, max_value=2000))
def test_balance_over_every_power_of_two_split(bits: int, n: int) -> None:
    keys = BalancedKeyAllocator(bits=bits).allocate(min(n, 2**bits))
    for k in range(min(bits, 12) + 1):
        counts = segment_counts(keys, bits, k)
        assert max(counts) - min(counts) <= 1


@pytest.mark.parametrize("shards", [1, 2, 4, 8, 64, 1024])
def test_balance_holds_on_uniform_kinesis_shards(shards: int) -> None:
    keys = BalancedKeyAllocator().allocate(3000)
    report = skew_report(shards, hash_keys=keys)
    assert report.max - report.min <= 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2**16 - 1), max_size=300, unique=True))
def test_rehydrated_allocator_rebalances_the_halves(existing: list[int]) -> None:
    """New keys go to the lighter half until the halves differ by at most one, then stay so."""
    mid = 2**15
    a = BalancedKeyAllocator(existing, bits=16)
    left = sum(1 for k in existing if k < mid)
    right = sum(1 for k in existing if k > mid)
    keys = list(existing)
    needed = (mid not in existing) + abs(left - right)
    for i in range(needed + 30):
        keys.append(a.next_key())
        low, high = segment_counts(keys, 16, 1)
        if i + 1 >= needed:
            assert abs(low - high) <= 1
        else:  # still rebalancing: the gap only shrinks
            assert abs(low - high) <= abs(left - right) + 1


@pytest.mark.slow
def test_100k_keys_from_empty() -> None:
    keys = BalancedKeyAllocator().allocate(100_000)
    assert len(set(keys)) == 100_000
    for k in (1, 4, 10, 16):
        counts = segment_counts(keys, 128, k)
        assert max(counts) - min(counts) <= 1


@pytest.mark.slow
def test_100k_random_existing_keys_then_more() -> None:
    rnd = random.Random(7)
    existing = [rnd.getrandbits(128) for _ in range(100_000)]
    a = BalancedKeyAllocator(existing)
    assert len(a) == len(set(existing))
    new = a.allocate(20_000)
    assert not set(new) & set(existing)
    assert len(set(new)) == 20_000
    # 20k new keys are plenty to even out the random imbalance of the top levels.
    assert new[0] == 2**127
    for k in (1, 2, 4, 6):
        counts = segment_counts(existing + new, 128, k)
        assert max(counts) - min(counts) <= 1
