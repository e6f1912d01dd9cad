"""kinesis_core.shards.hashing: hash keys, explicit hash keys, partition keys and record limits."""

from __future__ import annotations

import hashlib
from array import array

import pytest
from hypothesis import given, strategies as st

from kinesis_core.errors import ValidationError
from kinesis_core.shards.hashing import (
    MAX_HASH_KEY,
    MAX_PARTITION_KEY_CHARS,
    MAX_RECORD_BYTES,
    hash_key,
    parse_explicit_hash_key,
    utf16_length,
    validate_partition_key,
    validate_record,
)

# The hash keys of partition keys "1".."14", as printed in seed 001.
SEED_HASH_KEYS = [
    261578874264819908609102035485573088411,
    266003691477286198901011725417809479212,
    314755909755515592000481005244904880883,
    223974724102701384270894320508706361900,
    304197110536387568331823853743770900693,
    29871468615243985478486908056489800412,
    190188081314515644627836686569786975555,
    268426020319259673719831598091001013101,
    92737277766069325975379119957797678374,
    281595222973318803755638905082365601824,
    134349327668835346876933282647662472650,
    257926471090385021762358474659294308112,
    262007925198482523730006737380068994873,
    226898901170458510997176709786703486038,
]


def test_constants() -> None:
    assert MAX_HASH_KEY == 340282366920938463463374607431768211455
    assert MAX_RECORD_BYTES == 1_048_576
    assert MAX_PARTITION_KEY_CHARS == 256


def test_hash_key_matches_the_seed_values() -> None:
    assert [hash_key(str(i)) for i in range(1, 15)] == SEED_HASH_KEYS


def test_hash_key_hashes_utf8() -> None:
    for pk in ("é", "日本", "😀", "a b\n"):
        assert hash_key(pk) == int(hashlib.md5(pk.encode("utf-8")).hexdigest(), 16)


@given(st.text(min_size=1, max_size=300))
def test_hash_key_is_md5_big_endian_in_range(pk: str) -> None:
    key = hash_key(pk)
    assert 0 <= key <= MAX_HASH_KEY
    assert key == int.from_bytes(hashlib.md5(pk.encode("utf-8")).digest(), "big")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", 0),
        ("1", 1),
        (str(MAX_HASH_KEY), MAX_HASH_KEY),
        (0, 0),
        (MAX_HASH_KEY, MAX_HASH_KEY),
        ("170141183460469231731687303715884105728", 2**127),
    ],
)
def test_parse_explicit_hash_key_accepts(value: str | int, expected: int) -> None:
    assert parse_explicit_hash_key(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        str(2**128),
        2**128,
        -1,
        "-1",
        "",
        "+1",
        " 1",
        "1 ",
        "1.0",
        "1e3",
        "0x10",
        "1_000",
        "abc",
        "\u0661",  # ARABIC-INDIC DIGIT ONE: str.isdigit() is True, Kinesis wants ASCII
        "\u00b2",  # SUPERSCRIPT TWO: isdigit() True, int() refuses it
        "\uff11",  # FULLWIDTH DIGIT ONE: int() would accept it
        "0" * 40,
        "9" * 40,
    ],
)
def test_parse_explicit_hash_key_refuses(value: str | int) -> None:
    with pytest.raises(ValidationError) as info:
        parse_explicit_hash_key(value)
    assert info.value.field == "explicit_hash_key"


@pytest.mark.parametrize("value", [True, False, 1.0, None, b"1", [1]])
def test_parse_explicit_hash_key_refuses_other_types(value: object) -> None:
    with pytest.raises(ValidationError, match="explicit_hash_key: must be a decimal string or int"):
        parse_explicit_hash_key(value)  # type: ignore[arg-type]


def test_parse_explicit_hash_key_names_the_given_field() -> None:
    with pytest.raises(ValidationError) as info:
        parse_explicit_hash_key("x", "ExplicitHashKey")
    assert info.value.field == "ExplicitHashKey"
    assert str(info.value).startswith("ExplicitHashKey: ")


def test_parse_explicit_hash_key_names_the_range() -> None:
    with pytest.raises(ValidationError, match=r"\[0, 2\*\*128 - 1\]"):
        parse_explicit_hash_key(2**128)


@pytest.mark.parametrize("value", ["00", "007", "0" + str(MAX_HASH_KEY)[:38]])
def test_parse_explicit_hash_key_refuses_leading_zeros(value: str) -> None:
    with pytest.raises(ValidationError):
        parse_explicit_hash_key(value)


@given(st.integers(min_value=0, max_value=MAX_HASH_KEY))
def test_parse_explicit_hash_key_round_trips(key: int) -> None:
    assert parse_explicit_hash_key(str(key)) == key
    assert parse_explicit_hash_key(key) == key


