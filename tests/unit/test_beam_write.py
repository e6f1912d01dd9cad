"""WriteToKinesis without a server: element -> record, configuration, credentials, and the DoFn's
bundle logic (chunked hand-off, waiting, failures in their windows, sharing the producer) driven
against a fake producer, directly and on the in-process FnApiRunner."""

from __future__ import annotations

import concurrent.futures
import itertools
import pickle
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import apache_beam as beam
import pytest
from apache_beam.internal import pickler
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.pvalue import TaggedOutput
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import window
from apache_beam.transforms.display import DisplayData
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from beam_kinesis import (
    FAILED_RECORDS,
    METRICS_NAMESPACE,
    CredentialsInPipelineWarning,
    FailedRecord,
    KinesisOptions,
    KinesisWriteError,
    WriteToKinesis,
    _producer_cache,
    write,
)
from beam_kinesis._elements import make_record_fn, to_bytes
from beam_kinesis.options import client_config_from_options
from kinesis_core.aws.config import ClientConfig
from kinesis_core.errors import ConfigurationError, ValidationError
from kinesis_core.producer import (
    EXPIRED,
    INTERNAL,
    VALIDATION_ERROR,
    Attempt,
    BatchResult,
    MetricsSnapshot,
    ProducerConfig,
    ProducerCrashedError,
    RecordResult,
)
from kinesis_core.producer.metrics import Distribution
from kinesis_core.producer.result import THROTTLED, Runs
from kinesis_core.shards.hashing import hash_key, validate_record
from kinesis_core.shards.info import uniform_shards

Outcome = Callable[[tuple[Any, ...]], "tuple[str, str] | None"]


class FakeProducer:
    """Stands in for BlockingProducer: records every submit_many call, answers with a
    BatchResult per chunk (failures by ``outcome``), at once or only at ``flush``."""

    made: list[FakeProducer] = []
    outcome: Outcome | None = None
    defer = False

    def __init__(
        self, stream_name: str, *, client_config: ClientConfig, producer_config: ProducerConfig
    ) -> None:
        self.stream_name = stream_name
        self.client_config = client_config
        self.config = producer_config
        self.chunks: list[list[tuple[Any, ...]]] = []
        self.pending: list[tuple[concurrent.futures.Future[BatchResult], BatchResult]] = []
        self.closed = False
        self.crash_on_flush = False
        self.flushes = 0
        self.seq = itertools.count(1)
        FakeProducer.made.append(self)

    def submit_many(self, records: Sequence[tuple[Any, ...]]) -> concurrent.futures.Future[Any]:
        if self.closed:
            raise RuntimeError("closed")
        self.chunks.append(list(records))
        n = len(records)
        runs = Runs()
        failures: dict[int, RecordResult] = {}
        seq = str(next(self.seq))  # one "aggregate" per chunk
        written = (Attempt(0.0, 0.001, True, shard_id="shardId-000000000000"),)
        for i, rec in enumerate(records):
            code: tuple[str, str] | None
            try:
                validate_record(*rec)
                code = FakeProducer.outcome(rec) if FakeProducer.outcome else None
            except ValidationError as exc:
                code = (VALIDATION_ERROR, str(exc))
            if code is None:
                runs.add([i], i, "shardId-000000000000", seq, written)
            else:
                attempt = Attempt(0.0, 0.001, False, code[0], code[1])
                failures[i] = RecordResult(False, None, None, None, (attempt,), *code)
        future: concurrent.futures.Future[BatchResult] = concurrent.futures.Future()
        result = BatchResult(n, runs, failures)
        if FakeProducer.defer:
            self.pending.append((future, result))
        else:
            future.set_result(result)
        return future

    def flush(self) -> None:
        self.flushes += 1
        if self.crash_on_flush:
            raise ProducerCrashedError("boom")
        for future, result in self.pending:
            future.set_result(result)
        self.pending.clear()

    def close(self, timeout: float | None = None) -> None:
        self.closed = True

    def metrics(self) -> MetricsSnapshot:
        written = sum(len(c) for c in self.chunks)
        return MetricsSnapshot(
            self.stream_name,
            0.0,
            kinesis_records_put=len(self.chunks),
            put_records_requests=len(self.chunks),
            errors_by_code={THROTTLED: 2},
            retries_by_code={THROTTLED: 3},
            retries_per_record=Distribution(written, 3.0, 0, 1),
        )


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[FakeProducer]]:
    monkeypatch.setattr(write, "BlockingProducer", FakeProducer)
    FakeProducer.made = []
    FakeProducer.outcome = None
    FakeProducer.defer = False
    yield FakeProducer
    leaked = {p.stream_name for p in FakeProducer.made} & set(_producer_cache.live_producers())
    assert not leaked, "a DoFn did not release its producer"
    assert all(p.closed for p in FakeProducer.made)


