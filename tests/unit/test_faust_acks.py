"""The ack decision, the ledger, and KinesisMessage's hooks, against real Faust streams.

No Kinesis here: records are built by hand and the message's run is a recorder. The stream
tests run a Kafka-less Faust app in-process, with the default (compiled) stream iterator.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import faust
import pytest
from faust.types import TP

from faust_kinesis.acks import Ledger, Outcome, decide
from faust_kinesis.message import KinesisMessage
from kinesis_core.records import KinesisRecord
from tests.fakes.clock import FakeClock


@pytest.mark.parametrize(
    ("failed", "exc", "safe", "flow", "generation", "expected"),
    [
        (False, False, True, True, True, Outcome.ACKED),
        (False, True, True, True, True, Outcome.FAILED),
        (True, False, True, True, True, Outcome.FAILED),
        (False, True, False, True, True, Outcome.ACKED),
        (True, True, False, True, True, Outcome.ACKED),
        (False, False, True, False, True, Outcome.DROPPED),
        (False, False, False, True, False, Outcome.DROPPED),
        (True, True, True, False, False, Outcome.DROPPED),
    ],
)
def test_decide(
    failed: bool, exc: bool, safe: bool, flow: bool, generation: bool, expected: Outcome
) -> None:
    outcome = decide(
        failed=failed,
        exception_in_flight=exc,
        safe=safe,
        flow_active=flow,
        same_generation=generation,
    )
    assert outcome is expected


def test_ledger_counts_until_closed() -> None:
    ledger = Ledger()
    for _ in range(5):
        ledger.deliver()
    assert ledger.settle(Outcome.ACKED)
    assert ledger.settle(Outcome.FAILED)
    assert ledger.settle(Outcome.DROPPED)
    assert (ledger.acked, ledger.failed, ledger.dropped, ledger.in_flight) == (1, 1, 1, 2)
    ledger.close()
    assert not ledger.settle(Outcome.ACKED)
    assert ledger.in_flight == 2
    totals = Ledger()
    totals.add(ledger)
    totals.add(ledger)
    assert (totals.delivered, totals.acked, totals.failed, totals.dropped) == (10, 2, 2, 2)


class Recorder:
    """A run that records what the messages tell it."""

    def __init__(self) -> None:
        self.finished: list[tuple[int, bool]] = []
        self.settled: list[tuple[int, Outcome]] = []

    def finish(self, message: KinesisMessage, exception_in_flight: bool) -> None:
        self.finished.append((message.sub_sequence_number, exception_in_flight))

    def settle(self, message: KinesisMessage, outcome: Outcome) -> None:
        self.settled.append((message.sub_sequence_number, outcome))


_seq = itertools.count(1)


def message(
    run: Any,
    sub: int = 0,
    data: bytes = b"x",
    refcount: int = 0,
    generation_id: int | None = None,
) -> KinesisMessage:
    record = KinesisRecord(
        data,
        "pk",
        None,
        49_000_000_000_000_000_000_000_000_000_000_000_000_000_000_000,
        sub,
        "shardId-000000000003",
        None,
        True,
    )
    return KinesisMessage(
        record, TP("orders", 3), b"pk", 1.5, run, refcount=refcount, generation_id=generation_id
    )


def test_message_carries_the_record() -> None:
    m = message(Recorder(), sub=7, data=b"hello")
    assert (m.topic, m.partition, m.tp) == ("orders", 3, TP("orders", 3))
    assert m.offset == m.sequence_number
    assert m.position == (m.sequence_number, 7)
    assert (m.shard_id, m.partition_key, m.key, m.value) == (
        "shardId-000000000003",
        "pk",
        b"pk",
        b"hello",
    )
    assert (m.serialized_key_size, m.serialized_value_size) == (2, 5)
    assert not m.acked
    assert m.refcount == 0
    assert "shardId-000000000003" in repr(m)


def test_final_ack_finishes_once() -> None:
    run = Recorder()
    m = message(run, refcount=2, generation_id=4)
    assert (m.refcount, m.generation_id) == (2, 4)
    m.refcount -= 1
    assert not m.failed
    m.acked = True
    m.acked = True
    assert m.acked
    assert run.finished == [(0, False)]
    m.drop()
    assert run.settled == []


def test_release_during_an_exception_marks_the_message() -> None:
    run = Recorder()
    m = message(run, refcount=2)
    try:
        raise GeneratorExit
    except GeneratorExit:
        m.refcount -= 1
    assert m.failed
    m.acked = True
    assert run.finished == [(0, False)]

    other = message(run, sub=1)
    try:
        raise ValueError
    except ValueError:
        other.acked = True
    assert run.finished[-1] == (1, True)


def test_drop_and_fail_settle_once() -> None:
    run = Recorder()
    a, b = message(run, 0), message(run, 1)
    a.drop()
    a.fail()
    b.fail()
    b.acked = True
    assert run.settled == [(0, Outcome.DROPPED), (1, Outcome.FAILED)]
    assert run.finished == []
    assert a.settled
    assert b.settled


def test_python_message_ack_path() -> None:
    """Message.ack (pure-Python streams, Event.ack) reaches the hooks too."""
    run = Recorder()
    m = message(run, refcount=1, generation_id=0)
    assert m.ack(None) is True  # type: ignore[arg-type]
    assert run.finished == [(0, False)]
    assert m.ack(None) is False  # type: ignore[arg-type]


def make_app(tmp_path: Path, name: str) -> faust.App:
    app = faust.App(name, web_enabled=False, datadir=str(tmp_path / name))
    app.boot_strategy.enable_kafka = False
    return app


def run_agent(tmp_path: Path, agent_body: Any, values: list[int]) -> Recorder:
    """Feed KinesisMessage events through a real Faust agent; return what reached the run."""
    run = Recorder()

    async def main() -> None:
        app = make_app(tmp_path, "acks")
        channel = app.channel()
        app.agent(channel)(agent_body)
        await app.start()
        app.flow_control.resume()
        for value in values:
            m = message(run, sub=value, refcount=1, generation_id=app.consumer_generation_id)
            await channel.put(app.create_event(None, value, None, m))
        for _ in range(100):
            if len(run.finished) + len(run.settled) >= len(values):
                break
            await asyncio.sleep(0.01)
        await app.stop()

    FakeClock().run(main())  # an agent that stops early is waited for the whole 1 s: at once
    return run


def test_auto_ack_agent_that_raises_acks_during_generator_exit(tmp_path: Path) -> None:
    async def agent(stream: Any) -> None:
        async for value in stream:
            if value == 2:
                raise RuntimeError("boom")

    run = run_agent(tmp_path, agent, [0, 1, 2, 3, 4])
    assert sorted(run.finished) == [(0, False), (1, False), (2, True), (3, False), (4, False)]


def test_noack_agent_acks_only_what_it_processed(tmp_path: Path) -> None:
    async def agent(stream: Any) -> None:
        async for event in stream.noack().events():
            if event.value == 1:
                raise RuntimeError("boom")
            event.ack()

    run = run_agent(tmp_path, agent, [0, 1, 2])
    assert sorted(run.finished) == [(0, False), (2, False)]


def test_async_with_event_that_raises(tmp_path: Path) -> None:
    async def agent(stream: Any) -> None:
        async for event in stream.noack().events():
            async with event:
                if event.value == 1:
                    raise RuntimeError("boom")

    run = run_agent(tmp_path, agent, [0, 1, 2])
    assert sorted(run.finished) == [(0, False), (1, True), (2, False)]


def test_take_batch_that_raises(tmp_path: Path) -> None:
    async def agent(stream: Any) -> None:
        async for values in stream.take(2, within=0.05):
            if 2 in values:
                raise RuntimeError("boom")

    run = run_agent(tmp_path, agent, [0, 1, 2, 3])
    assert sorted(run.finished) == [(0, False), (1, False), (2, True), (3, True)]
