"""The telemetry layer without a server: the metric table and its names, the mapping to the
KPL/KCL, the producer's figures, the no-op recorder of a consumer with telemetry off, the timed
transports and store, the OpenTelemetry registry (counters never go down), and that nothing of
OpenTelemetry is imported while telemetry is off."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from kinesis_core.checkpoint import CheckpointConflictError
from kinesis_core.consumer import ConsumerConfig
from kinesis_core.errors import ConfigurationError
from kinesis_core.producer import MetricsSnapshot, ProducerConfig
from kinesis_core.telemetry import METRICS, Instrument, Telemetry
from kinesis_core.telemetry.figures import producer_figures
from kinesis_core.telemetry.metered import MeteredStore, MeteredTransport, error_type
from kinesis_core.telemetry.names import (
    BY_NAME,
    CONSUMED,
    DESTINATION,
    ERROR_TYPE,
    LAG,
    MESSAGING_SYSTEM,
    OPERATION,
    OPERATION_DURATION,
    PARTITION,
    PROCESS_DURATION,
    SENT,
    SYSTEM,
    SubscriptionOutcome,
    beam_name,
    operation_name,
)
from kinesis_core.telemetry.otel import ConsumerTelemetry, Registry
from kinesis_core.telemetry.recorder import NO_RECORDER, ConsumerRecorder
from tests.helpers.otel import collected

REPO = Path(__file__).resolve().parents[2]
OTEL_NAME = re.compile(r"[a-z][a-z0-9_.]{0,254}")
"""OpenTelemetry's instrument name syntax, in the lower case the conventions use."""
UNITS = {"{message}", "{record}", "{retry}", "{error}", "{checkpoint}", "{lease}",
         "{subscription}", "By", "s", "ms"}  # fmt: skip


# -- the table -----------------------------------------------------------------------------------


def test_names_follow_the_messaging_conventions_and_the_kcl_style() -> None:
    names = [m.name for m in METRICS]
    assert len(names) == len(set(names))
    for metric in METRICS:
        assert OTEL_NAME.fullmatch(metric.name), metric.name
        assert metric.name.startswith(("messaging.", "aws.kinesis.")), metric.name
        assert metric.unit in UNITS, metric
        assert metric.description, metric
        assert metric.kpl_kcl, metric
        assert metric.side in ("producer", "consumer", "both"), metric
        if metric.unit in ("s", "ms") and metric.instrument is Instrument.HISTOGRAM:
            assert metric.name.endswith(".duration") or metric.name.endswith(".age"), metric
        if metric.kcl_otel != "-":
            assert all(n.startswith("aws.kinesis.client.") for n in metric.kcl_otel.split(", "))
    # The conventions' own: name, instrument and unit as they define them.
    assert (BY_NAME[SENT].instrument, BY_NAME[SENT].unit) == (Instrument.COUNTER, "{message}")
    assert (BY_NAME[CONSUMED].instrument, BY_NAME[CONSUMED].unit) == (
        Instrument.COUNTER,
        "{message}",
    )
    for name in (OPERATION_DURATION, PROCESS_DURATION):
        assert (BY_NAME[name].instrument, BY_NAME[name].unit) == (Instrument.HISTOGRAM, "s")
    assert OPERATION in BY_NAME[SENT].attributes
    assert ERROR_TYPE in BY_NAME[SENT].attributes
    assert PARTITION in BY_NAME[CONSUMED].attributes
    assert BY_NAME[LAG].instrument is Instrument.GAUGE
    assert BY_NAME[LAG].kpl_kcl == "MillisBehindLatest"
    assert BY_NAME[LAG].kcl_otel == "aws.kinesis.client.consumer.lag.duration"


def test_every_metric_is_in_the_operations_page_with_its_unit_and_kpl_kcl_name() -> None:
    page = (REPO / "docs" / "operations.md").read_text()
    for metric in METRICS:
        rows = [line for line in page.splitlines() if line.startswith(f"| `{metric.name}` |")]
        assert rows, f"{metric.name} is not in docs/operations.md"
        cells = [cell.strip() for cell in rows[0].strip("|").split("|")]
        assert f"`{metric.unit}`" in cells, (metric.name, cells)
        assert any(metric.kpl_kcl.split(" ")[0] in cell for cell in cells), (metric.name, cells)