@pytest.mark.parametrize(
    "pk",
    ["a", "a" * 256, "é" * 256, "😀" * 128, "a" + "😀" * 127 + "a", "日本語" * 85, " ", "\x00"],
)
def test_validate_partition_key_accepts_1_to_256_utf16_units(pk: str) -> None:
    assert validate_partition_key(pk) is pk
    assert validate_record(b"x", pk) == hash_key(pk)


@pytest.mark.parametrize(
    ("pk", "count"),
    [("a" * 257, 257), ("😀" * 129, 258), ("😀" * 256, 512), ("é" * 300, 300), ("a😀" * 86, 258)],
)
def test_validate_partition_key_counts_utf16_units_like_kinesis(pk: str, count: int) -> None:
    """An emoji is one code point but two UTF-16 units: kinesis-mock refuses 129 of them."""
    assert utf16_length(pk) == count
    for check in (validate_partition_key, lambda k: validate_record(b"x", k)):
        with pytest.raises(
            ValidationError, match=f"has {count} characters as Kinesis counts"
        ) as info:
            check(pk)
        assert info.value.field == "partition_key"
        assert "the limit is 256" in str(info.value)


@pytest.mark.parametrize("pk", ["\ud800", "key-\udfff", "a" * 200 + "\udc80"])
def test_a_lone_surrogate_is_refused_naming_the_partition_key(pk: str) -> None:
    for check in (validate_partition_key, lambda k: validate_record(b"x", k)):
        with pytest.raises(ValidationError, match="lone surrogate") as info:
            check(pk)
        assert info.value.field == "partition_key"
        assert f"index {len(pk) - 1}" in str(info.value)


@given(st.text(min_size=1, max_size=300))
def test_utf16_length_is_what_utf16_encoding_takes(pk: str) -> None:
    assert utf16_length(pk) == len(pk.encode("utf-16-le", "surrogatepass")) // 2


def test_validate_partition_key_refuses_empty() -> None:
    with pytest.raises(ValidationError, match="must not be empty"):
        validate_partition_key("")


@pytest.mark.parametrize("pk", [None, b"a", 1, ["a"]])
def test_validate_partition_key_refuses_non_str(pk: object) -> None:
    with pytest.raises(ValidationError, match="must be str"):
        validate_partition_key(pk)


def test_validate_record_returns_the_hash_key() -> None:
    assert validate_record(b"x", "1") == SEED_HASH_KEYS[0]
    assert validate_record(bytearray(b"x"), "1") == SEED_HASH_KEYS[0]
    assert validate_record(memoryview(b"x"), "1") == SEED_HASH_KEYS[0]
    assert validate_record(b"", "1") == SEED_HASH_KEYS[0]


def test_validate_record_explicit_hash_key_overrides_the_partition_key() -> None:
    assert validate_record(b"x", "1", "5") == 5
    assert validate_record(b"x", "1", 0) == 0
    with pytest.raises(ValidationError) as info:
        validate_record(b"x", "1", "-5")
    assert info.value.field == "explicit_hash_key"


def test_validate_record_still_checks_the_partition_key_with_an_explicit_hash_key() -> None:
    with pytest.raises(ValidationError) as info:
        validate_record(b"x", "", "5")
    assert info.value.field == "partition_key"


def test_validate_record_limit_counts_data_plus_utf8_partition_key() -> None:
    assert validate_record(b"\0" * (MAX_RECORD_BYTES - 1), "a") == hash_key("a")
    with pytest.raises(ValidationError, match="1048577 bytes, the limit is 1048576") as info:
        validate_record(b"\0" * MAX_RECORD_BYTES, "a")
    assert info.value.field == "data"
    # "é" is two UTF-8 bytes: one character, but it tips the record over the limit.
    with pytest.raises(ValidationError, match="1048577 bytes"):
        validate_record(b"\0" * (MAX_RECORD_BYTES - 1), "é")
    assert validate_record(b"\0" * (MAX_RECORD_BYTES - 2), "é") == hash_key("é")


def test_validate_record_max_record_bytes_is_configurable() -> None:
    assert validate_record(b"\0" * 9, "a", max_record_bytes=10) == hash_key("a")
    with pytest.raises(ValidationError, match="11 bytes, the limit is 10 bytes"):
        validate_record(b"\0" * 10, "a", max_record_bytes=10)


@pytest.mark.parametrize("data", ["text", None, 1, [1]])
def test_validate_record_refuses_non_bytes_data(data: object) -> None:
    with pytest.raises(ValidationError, match="must be bytes") as info:
        validate_record(data, "a")
    assert info.value.field == "data"


def test_validate_record_counts_bytes_of_a_multibyte_memoryview() -> None:
    data = memoryview(array("I", bytes(MAX_RECORD_BYTES)))
    assert data.nbytes == MAX_RECORD_BYTES
    with pytest.raises(ValidationError):
        validate_record(data, "a")
