"""The sans-I/O fault plan of the fault proxy, and the CLI's parsing of rates."""

from __future__ import annotations

import json
import math
import zlib
from typing import Any

import botocore.session
import pytest
from botocore.awsrequest import HeadersDict
from botocore.parsers import create_parser

from kinesis_core.errors import ConfigurationError
from kinesis_core.fanout.errors import FanOutTransportError
from kinesis_core.fanout.eventstream import EventStreamDecoder
from kinesis_core.lifecycle import LifecycleError
from kinesis_core.local.fault_cli import build_parser, config_from_args
from kinesis_core.local.fault_proxy import FaultProxy
from kinesis_core.local.faults import (
    MALFORMED_KINDS,
    SHORT_BY,
    Action,
    Decision,
    FaultConfig,
    FaultKind,
    FaultPlan,
    FaultRule,
    Response,
    split_target,
)

KINESIS_JSON = "application/x-amz-json-1.1"
DYNAMODB_JSON = "application/x-amz-json-1.0"
PUT_RECORD = "Kinesis_20131202.PutRecord"
PUT_RECORDS = "Kinesis_20131202.PutRecords"
GET_RECORDS = "Kinesis_20131202.GetRecords"
LIST_SHARDS = "Kinesis_20131202.ListShards"
UPDATE_ITEM = "DynamoDB_20120810.UpdateItem"
SIGMAS = 5.0


def put_records_body(n: int) -> bytes:
    records = [{"Data": "eA==", "PartitionKey": str(i)} for i in range(n)]
    return json.dumps({"StreamName": "s", "Records": records}).encode()


def upstream_put_records(n: int, failed_at: frozenset[int] = frozenset()) -> Response:
    """What the emulator answers for n forwarded records (optionally failing some itself)."""
    results: list[dict[str, Any]] = [
        {"ErrorCode": "InternalFailure", "ErrorMessage": "upstream"}
        if i in failed_at
        else {"SequenceNumber": str(1000 + i), "ShardId": "shardId-000000000000"}
        for i in range(n)
    ]
    body = json.dumps({"FailedRecordCount": len(failed_at), "Records": results}).encode()
    return Response(200, (("Content-Type", KINESIS_JSON), ("Content-Length", "1")), body)


def within_sigmas(count: int, n: int, p: float) -> bool:
    """`count` successes of n draws at probability p, within SIGMAS standard deviations."""
    return abs(count - n * p) <= SIGMAS * math.sqrt(n * p * (1 - p))


def trace(plan: FaultPlan, requests: list[tuple[str, bytes]]) -> list[Decision]:
    return [plan.decide(target, body, KINESIS_JSON) for target, body in requests]


MIXED_REQUESTS = [
    (PUT_RECORDS, put_records_body(20)),
    (GET_RECORDS, b'{"ShardIterator": "x"}'),
    (LIST_SHARDS, b'{"StreamName": "s"}'),
    (PUT_RECORD, b'{"StreamName": "s", "Data": "eA==", "PartitionKey": "k"}'),
] * 50
EVERYTHING = FaultConfig.from_rates(
    throttle=0.1,
    limit_exceeded=0.1,
    internal_error=0.05,
    service_unavailable=0.05,
    expired_iterator=0.1,
    reset=0.05,
    stall=0.05,
    truncate=0.05,
    drip=0.05,
    lost_answer=0.05,
    put_record_throttle=0.1,
    put_record_internal_error=0.05,
    latency_ms=5,
    latency_jitter_ms=5,
    latency_rate=0.5,
)


def test_same_seed_and_requests_give_the_same_faults() -> None:
    first = trace(FaultPlan(EVERYTHING, seed=7), MIXED_REQUESTS)
    again = trace(FaultPlan(EVERYTHING, seed=7), MIXED_REQUESTS)
    other = trace(FaultPlan(EVERYTHING, seed=8), MIXED_REQUESTS)
    assert first == again
    assert first != other
    assert {d.action for d in first} == set(Action) - {Action.LEARN_SHARDS}


