"""The asyncio Producer against an in-memory Kinesis: results, bad input, backpressure, expiry,
shutdown, crashes, flush, resharding and throttling."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kinesis_core.errors import ValidationError
from kinesis_core.producer import (
    EXPIRED,
    INTERNAL,
    PRODUCER_CLOSED,
    SHUTDOWN,
    VALIDATION_ERROR,
    MetricsSnapshot,
    Producer,
    ProducerClosedError,
    ProducerConfig,
    ProducerCrashedError,
    PutFailedError,
    Record,
)
from kinesis_core.producer.result import THROTTLED
from kinesis_core.shards.hashing import MAX_HASH_KEY
from tests.fakes.kinesis import Entry, FakeKinesis, client_error
from tests.helpers.producer import FAST, check_landed, producer, records, run

# -- results -------------------------------------------------------------------------------


def test_put_and_put_many_report_where_every_record_landed() -> None:
    fake = FakeKinesis(shards=4)
    sent = records(3000)

    async def main() -> tuple[Any, Any]:
        async with producer(fake) as p:
            one = await p.put(b"solo", "solo-key")
            batch = await p.put_many(sent)
            return one, batch

    one, batch = run(main)
    assert one.success
    assert one.attempts[0].success
    assert batch.ok
    assert len(batch) == 3000
    assert batch.failures == []
    check_landed(fake, [one, *batch], [(b"solo", "solo-key"), *sent])
    # Aggregated: far fewer Kinesis records than user records.
    assert sum(len(r) for r in fake.requests) < 100


def test_explicit_hash_keys_route_records() -> None:
    fake = FakeKinesis(shards=2)

    async def main() -> Any:
        async with producer(fake) as p:
            return await p.put_many(
                [Record(b"a", "same", 0), Record(b"b", "same", str(MAX_HASH_KEY - 1))]
            )

    batch = run(main)
    assert batch.shard_ids == ["shardId-000000000000", "shardId-000000000001"]
    assert {r.data for r in fake.read_all()} == {b"a", b"b"}


def test_records_go_out_unaggregated_when_aggregation_is_off() -> None:
    fake = FakeKinesis(shards=2)

    async def main() -> Any:
        async with producer(fake, aggregation_enabled=False) as p:
            return await p.put_many(records(20))

    batch = run(main)
    assert batch.ok
    assert set(batch.sub_sequence_numbers) == {0}
    assert sum(len(r) for r in fake.requests) == 20
    assert not any(r.aggregated for r in fake.read_all())


BAD_INPUTS: list[tuple[Any, str]] = [
    (("text", "k"), "data"),
    ((None, "k"), "data"),
    ((b"d", ""), "partition_key"),
    ((b"d", 7), "partition_key"),
    ((b"d", "k" * 257), "partition_key"),
    ((b"d" * (1024 * 1024), "k"), "data"),
    ((b"d", "k", "12a"), "explicit_hash_key"),
    ((b"d", "k", -1), "explicit_hash_key"),
    ((b"d", "k", MAX_HASH_KEY + 1), "explicit_hash_key"),
    ((b"d", "k", 1.5), "explicit_hash_key"),
]


@pytest.mark.parametrize(("args", "field"), BAD_INPUTS)
def test_put_refuses_bad_input_and_the_producer_goes_on(args: tuple[Any, ...], field: str) -> None:
    fake = FakeKinesis()

    async def main() -> Any:
        async with producer(fake) as p:
            pending = await p.submit(b"before", "k")
            with pytest.raises(ValidationError) as info:
                await p.put(*args)
            assert info.value.field == field
            return await pending, await p.put(b"after", "k"), p.outstanding_records

    before, after, outstanding = run(main)
    assert before.success
    assert after.success
    assert outstanding == 0


def test_put_many_fails_bad_records_alone() -> None:
    fake = FakeKinesis()
    bad = [args for args, _ in BAD_INPUTS] + [None, (b"only-data",), (b"a", "b", None, "d"), 42]
    good = records(len(bad))
    mixed: list[Any] = [x for pair in zip(good, bad, strict=False) for x in pair]

    async def main() -> Any:
        async with producer(fake) as p:
            return await p.put_many(mixed)

    batch = run(main)
    assert sorted(i for i, _ in batch.failures) == list(range(1, len(mixed), 2))
    assert all(r.error_code == VALIDATION_ERROR and r.attempts == () for _, r in batch.failures)
    assert "partition_key" in (batch[5].error_message or "")
    assert batch.succeeded_count == len(good)
    check_landed(fake, [batch[i] for i in range(0, len(mixed), 2)], good)
    with pytest.raises(PutFailedError, match="record"):
        batch.raise_for_failures()


MALFORMED: list[tuple[Any, str]] = [
    ((b"b",), "got a tuple of 1 element: partition_key (element 1) is missing"),
    ([b"b"], "got a list of 1 element: partition_key (element 1) is missing"),
    ((), "got a tuple of 0 elements: data (element 0) is missing"),
    ((b"a", "b", None, "d", "e"), "got a tuple of 5 elements, one too many (at most 4)"),
    ((b"a", "b", None, "d", "e", "f"), "got a tuple of 6 elements, 2 too many (at most 4)"),
    (None, "got None"),
    (42, "got int 42"),
    ("not a tuple", "got str 'not a tuple'"),
]


@pytest.mark.parametrize(("entry", "problem"), MALFORMED)
def test_a_malformed_put_many_entry_says_what_is_wrong_with_it(entry: Any, problem: str) -> None:
    async def main() -> Any:
        async with producer(FakeKinesis()) as p:
            return await p.put_many([entry])

    ((index, result),) = run(main).failures
    assert index == 0
    assert result.error_code == VALIDATION_ERROR
    assert result.error_message == (
        "record: must be a (data, partition_key[, explicit_hash_key[, record_id]]) tuple; "
        f"{problem}"
    )


def test_put_many_accepts_any_iterable_and_an_empty_batch() -> None:
    fake = FakeKinesis()

    async def main() -> tuple[Any, Any]:
        async with producer(fake) as p:
            return await p.put_many(iter(records(5))), await p.put_many([])

    five, empty = run(main)
    assert five.ok
    assert len(five) == 5
    assert len(empty) == 0
    assert empty.ok


# -- backpressure --------------------------------------------------------------------------


def test_backpressure_keeps_outstanding_records_and_bytes_within_the_budget() -> None:
    fake = FakeKinesis(shards=4, delay=0.01)
    seen: list[tuple[int, int]] = []

    async def main() -> Any:
        async with producer(
            fake, max_outstanding_records=500, max_outstanding_bytes=1024 * 1024
        ) as p:

            async def watch() -> None:
                while True:
                    seen.append((p.outstanding_records, p.outstanding_bytes))
                    await asyncio.sleep(0.001)

            watcher = asyncio.create_task(watch())
            futures = [await p.submit_many(records(1000, size=1000)) for _ in range(5)]
            singles = [await p.submit(b"z" * 1000, f"s{i}") for i in range(300)]
            results = await asyncio.gather(*futures, *singles)
            watcher.cancel()
            return results

    results = run(main)
    assert all(r.ok for r in results[:5])
    assert all(r.success for r in results[5:])
    assert max(r for r, _ in seen) <= 500
    assert max(b for _, b in seen) <= 1024 * 1024
    assert max(r for r, _ in seen) > 100  # it did fill up


def test_a_batch_stopped_by_the_byte_budget_waits_instead_of_spinning() -> None:
    fake = FakeKinesis(shards=2, delay=0.01)
    config = {"max_outstanding_records": 1_000_000, "max_outstanding_bytes": 1024 * 1024}

    async def main() -> list[Any]:
        async with producer(fake, **config) as p:
            futures = [await p.submit_many(records(1000, size=900)) for _ in range(8)]
            assert p.outstanding_bytes <= 1024 * 1024
            return list(await asyncio.gather(*futures))

    assert all(batch.ok for batch in run(main))


def test_submit_waits_for_room_before_accepting() -> None:
    fake = FakeKinesis(shards=1)
    gate = asyncio.Event()

    async def main() -> None:
        async with producer(fake, max_outstanding_records=10) as p:
            original = fake.put_records

            async def gated(**kwargs: Any) -> dict[str, Any]:
                await gate.wait()
                return await original(**kwargs)

            fake.put_records = gated  # type: ignore[method-assign]
            first = await p.submit_many(records(10))
            blocked = asyncio.create_task(p.submit(b"late", "late"))
            await asyncio.sleep(0.1)
            assert not blocked.done()
            assert p.outstanding_records == 10
            gate.set()
            late = await blocked
            assert (await first).ok
            assert (await late).success

    run(main)


# -- expiry --------------------------------------------------------------------------------


def test_records_that_keep_failing_expire_with_their_attempts() -> None:
    fake = FakeKinesis(shards=2)
    throttle = {"ErrorCode": THROTTLED, "ErrorMessage": "Rate exceeded"}
    fake.script.extend([lambda entries: {"Records": [throttle] * len(entries)}] * 1000)

    async def main() -> Any:
        async with producer(fake, record_ttl=0.3) as p:
            return await p.put_many(records(50))

    batch = run(main)
    assert batch.failed_count == 50
    result = batch[0]
    assert result.error_code == EXPIRED
    assert "Rate exceeded" in (result.error_message or "")
    codes = [a.error_code for a in result.attempts]
    assert codes[-1] == EXPIRED
    assert codes[:-1] == [THROTTLED] * (len(codes) - 1)
    assert len(codes) >= 3


def test_records_expire_while_the_limiter_holds_them() -> None:
    fake = FakeKinesis(shards=1)

    async def main() -> Any:
        config = {"rate_limit": 1, "aggregation_enabled": False, "record_ttl": 0.3}
        async with Producer(
            "stream",
            client=fake,
            producer_config=ProducerConfig(record_max_buffered_time=0.01, **config),
        ) as p:
            return await p.put_many(records(40)), p.metrics()

    batch, metrics = run(main)
    expired = [r for _, r in batch.failures]
    assert batch.succeeded_count >= 10
    assert expired
    assert all(r.error_code == EXPIRED and "limiter" in (r.error_message or "") for r in expired)
    assert metrics.user_record_expired == len(expired)


# -- shutdown ------------------------------------------------------------------------------


def test_close_waits_for_outstanding_records() -> None:
    fake = FakeKinesis(shards=2, delay=0.1)

    async def main() -> Any:
        p = producer(fake, record_max_buffered_time=0.5)
        await p.start()
        future = await p.submit_many(records(100))
        await p.close()
        return future.result(), p

    batch, p = run(main)
    assert batch.ok
    assert p.outstanding_records == 0
    assert p.closed


def test_close_with_a_timeout_fails_what_is_left_with_a_clear_code() -> None:
    fake = FakeKinesis(shards=2, delay=60)

    async def main() -> Any:
        p = producer(fake)
        await p.start()
        batch = await p.submit_many(records(100))
        single = await p.submit(b"one", "one")
        await p.close(timeout=0.2)
        return batch.result(), single.result()

    batch, single = run(main)
    assert batch.failed_count == 100
    assert not single.success
    assert {r.error_code for _, r in batch.failures} == {SHUTDOWN}
    assert single.error_code == SHUTDOWN
    assert "timeout=0.2" in (single.error_message or "")


def test_put_after_close_is_refused() -> None:
    fake = FakeKinesis()

    async def main() -> None:
        async with producer(fake) as p:
            pass
        with pytest.raises(ProducerClosedError):
            await p.put(b"x", "k")
        with pytest.raises(ProducerClosedError):
            await p.put_many([(b"x", "k")])
        await p.close()  # closing twice is fine

    run(main)


def test_closing_fails_the_unaccepted_rest_of_a_waiting_batch() -> None:
    fake = FakeKinesis(shards=1, delay=0.2)

    async def main() -> Any:
        p = producer(fake, max_outstanding_records=10)
        await p.start()
        task = asyncio.create_task(p.put_many(records(30)))
        await asyncio.sleep(0.05)
        await p.close()
        return await task

    batch = run(main)
    assert batch.succeeded_count == 10
    assert {r.error_code for _, r in batch.failures} == {PRODUCER_CLOSED}
    assert len(batch) == 30


def test_cancelling_a_waiting_put_many_does_not_leave_a_flush_hanging() -> None:
    fake = FakeKinesis(shards=1, delay=0.05)

    async def main() -> None:
        async with producer(fake, max_outstanding_records=10) as p:
            task = asyncio.create_task(p.put_many(records(30)))
            await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await p.flush()
            assert p.outstanding_records == 0

    run(main)


# -- crashes -------------------------------------------------------------------------------


def test_a_crash_fails_outstanding_records_and_surfaces() -> None:
    fake = FakeKinesis(shards=1)
    fake.script.append(lambda entries: {"Records": [{"SequenceNumber": "1"}] * len(entries)})

    async def main() -> Any:
        p = producer(fake)
        await p.start()
        batch = await p.submit_many(records(20))
        result = await batch
        with pytest.raises(ProducerCrashedError):
            await p.flush()
        with pytest.raises(ProducerCrashedError):
            await p.put(b"x", "k")
        with pytest.raises(ProducerCrashedError):
            await p.close()
        return result, p

    batch, p = run(main)
    assert batch.failed_count == 20
    assert {r.error_code for _, r in batch.failures} == {INTERNAL}
    assert isinstance(p.error, KeyError)


# -- flush ---------------------------------------------------------------------------------


def test_flush_sends_at_once_and_waits_for_earlier_records() -> None:
    fake = FakeKinesis(shards=2)

    async def main() -> Any:
        async with producer(fake, record_max_buffered_time=30.0, record_ttl=60.0) as p:
            futures = [await p.submit(b"x", f"k{i}") for i in range(10)]
            await asyncio.sleep(0.05)
            assert not any(f.done() for f in futures)  # buffered for up to 30 s
            await p.flush()
            assert all(f.done() for f in futures)
            await p.flush()  # nothing outstanding: returns at once
            return [f.result() for f in futures]

    results = run(main)
    assert all(r.success for r in results)


# -- retries, resharding, throttling -------------------------------------------------------


def test_a_failed_request_is_retried_with_its_history() -> None:
    fake = FakeKinesis(shards=2)

    def fail(entries: list[Entry]) -> dict[str, Any]:
        raise client_error("InternalFailure", "try again")

    fake.script.append(fail)

    async def main() -> Any:
        async with producer(fake) as p:
            return await p.put(b"x", "k")

    result = run(main)
    assert result.success
    assert [(a.success, a.error_code) for a in result.attempts] == [
        (False, "InternalFailure"),
        (True, None),
    ]


def test_a_split_behind_the_producers_back_retries_whole_aggregates() -> None:
    fake = FakeKinesis(shards=1)
    sent = records(2000)

    async def main() -> Any:
        async with producer(fake) as p:
            fake.split("shardId-000000000000")  # the producer still predicts the parent
            batch = await p.put_many(sent)
            again = await p.put_many(records(200, prefix="after"))
            return batch, again, p.metrics()

    batch, again, metrics = run(main)
    assert batch.ok
    assert again.ok
    check_landed(fake, list(batch), sent)
    assert metrics.errors_by_code.get("Wrong Shard", 0) >= 1
    assert fake.count("ListShards") >= 2
    retried = [r for r in batch if len(r.attempts) > 1]
    assert retried
    assert all(r.attempts[0].error_code == "Wrong Shard" for r in retried)
    # After the refresh, records are predicted for the children: one attempt each.
    assert all(len(r.attempts) == 1 for r in again)
    kcl = {(r.partition_key, r.data) for r in fake.read_all(kcl=True)}
    assert {(pk, data) for data, pk in sent} <= kcl


def test_a_throttled_shard_is_slowed_down_and_its_records_still_land() -> None:
    fake = FakeKinesis(shards=2)
    throttled = {"ErrorCode": THROTTLED, "ErrorMessage": "Rate exceeded"}

    def throttle_first_shard(entries: list[Entry]) -> dict[str, Any]:
        out = []
        for e in entries:
            if fake.route(e).shard_id == "shardId-000000000000":
                out.append(throttled)
            else:
                out.append(fake.write(e))
        return {"Records": out}

    fake.script.extend([throttle_first_shard] * 3)

    async def main() -> Any:
        async with producer(fake, rate_limit=150) as p:
            batch = await p.put_many(records(200))
            return batch, p._require_pipeline().limiter.multiplier("shardId-000000000000")

    batch, multiplier = run(main)
    assert batch.ok
    assert multiplier < 1.0
    assert max(len(r.attempts) for r in batch) >= 2


# -- metrics -------------------------------------------------------------------------------


def test_metrics_snapshot_and_hook() -> None:
    fake = FakeKinesis(shards=2)
    snapshots: list[MetricsSnapshot] = []

    async def main() -> MetricsSnapshot:
        async with Producer(
            "stream",
            client=fake,
            producer_config=ProducerConfig(metrics_interval=0.1, **FAST),
            on_metrics=snapshots.append,
        ) as p:
            await p.put_many(records(500))
            await asyncio.sleep(0.25)
            return p.metrics()

    final = run(main)
    assert len(snapshots) >= 2  # periodic, plus one at close
    kpl = final.as_kpl_metrics()
    assert kpl["UserRecordsReceived"] == 500
    assert kpl["UserRecordsPut"] == 500
    assert kpl["UserRecordsPending"] == 0
    assert kpl["ErrorsByCode"] == {}
    assert kpl["KinesisRecordsPut"] < 500
    assert kpl["UserRecordsPerKinesisRecord"]["mean"] > 1
    assert kpl["RetriesPerRecord"]["max"] == 0
    assert kpl["UserRecordExpired"] == 0
    assert kpl["BufferingTime"]["count"] == 500
    assert sum(kpl["UserRecordsPutByShard"].values()) == 500
    delta = final.since(snapshots[0])
    assert delta.user_records_put == 500 - snapshots[0].user_records_put


def test_a_failing_metrics_hook_does_not_hurt_the_producer() -> None:
    fake = FakeKinesis()

    def broken(snapshot: MetricsSnapshot) -> None:
        raise RuntimeError("exporter down")

    async def main() -> Any:
        async with Producer(
            "stream",
            client=fake,
            producer_config=ProducerConfig(metrics_interval=0.1),
            on_metrics=broken,
        ) as p:
            await asyncio.sleep(0.15)
            return await p.put(b"x", "k")

    assert run(main).success


def test_a_cancelled_result_future_does_not_disturb_the_others() -> None:
    fake = FakeKinesis()

    async def main() -> Any:
        async with producer(fake) as p:
            cancelled = await p.submit(b"x", "a")
            cancelled.cancel()
            return await p.put(b"y", "b")

    assert run(main).success


def test_start_fails_for_a_missing_stream() -> None:
    class Missing(FakeKinesis):
        async def list_shards(self, **kwargs: Any) -> dict[str, Any]:
            raise client_error("ResourceNotFoundException", "no stream", "ListShards")

    async def main() -> None:
        with pytest.raises(Exception, match="no stream"):
            async with producer(Missing()):
                pass

    run(main)


def test_the_producer_makes_its_client_with_botocore_retries_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import contextlib

    from kinesis_core.aws import client as client_module
    from kinesis_core.aws.config import ClientConfig

    made: list[tuple[ClientConfig, int | None]] = []
    fake = FakeKinesis()

    @contextlib.asynccontextmanager
    async def create(config: ClientConfig, *, max_attempts: int | None = None) -> Any:
        made.append((config, max_attempts))
        yield fake

    monkeypatch.setattr(client_module, "create_kinesis_client", create)
    base = ClientConfig(region_name="us-east-1", endpoint_url="http://127.0.0.1:1")
    config = ProducerConfig(max_connections=7, request_timeout=2.5, connect_timeout=1.5, **FAST)

    async def main() -> Any:
        async with Producer("stream", client_config=base, producer_config=config) as p:
            return await p.put(b"x", "k")

    assert run(main).success
    ((client_config, max_attempts),) = made
    assert max_attempts == 1
    assert client_config.max_pool_connections == 7
    # A socket read may wait as long as the largest request (10 MiB, a 13.3 MiB body) may
    # take; each request has its own timeout for its size.
    assert client_config.read_timeout == config.request_timeout_for(10 * 1024 * 1024)
    assert client_config.read_timeout == pytest.approx(2.5 + (40 / 3 - 1) * 2.0)
    assert client_config.connect_timeout == 1.5
    assert client_config.endpoint_url == base.endpoint_url
