"""ReadFromKinesis's read-ahead against moto: the next call of the round is sent on the
read-ahead thread while the DoFn outputs an answer, and neither a runner's checkpoint nor the
DoFn's own self-checkpoint with such a call in flight loses or repeats a record. The DoFn is
driven call by call as a runner drives it (tests/helpers/beam.SdfDriver); the metrics test
runs a pipeline on the in-process runner."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from apache_beam.metrics.metric import MetricsFilter

from beam_kinesis import METRICS_NAMESPACE
from beam_kinesis._first_calls import SharedFirstCalls
from beam_kinesis._read_fn import BoundedReadFn, ReadFn, UnboundedReadFn
from beam_kinesis.read import ReadFromKinesis
from kinesis_core.aws.config import ClientConfig
from kinesis_core.consumer import TRIM_HORIZON
from kinesis_core.consumer.reading import SyncShardReader
from kinesis_core.local import DUMMY_ACCESS_KEY_ID, DUMMY_SECRET_ACCESS_KEY, LocalStream
from tests.helpers.beam import SdfDriver, pipeline

pytestmark = pytest.mark.integration

PER_SHARD = 30


@pytest.fixture(autouse=True)
def worker_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", DUMMY_ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", DUMMY_SECRET_ACCESS_KEY)


@pytest.fixture
def sent_ahead(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The shards whose reader sent a call ahead, in order."""
    sent: list[str] = []
    read_ahead = SyncShardReader.read_ahead

    def spy(self: SyncShardReader, now: float) -> bool:
        went = read_ahead(self, now)
        if went:
            sent.append(self.machine.shard_id)
        return went

    monkeypatch.setattr(SyncShardReader, "read_ahead", spy)
    return sent


def _fill(stream: LocalStream, shards: int = 2) -> list[bytes]:
    """``PER_SHARD`` records in each of the stream's last ``shards`` shards (explicit hash
    keys)."""
    client = stream.boto_client()
    data = []
    for shard in stream.shards()[-shards:]:
        lo = int(shard["HashKeyRange"]["StartingHashKey"])
        for i in range(PER_SHARD):
            value = f"{shard['ShardId']}:{i}".encode()
            client.put_record(
                StreamName=stream.name, Data=value, PartitionKey="k", ExplicitHashKey=str(lo)
            )
            data.append(value)
    return data


def _fn(
    stream: LocalStream,
    *,
    bounded: bool = True,
    first_calls: SharedFirstCalls | None = None,
    **kw: Any,
) -> ReadFn:
    transform = ReadFromKinesis(
        stream.name,
        client_config=ClientConfig(
            endpoint_url=stream.endpoint_url, region_name=stream.client_config.region_name
        ),
        initial_position=TRIM_HORIZON,
        stop_when_caught_up=bounded,
        idle_interval=0.2,
        **kw,
    )
    spec = transform._spec
    fn: ReadFn = BoundedReadFn(spec, first_calls) if bounded else UnboundedReadFn(spec, first_calls)
    fn.setup()
    return fn


def _data(driver: SdfDriver) -> list[bytes]:
    return [out.value.data for out, _ in driver.outputs]


def _run_out(driver: SdfDriver) -> None:
    for _ in range(50):
        if driver.done:
            return
        driver.call()
    raise AssertionError("the read did not end")


def test_a_runner_checkpoint_with_a_call_in_flight_loses_and_repeats_nothing(
    moto_stream: Any, sent_ahead: list[str]
) -> None:
    """One restriction over two shards: while the first shard's answer is output, the second
    shard's GetRecords is in flight; the runner checkpoints after the first element. The
    first answer stays whole in the primary; the second, taken after the checkpoint, is
    claimed by nobody and read again by the residual: every record comes out once."""
    stream: LocalStream = moto_stream(shards=2)
    data = _fill(stream)
    fn = _fn(stream)
    try:
        driver = SdfDriver(fn, stream.name, fn.initial_restriction(stream.name))
        driver.call(checkpoint_after=1)
        assert not driver.done  # the checkpoint left a residual
        first = _data(driver)
        assert len(first) == PER_SHARD  # the whole first answer, and only it
        shards = [s["ShardId"] for s in stream.shards()]
        assert shards[1] in sent_ahead  # the second shard's call went ahead
        _run_out(driver)
    finally:
        fn.teardown()
    assert Counter(_data(driver)) == Counter(data)