def test_request_fault_rates_are_honoured() -> None:
    rates = {FaultKind.THROTTLE: 0.1, FaultKind.RESET: 0.05, FaultKind.TRUNCATE: 0.2}
    plan = FaultPlan(FaultConfig(tuple(FaultRule(k, r) for k, r in rates.items())), seed=1)
    n = 10_000
    for _ in range(n):
        plan.decide(PUT_RECORD, b"{}", KINESIS_JSON)
    stats = plan.stats()
    assert stats.requests == {"PutRecord": n}
    for kind, rate in rates.items():
        assert within_sigmas(stats.injected[(kind, "PutRecord")], n, rate), kind


def test_per_record_failure_rate_is_honoured() -> None:
    plan = FaultPlan(FaultConfig.from_rates(put_record_throttle=0.2), seed=2)
    body = put_records_body(100)
    failed = 0
    for _ in range(100):
        decision = plan.decide(PUT_RECORDS, body, KINESIS_JSON)
        failed += len(decision.record_failures)
    assert within_sigmas(failed, 10_000, 0.2)
    assert plan.stats().injected == {(FaultKind.PUT_RECORD_THROTTLE, "PutRecords"): failed}


def test_latency_is_within_fixed_plus_jitter_at_its_rate() -> None:
    config = FaultConfig.from_rates(latency_ms=20, latency_jitter_ms=10, latency_rate=0.3)
    plan = FaultPlan(config, seed=3)
    delays = [plan.decide(LIST_SHARDS, b"{}", KINESIS_JSON).delay for _ in range(10_000)]
    delayed = [d for d in delays if d > 0]
    assert all(0.020 <= d <= 0.030 for d in delayed)
    assert within_sigmas(len(delayed), 10_000, 0.3)
    assert plan.stats().total(FaultKind.LATENCY) == len(delayed)


def test_one_request_gets_at_most_one_request_fault_and_then_no_record_faults() -> None:
    config = FaultConfig.from_rates(throttle=0.5, put_record_throttle=1.0)
    plan = FaultPlan(config, seed=4)
    for _ in range(200):
        decision = plan.decide(PUT_RECORDS, put_records_body(3), KINESIS_JSON)
        if decision.kind is FaultKind.THROTTLE:
            assert decision.action is Action.RESPOND
            assert decision.record_failures == ()
        else:
            assert len(decision.record_failures) == 3


def test_pause_forwards_without_drawing_or_counting() -> None:
    config = FaultConfig.from_rates(throttle=0.3, reset=0.3)
    plain = trace(FaultPlan(config, seed=5), [(PUT_RECORD, b"{}")] * 100)
    plan = FaultPlan(config, seed=5)
    paused: list[Decision] = []
    resumed: list[Decision] = []
    for i in range(100):
        resumed.append(plan.decide(PUT_RECORD, b"{}", KINESIS_JSON))
        if i == 49:
            plan.paused = True
            paused = trace(plan, [(PUT_RECORD, b"{}")] * 30)
            plan.paused = False
    assert resumed == plain
    assert all(d.action is Action.FORWARD and d.kind is None for d in paused)
    assert plan.stats().requests == {"PutRecord": 100}


def test_changing_the_config_changes_the_rates_from_then_on() -> None:
    plan = FaultPlan(seed=6)
    assert plan.decide(PUT_RECORD, b"{}", KINESIS_JSON).action is Action.FORWARD
    plan.config = FaultConfig.from_rates(internal_error=1.0)
    assert plan.decide(PUT_RECORD, b"{}", KINESIS_JSON).kind is FaultKind.INTERNAL_ERROR
    plan.reset_stats()
    assert plan.stats().total() == 0