def stream() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


def make_fn(windowed: bool = False, **kwargs: Any) -> Any:
    """The sink's DoFn: the one of globally windowed inputs, or the per-window one."""
    transform = WriteToKinesis(kwargs.pop("stream", stream()), **kwargs)
    if windowed:
        return write._WindowedWriteToKinesisFn(transform._spec)
    return write._WriteToKinesisFn(transform._spec)


GLOBAL = (window.GlobalWindow(),)


def windowed(value: Any, ts: float = 10.0, windows: Any = GLOBAL) -> Any:
    return WindowedValue(value, ts, windows)


def run_bundle(fn: Any, elements: Sequence[Any]) -> list[Any]:
    """Outputs of one bundle: what ``process`` returned (Beam puts it in the element's windows
    at its timestamp, as here) and what ``finish_bundle`` yielded."""
    fn.start_bundle()
    out = []
    for element in elements:
        wv = element if isinstance(element, WindowedValue) else windowed(element)
        if isinstance(fn, write._WindowedWriteToKinesisFn):
            returned = fn.process(wv.value, wv)
        else:
            returned = fn.process(wv.value)
        out += [TaggedOutput(r.tag, wv.with_value(r.value)) for r in returned or ()]
    return out + list(fn.finish_bundle())


# -- element -> record --------------------------------------------------------------------------


def test_default_serializer_takes_bytes_and_str_only() -> None:
    assert to_bytes(b"x") == b"x"
    assert to_bytes("é") == "é".encode()
    assert to_bytes(bytearray(b"ab")) == b"ab"
    assert to_bytes(memoryview(b"cd")) == b"cd"
    with pytest.raises(ValidationError, match=r"data: must be bytes or str, got dict"):
        to_bytes({"a": 1})


def test_default_keys_are_random_and_spread_over_every_shard() -> None:
    record = make_record_fn(
        serializer=None, partition_key=None, explicit_hash_key=None, keyed=False
    )
    keys = [record(b"same")[1] for _ in range(2000)]
    assert len(set(keys)) == len(keys)
    shards = uniform_shards(16)
    hit = {s.shard_id for k in keys for s in shards if s.contains(hash_key(k))}
    assert len(hit) == 16


def test_partition_key_from_a_field_a_function_or_the_element_key() -> None:
    by_field = make_record_fn(
        serializer=str, partition_key="user", explicit_hash_key=None, keyed=False
    )
    assert by_field({"user": 7}) == (b"{'user': 7}", "7")
    by_fn = make_record_fn(
        serializer=None, partition_key=lambda e: e[:2], explicit_hash_key=None, keyed=False
    )
    assert by_fn("abcdef") == (b"abcdef", "ab")
    keyed = make_record_fn(
        serializer=None, partition_key=None, explicit_hash_key=lambda kv: 5, keyed=True
    )
    assert keyed((b"k", "v")) == (b"v", "k", 5)
    with pytest.raises(ValidationError, match=r"element: keyed=True needs \(key, value\) pairs"):
        keyed(3)
    with pytest.raises(ValidationError) as too_long:
        keyed(("k", "v", "extra"))
    assert str(too_long.value) == (
        "element: keyed=True needs (key, value) pairs; "
        "got a tuple of 3 elements, one too many (at most 2)"
    )
    with pytest.raises(ValidationError, match=r"got a list of 1 element: value \(element 1\)"):
        keyed(["k"])
    with pytest.raises(ValidationError, match=r"key: must give a str, int or UTF-8 bytes"):
        keyed((1.5, "v"))


