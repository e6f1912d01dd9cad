"""WriteToKinesis on real runners against local Kinesis servers, read back with the core consumer.

- 5,000 elements while a shard is split mid-write (kinesis-mock), on the FnApiRunner in memory,
  the FnApiRunner with two worker processes, and the streaming DirectRunner (a TestStream): every
  element arrives, and records landed in the parent before the split and the children after.
- A bundle that fails after part of it was written is retried and nothing is lost: by the
  streaming DirectRunner's own bundle retry, and on the FnApiRunner (which does not retry
  bundles) by running the failed job again, as a production runner would retry it.
- With ``record_id_fn``, a re-run writes its records with the same ids as the failed run.
- Bad elements go to ``failed_records`` with their error while the rest is written.
- Records of 3 and 9.5 MiB are written and read back intact by ReadFromKinesis, polling and
  by enhanced fan-out.

The runners are passed as objects: ``runner="DirectRunner"`` would try Prism first, which
downloads a binary. Credentials come from the environment, as on a worker.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing import test_stream
from apache_beam.testing.util import assert_that, equal_to

from beam_kinesis import METRICS_NAMESPACE, FailedRecord, WriteToKinesis, _producer_cache
from beam_kinesis.read import ReadFromKinesis
from kinesis_core.aws.client import create_botocore_client
from kinesis_core.aws.config import ClientConfig
from kinesis_core.consumer import TRIM_HORIZON
from kinesis_core.local import DUMMY_ACCESS_KEY_ID, DUMMY_SECRET_ACCESS_KEY, LocalStream
from kinesis_core.local.streams import split_shard
from kinesis_core.producer import VALIDATION_ERROR
from kinesis_core.records import KinesisRecord
from tests.helpers.beam import read_back
from tests.helpers.large_records import large_records

pytestmark = pytest.mark.integration

ELEMENTS = 5000
SPLIT_AFTER = 1500
"""The split happens when the writer serializes this many elements in a process: one chunk of
1,000 has then been handed to the producer, and the rest of the bundle comes after the split."""


@pytest.fixture(autouse=True)
def worker_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials from the environment (as on a worker); this module importable by the
    FnApiRunner's worker processes, which unpickle the test's helper classes."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", DUMMY_ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", DUMMY_SECRET_ACCESS_KEY)
    path = [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in path if p))


def options(stream: LocalStream, *extra: str) -> PipelineOptions:
    return PipelineOptions(
        [
            f"--kinesis_endpoint_url={stream.endpoint_url}",
            f"--kinesis_region_name={stream.client_config.region_name}",
            *extra,
        ]
    )


class SplitMidWrite:
    """A serializer that splits ``shard_id`` (once per test, whichever process gets there
    first) when it has serialized ``after`` elements in its process, as soon as the records
    handed to the producer before have reached the shard."""

    _counts: Counter[str] = Counter()
    _lock = threading.Lock()

    def __init__(self, config: ClientConfig, stream: str, shard_id: str, marker: Path) -> None:
        self.config = config
        self.stream = stream
        self.shard_id = shard_id
        self.marker = marker
        self.after = SPLIT_AFTER

    def __call__(self, element: int) -> bytes:
        with self._lock:
            self._counts[str(self.marker)] += 1
            now = self._counts[str(self.marker)] == self.after
        if now and _first(self.marker):
            client = create_botocore_client(self.config, "kinesis", max_attempts=8)
            try:
                self._wait_for_a_record(client)
                split_shard(client, self.stream, self.shard_id)
            finally:
                client.close()
        return str(element).encode()

    def _wait_for_a_record(self, client: Any) -> None:
        iterator = client.get_shard_iterator(
            StreamName=self.stream, ShardId=self.shard_id, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            page = client.get_records(ShardIterator=iterator)
            if page["Records"]:
                return
            iterator = page["NextShardIterator"]
            time.sleep(0.05)
        raise AssertionError(f"nothing reached {self.shard_id} before the split")


def _first(marker: Path) -> bool:
    """True for the first caller only, across processes (an exclusively created file)."""
    try:
        marker.touch(exist_ok=False)
    except FileExistsError:
        return False
    return True


def _write_with_split(stream: LocalStream, tmp_path: Path) -> tuple[str, WriteToKinesis]:
    parent = stream.shards()[0]["ShardId"]
    serializer = SplitMidWrite(stream.client_config, stream.name, parent, tmp_path / "split")
    return parent, WriteToKinesis(stream.name, serializer=serializer)


def _check_every_element_and_the_split(stream: LocalStream, parent: str) -> None:
    expected = {str(i).encode() for i in range(ELEMENTS)}
    got = read_back(stream, expected)
    assert {r.data for r in got} == expected
    children = {s["ShardId"] for s in stream.shards() if s.get("ParentShardId") == parent}
    assert len(children) == 2, "the shard was not split"
    landed = {r.shard_id for r in got}
    assert parent in landed, "nothing was written before the split"
    assert children <= landed, "nothing was written after the split"


@pytest.mark.parametrize("mode", ["in_memory", "multi_processing"])
def test_fn_api_runner_writes_everything_while_a_shard_splits(
    kinesis_stream: Any, tmp_path: Path, mode: str
) -> None:
    stream = kinesis_stream(shards=2)
    parent, write = _write_with_split(stream, tmp_path)
    extra = (
        ["--direct_num_workers=2", f"--direct_running_mode={mode}"] if mode != "in_memory" else []
    )
    with beam.Pipeline(runner=FnApiRunner(), options=options(stream, *extra)) as p:
        result = p | beam.Create(range(ELEMENTS)) | write
        assert_that(result.failed_records, equal_to([]))
    _check_every_element_and_the_split(stream, parent)
    assert stream.name not in _producer_cache.live_producers(), "not closed at teardown"


def test_streaming_direct_runner_writes_everything_while_a_shard_splits(
    kinesis_stream: Any, tmp_path: Path
) -> None:
    stream = kinesis_stream(shards=2)
    parent, write = _write_with_split(stream, tmp_path)
    events = test_stream.TestStream()
    for start in range(0, ELEMENTS, 500):
        events = events.add_elements(list(range(start, start + 500))).advance_watermark_to(start)
    events = events.advance_watermark_to_infinity()
    with beam.Pipeline(
        runner=BundleBasedDirectRunner(), options=options(stream, "--streaming")
    ) as p:
        result = p | events | write
        assert_that(result.failed_records, equal_to([]))
    _check_every_element_and_the_split(stream, parent)
    assert stream.name not in _producer_cache.live_producers(), "not closed at teardown"


class PoisonOnce:
    """Serializer: the first time (across retries and processes) it meets ``poison`` it makes
    a record too big for Kinesis, so the bundle fails once; after that it is harmless."""

    def __init__(self, poison: int, marker: Path) -> None:
        self.poison = poison
        self.marker = marker

    def __call__(self, element: int) -> bytes:
        if element == self.poison and _first(self.marker):
            return b"x" * (1024 * 1024 + 1)
        return str(element).encode()


def test_streaming_direct_runner_retries_a_failed_bundle_and_loses_nothing(
    moto_stream: Any, tmp_path: Path
) -> None:
    stream = moto_stream(shards=4)
    count = 600
    events = (
        test_stream.TestStream()
        .add_elements(list(range(0, 300)))
        .advance_watermark_to(10)
        .add_elements(list(range(300, count)))
        .advance_watermark_to_infinity()
    )
    write = WriteToKinesis(
        stream.name, serializer=PoisonOnce(150, tmp_path / "poison"), on_failure="raise"
    )
    with beam.Pipeline(
        runner=BundleBasedDirectRunner(), options=options(stream, "--streaming")
    ) as p:
        _ = p | events | write
    expected = {str(i).encode() for i in range(count)}
    got = Counter(r.data for r in read_back(stream, expected))
    assert set(got) == expected
    # The failed attempt wrote the poison's bundle-mates, and its retry wrote them again.
    assert any(got[str(i).encode()] == 2 for i in range(300)), "no record of the failed try"
    assert all(got[str(i).encode()] == 1 for i in range(300, count))


class FailOnce(beam.DoFn):
    """Passes elements on; raises once (across re-runs) at element ``at``, mid-bundle."""

    def __init__(self, at: int, marker: Path) -> None:
        super().__init__()
        self.at = at
        self.marker = marker

    def process(self, element: int) -> Any:
        if element == self.at and _first(self.marker):
            raise RuntimeError("the worker died mid-bundle")
        yield element


def test_fn_api_runner_rerun_of_a_failed_bundle_loses_nothing(
    moto_stream: Any, tmp_path: Path
) -> None:
    """The FnApiRunner does not retry bundles: the job fails, and running it again is the
    retry a production runner makes. Elements are generated in order in one fused bundle, so
    two chunks (2,000 elements) have been handed to the producer when the bundle fails."""
    stream = moto_stream(shards=4)
    count = 3000

    def run() -> None:
        with beam.Pipeline(runner=FnApiRunner(), options=options(stream)) as p:
            _ = (
                p
                | beam.Impulse()
                | beam.FlatMap(lambda _: range(count))
                | beam.ParDo(FailOnce(2500, tmp_path / "failed"))
                | beam.Map(lambda i: str(i).encode())
                | WriteToKinesis(stream.name)
            )

    with pytest.raises(RuntimeError, match="the worker died mid-bundle"):
        run()
    written_before = {str(i).encode() for i in range(2000)}
    assert {r.data for r in read_back(stream, written_before)} >= written_before
    run()
    expected = {str(i).encode() for i in range(count)}
    got = Counter(r.data for r in read_back(stream, expected))
    assert set(got) == expected
    assert all(got[data] == 2 for data in written_before)


def test_a_rerun_of_a_failed_bundle_writes_the_same_record_ids(
    moto_stream: Any, tmp_path: Path
) -> None:
    """With ``record_id_fn``, the records a failed bundle wrote and its re-run wrote again
    carry the same ids, in their aggregates' tags: a deduplicating reader drops the copies."""
    stream = moto_stream(shards=2)
    count = 1500

    def run() -> None:
        with beam.Pipeline(runner=FnApiRunner(), options=options(stream)) as p:
            _ = (
                p
                | beam.Impulse()
                | beam.FlatMap(lambda _: range(count))
                | beam.ParDo(FailOnce(1200, tmp_path / "failed"))
                | WriteToKinesis(
                    stream.name,
                    serializer=lambda i: str(i).encode(),
                    record_id_fn=lambda i: f"element-{i}",
                )
            )

    with pytest.raises(RuntimeError, match="the worker died mid-bundle"):
        run()
    run()
    expected = {str(i).encode() for i in range(count)}
    got = read_back(stream, expected)
    assert all(r.record_id == f"element-{r.data.decode()}" for r in got)
    ids = Counter(r.record_id for r in got)
    assert len(ids) == count
    assert ids["element-0"] == 2  # written by the failed bundle and by its re-run