def test_default_operations_of_each_kind() -> None:
    plan = FaultPlan(seed=0)

    def hit(kind: FaultKind, target: str, operations: frozenset[str] = frozenset()) -> bool:
        plan.config = FaultConfig((FaultRule(kind, 1.0, operations),))
        return plan.decide(target, put_records_body(1), KINESIS_JSON).action is not Action.FORWARD

    assert hit(FaultKind.THROTTLE, GET_RECORDS)
    assert hit(FaultKind.THROTTLE, UPDATE_ITEM)
    assert not hit(FaultKind.THROTTLE, LIST_SHARDS)
    assert hit(FaultKind.LIMIT_EXCEEDED, LIST_SHARDS)
    assert hit(FaultKind.LIMIT_EXCEEDED, "DynamoDB_20120810.CreateTable")
    assert not hit(FaultKind.LIMIT_EXCEEDED, PUT_RECORDS)
    assert hit(FaultKind.EXPIRED_ITERATOR, GET_RECORDS)
    assert hit(FaultKind.EXPIRED_ITERATOR, "DynamoDBStreams_20120810.GetRecords")
    assert not hit(FaultKind.EXPIRED_ITERATOR, PUT_RECORDS, frozenset({"PutRecords"}))
    assert not hit(FaultKind.PUT_RECORD_THROTTLE, PUT_RECORD)
    assert hit(FaultKind.RESET, "Logs_20140328.PutLogEvents")
    assert hit(FaultKind.LOST_ANSWER, PUT_RECORDS)
    assert not hit(FaultKind.LOST_ANSWER, PUT_RECORD)
    assert not hit(FaultKind.LOST_ANSWER, GET_RECORDS)
    assert not hit(FaultKind.LOST_ANSWER, UPDATE_ITEM)
    assert hit(FaultKind.LOST_ANSWER, UPDATE_ITEM, frozenset({"DynamoDB"}))
    # An explicit filter overrides the defaults: by operation, service or whole target.
    assert hit(FaultKind.THROTTLE, LIST_SHARDS, frozenset({"ListShards"}))
    assert hit(FaultKind.INTERNAL_ERROR, UPDATE_ITEM, frozenset({"DynamoDB"}))
    assert hit(FaultKind.INTERNAL_ERROR, UPDATE_ITEM, frozenset({UPDATE_ITEM}))
    assert not hit(FaultKind.INTERNAL_ERROR, PUT_RECORDS, frozenset({"DynamoDB"}))


def test_requests_without_target_pass_untouched_and_uncounted() -> None:
    plan = FaultPlan(FaultConfig.from_rates(reset=1.0), seed=0)
    decision = plan.decide("", b"<xml/>", "application/xml")
    assert decision == Decision(Action.FORWARD, "", b"<xml/>")
    assert plan.stats().requests == {}


def test_cbor_requests_get_only_transport_faults() -> None:
    plan = FaultPlan(FaultConfig.from_rates(throttle=1.0, put_record_throttle=1.0), seed=0)
    cbor = "application/x-amz-cbor-1.1"
    assert plan.decide(PUT_RECORDS, b"\xa0", cbor).action is Action.FORWARD
    plan.config = FaultConfig.from_rates(throttle=0.5, reset=0.5)
    kinds = {plan.decide(PUT_RECORDS, b"\xa0", cbor).kind for _ in range(50)}
    assert kinds == {FaultKind.RESET, None}


def parse_with_botocore(service: str, operation: str, response: Response) -> dict[str, Any]:
    model = botocore.session.get_session().get_service_model(service)
    raw = {"status_code": response.status, "headers": HeadersDict(response.headers)}
    parsed: dict[str, Any] = create_parser("json").parse(
        {**raw, "body": response.body}, model.operation_model(operation).output_shape
    )
    return parsed


