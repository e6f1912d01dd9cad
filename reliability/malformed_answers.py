"""The consumer under malformed answers: nothing lost, no shard ended early, the consumer alive.

A fault proxy in front of kinesis-mock answers a share of the reads with something that is not
an answer (:data:`~kinesis_core.local.faults.MALFORMED_KINDS`: an empty 200 ``{}``, a 200 that
is not JSON, a captive portal's HTML page, a body 5 bytes short of its Content-Length, a 500
whose body is not UTF-8, an answer dripped a byte at a time), on three read paths in turn:
polling with the lean GetRecords, polling through botocore, and enhanced fan-out (its
subscriptions get the empty and the non-JSON event, the HTML page and the binary 500). Half
the records are written before the consumer starts, half while it reads.

Checks: every record written is delivered (lost = never delivered); no SHARD_END is stored
for a shard that ListShards shows open; the consumer reads to the end without raising.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from kinesis_core.checkpoint.base import SHARD_END
from kinesis_core.consumer import TRIM_HORIZON, Consumer, EnhancedFanOut
from kinesis_core.local.fault_proxy import FaultProxy
from kinesis_core.local.faults import MALFORMED_KINDS, FaultConfig, FaultKind, FaultRule
from kinesis_core.local.streams import LocalStream
from kinesis_core.producer import Producer, ProducerConfig
from reliability._common import MakeStream, faults_injected, payload, record_id, via
from reliability.consumer_faults import RecordingStore
from reliability.result import SuiteResult

NAME = "consumer under malformed answers"
READ_TIMEOUT = 1.0
"""Polling legs: a dripped answer is cut two read timeouts after its request."""
RATE = 0.04
"""Per kind and call: a quarter of the reads get one malformed answer or another."""
FAN_OUT_KINDS = tuple(k for k in MALFORMED_KINDS if k not in (FaultKind.SHORT_BODY, FaultKind.DRIP))
"""A subscription is a stream: a cut or slow one is the stream_* faults' (consumer_faults)."""
LEGS = ("polling, lean", "polling, botocore", "fan-out")
MIN_FAULTS = 8
"""Malformed answers each leg reads through at least (idle polls and renewals get them too)."""


def faults(leg: str) -> FaultConfig:
    """Every malformed kind at :data:`RATE` on the reads of ``leg``."""
    if leg == "fan-out":
        rules = tuple(
            FaultRule(k, RATE * 3, frozenset({"SubscribeToShard"})) for k in FAN_OUT_KINDS
        )
    else:
        reads = frozenset({"GetRecords", "GetShardIterator"})
        rules = tuple(FaultRule(k, RATE, reads) for k in MALFORMED_KINDS)
    return FaultConfig(rules, drip_seconds=0.2)


async def _produce(stream: LocalStream, first: int, count: int) -> set[int]:
    records = [(payload(i, 50), f"k{i % 50}") for i in range(first, first + count)]
    config = ProducerConfig(aggregation_enabled=False)  # one Kinesis record each: more calls
    async with Producer(
        stream.name, client_config=stream.client_config, producer_config=config
    ) as producer:
        results = await producer.put_many(records)
    return {record_id(d) for (d, _), r in zip(records, results, strict=True) if r.success}


async def _leg(
    stream: LocalStream, proxy: FaultProxy, leg: str, records: int, deadline: float
) -> tuple[set[int], set[int], RecordingStore, BaseException | None]:
    """Written ids, delivered ids, the store, and what the consumer raised (None)."""
    store = RecordingStore(lambda: 0, random.Random(0), 0.0)  # noqa: S311 - fails nothing
    options: dict[str, Any] = {
        "client_config": via(stream.client_config, proxy.endpoint_url, read_timeout=READ_TIMEOUT),
        "checkpoint_store": store,
        "initial_position": TRIM_HORIZON,
        "checkpoint_interval": 0.2,
        "idle_interval": 0.2,
        "max_records_per_call": 10,  # many calls: many faults
        "lean_get_records": leg != "polling, botocore",
    }
    if leg == "fan-out":
        # kinesis-mock sends an event a second: a one-second read timeout would cut them.
        options["client_config"] = via(stream.client_config, proxy.endpoint_url)
        options["enhanced_fan_out"] = EnhancedFanOut(
            consumer_name="malformed",
            deregister_on_close=True,
            max_failures=60,
            max_subscription_seconds=5.0,  # renewals: more subscriptions to fault
        )
    written = await _produce(stream, 0, records // 2)
    producing = asyncio.create_task(_produce(stream, records // 2, records - records // 2))
    delivered: set[int] = set()
    raised: BaseException | None = None
    try:
        async with Consumer(stream.name, **options) as consumer:
            while time.monotonic() < deadline:
                everything = producing.done() and delivered >= written | producing.result()
                if everything and faults_injected(proxy.stats()) >= MIN_FAULTS:
                    break
                try:
                    record = await asyncio.wait_for(consumer.__anext__(), 1.0)
                except asyncio.TimeoutError:
                    continue
                delivered.add(record_id(record.data))
                record.ack()
    except Exception as exc:  # the row reports it: the consumer must not stop
        raised = exc
    written |= await producing
    return written, delivered, store, raised


def consumer_under_malformed_answers(
    make_stream: MakeStream, *, records: int = 600, seed: int = 3, timeout: float = 120.0
) -> SuiteResult:
    result = SuiteResult(NAME)
    started = time.monotonic()
    per_leg = timeout / len(LEGS)
    for number, leg in enumerate(LEGS):
        stream = make_stream(2)
        with FaultProxy(stream.endpoint_url, faults(leg), seed=seed) as proxy:
            written, delivered, store, raised = asyncio.run(
                _leg(stream, proxy, leg, records, started + per_leg * (number + 1))
            )
            stats = proxy.stats()
        injected = faults_injected(stats)
        result.faults += injected
        result.attempted += len(written)
        result.delivered += len(written & delivered)
        result.lost += len(written - delivered)
        result.note(
            f"{leg}: {len(written & delivered)} of {len(written)} delivered; {stats.summary()}"
        )
        if injected < MIN_FAULTS:
            result.problem(f"{leg}: {injected} malformed answers injected, fewer than {MIN_FAULTS}")
        if raised is not None:
            result.problem(f"{leg}: the consumer stopped: {type(raised).__name__}: {raised}")
        open_shards = {s["ShardId"] for s in stream.shards(open_only=True)}
        ended = {w.shard_id for w in store.writes if w.value is SHARD_END}
        if ended & open_shards:
            result.problem(f"{leg}: SHARD_END stored for open shards {sorted(ended & open_shards)}")
    result.seconds = time.monotonic() - started
    return result
