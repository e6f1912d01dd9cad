"""The server stopped for several seconds and started again: producer and consumer resume alone.

kinesis-mock runs with persistence; a producer puts records continuously and a consumer reads
and acks them continuously. The server is stopped (its data saved), stays down for ``outage``
seconds, and starts again on the same port. Nobody restarts the producer or the consumer.

The clients talk to the server directly: ``KinesisMock.stop()`` first closes every connection
and refuses new ones, then waits for a snapshot taken after that, so every write it acknowledged
is in the restarted server, and the clients see the outage as a server that refuses
connections.

With ``fan_out``, the consumer reads by enhanced fan-out: its subscriptions break with the
server and are made again once it is back.

Checks: every record the producer reports written is in the stream after the restart and is
delivered by the consumer; the producer's failures are only records whose TTL ran out (the TTL
is longer than the outage, so there should be none); both resumed by themselves (the producer
writes, the consumer delivers records put after the restart).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer, EnhancedFanOut
from kinesis_core.local import KinesisMock
from kinesis_core.local.streams import LocalStream
from kinesis_core.producer import EXPIRED, BatchResult, Producer, ProducerConfig
from reliability._common import kcl_view, payload, record_id
from reliability.result import SuiteResult

NAME = "server restart"
NAME_FAN_OUT = "server restart (fan-out)"
BATCH = 20
PERIOD = 0.05
"""Seconds between two put_many calls of the producer (about 400 records/s)."""


class _Run:
    """The producer's and the consumer's sides of one run, and the clock of the outage."""

    def __init__(self, stream: LocalStream, outage: float, ttl: float, fan_out: bool) -> None:
        self.stream = stream
        self.fan_out: EnhancedFanOut | bool = fan_out and EnhancedFanOut(
            consumer_name="restart", closed_check_interval=1.0, max_failures=60
        )
        self.client_config = stream.client_config
        self.outage = outage
        self.config = ProducerConfig(record_ttl=ttl)
        self.put: list[tuple[float, BatchResult]] = []
        self.delivered: Counter[int] = Counter()
        self.positions: set[tuple[str, int, int]] = set()
        self.redelivered = 0
        """Deliveries of a position already delivered (the consumer read it twice)."""
        self.delivered_at: dict[int, float] = {}
        self.restarted_at = float("inf")
        self.stop_producing = asyncio.Event()
        self.consumer: Consumer | None = None
        self.started = asyncio.Event()
        """Set once the consumer has started: the outage must not cut its start short (a
        start that fails raises, as it should, and is not what this suite measures)."""
        self.stuck: list[str] = []
        """The consumer's shard status, if it had not delivered everything in time."""

    async def produce(self) -> None:
        async with Producer(
            self.stream.name, client_config=self.client_config, producer_config=self.config
        ) as p:
            pending = []
            i = 0
            while not self.stop_producing.is_set():
                batch = [(payload(n, 100), f"k{n % 101}") for n in range(i, i + BATCH)]
                pending.append((time.monotonic(), await p.submit_many(batch)))
                i += BATCH
                await asyncio.sleep(PERIOD)
            self.put = [(at, await future) for at, future in pending]

    async def consume(self, written: asyncio.Future[set[int]]) -> None:
        async with Consumer(
            self.stream.name,
            client_config=self.client_config,
            checkpoint_store=MemoryCheckpointStore(),
            initial_position=TRIM_HORIZON,
            checkpoint_interval=0.5,
            idle_interval=0.2,
            close_timeout=1.0,
            enhanced_fan_out=self.fan_out,
        ) as consumer:
            self.consumer = consumer
            self.started.set()
            while not (written.done() and set(self.delivered) >= written.result()):
                try:
                    record = await asyncio.wait_for(consumer.__anext__(), 0.5)
                except asyncio.TimeoutError:
                    continue
                n = record_id(record.data)
                where = (record.shard_id, *record.position)
                self.redelivered += where in self.positions
                self.positions.add(where)
                self.delivered[n] += 1
                self.delivered_at.setdefault(n, time.monotonic())
                record.ack()