@pytest.mark.parametrize(
    ("kind", "service", "target", "content_type", "status", "code"),
    [
        (FaultKind.THROTTLE, "kinesis", PUT_RECORD, KINESIS_JSON, 400,
         "ProvisionedThroughputExceededException"),
        (FaultKind.LIMIT_EXCEEDED, "kinesis", LIST_SHARDS, KINESIS_JSON, 400,
         "LimitExceededException"),
        (FaultKind.INTERNAL_ERROR, "kinesis", PUT_RECORD, KINESIS_JSON, 500, "InternalFailure"),
        (FaultKind.SERVICE_UNAVAILABLE, "kinesis", PUT_RECORD, KINESIS_JSON, 503,
         "ServiceUnavailable"),
        (FaultKind.EXPIRED_ITERATOR, "kinesis", GET_RECORDS, KINESIS_JSON, 400,
         "ExpiredIteratorException"),
        (FaultKind.THROTTLE, "dynamodb", UPDATE_ITEM, DYNAMODB_JSON, 400,
         "ProvisionedThroughputExceededException"),
        (FaultKind.INTERNAL_ERROR, "dynamodb", UPDATE_ITEM, DYNAMODB_JSON, 500,
         "InternalServerError"),
        (FaultKind.SERVICE_UNAVAILABLE, "dynamodb", UPDATE_ITEM, "", 503, "ServiceUnavailable"),
    ],
)  # fmt: skip
def test_error_responses_parse_as_the_service_error_in_botocore(
    kind: FaultKind, service: str, target: str, content_type: str, status: int, code: str
) -> None:
    plan = FaultPlan(FaultConfig((FaultRule(kind, 1.0),)), seed=0)
    decision = plan.decide(target, b"{}", content_type)
    assert decision.action is Action.RESPOND
    assert decision.response is not None
    headers = dict(decision.response.headers)
    expected_type = DYNAMODB_JSON if service == "dynamodb" else KINESIS_JSON
    assert headers["Content-Type"] == expected_type
    assert headers["x-amzn-ErrorType"] == code
    assert decision.response.status == status
    parsed = parse_with_botocore(service, split_target(target)[1], decision.response)
    assert parsed["Error"]["Code"] == code
    assert "injected" in parsed["Error"]["Message"]
    assert parsed["ResponseMetadata"]["RequestId"].startswith("fa017000-")


def test_failed_records_are_withheld_and_merged_back_at_their_index() -> None:
    plan = FaultPlan(FaultConfig.from_rates(put_record_throttle=0.3), seed=9)
    body = put_records_body(50)
    decision = plan.decide(PUT_RECORDS, body, KINESIS_JSON)
    failed = {f.index for f in decision.record_failures}
    assert 0 < len(failed) < 50
    forwarded = json.loads(decision.body)["Records"]
    assert [r["PartitionKey"] for r in forwarded] == [str(i) for i in range(50) if i not in failed]
    # Upstream fails the first forwarded record itself: both kinds of failure are counted.
    answer = plan.finish(decision, upstream_put_records(len(forwarded), frozenset({0})))
    merged = json.loads(answer.body)
    first_forwarded = min(set(range(50)) - failed)
    assert merged["FailedRecordCount"] == len(failed) + 1
    assert len(merged["Records"]) == 50
    for i, result in enumerate(merged["Records"]):
        if i in failed:
            assert result["ErrorCode"] == "ProvisionedThroughputExceededException"
            assert "SequenceNumber" not in result
            assert "ShardId" not in result
        elif i == first_forwarded:
            assert result["ErrorMessage"] == "upstream"
        else:
            assert "ErrorCode" not in result
    assert "Content-Length" not in dict(answer.headers)
    parsed = parse_with_botocore("kinesis", "PutRecords", answer)
    assert parsed["FailedRecordCount"] == len(failed) + 1


def test_all_records_failed_is_answered_without_upstream() -> None:
    plan = FaultPlan(FaultConfig.from_rates(put_record_internal_error=1.0), seed=0)
    decision = plan.decide(PUT_RECORDS, put_records_body(4), KINESIS_JSON)
    assert decision.action is Action.RESPOND
    assert decision.response is not None
    parsed = parse_with_botocore("kinesis", "PutRecords", decision.response)
    assert parsed["FailedRecordCount"] == 4
    assert {r["ErrorCode"] for r in parsed["Records"]} == {"InternalFailure"}


def test_finish_leaves_other_answers_alone_and_fixes_crc32() -> None:
    plan = FaultPlan(FaultConfig.from_rates(put_record_throttle=0.5), seed=1)
    decision = plan.decide(PUT_RECORDS, put_records_body(10), KINESIS_JSON)
    forwarded = len(json.loads(decision.body)["Records"])
    error = Response(400, (), b'{"__type": "ResourceNotFoundException"}')
    assert plan.finish(decision, error) is error
    garbled = upstream_put_records(forwarded + 1)
    assert plan.finish(decision, garbled) is garbled
    good = upstream_put_records(forwarded)
    with_crc = Response(200, (*good.headers, ("x-amz-crc32", "1")), good.body)
    answer = plan.finish(decision, with_crc)
    assert dict(answer.headers)["x-amz-crc32"] == str(zlib.crc32(answer.body))
    untouched = plan.decide(LIST_SHARDS, b"{}", KINESIS_JSON)
    assert plan.finish(untouched, good) is good


