"""The asyncio Producer when things go wrong, against the in-memory Kinesis: auth errors fail
fast (at start and after), a record the service refuses fails alone while the rest of its
request is written, a dead endpoint is backed off instead of hammered, an aggregate that lands on
a shard the map does not know is decided exactly, and preserve_order holds across retries."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from kinesis_core.aws.classify import ERROR_CODES, ErrorKind
from kinesis_core.errors import ConfigurationError, KinesisConnectorError
from kinesis_core.lifecycle import State
from kinesis_core.producer import (
    WRONG_SHARD,
    BlockingProducer,
    Producer,
    ProducerConfig,
    ProducerFailedError,
)
from kinesis_core.stream import StreamRef
from tests.fakes.clock import RecordingClock
from tests.fakes.kinesis import Entry, FakeKinesis, client_error
from tests.helpers.producer import FAST, check_landed, producer, records, run

AUTH_CODES = sorted(code for code, kind in ERROR_CODES.items() if kind is ErrorKind.AUTH)
AUTH_CASES = [(code, 400) for code in AUTH_CODES] + [("403", 403), ("Forbidden", 403)]
"""Every auth code of the error table, and a bare HTTP 403 (a code the table does not know)."""
ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"


# -- auth errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(("code", "status"), AUTH_CASES)
def test_start_raises_at_once_naming_an_auth_error(code: str, status: int) -> None:
    fake = FakeKinesis()
    fake.faults["ListShards"] = [client_error(code, "the credentials say no", "ListShards", status)]

    async def main() -> None:
        async with producer(fake):
            pass

    with pytest.raises(KinesisConnectorError) as info:
        run(main, limit=5.0)
    assert fake.count("ListShards") == 1  # not retried for 30 s
    message = str(info.value)
    assert code in message
    assert "the credentials say no" in message
    assert "credentials" in message
    assert "permission" in message
    assert "Producer('stream') could not start" in message


@pytest.mark.parametrize(("code", "status"), AUTH_CASES)
def test_an_auth_error_fails_every_accepted_record_at_once_and_stops_the_producer(
    code: str, status: int
) -> None:
    fake = FakeKinesis(shards=2, delay=0.01)

    def refuse(entries: list[Entry]) -> dict[str, Any]:
        raise client_error(code, "denied", "PutRecords", status)

    fake.script.append(refuse)

    async def main() -> Any:
        async with producer(fake, record_ttl=30.0) as p:
            batch = await p.put_many(records(50))
            with pytest.raises(ProducerFailedError) as info:
                await p.put(b"more", "k")
            return batch, info.value, p.state

    batch, error, state = run(main, limit=5.0)  # not after the 30 s TTL
    assert batch.failed_count == 50
    assert {r.error_code for _, r in batch.failures} == {code}
    assert all(r.attempt_count == 1 for _, r in batch.failures)
    assert "denied" in (batch[0].error_message or "")
    assert error.code == code
    assert code in str(error)
    assert "denied" in str(error)
    assert state is State.FAILED
    assert len(fake.requests) == 1


def test_an_auth_error_on_one_record_stops_everything_too() -> None:
    fake = FakeKinesis(shards=2)
    denied = {"ErrorCode": "KMSAccessDeniedException", "ErrorMessage": "key policy"}
    fake.script.append(lambda entries: {"Records": [denied] * len(entries)})

    async def main() -> Any:
        async with producer(fake) as p:
            return await p.put_many(records(10))

    batch = run(main)
    assert {r.error_code for _, r in batch.failures} == {"KMSAccessDeniedException"}


# -- a record the service refuses ---------------------------------------------------------------


class Picky(FakeKinesis):
    """Refuses a whole request (InvalidArgumentException) when it holds a record whose key or
    data contains ``bad``, as the service does for a key it finds too long."""

    def __init__(self, bad: bytes, **kw: Any) -> None:
        super().__init__(**kw)
        self.bad = bad

    async def put_records(self, *, Records: list[Entry], **kwargs: Any) -> dict[str, Any]:
        if any(self.bad in e["Data"] or self.bad.decode() in e["PartitionKey"] for e in Records):
            self.requests.append(Records)
            raise client_error(
                "InvalidArgumentException", "Partition key must be between 1 and 256 in length"
            )
        return await super().put_records(Records=Records, **kwargs)


@pytest.mark.parametrize("aggregation", [False, True])
def test_fifty_good_records_are_written_and_the_one_refused_fails_at_once(
    aggregation: bool,
) -> None:
    fake = Picky(b"BAD", shards=2)
    good = records(50)
    sent = [*good[:25], (b"BAD data", "bad-key"), *good[25:]]

    async def main() -> Any:
        async with producer(fake, aggregation_enabled=aggregation, record_ttl=30.0) as p:
            return await p.put_many(sent)

    batch = run(main, limit=5.0)
    assert batch.succeeded_count == 50
    ((index, failed),) = batch.failures
    assert index == 25
    assert failed.error_code == "InvalidArgumentException"
    assert failed.error_message == "Partition key must be between 1 and 256 in length"
    assert failed.attempt_count <= 8  # one per halving, never retried as such
    check_landed(fake, [batch[i] for i in range(51) if i != 25], good)
    assert len(fake.requests) <= 2 * 8 + 2


# -- a dead endpoint ------------------------------------------------------------------------------


class Down(FakeKinesis):
    """No connection possible until ``up`` is set; counts the attempts."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.up = False
        self.refused = 0

    async def put_records(self, *, Records: list[Entry], **kwargs: Any) -> dict[str, Any]:
        if not self.up:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                await asyncio.sleep(0.005)
                self.refused += 1
                raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9")
            finally:
                self.in_flight -= 1
        return await super().put_records(Records=Records, **kwargs)


