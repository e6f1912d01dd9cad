"""What ReadFromKinesis tells the runner about its backlog, and its watermark under faults,
against kinesis-mock. The DoFn is driven call by call as a runner drives it (tests/helpers/
beam.SdfDriver): Beam's tracker wrappers, the DoFn's own estimator and restriction sizes.

- ``restriction_size`` (and the tracker's progress) estimate the unread bytes: they grow while
  records arrive faster than a slowed reader reads them, and fall to nothing once it caught up.
- Through a fault proxy that throttles, fails and delays calls, no element is output behind the
  watermark its restriction had reported before it.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from beam_kinesis._read_fn import UnboundedReadFn
from beam_kinesis.read import ReadFromKinesis
from kinesis_core.aws.config import ClientConfig
from kinesis_core.consumer import TRIM_HORIZON
from kinesis_core.local import DUMMY_ACCESS_KEY_ID, DUMMY_SECRET_ACCESS_KEY, LocalStream
from kinesis_core.local.faults import FaultConfig, FaultKind
from tests.helpers.beam import SdfDriver

pytestmark = pytest.mark.integration

RECORD = b"x" * 1000


@pytest.fixture(autouse=True)
def worker_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", DUMMY_ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", DUMMY_SECRET_ACCESS_KEY)


def _driver(stream: LocalStream, endpoint_url: str, **kw: Any) -> SdfDriver:
    config = ClientConfig(endpoint_url=endpoint_url, region_name=stream.client_config.region_name)
    transform = ReadFromKinesis(
        stream.name, client_config=config, initial_position=TRIM_HORIZON, **kw
    )
    fn = UnboundedReadFn(transform._spec)
    fn.setup()
    (restriction,) = fn.split(stream.name, fn.initial_restriction(stream.name))
    return SdfDriver(fn, stream.name, restriction)


def _put(stream: LocalStream, count: int, spread: float) -> None:
    """``count`` records of 1000 bytes, over about ``spread`` seconds."""
    client = stream.boto_client()
    for i in range(count):
        client.put_record(StreamName=stream.name, Data=RECORD, PartitionKey=f"k{i}")
        time.sleep(spread / count)


def test_restriction_size_grows_with_an_unread_backlog_and_falls_as_it_is_read(
    kinesis_stream: Any,
) -> None:
    stream: LocalStream = kinesis_stream(shards=1)
    # Ten records per GetRecords, at most five calls a second: a reader slower than the writer.
    driver = _driver(
        stream,
        stream.endpoint_url,
        max_records_per_call=10,
        self_checkpoint_interval=0.3,
        idle_interval=0.2,
    )
    try:
        assert driver.size == 1  # nothing known yet
        _put(stream, 40, 1.0)
        driver.call()
        first = driver.size
        _put(stream, 80, 2.0)
        driver.call()
        second = driver.size
        assert first > 1
        assert second > first  # the tip moved on faster than the reader
        sizes = [second]
        for _ in range(60):
            driver.call()
            sizes.append(driver.size)
            if sizes[-1] == 1:
                break
        assert sizes[-1] == 1  # caught up: nothing left behind
        assert len(driver.outputs) == 120
        assert max(sizes) > sizes[-1]
    finally:
        driver.fn.teardown()


def test_no_element_is_output_behind_the_watermark_through_faults(
    kinesis_stream: Any, fault_proxy: Any
) -> None:
    stream: LocalStream = kinesis_stream(shards=1)
    faults = FaultConfig.from_rates(
        throttle=0.2,
        internal_error=0.1,
        expired_iterator=0.05,
        latency_ms=100,
        latency_jitter_ms=300,
        operations=["GetRecords", "GetShardIterator"],
    )
    proxy = fault_proxy(stream.endpoint_url, faults, seed=25)
    driver = _driver(
        stream,
        proxy.endpoint_url,
        self_checkpoint_interval=0.3,
        idle_interval=0.2,
        idle_threshold=0.01,
    )
    try:
        for _ in range(6):
            _put(stream, 10, 0.3)
            for _ in range(4):
                driver.call()
        for _ in range(30):
            if len(driver.outputs) == 60:
                break
            driver.call()
        assert len(driver.outputs) == 60
        marks = [mark for _, mark in driver.outputs if mark is not None]
        assert marks  # the watermark moved while reading
        for out, mark in driver.outputs:
            assert mark is None or out.timestamp >= mark, (out, mark)
        injected = proxy.stats()
        assert injected.total(FaultKind.THROTTLE) > 0, injected.summary()
        assert injected.total(FaultKind.INTERNAL_ERROR) > 0, injected.summary()
    finally:
        driver.fn.teardown()