def test_a_reader_kept_with_its_call_in_flight_takes_the_answer_in_the_next_call(
    moto_stream: Any, sent_ahead: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner checkpoints before the first claim: the first shard's (empty) answer is
    refused, while the second shard's GetRecords, sent ahead, is in flight. That reader stopped
    where its cursor is, so it is kept with the call; the restriction's next process call takes
    that answer instead of calling again. Nothing is lost or repeated."""
    stream: LocalStream = moto_stream(shards=2)
    data = _fill(stream, shards=1)
    steps: list[tuple[str, str, bool]] = []
    step = SyncShardReader.step

    def spy(self: SyncShardReader, call: Any, ack: Any = None) -> Any:
        steps.append((self.machine.shard_id, type(call).__name__, self.reading_ahead))
        return step(self, call, ack)

    monkeypatch.setattr(SyncShardReader, "step", spy)
    fn = _fn(stream, bounded=False)
    try:
        driver = SdfDriver(fn, stream.name, fn.initial_restriction(stream.name))
        driver.call(checkpoint_after=0)
        assert driver.outputs == []
        readers = fn._readers
        assert readers is not None
        (kept,) = [r for _, r, _ in readers._kept.values() if r.reading_ahead]
        shard = kept.machine.shard_id
        steps.clear()
        driver.call()
        # Its first step is the call in flight, taken (the other shard starts again).
        assert next(s for s in steps if s[0] == shard) == (shard, "GetRecords", True)
        for _ in range(50):
            if len(driver.outputs) >= len(data):
                break
            driver.call()
    finally:
        fn.teardown()
    assert Counter(_data(driver)) == Counter(data)


def test_a_residual_taken_by_another_worker_reads_what_was_in_flight_again(
    moto_stream: Any, sent_ahead: list[str]
) -> None:
    """As above, but the residual goes to another DoFn instance (another worker): the call in
    flight on the first is abandoned, and the second reads from the residual's positions."""
    stream: LocalStream = moto_stream(shards=2)
    data = _fill(stream, shards=1)
    first = _fn(stream, bounded=False)
    second = _fn(stream)
    try:
        driver = SdfDriver(first, stream.name, first.initial_restriction(stream.name))
        driver.call(checkpoint_after=0)
        assert first._readers is not None
        assert any(reader.reading_ahead for _, reader, _ in first._readers._kept.values())
        driver.fn = second
        _run_out(driver)
    finally:
        first.teardown()
        second.teardown()
    assert Counter(_data(driver)) == Counter(data)


def test_calls_read_ahead_count_in_the_beam_metrics(
    moto_stream: Any, sent_ahead: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the in-process runner, one restriction over two shards (``max_records``): every
    GetRecords whose answer the read took counts in the operation-duration distribution,
    those timed on the read-ahead thread too (Beam drops a figure recorded there)."""
    stream: LocalStream = moto_stream(shards=2)
    data = _fill(stream)
    taken: list[bool] = []
    step = SyncShardReader.step

    def spy(self: SyncShardReader, call: Any, ack: Any = None) -> Any:
        if type(call).__name__ == "GetRecords":
            taken.append(self.reading_ahead)
        return step(self, call, ack)

    monkeypatch.setattr(SyncShardReader, "step", spy)
    p = pipeline(stream, "in_memory")
    _ = p | ReadFromKinesis(
        stream.name, initial_position=TRIM_HORIZON, max_records=len(data), idle_interval=0.2
    )
    result = p.run()
    result.wait_until_finish()
    found = result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))
    name = "messaging.client.operation.duration{messaging.operation.name=GetRecords}"
    counted = sum(m.committed.count for m in found["distributions"] if m.key.metric.name == name)
    assert any(taken)  # some answers were taken from calls read ahead
    assert counted >= len(taken)