@pytest.mark.slow
def test_a_dead_endpoint_is_backed_off_one_request_at_a_time_and_recovers() -> None:
    random.seed(7)
    fake = Down(shards=4)
    config = {"retry_backoff_base": 0.05, "retry_backoff_max": 0.5, "max_connections": 24}

    async def main() -> Any:
        async with producer(fake, collection_max_count=10, **config) as p:
            futures = [await p.submit_many(records(20, prefix=f"b{i}-")) for i in range(10)]
            await asyncio.sleep(3.0)
            refused, in_flight = fake.refused, fake.max_in_flight
            fake.up = True
            return refused, in_flight, await asyncio.gather(*futures)

    refused, max_in_flight, batches = run(main)
    # Without a backoff: 24 connections retrying every 50 ms, about 1,400 attempts in 3 s.
    assert refused < 60
    assert max_in_flight <= 24  # the first burst; then one probe at a time
    assert all(b.ok for b in batches)
    results = [r for b in batches for r in b]
    assert max(r.attempt_count for r in results) < 30
    assert any("Could not connect" in (a.error_message or "") for r in results for a in r.attempts)


@pytest.mark.slow
def test_after_the_first_failures_only_one_request_is_in_flight() -> None:
    random.seed(3)
    fake = Down(shards=4)

    async def main() -> None:
        async with producer(fake, collection_max_count=1, retry_backoff_max=0.2) as p:
            futures = [await p.submit(b"x", f"k{i}") for i in range(20)]
            await asyncio.sleep(0.3)  # the first burst failed
            fake.max_in_flight = 0
            await asyncio.sleep(1.0)
            assert fake.max_in_flight == 1
            fake.up = True
            await asyncio.gather(*futures)

    run(main)


@pytest.mark.slow
def test_start_reports_an_endpoint_that_does_not_answer_within_seconds() -> None:
    fake = FakeKinesis()
    fake.faults["ListShards"] = [EndpointConnectionError(endpoint_url="http://127.0.0.1:9")] * 4

    async def main() -> None:
        async with producer(fake):
            pass

    with pytest.raises(KinesisConnectorError) as info:
        run(main, limit=10.0)  # not the 30 s of start_timeout
    assert fake.count("ListShards") == 3
    assert "no answer from the endpoint after 3 attempts" in str(info.value)
    assert "Could not connect to the endpoint URL" in str(info.value)


# -- the stream argument --------------------------------------------------------------------------


def test_a_stream_arn_names_the_stream_by_its_arn_in_every_call() -> None:
    fake = FakeKinesis(shards=2)

    async def main() -> Any:
        async with Producer(ARN, client=fake, producer_config=ProducerConfig(**FAST)) as p:
            assert (p.stream_name, p.stream.arn) == ("orders", ARN)
            return await p.put_many(records(20))

    assert run(main).ok
    assert fake.calls
    for _, _, params in fake.calls:
        assert params.get("StreamARN") == ARN or "NextToken" in params
        assert "StreamName" not in params


