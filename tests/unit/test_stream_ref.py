"""StreamRef: one way to name a stream in every call, by name or by ARN."""

from __future__ import annotations

import pytest

from kinesis_core.errors import ConfigurationError
from kinesis_core.stream import StreamRef

ARN = "arn:aws:kinesis:eu-west-1:123456789012:stream/orders"


def test_a_name_is_sent_as_stream_name() -> None:
    ref = StreamRef.of("orders")
    assert ref == StreamRef("orders")
    assert ref.params() == {"StreamName": "orders"}
    assert str(ref) == "orders"
    assert ref.region is None


def test_an_arn_is_sent_as_stream_arn_and_knows_its_name() -> None:
    ref = StreamRef.of(ARN)
    assert ref.name == "orders"
    assert ref.arn == ARN
    assert ref.params() == {"StreamARN": ARN}
    assert str(ref) == ARN
    assert ref.region == "eu-west-1"


def test_other_partitions_parse() -> None:
    ref = StreamRef.of("arn:aws-cn:kinesis:cn-north-1:123456789012:stream/a.b-c_d")
    assert ref.name == "a.b-c_d"


def test_a_ref_passes_through() -> None:
    ref = StreamRef.of(ARN)
    assert StreamRef.of(ref) is ref


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "must be a stream name or ARN"),
        (None, "must be a stream name or ARN"),
        (42, "must be a stream name or ARN"),
        ("has space", "1 to 128 characters"),
        ("x" * 129, "1 to 128 characters"),
        ("arn:aws:kinesis:eu-west-1:123456789012:table/orders", "not a Kinesis stream ARN"),
        ("arn:aws:kinesis:eu-west-1:12345:stream/orders", "not a Kinesis stream ARN"),
    ],
)
def test_bad_references_name_the_field(value: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=f"^target: .*{message}"):
        StreamRef.of(value, field="target")  # type: ignore[arg-type]