def test_beam_names_carry_the_attributes_that_matter() -> None:
    assert beam_name(CONSUMED) == CONSUMED
    assert beam_name(LAG, {PARTITION: "shardId-000000000001"}) == (
        "aws.kinesis.consumer.lag{messaging.destination.partition.id=shardId-000000000001}"
    )
    assert beam_name(SENT, {OPERATION: "PutRecords", ERROR_TYPE: "Expired"}) == (
        "messaging.client.sent.messages{messaging.operation.name=PutRecords,error.type=Expired}"
    )


def test_operation_names_of_the_readers_calls() -> None:
    from kinesis_core.consumer.polling import GetIterator, GetRecords
    from kinesis_core.consumer.subscription import CheckConsumer, NextEvent, Subscribe
    from kinesis_core.consumer.transport import CheckStream

    assert operation_name(GetRecords("it", 10)) == "GetRecords"
    assert operation_name(GetIterator({})) == "GetShardIterator"
    assert operation_name(Subscribe({})) == "SubscribeToShard"
    assert operation_name(CheckStream()) == "ListShards"
    assert operation_name(CheckConsumer()) == "DescribeStreamConsumer"
    assert operation_name(NextEvent()) is None  # waiting for a push is no operation
    assert operation_name(object()) == "object"


def test_producer_figures_of_a_snapshot() -> None:
    snapshot = MetricsSnapshot(
        "orders",
        0.0,
        user_records_received=12,
        user_records_pending=2,
        user_records_put=9,
        user_records_data_put=900,
        user_record_expired=1,
        kinesis_records_put=3,
        kinesis_records_data_put=1000,
        errors_by_code={"ProvisionedThroughputExceededException": 2},
        user_records_put_by_shard={"shardId-0": 5, "shardId-1": 4},
        failed_by_code={"Expired": 1},
        retries_by_code={"ProvisionedThroughputExceededException": 6},
    )
    base = ((MESSAGING_SYSTEM, SYSTEM), (DESTINATION, "orders"))
    op = (*base, (OPERATION, "PutRecords"))
    throttled = (ERROR_TYPE, "ProvisionedThroughputExceededException")
    assert producer_figures(snapshot) == [
        (SENT, op, 9),
        (SENT, (*op, (ERROR_TYPE, "Expired")), 1),
        ("aws.kinesis.producer.user_records.received", base, 12),
        ("aws.kinesis.producer.user_records.pending", base, 2),
        ("aws.kinesis.producer.user_records.data", base, 900),
        ("aws.kinesis.producer.user_records.expired", base, 1),
        ("aws.kinesis.producer.kinesis_records", base, 3),
        ("aws.kinesis.producer.kinesis_records.data", base, 1000),
        ("aws.kinesis.producer.retries", (*base, throttled), 6),
        ("aws.kinesis.producer.errors", (*base, throttled), 2),
    ]
    by_shard = producer_figures(snapshot, shard_attribute=True)
    assert [f for f in by_shard if f[0] == SENT][:2] == [
        (SENT, (*op, (PARTITION, "shardId-0")), 5),
        (SENT, (*op, (PARTITION, "shardId-1")), 4),
    ]


# -- off -------------------------------------------------------------------------------------------


def test_the_recorder_of_a_consumer_without_telemetry_does_nothing() -> None:
    assert NO_RECORDER.enabled is False
    transport, store = object(), object()
    assert NO_RECORDER.transport(transport, "shardId-0") is transport
    assert NO_RECORDER.store(store) is store
    assert NO_RECORDER.delivered("s", [], 0.0) is None
    assert NO_RECORDER.lag("s", 5) is None
    assert NO_RECORDER.checkpoint("s") is None
    assert NO_RECORDER.close() is None


def test_settings_are_checked() -> None:
    with pytest.raises(ConfigurationError, match=r"telemetry\.shard_attribute: must be a bool"):
        Telemetry(shard_attribute="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="telemetry: must be a Telemetry or None"):
        ProducerConfig(telemetry=True)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="telemetry: must be a Telemetry or None"):
        ConsumerConfig(telemetry="on")  # type: ignore[arg-type]
    assert ProducerConfig(telemetry=Telemetry()).telemetry == Telemetry()