def test_bad_elements_go_to_failed_records_and_the_rest_is_written(moto_stream: Any) -> None:
    stream = moto_stream(shards=4)
    good = [(f"key-{i % 13}", f"value-{i}".encode()) for i in range(300)]
    bad = [
        ("big", b"x" * (1024 * 1024)),  # with its key, over the 1 MiB record limit
        ("", b"empty key"),
        ("wrong-type", 42),
        (1.5, b"a float key"),
    ]

    def check(failed: list[FailedRecord]) -> None:
        by_key = {f.element[0]: f for f in failed}
        assert set(by_key) == {"big", "", "wrong-type", 1.5}
        assert {f.error_code for f in failed} == {VALIDATION_ERROR}
        assert "data plus partition key is 1048579 bytes, over the 1024 KiB" in (
            by_key["big"].error_message
        )
        assert "UpdateMaxRecordSize" in by_key["big"].error_message
        assert "key: must not be empty" in by_key[""].error_message
        assert "data: must be bytes or str, got int" in by_key["wrong-type"].error_message
        assert "must give a str, int or UTF-8 bytes partition key, got float" in (
            by_key[1.5].error_message
        )

    pipeline = beam.Pipeline(runner=FnApiRunner(), options=options(stream))
    result = (
        pipeline
        | beam.Create(good[:150] + bad + good[150:])
        | WriteToKinesis(stream.name, keyed=True)
    )
    assert_that(result.failed_records, check)
    run = pipeline.run()
    run.wait_until_finish()
    got = read_back(stream, {value for _, value in good})
    assert {(r.partition_key, r.data) for r in got} == set(good)
    counters = {
        c.key.metric.name: c.committed
        for c in run.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))["counters"]
    }
    assert counters["messaging.client.sent.messages"] == len(good)
    failed = sum(n for name, n in counters.items() if name.endswith("{error.type=ValidationError}"))
    assert failed == len(bad)
    assert counters["aws.kinesis.producer.user_records.data"] == sum(len(v) for _, v in good)
    assert 0 < counters["aws.kinesis.producer.kinesis_records"] < len(good)  # aggregated


