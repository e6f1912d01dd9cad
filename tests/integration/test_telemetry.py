"""OpenTelemetry metrics read through the SDK's in-memory reader against kinesis-mock, checked
against what was written and read; and the Prometheus exporter scraped over HTTP."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer, ConsumerConfig, EnhancedFanOut
from kinesis_core.local import DUMMY_ACCESS_KEY_ID, DUMMY_SECRET_ACCESS_KEY
from kinesis_core.producer import Producer, ProducerConfig
from kinesis_core.telemetry import Telemetry
from tests.helpers.otel import collected

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


class Metrics:
    """The points an in-memory reader collected, by metric name."""

    def __init__(self, reader: InMemoryMetricReader) -> None:
        self.points: dict[str, list[Any]] = {}
        for name, _, point in collected(reader):
            self.points.setdefault(name, []).append(point)

    def values(self, name: str, **where: str) -> list[tuple[dict[str, Any], Any]]:
        out = []
        for point in self.points.get(name, []):
            attrs = dict(point.attributes)
            wanted = {k.replace("__", "."): v for k, v in where.items()}
            if all(attrs.get(k) == v for k, v in wanted.items()):
                out.append((attrs, point))
        return out

    def total(self, name: str, **where: str) -> float:
        return sum(
            p.count if hasattr(p, "bucket_counts") else p.value
            for _, p in self.values(name, **where)
        )


@pytest.fixture
def reader() -> Iterator[tuple[InMemoryMetricReader, MeterProvider]]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    yield reader, provider
    provider.shutdown()


def test_producer_metrics_count_what_was_written(kinesis_stream: Any, reader: Any) -> None:
    metric_reader, provider = reader
    stream = kinesis_stream(shards=2)
    telemetry = Telemetry(meter_provider=provider, shard_attribute=True)
    records = [(b"record-%03d" % i, f"key-{i}") for i in range(120)]

    async def main() -> None:
        config = ProducerConfig(telemetry=telemetry)
        async with Producer(
            stream.name, client_config=stream.client_config, producer_config=config
        ) as p:
            batch = await p.put_many(records)
            assert batch.ok

    asyncio.run(main())
    m = Metrics(metric_reader)
    sent = m.values("messaging.client.sent.messages")
    assert sum(p.value for _, p in sent) == len(records)
    for attrs, _ in sent:
        assert attrs["messaging.system"] == "aws.kinesis"
        assert attrs["messaging.destination.name"] == stream.name
        assert attrs["messaging.operation.name"] == "PutRecords"
        assert attrs["messaging.destination.partition.id"].startswith("shardId-")
        assert "error.type" not in attrs
    assert m.total("aws.kinesis.producer.user_records.received") == len(records)
    assert m.total("aws.kinesis.producer.user_records.data") == sum(len(d) for d, _ in records)
    assert m.total("aws.kinesis.producer.user_records.pending") == 0
    requests = m.total(
        "messaging.client.operation.duration", messaging__operation__name="PutRecords"
    )
    assert requests >= 1
    assert m.total("aws.kinesis.producer.buffering.duration") == requests
    kinesis_records = m.total("aws.kinesis.producer.kinesis_records")
    assert 1 <= kinesis_records < len(records)  # aggregated


def test_consumer_metrics_count_what_was_read_and_lag_goes_to_zero(
    kinesis_stream: Any, reader: Any
) -> None:
    metric_reader, provider = reader
    stream = kinesis_stream(shards=2)
    records = [(b"value-%03d" % i, f"key-{i}") for i in range(90)]
    client = stream.boto_client()
    client.put_records(
        StreamName=stream.name, Records=[{"Data": d, "PartitionKey": k} for d, k in records]
    )
    shard_ids = {s["ShardId"] for s in stream.shards()}
    telemetry = Telemetry(meter_provider=provider, shard_attribute=True)
    config = ConsumerConfig(
        telemetry=telemetry,
        initial_position=TRIM_HORIZON,
        idle_interval=0.2,
        leases=True,
        application_name="metered",
    )

    async def main() -> Metrics:
        store = MemoryCheckpointStore()
        async with Consumer(
            stream.name,
            consumer_config=config,
            client_config=stream.client_config,
            checkpoint_store=store,
        ) as consumer:
            seen = 0
            async for batch in consumer.batches():
                batch.ack()
                seen += len(batch)
                if seen == len(records):
                    break
            # Caught up: the next empty reads say MillisBehindLatest 0 on every shard.
            lags: list[Any] = []
            for _ in range(100):
                lags = Metrics(metric_reader).values("aws.kinesis.consumer.lag")
                if len(lags) == 2 and all(p.value == 0 for _, p in lags):
                    break
                await asyncio.sleep(0.1)
            assert sorted(a["messaging.destination.partition.id"] for a, _ in lags) == sorted(
                shard_ids
            )
            assert [p.value for _, p in lags] == [0, 0]
            live = Metrics(metric_reader)
            assert live.total("aws.kinesis.consumer.leases.held") == 2
        return Metrics(metric_reader)

    m = asyncio.run(asyncio.wait_for(main(), 120))
    consumed = m.values("messaging.client.consumed.messages")
    assert sum(p.value for _, p in consumed) == len(records)
    assert {a["messaging.destination.partition.id"] for a, _ in consumed} == shard_ids
    for attrs, _ in consumed:
        assert attrs["messaging.operation.name"] == "GetRecords"
        assert attrs["messaging.consumer.group.name"] == "metered"
    assert m.total("aws.kinesis.consumer.user_records.data") == sum(len(d) for d, _ in records)
    assert m.values("aws.kinesis.consumer.lag") == []  # no shard is read after close
    assert m.total("aws.kinesis.consumer.record.age") >= 1
    assert m.total("messaging.process.duration") >= 1
    assert (
        m.total("messaging.client.operation.duration", messaging__operation__name="GetRecords") >= 2
    )
    # The final checkpoints at close: one per shard; every lease taken, then released.
    assert m.total("aws.kinesis.consumer.checkpoints") >= 2
    changes = {
        a["aws.kinesis.lease.change"]: p.value
        for a, p in m.values("aws.kinesis.consumer.lease.changes")
    }
    assert changes == {"taken": 2, "released": 2}
    assert (
        m.total(
            "aws.kinesis.checkpoint_store.operation.duration",
            aws__kinesis__checkpoint_store__operation="update_lease",
        )
        >= 4
    )


def test_the_prometheus_example_scrapes_the_demos_metrics_over_http() -> None:
    """examples/metrics_prometheus.py runs the demo's core with telemetry on, then GETs
    /metrics from the Prometheus endpoint on 127.0.0.1: the counts are those of the demo."""
    done = subprocess.run(
        [sys.executable, "-m", "examples.metrics_prometheus", "--records", "200", "--users", "20"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "200 written, 200 read, 0 duplicates" in done.stdout
    samples: dict[str, float] = {}
    for line in done.stdout.split("GET /metrics")[1].splitlines()[1:]:
        name, _, value = line.rpartition(" ")
        family = name.split("{")[0]
        samples[family] = samples.get(family, 0.0) + float(value)
    assert samples["messaging_client_sent_messages_total"] == 200
    assert samples["messaging_client_consumed_messages_total"] == 200
    assert samples["aws_kinesis_producer_user_records_received_total"] == 200
    assert (
        samples["aws_kinesis_producer_user_records_data_bytes_total"]
        == samples["aws_kinesis_consumer_user_records_data_bytes_total"]
    )
    assert samples["messaging_client_operation_duration_seconds_count"] >= 2


def test_beam_transforms_report_the_same_figures_as_beam_metrics(
    kinesis_stream: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """WriteToKinesis then ReadFromKinesis on the in-process runner: the counts from
    ``result.metrics()`` are what was written and read; the lag gauge is per shard, 0 once
    the read caught up."""
    import apache_beam as beam
    from apache_beam.metrics.metric import MetricsFilter

    from beam_kinesis import METRICS_NAMESPACE, ReadFromKinesis, WriteToKinesis
    from tests.helpers.beam import pipeline

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", DUMMY_ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", DUMMY_SECRET_ACCESS_KEY)
    stream = kinesis_stream(shards=2)
    values = [b"element-%03d" % i for i in range(60)]
    shard_ids = {s["ShardId"] for s in stream.shards()}

    def query(result: Any) -> dict[str, dict[str, Any]]:
        found = result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))
        return {
            kind: {m.key.metric.name: m.committed for m in found[kind]}
            for kind in ("counters", "distributions", "gauges")
        }

    p = pipeline(stream, "in_memory")
    _ = p | beam.Create(values) | WriteToKinesis(stream.name)
    written = p.run()
    written.wait_until_finish()
    w = query(written)
    assert w["counters"]["messaging.client.sent.messages"] == len(values)
    assert w["counters"]["aws.kinesis.producer.user_records.data"] == sum(map(len, values))
    assert w["counters"]["aws.kinesis.producer.kinesis_records"] >= 1
    assert w["distributions"]["aws.kinesis.producer.user_records.per_kinesis_record"].sum == 60

    p = pipeline(stream, "in_memory")
    _ = p | ReadFromKinesis(
        stream.name, initial_position=TRIM_HORIZON, stop_when_caught_up=True, idle_interval=0.2
    )
    read = p.run()
    read.wait_until_finish()
    r = query(read)
    assert r["counters"]["messaging.client.consumed.messages"] == len(values)
    assert r["counters"]["aws.kinesis.consumer.user_records.data"] == sum(map(len, values))
    lag = "aws.kinesis.consumer.lag{messaging.destination.partition.id=%s}"
    assert {shard: r["gauges"][lag % shard].value for shard in shard_ids} == dict.fromkeys(
        shard_ids, 0
    )
    get_records = "messaging.client.operation.duration{messaging.operation.name=GetRecords}"
    assert r["distributions"][get_records].count >= 2
    assert r["distributions"]["aws.kinesis.consumer.record.age"].count >= 1


def test_fan_out_subscriptions_opened_and_renewed(kinesis_stream: Any, reader: Any) -> None:
    """Enhanced fan-out on kinesis-mock, subscriptions renewed every 2 s: each shard's first
    SubscribeToShard counts as opened, the later ones as renewed, and the records delivered
    count under the SubscribeToShard operation."""
    metric_reader, provider = reader
    stream = kinesis_stream(shards=1)
    total = 20
    for n in range(total):
        stream.put(f"k:{n}".encode(), "k")
    config = ConsumerConfig(
        initial_position=TRIM_HORIZON,
        idle_interval=0.2,
        enhanced_fan_out=EnhancedFanOut(
            consumer_name="efo-metrics", closed_check_interval=1.0, max_subscription_seconds=2.0
        ),
        telemetry=Telemetry(meter_provider=provider),
    )

    async def main() -> int:
        async with Consumer(
            stream.name,
            consumer_config=config,
            client_config=stream.client_config,
            checkpoint_store=MemoryCheckpointStore(),
        ) as consumer:
            seen = 0
            async for batch in consumer.batches():
                batch.ack()
                seen += len(batch)
                if seen >= total:
                    break
            for _ in range(100):  # renewed every 2 s: a few seconds more
                if consumer.status()[0].connects >= 3:
                    break
                await asyncio.sleep(0.2)
            return consumer.status()[0].connects

    connects = asyncio.run(asyncio.wait_for(main(), 60))
    m = Metrics(metric_reader)
    outcomes = {
        a["aws.kinesis.subscription.outcome"]: p.value
        for a, p in m.values("aws.kinesis.fanout.subscriptions")
    }
    assert outcomes["opened"] == 1
    assert outcomes["renewed"] >= connects - 1 >= 2
    consumed = m.values("messaging.client.consumed.messages")
    assert [(a["messaging.operation.name"], p.value) for a, p in consumed] == [
        ("SubscribeToShard", total)
    ]