WITHOUT_THE_API = """
from kinesis_core.errors import ConfigurationError
from kinesis_core.producer.config import ProducerConfig
from kinesis_core.telemetry import Telemetry
for make in (Telemetry, lambda: ProducerConfig(trace_context=True)):
    try:
        make()
    except ConfigurationError as exc:
        print(exc)
    else:
        print("accepted")
"""


@pytest.mark.slow
@pytest.mark.parametrize("namespace", [False, True], ids=["none", "namespace-only"])
def test_telemetry_without_the_opentelemetry_api_says_what_to_install(
    tmp_path: Path, namespace: bool
) -> None:
    """No OpenTelemetry at all, or only a namespace package ``opentelemetry`` that another
    distribution left (opentelemetry-proto): ``Telemetry()`` and ``trace_context=True`` name
    the ``otel`` extra (with only the namespace, both were accepted and the producer's start
    raised a bare ``ModuleNotFoundError: No module named 'opentelemetry.metrics'``)."""
    if namespace:
        (tmp_path / "opentelemetry" / "proto").mkdir(parents=True)
        (tmp_path / "opentelemetry" / "proto" / "__init__.py").write_text("")
    root = Path(__file__).resolve().parents[2]
    # -S: no site-packages, so the installed opentelemetry-api is out of reach.
    done = subprocess.run(
        [sys.executable, "-S", "-c", WITHOUT_THE_API],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": f"{tmp_path}:{root}"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "telemetry: needs the opentelemetry-api package (pip install 'kinesis-connectors[otel]')",
        "trace_context: needs the opentelemetry-api package "
        "(pip install 'kinesis-connectors[otel]')",
    ]


OFF = """
import asyncio, sys
from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.consumer import Consumer, ConsumerConfig
from kinesis_core.producer import Producer, ProducerConfig
from tests.fakes.kinesis import FakeKinesis

async def main():
    fake = FakeKinesis(shards=2)
    async with Producer("stream", client=fake, producer_config=ProducerConfig()) as producer:
        assert (await producer.put_many([(b"x%d" % i, str(i)) for i in range(500)])).ok
    consumer = Consumer("stream", client=fake, checkpoint_store=MemoryCheckpointStore(),
                        initial_position="TRIM_HORIZON", auto_ack=True)
    async with consumer:
        n = 0
        async for batch in consumer.batches():
            n += len(batch)
            if n == 500:
                break

asyncio.run(main())
loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
assert not loaded, loaded
print("no opentelemetry")
"""