def test_the_example_runs_against_a_local_emulator() -> None:
    example = Path(__file__).parents[2] / "examples" / "beam_write.py"
    done = subprocess.run(
        [sys.executable, str(example), "--count", "200"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "messaging.client.sent.messages: 200" in done.stdout
    assert "messaging.client.sent.messages{error.type=ValidationError}: 1" in done.stdout
    assert "read back 200 orders" in done.stdout


def test_the_benchmark_runs_in_quick_mode() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--only", "beam_write", "--json"],
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    subjects = {(row["group"], row["subject"]) for row in rows}
    assert len(rows) == 15
    for row in rows:
        if row["group"].endswith("per element vs core"):
            # Past the start and stop: at quick volumes the two runs may be too close to tell.
            assert row["value"] is None or row["value"] > 0, row
            assert row["value"] is not None or "not measured" in row["note"], row
        else:
            assert row["value"] > 0, row
        if row["baseline"] is not None:
            assert (row["group"], row["baseline"]) in subjects, row
    assert sorted(row["target"] for row in rows if row["target"]) == [0.6, 0.8, 5.0, 10.0]
    vs_boto3 = {
        row["group"]: row["target"]
        for row in rows
        if row["group"].endswith("vs boto3") and row["subject"] == "WriteToKinesis"
    }
    assert sorted(vs_boto3.values()) == [5.0, 10.0]
    assert [target for group, target in vs_boto3.items() if "Create" in group] == [5.0]
    core = [row for row in rows if row["baseline"] == "kinesis_core producer"]
    assert [(row["subject"], row["target"]) for row in core] == [
        ("WriteToKinesis", None),
        ("WriteToKinesis", 0.8),
    ]
    assert core[1]["group"].endswith("per element vs core")


def _digest_line(path: str) -> Any:
    """A sink that appends ``sha256 length`` of each record's data to ``path``."""

    def write(record: KinesisRecord) -> None:
        with open(path, "a") as f:
            f.write(f"{hashlib.sha256(record.data).hexdigest()} {len(record.data)}\n")

    return write


def test_large_records_through_the_sink_and_back_through_the_source_both_ways(
    kinesis_stream: Any, tmp_path: Path
) -> None:
    """A 3 MiB and a 9.5 MiB element among small ones, with default settings: written by
    WriteToKinesis, read back intact by ReadFromKinesis polling and by enhanced fan-out."""
    stream = kinesis_stream(shards=1, max_record_size_kib=10240)
    values = [data for data, _ in large_records("beam")]
    expected = sorted(f"{hashlib.sha256(v).hexdigest()} {len(v)}" for v in values)
    with beam.Pipeline(runner=FnApiRunner(), options=options(stream)) as p:
        result = p | beam.Create(values, reshuffle=False) | WriteToKinesis(stream.name)
        assert_that(result.failed_records, equal_to([]))
    for name, fan_out in (("polling", {}), ("fan-out", {"consumer_name": "beam-large"})):
        out = tmp_path / f"{name}.txt"
        with beam.Pipeline(runner=FnApiRunner(), options=options(stream)) as p:
            _ = (
                p
                | ReadFromKinesis(
                    stream.name,
                    initial_position=TRIM_HORIZON,
                    max_records=len(values),
                    idle_interval=0.2,
                    **fan_out,
                )
                | beam.Map(_digest_line(str(out)))
            )
        assert sorted(out.read_text().splitlines()) == expected, name
