"""The executors against the in-memory Kinesis: every page of a call, each page under the
caller's retry policy, a log line only for a retry that comes, the history on the error that
ends the retries, and the look at the stream that the links of one executor share."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from botocore.exceptions import ClientError

from kinesis_core.aws.calls import DescribeStreamSummary, ListShards
from kinesis_core.aws.classify import ErrorKind
from kinesis_core.aws.exceptions import error_kind
from kinesis_core.aws.executor import LISTING_RETRY, AsyncExecutor, SyncExecutor, list_all_shards
from kinesis_core.aws.retry import RetryPolicy
from kinesis_core.consumer.links import async_link, consumer_look, take_look, take_look_sync
from kinesis_core.consumer.transport import CheckStream
from kinesis_core.errors import KinesisServiceError, MalformedResponseError
from kinesis_core.stream import StreamRef
from tests.fakes.clock import FakeClock
from tests.fakes.kinesis import FakeKinesis, client_error

STREAM = StreamRef.of("stream")


def throttled() -> ClientError:
    return client_error("LimitExceededException", operation="ListShards")


def retry_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]


def test_every_page_is_asked_for_and_later_pages_name_only_the_token() -> None:
    fake = FakeKinesis(5)
    shards = SyncExecutor(fake.sync).execute(ListShards(STREAM, {"Type": "AT_LATEST"}))
    assert [s.shard_id for s in shards] == list(fake.shards)
    params = [call.params for call in fake.calls]
    assert params[0] == {
        "MaxResults": 1000,
        "StreamName": "stream",
        "ShardFilter": {"Type": "AT_LATEST"},
    }
    assert all(set(p) == {"NextToken", "MaxResults"} for p in params[1:])
    assert len(params) == 3  # two shards a page


def test_a_page_is_retried_as_the_policy_says_and_only_retries_are_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeKinesis(3)
    fake.faults["ListShards"] += [throttled(), throttled()]
    clock = FakeClock()
    executor = AsyncExecutor(fake, clock=clock)
    with caplog.at_level(logging.WARNING, logger="kinesis_core"):
        shards = clock.run(executor.execute(ListShards(STREAM), LISTING_RETRY))
    assert len(shards) == 3
    assert fake.count("ListShards") == 4  # two refused, then two pages
    lines = retry_lines(caplog)
    assert len(lines) == 2
    assert lines[0].startswith("ListShards of stream failed (LimitExceededException: scripted)")


def test_when_the_retries_end_the_error_carries_their_history(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeKinesis(1)
    fake.faults["ListShards"] += [throttled() for _ in range(5)]
    with (
        caplog.at_level(logging.WARNING, logger="kinesis_core"),
        pytest.raises(ClientError) as info,
    ):
        FakeClock().run(list_all_shards(fake, STREAM, max_attempts=3))
    assert len(retry_lines(caplog)) == 2  # three attempts: two retries announced
    (note,) = info.value.__notes__
    assert note.startswith("retried: 3 failed attempts over ")
    assert "(LimitExceededException x3)" in note
    wrapped = KinesisServiceError.wrap(info.value, "listing stream")
    assert str(wrapped).endswith(note)


def test_what_no_retry_fixes_raises_at_once_without_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeKinesis(1)
    fake.faults["DescribeStreamSummary"].append(client_error("AccessDeniedException"))
    executor = SyncExecutor(fake.sync)
    with (
        caplog.at_level(logging.WARNING, logger="kinesis_core"),
        pytest.raises(ClientError) as info,
    ):
        executor.execute(DescribeStreamSummary(STREAM), RetryPolicy(attempts=None))
    assert fake.count("DescribeStreamSummary") == 1
    assert retry_lines(caplog) == []
    assert not hasattr(info.value, "__notes__")  # no attempt before it: no history


def test_without_a_policy_a_call_is_sent_once() -> None:
    fake = FakeKinesis(1)
    fake.faults["ListShards"].append(throttled())
    with pytest.raises(ClientError):
        SyncExecutor(fake.sync).execute(ListShards(STREAM))
    assert fake.count("ListShards") == 1


def test_the_links_of_one_executor_share_one_look_at_the_stream() -> None:
    fake = FakeKinesis(4)
    clock = FakeClock()

    async def main() -> Any:
        executor = AsyncExecutor(fake, clock=clock)
        links = [async_link(executor, STREAM, shard_id) for shard_id in fake.shards]
        views = await asyncio.gather(*(link.call(CheckStream()) for link in links))
        assert fake.count("DescribeStreamSummary") == 1
        await asyncio.sleep(1.5)  # older than VIEW_MAX_AGE: looked at again
        await links[0].call(CheckStream())
        assert fake.count("DescribeStreamSummary") == 2
        return views

    views = clock.run(main())
    assert all(view is views[0] for view in views)
    assert [s.shard_id for s in views[0].shards] == list(fake.shards)
    assert views[0].facts.retention_hours == 24


def test_a_consumer_check_of_a_consumer_not_found_says_so() -> None:
    class Kinesis:
        def describe_stream_consumer(self, **params: Any) -> Any:
            raise client_error("ResourceNotFoundException", operation="DescribeStreamConsumer")

    arn = "arn:aws:kinesis:us-east-1:123456789012:stream/orders/consumer/reader:1700000000"
    executor = SyncExecutor(Kinesis())
    check = take_look_sync(executor, consumer_look(executor, arn))
    assert (check.status, check.gone, check.consumer_name, check.stream) == (
        None,
        True,
        "reader",
        "orders",
    )


def test_shared_consumer_looks_are_one_call_per_listing_max_age_and_fresh_ones_always_call() -> (
    None
):
    """The fan-out readers' periodic looks at their consumer share one DescribeStreamConsumer
    answer for ``listing_max_age`` seconds (a stream of many shards would spend the call's
    rate otherwise); a look after a ResourceNotFound is always fresh."""
    arn = "arn:aws:kinesis:us-east-1:123456789012:stream/orders/consumer/reader:1700000000"
    calls: list[str] = []

    class Kinesis:
        async def describe_stream_consumer(self, **params: Any) -> Any:
            calls.append(params["ConsumerARN"])
            return {"ConsumerDescription": {"ConsumerStatus": "ACTIVE", "ConsumerARN": arn}}

    clock = FakeClock()

    async def main() -> None:
        executor = AsyncExecutor(Kinesis(), clock=clock, listing_max_age=15.0)
        looks = [
            await take_look(executor, consumer_look(executor, arn, shared=True)) for _ in range(5)
        ]
        assert {look.status for look in looks} == {"ACTIVE"}
        assert len(calls) == 1
        await take_look(executor, consumer_look(executor, arn))
        assert len(calls) == 2
        await asyncio.sleep(16)
        await take_look(executor, consumer_look(executor, arn, shared=True))
        assert len(calls) == 3

    clock.run(main())


@pytest.mark.parametrize("answer", [{}, {"message": "<html>captive portal</html>"}])
def test_a_listing_answer_without_shards_is_a_transient_malformed_response(answer: Any) -> None:
    with pytest.raises(MalformedResponseError, match="ListShards") as raised:
        ListShards(StreamRef.of("orders")).parse(answer)
    assert error_kind(raised.value) is ErrorKind.TRANSIENT