def test_user_functions_that_raise_or_return_junk_make_a_bad_element() -> None:
    def explode(_: object) -> bytes:
        raise KeyError("nope")

    record = make_record_fn(
        serializer=explode, partition_key=None, explicit_hash_key=None, keyed=False
    )
    with pytest.raises(ValidationError, match=r"serializer .*explode: raised KeyError: 'nope'"):
        record(1)
    record = make_record_fn(
        serializer=lambda e: 42, partition_key=None, explicit_hash_key=None, keyed=False
    )
    with pytest.raises(ValidationError, match=r"must return bytes or str, got int"):
        record(1)
    record = make_record_fn(
        serializer=None, partition_key=lambda e: e.missing, explicit_hash_key=None, keyed=False
    )
    with pytest.raises(ValidationError, match=r"raised AttributeError"):
        record("x")


# -- configuration ------------------------------------------------------------------------------


def test_configuration_is_checked_at_construction() -> None:
    with pytest.raises(ConfigurationError, match="stream: must be a stream name or ARN"):
        WriteToKinesis("")
    with pytest.raises(ConfigurationError, match="on_failure"):
        WriteToKinesis("s", on_failure="ignore")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="keyed=True"):
        WriteToKinesis("s", keyed=True, partition_key="user")
    with pytest.raises(ConfigurationError, match="partition_key"):
        WriteToKinesis("s", partition_key=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"unknown option.*record_tll"):
        WriteToKinesis("s", record_tll=3)
    with pytest.raises(ConfigurationError, match="record_ttl"):
        WriteToKinesis("s", record_ttl=-1)
    spec = WriteToKinesis(
        "s", producer_config=ProducerConfig(rate_limit=100), fail_if_throttled=True
    )._spec
    assert spec.producer_config == ProducerConfig(rate_limit=100, fail_if_throttled=True)


def test_options_fill_what_the_code_leaves_unset_and_nothing_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "launcher-region")
    monkeypatch.setenv("AWS_ENDPOINT_URL_KINESIS", "http://launcher:1")
    options = PipelineOptions(
        [
            "--kinesis_region_name=eu-west-1",
            "--kinesis_endpoint_url=http://127.0.0.1:4567",
            "--kinesis_profile_name=etl",
            "--kinesis_verify=false",
        ]
    )
    assert options.view_as(KinesisOptions).kinesis_region_name == "eu-west-1"
    assert client_config_from_options(options) == ClientConfig(
        region_name="eu-west-1",
        endpoint_url="http://127.0.0.1:4567",
        profile_name="etl",
        verify=False,
    )
    explicit = ClientConfig(region_name="us-west-2", verify="/ca.pem")
    merged = client_config_from_options(options, explicit)
    assert (merged.region_name, merged.verify) == ("us-west-2", "/ca.pem")
    assert merged.endpoint_url == "http://127.0.0.1:4567"
    assert client_config_from_options(PipelineOptions([])) == ClientConfig()
    with pytest.raises(ConfigurationError, match="endpoint_url"):
        client_config_from_options(PipelineOptions(["--kinesis_endpoint_url=localhost:1"]))


def test_credentials_from_the_environment_are_never_pickled_into_the_pipeline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = "env-secret-" + uuid.uuid4().hex
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAENVIRONMENT")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_SESSION_TOKEN", secret + "-token")
    options = PipelineOptions(["--kinesis_region_name=eu-west-1"])
    pipeline = beam.Pipeline(options=options)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CredentialsInPipelineWarning)
        _ = pipeline | beam.Create([b"a"]) | WriteToKinesis("orders")
    proto = pipeline.to_runner_api().SerializeToString()
    assert b"eu-west-1" in proto  # the DoFn and its config are in there...
    assert secret.encode() not in proto  # ...but not the credentials
    assert b"AKIAENVIRONMENT" not in proto