def test_truncation_always_cuts_something() -> None:
    plan = FaultPlan(FaultConfig.from_rates(truncate=1.0), seed=0)
    for _ in range(1000):
        decision = plan.decide(LIST_SHARDS, b"{}", KINESIS_JSON)
        assert decision.action is Action.TRUNCATE
        assert 0 <= decision.truncate_at(100) < 100


def test_stall_carries_its_duration() -> None:
    plan = FaultPlan(FaultConfig.from_rates(stall=1.0, stall_seconds=2.5), seed=0)
    decision = plan.decide(LIST_SHARDS, b"{}", KINESIS_JSON)
    assert (decision.action, decision.stall_seconds) == (Action.STALL, 2.5)


def test_a_lost_answer_forwards_the_request_untouched_and_then_drops_the_answer() -> None:
    plan = FaultPlan(FaultConfig.from_rates(lost_answer=0.1, put_record_throttle=0.5), seed=3)
    body = put_records_body(10)
    decisions = [plan.decide(PUT_RECORDS, body, KINESIS_JSON) for _ in range(2000)]
    lost = [d for d in decisions if d.kind is FaultKind.LOST_ANSWER]
    assert within_sigmas(len(lost), 2000, 0.1)
    # The whole request goes upstream: no record is withheld, so every one is written.
    assert {(d.action, d.body, d.record_failures) for d in lost} == {(Action.LOSE_ANSWER, body, ())}
    assert plan.stats().injected[(FaultKind.LOST_ANSWER, "PutRecords")] == len(lost)


def test_overlapping_filtered_rates_are_scaled_to_one() -> None:
    rules = (
        FaultRule(FaultKind.THROTTLE, 0.8, frozenset({"PutRecord"})),
        FaultRule(FaultKind.RESET, 0.8, frozenset({"Kinesis"})),
    )
    plan = FaultPlan(FaultConfig(rules), seed=0)
    kinds = [plan.decide(PUT_RECORD, b"{}", KINESIS_JSON).kind for _ in range(10_000)]
    assert None not in kinds
    assert within_sigmas(kinds.count(FaultKind.THROTTLE), 10_000, 0.5)


def test_bad_configs_are_refused_naming_the_field() -> None:
    with pytest.raises(ConfigurationError, match="throttle"):
        FaultRule(FaultKind.THROTTLE, 1.5)
    with pytest.raises(ConfigurationError, match="rules"):
        FaultConfig.from_rates(throttle=0.6, reset=0.6)
    with pytest.raises(ConfigurationError, match="rules"):
        FaultConfig.from_rates(put_record_throttle=0.6, put_record_internal_error=0.6)
    with pytest.raises(ConfigurationError, match="stall_seconds"):
        FaultConfig(stall_seconds=-1)
    with pytest.raises(ConfigurationError, match="latency_ms"):
        FaultConfig(latency_ms=float("nan"))


def test_stats_summary_names_kinds_and_operations() -> None:
    plan = FaultPlan(FaultConfig.from_rates(internal_error=1.0), seed=0)
    plan.decide(PUT_RECORD, b"{}", KINESIS_JSON)
    plan.decide(LIST_SHARDS, b"{}", KINESIS_JSON)
    plan.decide(LIST_SHARDS, b"{}", KINESIS_JSON)
    stats = plan.stats()
    assert stats.by_kind() == {FaultKind.INTERNAL_ERROR: 3}
    assert stats.summary() == (
        "faults injected: internal_error=3 (ListShards=2, PutRecord=1); requests seen: 3"
    )
    assert FaultPlan().stats().summary() == "faults injected: none; requests seen: 0"