async def _restart(
    server: KinesisMock, run: _Run, before: float, after: float, limit: float
) -> None:
    written: asyncio.Future[set[int]] = asyncio.get_running_loop().create_future()
    consumer = asyncio.create_task(run.consume(written))
    producer = asyncio.create_task(run.produce())
    started = asyncio.create_task(run.started.wait())
    await asyncio.wait([started, consumer], return_when=asyncio.FIRST_COMPLETED)
    if consumer.done():  # its start failed: raise that
        started.cancel()
        await consumer
    await asyncio.sleep(before)
    await asyncio.to_thread(server.stop)
    await asyncio.sleep(run.outage)
    await asyncio.to_thread(server.start)
    run.restarted_at = time.monotonic()
    await asyncio.sleep(after)
    run.stop_producing.set()
    await producer
    # Record n is the n-th record put (its payload starts with n).
    written.set_result(
        {n for n, r in enumerate(r for _, batch in run.put for r in batch) if r.success}
    )
    try:
        await asyncio.wait_for(consumer, limit)
    except asyncio.TimeoutError:
        assert run.consumer is not None
        run.stuck = [
            f"{s.shard_id} {s.state.value} at {s.position} checkpoint {s.checkpoint}"
            for s in run.consumer.status()
        ]


def server_restart(
    workdir: Path,
    *,
    outage: float = 5.0,
    before: float = 3.0,
    after: float = 3.0,
    timeout: float = 90.0,
    fan_out: bool = False,
) -> SuiteResult:
    result = SuiteResult(NAME_FAN_OUT if fan_out else NAME, faults=1)
    started = time.monotonic()
    ttl = outage + 25.0
    with KinesisMock(persist_path=workdir / "kinesis-mock-data", persist_interval=0.2) as server:
        stream = server.create_stream("restart", shards=2)
        try:
            run = _Run(stream, outage, ttl, fan_out)
            asyncio.run(_restart(server, run, before, after, timeout))
            in_stream = Counter(record_id(r.data) for r in kcl_view(stream))
            result.note(
                f"duplicates: {sum(c - 1 for c in in_stream.values() if c > 1)} extra copies "
                f"in the stream (writes retried after the connection was cut), "
                f"{run.redelivered} positions delivered twice by the consumer"
            )
        finally:
            stream.close()
    if run.stuck:
        result.problem(f"the consumer did not deliver every record in time: {run.stuck}")
    results = [(at, r) for at, batch in run.put for r in batch]
    result.attempted = len(results)
    codes: Counter[str] = Counter()
    for n, (_, r) in enumerate(results):
        if r.success:
            if in_stream[n] and run.delivered[n]:
                result.delivered += 1
            else:
                result.lost += 1
        elif r.error_code and r.attempts:
            result.failed += 1
            codes[r.error_code] += 1
        else:
            result.lost += 1
        result.duplicated += max(run.delivered[n] - 1, 0)
    if set(codes) - {EXPIRED}:
        result.problem(f"the producer failed records for other reasons than their TTL: {codes}")
    if codes:
        result.problem(
            f"{sum(codes.values())} records expired although the TTL ({ttl:g} s) "
            f"is longer than the outage ({outage:g} s)"
        )
    resumed = [
        r.attempts[-1].ended_at
        for _, r in results
        if r.success and r.attempts[-1].ended_at > run.restarted_at
    ]
    put_after = [n for n, (at, _) in enumerate(results) if at > run.restarted_at]
    if not resumed or not put_after or not any(run.delivered[n] for n in put_after):
        result.problem("the producer or the consumer did not resume after the restart")
    else:
        first_delivery = min(run.delivered_at[n] for n in put_after if run.delivered[n])
        result.note(
            f"outage {outage:g} s; after the restart the producer wrote again within "
            f"{min(resumed) - run.restarted_at:.1f} s and the consumer delivered a new record "
            f"within {first_delivery - run.restarted_at:.1f} s; most attempts of one record: "
            f"{max(r.attempt_count for _, r in results)}"
        )
    result.seconds = time.monotonic() - started
    return result