def test_record_id_fn_gives_each_record_its_id_and_turns_record_ids_on() -> None:
    by_id = make_record_fn(
        serializer=None,
        partition_key=lambda e: "k",
        explicit_hash_key=None,
        keyed=False,
        record_id=lambda e: f"id-{e}",
    )
    assert by_id("x") == (b"x", "k", None, "id-x")
    keyed = make_record_fn(
        serializer=None,
        partition_key=None,
        explicit_hash_key=lambda kv: 5,
        keyed=True,
        record_id=lambda kv: kv[0],
    )
    assert keyed(("key", "v")) == (b"v", "key", 5, "key")

    def broken(element: Any) -> str:
        raise KeyError("id")

    failing = make_record_fn(
        serializer=None, partition_key=None, explicit_hash_key=None, keyed=False, record_id=broken
    )
    with pytest.raises(ValidationError, match="raised KeyError"):
        failing("x")
    transform = WriteToKinesis("s", record_id_fn=lambda e: str(e))
    assert transform._spec.producer_config.record_ids
    assert not WriteToKinesis("s")._spec.producer_config.record_ids
    with pytest.raises(ConfigurationError, match="record_id_fn: must be a function"):
        WriteToKinesis("s", record_id_fn="id")  # type: ignore[arg-type]


def test_explicit_credentials_warn_and_stay_out_of_reprs_and_display_data() -> None:
    config = ClientConfig(aws_access_key_id="AKIAEXPLICIT", aws_secret_access_key="hush-hush")
    with pytest.warns(CredentialsInPipelineWarning, match="pickled into the pipeline"):
        transform = WriteToKinesis("orders", client_config=config)
    assert "hush-hush" not in repr(transform._spec)
    shown = DisplayData.create_from(transform).items
    assert "hush-hush" not in repr(shown)
    # the pickle does carry them (that is what the warning is about)
    assert b"hush-hush" in pickle.dumps(transform._spec)


def test_display_data_says_where_and_how() -> None:
    transform = WriteToKinesis(
        "orders",
        partition_key="user",
        on_failure="raise",
        client_config=ClientConfig(region_name="eu-west-1"),
        record_ttl=60.0,
    )
    items = {item.key: item.value for item in DisplayData.create_from(transform).items}
    assert items["stream"] == "orders"
    assert items["region"] == "eu-west-1"
    assert items["partition_key"] == "field 'user'"
    assert items["on_failure"] == "fail the bundle"
    assert items["record_ttl"] == 60.0
    assert items["aggregation"] == "51200 bytes"


# -- the DoFn against a fake producer -------------------------------------------------------------


def test_elements_go_to_the_producer_in_chunks_not_one_by_one(fake: type[FakeProducer]) -> None:
    fn = make_fn()
    fn.setup()
    n = 2 * write.CHUNK_RECORDS + 17
    assert run_bundle(fn, [f"e{i}".encode() for i in range(n)]) == []
    (producer,) = fake.made
    assert [len(c) for c in producer.chunks] == [write.CHUNK_RECORDS, write.CHUNK_RECORDS, 17]
    fn.teardown()
    assert producer.closed