def test_cli_arguments_build_the_config() -> None:
    args = build_parser().parse_args(
        [
            "--upstream", "http://127.0.0.1:1",
            "--throttle", "0.1",
            "--throttle", "0.5@GetRecords,DynamoDB",
            "--put-record-throttle", "0.05",
            "--reset", "0.01",
            "--only", "Kinesis",
            "--latency-ms", "20",
            "--stall-seconds", "3",
        ]
    )  # fmt: skip
    config = config_from_args(args)
    kinesis = frozenset({"Kinesis"})
    assert config.rules == (
        FaultRule(FaultKind.THROTTLE, 0.1, kinesis),
        FaultRule(FaultKind.THROTTLE, 0.5, frozenset({"GetRecords", "DynamoDB"})),
        FaultRule(FaultKind.RESET, 0.01, kinesis),
        FaultRule(FaultKind.PUT_RECORD_THROTTLE, 0.05, kinesis),
        FaultRule(FaultKind.LATENCY, 1.0, kinesis),
    )
    assert (config.latency_ms, config.stall_seconds) == (20, 3)


@pytest.mark.parametrize("bad", ["1.5", "x", "-0.1@PutRecords"])
def test_cli_refuses_bad_rates(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--upstream", "u", "--throttle", bad])
    assert exc.value.code == 2
    assert "--throttle" in capsys.readouterr().err


def test_proxy_refuses_a_bad_upstream_and_has_no_endpoint_before_start() -> None:
    with pytest.raises(ConfigurationError, match="upstream_url"):
        FaultProxy("127.0.0.1:4567")
    proxy = FaultProxy("http://127.0.0.1:4567")
    with pytest.raises(LifecycleError, match=r"FaultProxy is new: cannot give its endpoint_url"):
        _ = proxy.endpoint_url


@pytest.mark.parametrize("kind", MALFORMED_KINDS)
def test_each_malformed_answer_is_what_its_name_says(kind: FaultKind) -> None:
    config = FaultConfig((FaultRule(kind, 1.0, frozenset({"GetRecords"})),), drip_seconds=0.5)
    decision = FaultPlan(config).decide(GET_RECORDS, b'{"ShardIterator": "x"}', KINESIS_JSON)
    assert decision.kind is kind
    if kind is FaultKind.SHORT_BODY:
        assert decision.action is Action.TRUNCATE
        assert decision.truncate_at(100) == 100 - SHORT_BY
        return
    if kind is FaultKind.DRIP:
        assert (decision.action, decision.drip_seconds) == (Action.DRIP, 0.5)
        return
    assert decision.action is Action.RESPOND
    assert decision.response is not None
    body = decision.response.body
    if kind is FaultKind.BINARY_5XX:
        assert decision.response.status == 500
        with pytest.raises(UnicodeDecodeError):
            body.decode("utf-8")
        return
    assert decision.response.status == 200
    expected = {
        FaultKind.EMPTY_ANSWER: b"{}",
        FaultKind.NOT_JSON: b"not JSON",
        FaultKind.HTML_PAGE: b"<html>",
    }[kind]
    assert body.startswith(expected)


@pytest.mark.parametrize("kind", [FaultKind.EMPTY_ANSWER, FaultKind.NOT_JSON])
def test_a_subscription_gets_its_malformed_answer_as_one_event(kind: FaultKind) -> None:
    plan = FaultPlan(FaultConfig((FaultRule(kind, 1.0),)))
    decision = plan.decide("Kinesis_20131202.SubscribeToShard", b"{}", KINESIS_JSON)
    assert decision.response is not None
    decoder = EventStreamDecoder()
    body = decision.response.body
    while body:
        wanted = decoder.bytes_wanted()
        decoder.feed(body[:wanted])
        body = body[wanted:]
    if kind is FaultKind.EMPTY_ANSWER:
        event = decoder.next_event()
        assert event is not None
        assert event.continuation_sequence_number is None
    else:
        with pytest.raises(FanOutTransportError, match="malformed SubscribeToShardEvent"):
            decoder.next_event()


def test_whole_answer_faults_never_touch_a_subscription() -> None:
    for kind in (FaultKind.SHORT_BODY, FaultKind.DRIP):
        assert not FaultRule(kind, 1.0).applies("Kinesis", "SubscribeToShard", "")
