"""Answers that are not answers (issue 37, parts 1, 2 and the drip of part 8), through the fault
proxy in front of a real server: an empty 200 ``{}``, a 200 that is not JSON, a captive
portal's HTML page, a body 5 bytes short of its Content-Length, a 500 whose body is not UTF-8,
an answer dripped a byte at a time.

Each one used to end an open shard (SHARD_END stored, the records written after it never
delivered) or kill the consumer with a decode error; now each is a transient failure: the
reader backs off and reads on from where it was, nothing is lost, SHARD_END is never stored
for an open shard, and the consumer keeps running.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from kinesis_core.aggregation import deaggregate
from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.checkpoint.base import SHARD_END
from kinesis_core.consumer import TRIM_HORIZON, Consumer, EnhancedFanOut
from kinesis_core.local import LocalStream
from kinesis_core.local.fault_proxy import FaultProxy
from kinesis_core.local.faults import MALFORMED_KINDS, FaultConfig, FaultKind, FaultRule
from kinesis_core.producer import Producer, ProducerConfig
from reliability._common import via

pytestmark = pytest.mark.integration

HANG = 60.0
"""A guard: every case recovers within seconds."""
FAULTS = 2
"""Bad answers injected in a row before the proxy lets answers through again."""
READ_TIMEOUT = 1.0
"""The client's read timeout here: a dripped answer is cut 2 x this after it was asked for."""
APP = "malformed"


def config_of(kind: FaultKind, operation: str) -> FaultConfig:
    return FaultConfig((FaultRule(kind, 1.0, frozenset({operation})),), drip_seconds=0.3)


async def wait_for_faults(proxy: FaultProxy, kind: FaultKind) -> None:
    """Until the proxy injected :data:`FAULTS` of ``kind``; then no more faults."""
    while proxy.stats().total(kind) < FAULTS:  # noqa: ASYNC110  # counters on the proxy's thread
        await asyncio.sleep(0.05)
    proxy.configure(FaultConfig())


def read_all(
    stream: LocalStream,
    proxy: FaultProxy,
    kind: FaultKind,
    read_timeout: float = READ_TIMEOUT,
    **options: Any,
) -> tuple[set[bytes], MemoryCheckpointStore, int]:
    """Read ``before`` (written first) through the faults, then ``after`` (written once the
    faults stopped); the records delivered, the store, and the bad answers counted."""
    store = MemoryCheckpointStore()
    seen: set[bytes] = set()
    bad_answers: list[int] = []

    async def main() -> None:
        faults = asyncio.create_task(wait_for_faults(proxy, kind))  # start() may meet them
        async with Consumer(
            stream.name,
            client_config=via(stream.client_config, proxy.endpoint_url, read_timeout=read_timeout),
            checkpoint_store=store,
            application_name=APP,
            initial_position=TRIM_HORIZON,
            idle_interval=0.2,
            **options,
        ) as consumer:

            async def take(wanted: bytes) -> None:
                while wanted not in seen:
                    record = await consumer.__anext__()
                    seen.add(record.data)
                    record.ack()

            await asyncio.wait_for(faults, HANG)
            await asyncio.wait_for(take(b"before"), HANG)
            await asyncio.to_thread(stream.put, b"after", "k")
            await asyncio.wait_for(take(b"after"), HANG)
            bad_answers.extend(s.bad_answers for s in consumer.status())

    stream.put(b"before", "k")
    asyncio.run(main())
    return seen, store, sum(bad_answers)


def stored(store: MemoryCheckpointStore, stream: LocalStream) -> list[Any]:
    rows = asyncio.run(store.list(APP, stream.name))
    return [row.value for row in rows]


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "botocore"])
@pytest.mark.parametrize("kind", MALFORMED_KINDS, ids=lambda k: k.value)
def test_a_bad_get_records_answer_is_retried_and_never_ends_the_shard(
    moto_stream: Callable[..., LocalStream],
    fault_proxy: Callable[..., FaultProxy],
    kind: FaultKind,
    lean: bool,
) -> None:
    stream = moto_stream(1)
    proxy = fault_proxy(stream.endpoint_url, config_of(kind, "GetRecords"))
    seen, store, _ = read_all(stream, proxy, kind, lean_get_records=lean)
    assert seen == {b"before", b"after"}
    assert SHARD_END not in stored(store, stream)