def test_large_elements_are_handed_off_by_bytes(fake: type[FakeProducer]) -> None:
    fn = make_fn()
    fn.setup()
    big = b"x" * (write.CHUNK_BYTES // 4)
    run_bundle(fn, [big] * 10)
    assert [len(c) for c in fake.made[0].chunks] == [4, 4, 2]
    fn.teardown()


def test_finish_bundle_waits_for_every_chunk(fake: type[FakeProducer]) -> None:
    fake.defer = True
    fake.outcome = lambda rec: (EXPIRED, "too slow") if rec[0] == b"e1500" else None
    fn = make_fn(windowed=True)
    fn.setup()
    ts = 123.0
    win = window.IntervalWindow(100, 200)
    elements = [windowed(f"e{i}".encode(), ts, (win,)) for i in range(2000)]
    out = run_bundle(fn, elements)
    assert fake.made[0].pending == []
    assert fake.made[0].flushes == 1
    (tagged,) = out
    assert tagged.tag == FAILED_RECORDS
    assert tagged.value.value == FailedRecord(
        b"e1500", EXPIRED, "too slow", tagged.value.value.attempts
    )
    assert len(tagged.value.value.attempts) == 1
    assert tagged.value.timestamp == ts
    assert tagged.value.windows == (win,)
    fn.teardown()


def test_bad_input_fails_alone_and_keeps_its_window(fake: type[FakeProducer]) -> None:
    fn = make_fn(windowed=True, partition_key=lambda e: "" if e == "empty-key" else "k")
    fn.setup()
    win = window.IntervalWindow(0, 10)
    out = run_bundle(
        fn,
        [
            windowed("ok", 1.0, (win,)),
            windowed(7, 2.0, (win,)),
            windowed("empty-key", 3.0, (win,)),
            windowed("x" * (1024 * 1024), 4.0, (win,)),  # data + key > 1 MiB
        ],
    )
    big = "x" * (1024 * 1024)
    failed = {"big" if o.value.value.element == big else o.value.value.element: o for o in out}
    assert set(failed) == {7, "empty-key", "big"}
    assert "data: must be bytes or str, got int" in failed[7].value.value.error_message
    assert "must not be empty" in failed["empty-key"].value.value.error_message
    assert "the limit is 1048576 bytes" in failed["big"].value.value.error_message
    assert {o.value.value.error_code for o in out} == {VALIDATION_ERROR}
    assert [o.value.timestamp for o in out] == [2.0, 3.0, 4.0]
    assert all(o.value.windows == (win,) for o in out)
    # the key and type are refused in the DoFn, the size by the producer
    assert [rec[0] for rec in fake.made[0].chunks[0]] == [b"ok", b"x" * 1048576]
    fn.teardown()


def test_globally_windowed_failures_keep_the_global_window(fake: type[FakeProducer]) -> None:
    """The cheap path (process takes the element only): a refused element is returned from
    process, so it keeps its timestamp; a later failure goes out in the global window at the
    time it was known."""
    fake.outcome = lambda rec: (EXPIRED, "too slow") if rec[0] == b"late" else None
    fn = make_fn()
    fn.setup()
    before = Timestamp.now()
    out = run_bundle(fn, [windowed(b"ok", 5.0), windowed(7, 6.0), windowed(b"late", 7.0)])
    after = Timestamp.now()
    by_element = {o.value.value.element: o.value for o in out}
    assert set(by_element) == {7, b"late"}
    assert by_element[7].timestamp == 6.0
    assert by_element[7].value.error_code == VALIDATION_ERROR
    assert by_element[b"late"].value.error_code == EXPIRED
    assert before <= by_element[b"late"].timestamp <= after
    assert all(o.value.windows == GLOBAL for o in out)
    fn.teardown()


def test_the_transform_picks_the_cheap_dofn_unless_windows_are_needed() -> None:
    def fn_of(pcoll: Any, **kwargs: Any) -> Any:
        result = pcoll | str(uuid.uuid4()) >> WriteToKinesis("s", **kwargs)
        return result.failed_records.producer.transform.fn

    p = beam.Pipeline()
    elements = p | beam.Create([b"a"])
    fixed = elements | beam.WindowInto(window.FixedWindows(10))
    assert type(fn_of(elements)) is write._WriteToKinesisFn
    assert type(fn_of(fixed)) is write._WindowedWriteToKinesisFn
    assert type(fn_of(fixed, on_failure="raise")) is write._WriteToKinesisFn


def test_on_failure_raise_fails_the_bundle(fake: type[FakeProducer]) -> None:
    fake.outcome = lambda rec: (THROTTLED, "slow down") if rec[0] == b"b" else None
    fn = make_fn(on_failure="raise")
    fn.setup()
    with pytest.raises(KinesisWriteError, match=r"ProvisionedThroughputExceededException: 1") as e:
        run_bundle(fn, [b"a", b"b", b"c"])
    assert [f.element for f in e.value.failures] == [b"b"]
    with pytest.raises(KinesisWriteError, match=r"ValidationError: 1; first: data: must be"):
        run_bundle(fn, [1])
    assert run_bundle(fn, [b"a"]) == []  # the next bundle starts clean
    fn.teardown()


def test_producer_trouble_always_fails_the_bundle(fake: type[FakeProducer]) -> None:
    fake.outcome = lambda rec: (INTERNAL, "the producer crashed")
    fn = make_fn()
    fn.setup()
    with pytest.raises(KinesisWriteError, match="the runner retries it"):
        run_bundle(fn, [b"a"])
    fn.teardown()


def test_a_crashed_producer_is_replaced_for_the_next_bundle(fake: type[FakeProducer]) -> None:
    fake.defer = True
    fn = make_fn()
    fn.setup()
    first = fake.made[0]
    first.crash_on_flush = True
    with pytest.raises(ProducerCrashedError):
        run_bundle(fn, [b"a"])
    assert first.closed
    assert run_bundle(fn, [b"b"]) == []
    second = fake.made[1]
    assert second.chunks == [[(b"b", second.chunks[0][0][1])]]
    fn.teardown()
    assert second.closed


def test_dofn_instances_share_one_producer_per_configuration(fake: type[FakeProducer]) -> None:
    name = stream()
    fns = [make_fn(stream=name) for _ in range(3)]
    for fn in fns:
        fn.setup()
    other = make_fn(stream=name, record_ttl=60.0)
    other.setup()
    assert len(fake.made) == 2
    shared = fake.made[0]
    for fn in fns[:2]:
        fn.teardown()
    assert not shared.closed
    fns[2].teardown()
    assert shared.closed
    other.teardown()


def test_the_dofn_pickles_without_a_producer(fake: type[FakeProducer]) -> None:
    fn = make_fn(partition_key=lambda e: e[:1])
    copy = pickler.loads(pickler.dumps(fn))
    assert not fake.made
    copy.setup()
    assert run_bundle(copy, ["ab"]) == []
    assert fake.made[0].chunks == [[(b"ab", "a")]]
    copy.teardown()


# -- on the in-process FnApiRunner ---------------------------------------------------------------


@pytest.mark.slow
def test_failed_records_output_keeps_windows_and_timestamps(fake: type[FakeProducer]) -> None:
    fake.outcome = lambda rec: (EXPIRED, "late") if rec[0].endswith(b"7") else None

    def stamped(i: int) -> Any:
        return window.TimestampedValue(str(i).encode(), i)

    with beam.Pipeline(runner=FnApiRunner()) as p:
        result = (
            p
            | beam.Create(range(20))
            | beam.Map(stamped)
            | beam.WindowInto(window.FixedWindows(10))
            | WriteToKinesis(stream())
        )
        seen = result.failed_records | beam.Map(
            lambda f, ts=beam.DoFn.TimestampParam, w=beam.DoFn.WindowParam: (
                f.element,
                f.error_code,
                int(ts.micros // 1_000_000),
                int(w.start.micros // 1_000_000),
            )
        )
        assert_that(seen, equal_to([(b"7", EXPIRED, 7, 0), (b"17", EXPIRED, 17, 10)]))


@pytest.mark.slow
def test_metrics_count_records_bytes_aggregates_and_producer_work(
    fake: type[FakeProducer],
) -> None:
    fake.outcome = lambda rec: (EXPIRED, "late") if rec[0] == b"0" else None
    pipeline = beam.Pipeline(runner=FnApiRunner())
    _ = pipeline | beam.Create([str(i).encode() for i in range(10)]) | WriteToKinesis(stream())
    result = pipeline.run()
    result.wait_until_finish()
    metrics = result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))
    counters = {c.key.metric.name: c.committed for c in metrics["counters"]}
    assert counters["messaging.client.sent.messages"] == 9
    assert counters["messaging.client.sent.messages{error.type=Expired}"] == 1
    assert counters["aws.kinesis.producer.user_records.data"] == 9  # b"1".."9": 1 byte each
    assert counters["aws.kinesis.producer.kinesis_records"] == 1
    assert counters[f"aws.kinesis.producer.retries{{error.type={THROTTLED}}}"] == 3
    assert counters[f"aws.kinesis.producer.errors{{error.type={THROTTLED}}}"] == 2
    dists = {d.key.metric.name: d.committed for d in metrics["distributions"]}
    per_aggregate = dists["aws.kinesis.producer.user_records.per_kinesis_record"]
    assert (per_aggregate.count, per_aggregate.sum) == (1, 9)
    assert dists["aws.kinesis.beam.write.duration"].count == 1


@pytest.mark.slow
def test_keyed_pairs_and_a_serializer(fake: type[FakeProducer]) -> None:
    with beam.Pipeline(runner=FnApiRunner()) as p:
        result = (
            p
            | beam.Create([("user-1", {"n": 1}), ("user-2", {"n": 2})])
            | WriteToKinesis(stream(), keyed=True, serializer=lambda v: f"n={v['n']}")
        )
        assert_that(result[FAILED_RECORDS], equal_to([]))
    records = sorted(rec for chunk in fake.made[0].chunks for rec in chunk)
    assert records == [(b"n=1", "user-1"), (b"n=2", "user-2")]


class Click(NamedTuple):
    user_id: str
    payload: bytes


beam.coders.registry.register_coder(Click, beam.coders.RowCoder)


@pytest.mark.slow
def test_schema_rows_name_their_key_and_data_fields(fake: type[FakeProducer]) -> None:
    """beam.Row and a registered NamedTuple: partition_key and data_field are field names; a
    row without the field fails alone, naming it."""
    with beam.Pipeline(runner=FnApiRunner()) as p:
        rows = p | "Rows" >> beam.Create(
            [beam.Row(user_id="u-1", payload=b"a"), beam.Row(user_id="u-2", payload=b"b")]
        )
        named = p | "Named" >> beam.Create([Click("u-3", b"c")]).with_output_types(Click)
        wrong = p | "Wrong" >> beam.Create([beam.Row(user="u-4", payload=b"d")])
        write = WriteToKinesis(stream(), partition_key="user_id", data_field="payload")
        result = (rows, named, wrong) | beam.Flatten() | write
        assert_that(
            result.failed_records | beam.Map(lambda f: (f.element.payload, f.error_message)),
            equal_to([(b"d", "user_id: the element has no such field")]),
        )
    records = sorted(rec for chunk in fake.made[0].chunks for rec in chunk)
    assert records == [(b"a", "u-1"), (b"b", "u-2"), (b"c", "u-3")]
    record = make_record_fn(
        serializer=None, partition_key=None, explicit_hash_key=None, keyed=False, data_field="x"
    )
    with pytest.raises(ValidationError, match="x: the element has no such field"):
        record(beam.Row(y=1))
    with pytest.raises(ValidationError, match="x: the element has no such field"):
        record({"y": 1})


def test_finished_chunks_are_settled_even_behind_an_unfinished_one(
    fake: type[FakeProducer],
) -> None:
    """A chunk keeps its records' data until settled, and the producer's budget stops counting
    them once written: finished chunks behind a slow one must not pile up in the DoFn."""
    fake.defer = True
    fn = make_fn()
    fn.setup()
    fn.start_bundle()
    big = [bytes([i]) * write.CHUNK_BYTES for i in range(3)]  # one chunk each
    fn.process(big[0])
    fn.process(big[1])
    producer = fake.made[0]
    future, result = producer.pending.pop(1)
    future.set_result(result)  # the second chunk is written before the first
    fn.process(big[2])
    held = [chunk.records for chunk in fn._chunks]
    assert held == [[big[0]], [big[2]]]  # the second one's data is let go
    assert len(list(fn.finish_bundle())) == 3  # over 1 MiB with their keys: failed, reported
    fn.teardown()