def test_a_stream_id_goes_with_every_call_that_names_the_stream() -> None:
    fake = FakeKinesis(shards=2)
    stream = StreamRef("orders", stream_id="abcdefghij0123456789-abc")

    async def main() -> Any:
        async with Producer(stream, client=fake, producer_config=ProducerConfig(**FAST)) as p:
            return await p.put_many(records(20))

    assert run(main).ok
    ops = {call.operation for call in fake.calls}
    assert ops == {"ListShards", "DescribeStreamSummary", "PutRecords"}
    for call in fake.calls:
        assert call.params["StreamId"] == "abcdefghij0123456789-abc"
        assert call.params["StreamName"] == "orders"


def test_producers_take_a_name_or_an_arn_and_nothing_else() -> None:
    fake = FakeKinesis(shards=1)
    with pytest.raises(ConfigurationError, match=r"^stream: must be a stream name or ARN"):
        Producer(None, client=fake)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="stream_name"):
        Producer("orders", stream_name="orders", client=fake)  # type: ignore[call-arg]
    with BlockingProducer(ARN, client=fake) as p:
        assert p.stream_name == "orders"
        assert p.put(b"x", "k").success


# -- landing on a shard the map does not know -----------------------------------------------------


def test_a_merge_behind_the_producers_back_writes_every_aggregate_once() -> None:
    """The merged child's range holds every record predicted for either parent: written."""
    fake = FakeKinesis(shards=2)
    sent = records(2000)

    async def main() -> Any:
        async with producer(fake) as p:
            fake.merge("shardId-000000000000", "shardId-000000000001")
            batch = await p.put_many(sent)
            return batch, p.metrics()

    batch, metrics = run(main)
    assert batch.ok
    assert all(r.attempt_count == 1 for r in batch)
    assert WRONG_SHARD not in metrics.errors_by_code
    check_landed(fake, list(batch), sent)
    stored = [r for r in fake.read_all(kcl=False)]
    assert len(stored) == len(sent)  # no duplicate


def test_a_landing_on_a_shard_born_and_closed_between_refreshes_is_decided() -> None:
    """AT_LATEST never lists that shard: a listing of every shard (AT_TRIM_HORIZON) does."""
    fake = FakeKinesis(shards=1)
    parent = "shardId-000000000000"
    children: list[str] = []

    def split_write_merge(entries: list[Entry]) -> dict[str, Any]:
        children.extend(fake.split(parent))
        response = fake.accept(entries)  # lands on a child
        fake.merge(*children)  # gone before the producer's map refresh lists it
        return response

    fake.script.append(split_write_merge)
    sent = [(b"r%d" % i, f"k{i}") for i in range(300)]

    async def main() -> Any:
        async with producer(fake) as p:
            batch = await p.put_many(sent)
            return batch

    batch = run(main)
    assert batch.ok
    assert {"Type": "AT_TRIM_HORIZON"} in fake.shard_filters
    check_landed(fake, list(batch), sent)
    kcl = {(r.partition_key, r.data) for r in fake.read_all(kcl=True)}
    assert {(pk, data) for data, pk in sent} <= kcl