@pytest.mark.parametrize("kind", MALFORMED_KINDS, ids=lambda k: k.value)
def test_a_bad_get_shard_iterator_answer_is_retried_and_never_ends_the_shard(
    moto_stream: Callable[..., LocalStream],
    fault_proxy: Callable[..., FaultProxy],
    kind: FaultKind,
) -> None:
    stream = moto_stream(1)
    proxy = fault_proxy(stream.endpoint_url, config_of(kind, "GetShardIterator"))
    seen, store, bad_answers = read_all(stream, proxy, kind)
    assert seen == {b"before", b"after"}
    assert SHARD_END not in stored(store, stream)
    if kind is FaultKind.EMPTY_ANSWER:  # no iterator, the shard open: counted in the status
        assert bad_answers >= FAULTS


FAN_OUT_KINDS = [k for k in MALFORMED_KINDS if k not in (FaultKind.SHORT_BODY, FaultKind.DRIP)]
"""A subscription's answer is a stream: cut and slow streams are the stream_* faults'."""


@pytest.mark.parametrize("kind", FAN_OUT_KINDS, ids=lambda k: k.value)
def test_a_bad_subscription_answer_is_retried_and_never_ends_the_shard(
    kinesis_stream: Callable[..., LocalStream],
    fault_proxy: Callable[..., FaultProxy],
    kind: FaultKind,
) -> None:
    stream = kinesis_stream(1)
    proxy = fault_proxy(stream.endpoint_url, config_of(kind, "SubscribeToShard"))
    efo = EnhancedFanOut(consumer_name=f"malformed-{kind.value}", deregister_on_close=True)
    # kinesis-mock sends an event a second: a read timeout of a second would cut them.
    seen, store, _ = read_all(stream, proxy, kind, read_timeout=10.0, enhanced_fan_out=efo)
    assert seen == {b"before", b"after"}
    assert SHARD_END not in stored(store, stream)


@pytest.mark.parametrize("kind", MALFORMED_KINDS, ids=lambda k: k.value)
def test_a_bad_put_records_answer_is_retried_and_every_record_lands_once_at_least(
    moto_stream: Callable[..., LocalStream],
    fault_proxy: Callable[..., FaultProxy],
    kind: FaultKind,
) -> None:
    stream = moto_stream(1)
    proxy = fault_proxy(stream.endpoint_url, config_of(kind, "PutRecords"))

    async def main() -> list[Any]:
        config = ProducerConfig(request_timeout=2 * READ_TIMEOUT + 1)
        client_config = via(stream.client_config, proxy.endpoint_url, read_timeout=READ_TIMEOUT)
        async with Producer(
            stream.name, client_config=client_config, producer_config=config
        ) as producer:
            puts = [producer.put(b"r%d" % i, f"k{i}") for i in range(20)]
            results = asyncio.gather(*puts)
            await asyncio.wait_for(wait_for_faults(proxy, kind), HANG)
            return list(await asyncio.wait_for(results, HANG))

    results = asyncio.run(main())
    assert all(r.success for r in results), [r for r in results if not r.success][:3]
    assert any(len(r.attempts) > 1 for r in results)
    landed = {r.data for r in deaggregate(stream.records(), stream.name)}
    assert landed == {b"r%d" % i for i in range(20)}


@pytest.mark.parametrize("kind", [FaultKind.EMPTY_ANSWER, FaultKind.NOT_JSON])
def test_a_bad_listing_never_makes_a_shard_look_gone(
    moto_stream: Callable[..., LocalStream],
    fault_proxy: Callable[..., FaultProxy],
    kind: FaultKind,
) -> None:
    stream = moto_stream(1)
    proxy = fault_proxy(stream.endpoint_url, config_of(kind, "ListShards"))
    seen, store, _ = read_all(stream, proxy, kind, shard_refresh_interval=0.5)
    assert seen == {b"before", b"after"}
    assert SHARD_END not in stored(store, stream)
