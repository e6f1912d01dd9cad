"""The fault proxy's shard limits: token buckets per shard, keyed by the shard map, and the
plan's answers for the records over them (per record in PutRecords, whole for PutRecord)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from kinesis_core.errors import ConfigurationError
from kinesis_core.local.fault_cli import build_parser, config_from_args
from kinesis_core.local.faults import Action, FaultConfig, FaultKind, FaultPlan
from kinesis_core.local.shard_limits import (
    RETRY_LISTING_AFTER,
    ShardCapacity,
    ShardLimits,
    ShardUse,
    request_stream,
)
from kinesis_core.shards.info import uniform_shards
from kinesis_core.stream import StreamRef
from tests.unit.test_faults import (
    KINESIS_JSON,
    PUT_RECORD,
    PUT_RECORDS,
    parse_with_botocore,
    upstream_put_records,
)

MIB = 1024 * 1024
SHARDS = [
    {
        "ShardId": shard.shard_id,
        "HashKeyRange": {
            "StartingHashKey": str(shard.start_hash_key),
            "EndingHashKey": str(shard.end_hash_key),
        },
        "SequenceNumberRange": {"StartingSequenceNumber": "1"},
    }
    for shard in uniform_shards(2)
]
"""Two open shards: hash keys below 2**127 go to the first, the rest to the second."""
FIRST, SECOND = "0", str(2**127)
"""Explicit hash keys that pin a record to the first or the second shard."""


def entry(data: bytes = b"x", key: str = "k", shard: str | None = FIRST) -> dict[str, Any]:
    record = {"Data": base64.b64encode(data).decode(), "PartitionKey": key}
    if shard is not None:
        record["ExplicitHashKey"] = shard
    return record


def capacity(**limits: Any) -> ShardCapacity:
    c = ShardCapacity(ShardLimits(**limits))
    c.learn("s", SHARDS, 0.0)
    return c


def test_a_shard_takes_its_records_per_second_then_refills() -> None:
    c = capacity()
    assert c.admit("s", [entry()] * 1000, 0.0) == {}
    assert list(c.admit("s", [entry()] * 3, 0.0)) == [0, 1, 2]
    assert c.admit("s", [entry()] * 500, 0.5) == {}
    assert list(c.admit("s", [entry()] * 2, 0.5)) == [0, 1]
    assert c.use() == ShardUse(1500, 1500 * 2, 5, 5 * 2)


def test_a_shard_takes_its_bytes_per_second_counting_the_partition_key() -> None:
    c = capacity()
    record = entry(b"d" * (100 * 1024 - 1), key="k")  # 100 KiB with its key
    assert c.admit("s", [record] * 10, 0.0) == {}
    assert list(c.admit("s", [record] * 2, 0.0)) == [0, 1]
    assert c.admit("s", [record], 0.1) == {}  # 0.1 s refills 104,857.6 bytes
    assert c.use().bytes == 11 * 100 * 1024


def test_shards_are_limited_apart_by_the_key_of_each_record() -> None:
    c = capacity(records_per_second=10)
    mixed = [entry(shard=FIRST)] * 12 + [entry(shard=SECOND)] * 12
    assert sorted(c.admit("s", mixed, 0.0)) == [10, 11, 22, 23]
    message = c.admit("s", [entry(shard=SECOND)], 0.0)[0]
    assert message == f"Rate exceeded for shard {SHARDS[1]['ShardId']} in stream s."
    # A partition key's MD5 decides its shard when there is no explicit hash key.
    by_key = [entry(key=f"key-{i}", shard=None) for i in range(200)]
    c = capacity(records_per_second=10)
    assert len(c.admit("s", by_key, 0.0)) == 200 - 20


def test_throttled_records_take_no_tokens() -> None:
    c = capacity(records_per_second=10)
    c.admit("s", [entry()] * 10, 0.0)
    for _ in range(100):
        assert list(c.admit("s", [entry()], 0.05)) == [0]
    assert c.admit("s", [entry()], 0.1) == {}


def test_the_burst_is_a_number_of_seconds_of_the_rate() -> None:
    c = capacity(records_per_second=10, burst_seconds=3)
    assert len(c.admit("s", [entry()] * 31, 0.0)) == 1
    assert c.admit("s", [entry()] * 30, 100.0) == {}  # refilled to the burst, not beyond


def test_a_record_larger_than_the_bucket_empties_it_and_leaves_it_in_debt() -> None:
    c = capacity()
    large = entry(b"L" * (5 * MIB))
    assert c.admit("s", [large], 0.0) == {}  # a full bucket lets a 5 MiB record through
    assert list(c.admit("s", [entry()], 3.9)) == [0]
    assert c.admit("s", [entry()], 4.1) == {}  # 4 s at 1 MiB/s paid the debt off
    assert list(c.admit("s", [large], 4.2)) == [0]  # the bucket is not full yet


def test_records_of_unknown_streams_or_keys_are_not_limited() -> None:
    c = capacity(records_per_second=1)
    assert c.admit("other", [entry()] * 50, 0.0) == {}
    assert c.admit("s", [entry(shard="not a number")] * 50, 0.0) == {}
    assert c.admit("s", [{"Data": "eA=="}] * 5, 0.0) == {}
    assert c.use().records == 105
    assert c.use().throttled_records == 0


def test_skipped_indices_are_not_checked() -> None:
    c = capacity(records_per_second=2)
    assert c.admit("s", [entry()] * 4, 0.0, skip=frozenset({0, 1})) == {}
    assert list(c.admit("s", [entry()] * 2, 0.0)) == [0, 1]


def test_shards_are_listed_again_after_the_ttl_or_a_second_after_a_failure() -> None:
    c = ShardCapacity(ShardLimits(shard_map_ttl=30))
    assert c.needs_shards("s", 0.0)
    c.learn("s", SHARDS, 0.0)
    assert not c.needs_shards("s", 29.9)
    assert c.needs_shards("s", 30.0)
    c.listing_failed("s", 30.0)
    assert not c.needs_shards("s", 30.0)
    assert c.needs_shards("s", 30.0 + RETRY_LISTING_AFTER)
    # a failed listing keeps the shards known before it
    c.admit("s", [entry()] * 1000, 30.0)
    assert c.admit("s", [entry()], 30.0) != {}


def test_sizes_come_from_the_base64_data_and_the_utf8_key() -> None:
    c = capacity()
    for data in (b"", b"a", b"ab", b"abc", b"abcd"):
        before = c.use().bytes
        c.admit("s", [entry(data, key="é")], 0.0)
        assert c.use().bytes - before == len(data) + 2


def test_limits_are_checked_naming_the_field() -> None:
    for name in ("records_per_second", "bytes_per_second", "burst_seconds", "shard_map_ttl"):
        for bad in (0, -1, float("nan"), float("inf")):
            with pytest.raises(ConfigurationError, match=name):
                ShardLimits(**{name: bad})


def test_the_stream_of_a_request_is_its_arn_or_name() -> None:
    arn = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"
    assert request_stream({"StreamARN": arn}) == StreamRef("orders", arn)
    assert request_stream({"StreamName": "orders"}) == StreamRef("orders")
    assert request_stream({"StreamName": "bad name!"}) is None
    assert request_stream({}) is None
    assert ShardUse(3, 0, 1, 0).throttled_share == 0.25
    assert ShardUse().throttled_share == 0.0


# -- the plan ----------------------------------------------------------------------------------


def put_records(*records: dict[str, Any]) -> bytes:
    return json.dumps({"StreamName": "s", "Records": list(records)}).encode()


def put_record(record: dict[str, Any]) -> bytes:
    return json.dumps({"StreamName": "s", **record}).encode()


def limited_plan(**limits: Any) -> FaultPlan:
    plan = FaultPlan(FaultConfig(shard_limits=ShardLimits(**limits)), seed=0)
    decision = plan.decide(PUT_RECORDS, put_records(entry()), KINESIS_JSON, 0.0)
    assert decision.action is Action.LEARN_SHARDS
    assert decision.stream == StreamRef("s")
    assert plan.stats().requests == {}  # nothing drawn or counted before the shards are known
    plan.learn_shards(StreamRef("s"), SHARDS, 0.0)
    return plan


def test_put_records_over_the_limit_fail_per_record_and_are_withheld() -> None:
    plan = limited_plan(records_per_second=3)
    body = put_records(*[entry(key=str(i)) for i in range(5)], entry(key="5", shard=SECOND))
    decision = plan.decide(PUT_RECORDS, body, KINESIS_JSON, 0.0)
    assert decision.action is Action.FORWARD
    assert [f.index for f in decision.record_failures] == [3, 4]
    forwarded = json.loads(decision.body)["Records"]
    assert [r["PartitionKey"] for r in forwarded] == ["0", "1", "2", "5"]
    answer = plan.finish(decision, upstream_put_records(4))
    parsed = parse_with_botocore("kinesis", "PutRecords", answer)
    assert parsed["FailedRecordCount"] == 2
    codes = [r.get("ErrorCode") for r in parsed["Records"]]
    throttled = "ProvisionedThroughputExceededException"
    assert codes == [None, None, None, throttled, throttled, None]
    assert parsed["Records"][3]["ErrorMessage"].startswith("Rate exceeded for shard shardId-")
    stats = plan.stats()
    assert stats.injected == {(FaultKind.SHARD_LIMIT, "PutRecords"): 2}
    assert stats.shard_use == ShardUse(4, 8, 2, 4)
    assert stats.summary().endswith(
        "; shard limits: 4 records (8 bytes) written, 2 throttled (33.3%)"
    )
    # every record throttled: answered without the upstream
    everything = plan.decide(PUT_RECORDS, put_records(entry(), entry()), KINESIS_JSON, 0.0)
    assert everything.action is Action.RESPOND
    assert everything.response is not None
    parsed = parse_with_botocore("kinesis", "PutRecords", everything.response)
    assert parsed["FailedRecordCount"] == 2


def test_put_record_over_the_limit_fails_whole_as_botocore_expects() -> None:
    plan = limited_plan(records_per_second=1)
    assert plan.decide(PUT_RECORD, put_record(entry()), KINESIS_JSON, 0.0).action is Action.FORWARD
    decision = plan.decide(PUT_RECORD, put_record(entry()), KINESIS_JSON, 0.0)
    assert decision.action is Action.RESPOND
    assert decision.kind is FaultKind.SHARD_LIMIT
    assert decision.response is not None
    assert decision.response.status == 400
    parsed = parse_with_botocore("kinesis", "PutRecord", decision.response)
    assert parsed["Error"]["Code"] == "ProvisionedThroughputExceededException"
    assert parsed["Error"]["Message"].startswith("Rate exceeded for shard shardId-")
    assert plan.decide(PUT_RECORD, put_record(entry()), KINESIS_JSON, 1.0).action is Action.FORWARD


def test_drawn_record_faults_come_first_and_take_no_tokens() -> None:
    config = FaultConfig.from_rates(put_record_internal_error=0.5, shard_limits=ShardLimits(10))
    plan = FaultPlan(config, seed=3)
    plan.learn_shards(StreamRef("s"), SHARDS, 0.0)
    decision = plan.decide(PUT_RECORDS, put_records(*[entry()] * 40), KINESIS_JSON, 0.0)
    codes = {f.index: f.code for f in decision.record_failures}
    drawn = [i for i, code in codes.items() if code == "InternalFailure"]
    admitted = [i for i in range(40) if i not in codes]
    assert 0 < len(drawn) < 40
    assert len(admitted) == 10
    assert all(code == "ProvisionedThroughputExceededException" for i, code in codes.items()
               if i not in drawn)  # fmt: skip
    assert [f.index for f in decision.record_failures] == sorted(codes)


def test_pause_and_other_calls_are_not_limited_and_limits_can_change() -> None:
    plan = limited_plan(records_per_second=1)
    plan.paused = True
    for _ in range(5):
        assert (
            plan.decide(PUT_RECORDS, put_records(entry()), KINESIS_JSON, 0.0).record_failures == ()
        )
    plan.paused = False
    for target in ("Kinesis_20131202.GetRecords", "Kinesis_20131202.ListShards"):
        assert (
            plan.decide(target, b'{"StreamName": "s"}', KINESIS_JSON, 0.0).action is Action.FORWARD
        )
    cbor = plan.decide(PUT_RECORDS, b"\xbf", "application/x-amz-cbor-1.1", 0.0)
    assert cbor.action is Action.FORWARD
    plan.config = FaultConfig(shard_limits=ShardLimits(records_per_second=100))
    assert plan.decide(PUT_RECORDS, put_records(entry()), KINESIS_JSON, 0.0).action is (
        Action.LEARN_SHARDS  # new limits, new buckets: the shards are listed again
    )
    plan.config = FaultConfig()
    assert (
        plan.decide(PUT_RECORDS, put_records(entry()), KINESIS_JSON, 0.0).action is Action.FORWARD
    )
    assert plan.stats().shard_use == ShardUse()


def test_a_failed_listing_lets_writes_through_and_retries_later() -> None:
    plan = FaultPlan(FaultConfig(shard_limits=ShardLimits(records_per_second=1)))
    body = put_records(entry(), entry())
    assert plan.decide(PUT_RECORDS, body, KINESIS_JSON, 0.0).action is Action.LEARN_SHARDS
    plan.listing_failed(StreamRef("s"), 0.0)
    assert plan.decide(PUT_RECORDS, body, KINESIS_JSON, 0.5).record_failures == ()
    assert plan.decide(PUT_RECORDS, body, KINESIS_JSON, 1.5).action is Action.LEARN_SHARDS


def test_cli_options_build_the_limits() -> None:
    parser = build_parser()
    assert config_from_args(parser.parse_args(["--upstream", "u"])).shard_limits is None
    args = parser.parse_args(["--upstream", "u", "--shard-limits"])
    assert config_from_args(args).shard_limits == ShardLimits()
    args = parser.parse_args(
        ["--upstream", "u", "--shard-limits", "--shard-records-per-second", "50",
         "--shard-bytes-per-second", "5000", "--shard-burst-seconds", "2"]
    )  # fmt: skip
    assert config_from_args(args).shard_limits == ShardLimits(50, 5000, 2)
    with pytest.raises(ConfigurationError, match="burst_seconds"):
        config_from_args(
            parser.parse_args(["--upstream", "u", "--shard-limits", "--shard-burst-seconds", "0"])
        )