class _ListingsFail(FakeKinesis):
    """The listings of every shard (AT_TRIM_HORIZON) fail ``failures`` times, then work."""

    def __init__(self, failures: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.failures = failures

    async def list_shards(self, **params: Any) -> dict[str, Any]:
        every = params.get("ShardFilter") == {"Type": "AT_TRIM_HORIZON"}
        if every and self.failures:
            self.failures -= 1
            raise client_error("InternalFailure", "a hiccup", "ListShards", 500)
        return await super().list_shards(**params)


def test_the_landing_lookup_retries_its_listing_on_the_producers_clock() -> None:
    """The listing of every shard that decides a landing fails three times: it is tried
    again after waits of the injected clock (on the retry policy's schedule), then decides."""
    fake = _ListingsFail(3, shards=1)
    parent = "shardId-000000000000"

    def split_write_merge(entries: list[Entry]) -> dict[str, Any]:
        children = fake.split(parent)
        response = fake.accept(entries)
        fake.merge(*children)
        return response

    fake.script.append(split_write_merge)
    sent = [(b"r%d" % i, f"k{i}") for i in range(100)]
    clock = RecordingClock()

    async def main() -> Any:
        config = ProducerConfig(**FAST)
        async with Producer("stream", client=fake, producer_config=config, clock=clock) as p:
            return await p.put_many(sent)

    batch = clock.run(main())
    assert batch.ok
    check_landed(fake, list(batch), sent)
    assert fake.failures == 0
    listings = [f for f in fake.shard_filters if f == {"Type": "AT_TRIM_HORIZON"}]
    assert len(listings) == 1  # the three that failed raised before the fake logged them
    ceilings = [1.0, 2.0, 4.0]  # LANDING_LISTING_RETRY: full jitter below 1, 2, 4 s
    retries = [w for w in clock.waits if w <= 4.0]
    assert len(retries) >= 3
    assert any(
        all(0 <= w <= c for w, c in zip(clock.waits[i : i + 3], ceilings, strict=True))
        for i in range(len(clock.waits) - 2)
    )


# -- preserve_order ------------------------------------------------------------------------


def flaky(fake: FakeKinesis, rng: random.Random) -> Any:
    codes = ["InternalFailure", "ProvisionedThroughputExceededException"]

    def behave(entries: list[Entry]) -> dict[str, Any]:
        out = []
        for e in entries:
            if rng.random() < 0.3:
                out.append({"ErrorCode": rng.choice(codes), "ErrorMessage": "flaky"})
            else:
                out.append(fake.write(e))
        return {"Records": out}

    return behave


def out_of_order(sent: list[tuple[bytes, str]], batches: list[Any]) -> int:
    """Records written before a record of the same key put earlier."""
    last: dict[str, tuple[str, int, int]] = {}
    behind = 0
    for (_, key), result in zip(sent, [r for b in batches for r in b], strict=True):
        assert result.success
        where = (result.shard_id, *result.position)
        if key in last and where < last[key]:
            behind += 1
        last[key] = max(where, last.get(key, where))
    return behind


@pytest.mark.parametrize("aggregation", [True, False])
def test_preserve_order_keeps_each_keys_order_across_retries(aggregation: bool) -> None:
    def produce(preserve: bool) -> int:
        rng = random.Random(5)
        fake = FakeKinesis(shards=2)
        fake.script.extend([flaky(fake, rng)] * 10_000)
        sent = [(b"%d" % i, f"key-{i % 7}") for i in range(600)]

        async def main() -> Any:
            async with producer(
                fake,
                preserve_order=preserve,
                aggregation_enabled=aggregation,
                aggregation_max_count=8,
                retry_backoff_base=0.001,
                retry_backoff_max=0.01,
            ) as p:
                return [await p.submit_many(sent[i : i + 20]) for i in range(0, 600, 20)]

        async def gather() -> Any:
            return await asyncio.gather(*await main())

        return out_of_order(sent, run(gather, limit=60.0))

    assert produce(preserve=False) > 0  # the check can fail: retries do reorder
    assert produce(preserve=True) == 0


def test_preserve_order_sends_one_record_per_shard_at_a_time() -> None:
    class Watching(FakeKinesis):
        """Fails the test if two records of one shard are ever in flight together."""

        def __init__(self) -> None:
            super().__init__(shards=2, delay=0.01)
            self.busy: set[str] = set()
            self.overlaps = 0

        async def put_records(self, *, Records: list[Entry], **kwargs: Any) -> dict[str, Any]:
            shards = [self.route(e).shard_id for e in Records]
            self.overlaps += len(shards) != len(set(shards)) or bool(self.busy & set(shards))
            self.busy.update(shards)
            try:
                return await super().put_records(Records=Records, **kwargs)
            finally:
                self.busy.difference_update(shards)

    def produce(preserve: bool) -> int:
        fake = Watching()

        async def main() -> Any:
            async with producer(fake, preserve_order=preserve, aggregation_enabled=False) as p:
                return await p.put_many(records(40))

        assert run(main).ok
        return fake.overlaps

    assert produce(preserve=False) > 0
    assert produce(preserve=True) == 0