@pytest.mark.slow
def test_nothing_of_opentelemetry_is_imported_while_telemetry_is_off() -> None:
    done = subprocess.run(
        [sys.executable, "-c", OFF], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no opentelemetry"


# -- the timed wrappers ----------------------------------------------------------------------------


class Recording(ConsumerRecorder):
    enabled = True

    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []

    def operation(self, shard_id: str, operation: str, seconds: float, error: str | None) -> None:
        self.seen.append(("operation", shard_id, operation, error))

    def subscription(
        self, shard_id: str, outcome: SubscriptionOutcome, error: str | None = None
    ) -> None:
        self.seen.append(("subscription", shard_id, outcome, error))

    def store_call(self, kind: str, operation: str, seconds: float, error: str | None) -> None:
        self.seen.append(("store", kind, operation, error))


def in_use() -> ClientError:
    return ClientError({"Error": {"Code": "ResourceInUseException", "Message": "busy"}}, "Sub")


def test_subscriptions_are_opened_renewed_or_refused() -> None:
    from kinesis_core.consumer.subscription import NextEvent, Subscribe

    answers: list[Any] = ["subscription", in_use(), "subscription", "event"]

    class Inner:
        async def call(self, call: Any) -> Any:
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

        async def aclose(self) -> None:
            pass

    recorder = Recording()
    transport = MeteredTransport(Inner(), recorder, "shardId-7")

    async def main() -> None:
        assert await transport.call(Subscribe({})) == "subscription"
        with pytest.raises(ClientError):
            await transport.call(Subscribe({}))
        await transport.call(Subscribe({}))
        assert await transport.call(NextEvent()) == "event"

    asyncio.run(main())
    assert recorder.seen == [
        ("operation", "shardId-7", "SubscribeToShard", None),
        ("subscription", "shardId-7", SubscriptionOutcome.OPENED, None),
        ("operation", "shardId-7", "SubscribeToShard", "ResourceInUseException"),
        ("subscription", "shardId-7", SubscriptionOutcome.REFUSED, "ResourceInUseException"),
        ("operation", "shardId-7", "SubscribeToShard", None),
        ("subscription", "shardId-7", SubscriptionOutcome.RENEWED, None),
    ]


def test_store_calls_are_timed_with_their_error_type() -> None:
    class Store:
        async def get(self, *args: Any) -> str:
            return "row"

        async def put(self, *args: Any, **kwargs: Any) -> None:
            raise CheckpointConflictError("shardId-0", None, "lost the compare-and-set")

        def extra(self) -> str:
            return "passed through"

    recorder = Recording()
    store = MeteredStore(Store(), recorder)

    async def main() -> None:
        assert await store.get("app", "stream", "shardId-0") == "row"
        with pytest.raises(CheckpointConflictError):
            await store.put("app", "stream", "shardId-0", (1, 0), expected=None)

    asyncio.run(main())
    assert store.extra() == "passed through"
    assert recorder.seen == [
        ("store", "Store", "get", None),
        ("store", "Store", "put", "CheckpointConflictError"),
    ]
    assert error_type(in_use()) == "ResourceInUseException"
    assert error_type(ValueError("x")) == "ValueError"


# -- the OpenTelemetry registry --------------------------------------------------------------------


@pytest.fixture
def provider() -> Iterator[tuple[MeterProvider, InMemoryMetricReader]]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    yield provider, reader
    provider.shutdown()


def points(reader: InMemoryMetricReader, name: str) -> list[tuple[dict[str, Any], float]]:
    return [(attrs, point.value) for metric, attrs, point in collected(reader) if metric == name]


def test_counters_keep_the_counts_of_closed_consumers_and_lag_is_the_largest(
    provider: tuple[MeterProvider, InMemoryMetricReader],
) -> None:
    meter_provider, reader = provider
    telemetry = Telemetry(meter_provider=meter_provider)
    lags = {"shardId-0": 120, "shardId-1": 4_000, "shardId-2": None}
    first = ConsumerTelemetry(telemetry, "orders", "app", "GetRecords", lag_source=lambda: lags)
    second = ConsumerTelemetry(telemetry, "orders", "app", "GetRecords")
    first.checkpoint("shardId-0")
    first.checkpoint("shardId-1")
    second.checkpoint("shardId-0")
    assert [v for _, v in points(reader, "aws.kinesis.consumer.checkpoints")] == [3]
    assert [v for _, v in points(reader, LAG)] == [4_000]  # the largest; None is no reading
    first.close()
    first.close()  # twice changes nothing
    assert [v for _, v in points(reader, "aws.kinesis.consumer.checkpoints")] == [3]
    assert points(reader, LAG) == []  # a closed consumer reads no shard
    second.checkpoint("shardId-0")
    assert [v for _, v in points(reader, "aws.kinesis.consumer.checkpoints")] == [4]
    second.close()


def test_per_shard_lag_with_the_shard_attribute(
    provider: tuple[MeterProvider, InMemoryMetricReader],
) -> None:
    meter_provider, reader = provider
    telemetry = Telemetry(meter_provider=meter_provider, shard_attribute=True)
    recorder = ConsumerTelemetry(telemetry, "orders", "app", "GetRecords")
    recorder.lag("shardId-0", 250)
    recorder.lag("shardId-1", 0)
    got = {a[PARTITION]: v for a, v in points(reader, LAG)}
    assert got == {"shardId-0": 250, "shardId-1": 0}
    recorder.close()


def test_one_registry_per_meter_provider(
    provider: tuple[MeterProvider, InMemoryMetricReader],
) -> None:
    from kinesis_core.telemetry.otel import registry

    meter_provider, _ = provider
    one = registry(Telemetry(meter_provider=meter_provider))
    assert registry(Telemetry(meter_provider=meter_provider, shard_attribute=True)) is one
    assert isinstance(one, Registry)
