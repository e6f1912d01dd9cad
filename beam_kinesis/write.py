"""``WriteToKinesis``: a Beam sink on the core producer, at-least-once per bundle.

Per element, in the calling thread: serialize, pick the keys, append to the bundle's current
chunk. Every ``CHUNK_RECORDS`` elements (or ``CHUNK_BYTES`` of data) the chunk goes to the
process's shared producer in one call, which validates it in this thread and admits it without
waiting for the producer's event-loop thread (unless the producer's memory budget is full); the
loop thread predicts the shard, aggregates per shard, and sends full aggregates and batches in
the background while the bundle goes on. There is no event-loop hop, no future and no object
per element beyond the record tuple. ``finish_bundle`` flushes and blocks until every record of
the bundle has its terminal result, so a committed bundle means written records; a bundle that
fails is retried by the runner (at-least-once: records of the failed attempt may be written
twice).

Records that fail for good (bad input, TTL expired, throttled with ``fail_if_throttled``) go
to the ``failed_records`` output as :class:`FailedRecord` (element, error code and message,
attempts) in the element's windows, or fail the bundle (``on_failure="raise"``). Failures that
are not the record's fault (the producer crashed or was shut down) always fail the bundle, so
that the runner retries it.

Two DoFns, chosen at construction from the input's windowing. Beam invokes a ``process`` that
takes only the element through its cheap invoker; asking for the element's window or timestamp
(``DoFn.WindowedValueParam``) goes through its per-window invoker, which costs per element
about as much as the producer's own work per record. A globally windowed input (or
``on_failure="raise"``, which outputs nothing) takes the cheap path: every element's window is
the global window, a record refused at once is returned from ``process`` (Beam gives it the
element's timestamp), and one that fails later is output in the global window at the time its
failure was known. Any other windowing takes the per-window path, and every failed record keeps
its element's windows and timestamp.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from typing import Any, Literal, NamedTuple

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.transforms.display import DisplayDataItem
from apache_beam.transforms.window import GlobalWindow, GlobalWindows
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from beam_kinesis import _producer_cache
from beam_kinesis._elements import (
    HashKeyFn,
    Serializer,
    describe_key,
    keys_in_bulk,
    make_record_fn,
    to_bytes,
)
from beam_kinesis._metrics import BeamMetrics
from beam_kinesis.options import client_config_from_options, warn_if_credentials
from kinesis_core.aws.config import ClientConfig
from kinesis_core.aws.overrides import with_overrides
from kinesis_core.errors import ConfigurationError, KinesisConnectorError, ValidationError
from kinesis_core.producer import (
    INTERNAL,
    PRODUCER_CLOSED,
    SHUTDOWN,
    VALIDATION_ERROR,
    Attempt,
    BatchResult,
    BlockingProducer,
    ProducerClosedError,
    ProducerConfig,
    ProducerCrashedError,
)
from kinesis_core.producer.partitioning import random_partition_keys
from kinesis_core.stream import StreamRef

__all__ = [
    "FAILED_RECORDS",
    "FailedRecord",
    "KinesisWriteError",
    "KinesisWriteResult",
    "WriteToKinesis",
]

logger = logging.getLogger(__name__)

FAILED_RECORDS = "failed_records"
"""Tag of the output that carries :class:`FailedRecord` s."""
CHUNK_RECORDS = 1000
"""Elements handed to the producer in one call: one thread hop per this many elements."""
CHUNK_BYTES = 1024 * 1024
"""...or per this many bytes of data, so that large elements do not pile up in the DoFn."""
BUNDLE_FAILURES = frozenset({INTERNAL, SHUTDOWN, PRODUCER_CLOSED})
"""Error codes that are the producer's trouble, not the record's: they fail the bundle."""
OnFailure = Literal["output", "raise"]


class FailedRecord(NamedTuple):
    """An element that could not be written, with why (an element of ``failed_records``)."""

    element: Any
    error_code: str
    """``ValidationError`` (bad input), ``Expired`` (``record_ttl`` ran out), or the Kinesis
    error code of the last attempt (``ProvisionedThroughputExceededException`` with
    ``fail_if_throttled``)."""
    error_message: str
    attempts: tuple[Attempt, ...] = ()
    """Every PutRecords attempt of the record (empty for input refused before sending)."""


class KinesisWriteError(KinesisConnectorError):
    """A bundle failed: ``on_failure="raise"`` and records failed, or the producer broke."""

    def __init__(self, message: str, failures: list[FailedRecord]) -> None:
        super().__init__(message)
        self.failures = failures


class KinesisWriteResult:
    """What ``WriteToKinesis`` returns: ``result.failed_records`` (or ``result["failed_records"]``),
    a PCollection of :class:`FailedRecord` (always empty with ``on_failure="raise"``)."""

    def __init__(self, failed_records: pvalue.PCollection[Any]) -> None:
        self.failed_records = failed_records

    def __getitem__(self, key: str) -> pvalue.PCollection[Any]:
        if key != FAILED_RECORDS:
            raise KeyError(f"WriteToKinesis has one output, {FAILED_RECORDS!r}; got {key!r}")
        return self.failed_records


@dataclasses.dataclass(frozen=True)
class _WriteSpec:
    """Everything a worker needs, picklable: no producer, thread or client in it."""

    stream: str
    client_config: ClientConfig
    producer_config: ProducerConfig
    serializer: Serializer | None
    data_field: str | None
    partition_key: str | Callable[[Any], object] | None
    explicit_hash_key: HashKeyFn | None
    keyed: bool
    on_failure: OnFailure
    record_id: Callable[[Any], str] | None = None

    @property
    def producer_key(self) -> tuple[str, ClientConfig, ProducerConfig]:
        return (self.stream, self.client_config, self.producer_config)

    def display_data(self) -> dict[str, Any]:
        config = self.client_config
        producer = self.producer_config
        return {
            "stream": _item(self.stream, label="Kinesis stream"),
            "region": _item(config.region_name or "(workers' AWS configuration)", label="Region"),
            "endpoint_url": _item(config.endpoint_url or "(region's endpoint)", label="Endpoint"),
            "partition_key": _item(
                describe_key(self.partition_key, self.keyed), label="Partition key"
            ),
            "data": _item(
                f"field {self.data_field!r}" if self.data_field else "the element",
                label="Data",
            ),
            "explicit_hash_key": _item(
                "none" if self.explicit_hash_key is None else "from the element",
                label="Explicit hash key",
            ),
            "record_id": _item(
                "from the element"
                if self.record_id is not None
                else "automatic"
                if producer.record_ids
                else "none",
                label="Record id",
            ),
            "on_failure": _item(
                "failed_records output" if self.on_failure == "output" else "fail the bundle",
                label="Records that fail for good",
            ),
            "aggregation": _item(
                f"{producer.aggregation_max_size} bytes" if producer.aggregation_enabled else "off",
                label="KPL aggregation",
            ),
            "record_ttl": _item(producer.record_ttl, label="Record TTL (s)"),
            "fail_if_throttled": _item(producer.fail_if_throttled, label="Fail if throttled"),
            "rate_limit": _item(producer.rate_limit, label="Rate limit (% of a shard)"),
        }


class WriteToKinesis(beam.PTransform[Any, KinesisWriteResult]):
    """Write every element of a PCollection to a Kinesis stream (a name or an ARN).

    ``pcoll | WriteToKinesis("orders")`` writes bytes or str elements, each with a random
    partition key (load spread evenly over every shard). Choose keys with ``partition_key``
    (a field name, looked up as ``element[name]`` or ``element.name``, or a function of the
    element returning str, int or UTF-8 bytes), or ``keyed=True`` for ``(key, value)``
    elements (the key is the partition key, the value is serialized). ``explicit_hash_key`` is
    an optional function of the element returning an int or decimal string. ``record_id_fn``
    is an optional function of the element returning its record id, a str that must be the
    same every time the element is written (Beam retries bundles: a retried element then
    carries the same id, and a deduplicating reader drops the copy; docs/effectively-once.md);
    it turns the producer's ``record_ids`` on. The data is the
    element (the value, with ``keyed``), or its field ``data_field`` (schema'd rows: a
    NamedTuple, a ``beam.Row``, a dict); ``serializer`` turns it into bytes or str.

    Where Kinesis is comes from ``client_config`` and the :class:`~beam_kinesis.KinesisOptions`
    command-line options (``--kinesis_region_name``, ``--kinesis_endpoint_url``, ...);
    credentials from the workers' default chain. The producer's knobs are a ``producer_config``
    or keyword arguments (``record_ttl=60``, ``fail_if_throttled=True``, ...).

    Returns a :class:`KinesisWriteResult`; its ``failed_records`` holds a :class:`FailedRecord`
    per element that failed for good, unless ``on_failure="raise"``, which fails the bundle.
    """

    def __init__(
        self,
        stream: str | StreamRef,
        *,
        partition_key: str | Callable[[Any], object] | None = None,
        explicit_hash_key: HashKeyFn | None = None,
        record_id_fn: Callable[[Any], str] | None = None,
        keyed: bool = False,
        serializer: Serializer | None = None,
        data_field: str | None = None,
        on_failure: OnFailure = "output",
        client_config: ClientConfig | None = None,
        producer_config: ProducerConfig | None = None,
        **producer_options: Any,
    ) -> None:
        super().__init__()
        ref = StreamRef.of(stream)
        if on_failure not in ("output", "raise"):
            raise ConfigurationError(
                "on_failure", f"must be 'output' or 'raise', got {on_failure!r}"
            )
        if keyed and partition_key is not None:
            raise ConfigurationError(
                "partition_key",
                "keyed=True takes the key of each (key, value) element; give one or the other",
            )
        if partition_key is not None and not (
            isinstance(partition_key, str) or callable(partition_key)
        ):
            raise ConfigurationError(
                "partition_key", f"must be a field name or a function, got {partition_key!r}"
            )
        if data_field is not None and (not isinstance(data_field, str) or not data_field):
            raise ConfigurationError("data_field", f"must be a field name, got {data_field!r}")
        for name, fn in (
            ("serializer", serializer),
            ("explicit_hash_key", explicit_hash_key),
            ("record_id_fn", record_id_fn),
        ):
            if fn is not None and not callable(fn):
                raise ConfigurationError(name, f"must be a function, got {fn!r}")
        base = producer_config if producer_config is not None else ProducerConfig()
        config = with_overrides(base, producer_options, "WriteToKinesis")
        if record_id_fn is not None and not config.record_ids:
            config = dataclasses.replace(config, record_ids=True)
        if client_config is not None:
            warn_if_credentials(client_config, "WriteToKinesis")
        self._client_config = client_config
        self._spec = _WriteSpec(
            stream=str(ref),
            client_config=client_config if client_config is not None else ClientConfig(),
            producer_config=config,
            serializer=serializer,
            data_field=data_field,
            partition_key=partition_key,
            explicit_hash_key=explicit_hash_key,
            keyed=keyed,
            on_failure=on_failure,
            record_id=record_id_fn,
        )

    def expand(self, pcoll: Any) -> KinesisWriteResult:
        client_config = client_config_from_options(pcoll.pipeline.options, self._client_config)
        spec = dataclasses.replace(self._spec, client_config=client_config)
        fn: _WriteToKinesisFn
        if spec.on_failure == "raise" or isinstance(pcoll.windowing.windowfn, GlobalWindows):
            fn = _WriteToKinesisFn(spec)
        else:
            fn = _WindowedWriteToKinesisFn(spec)
        write = beam.ParDo(fn)  # type: ignore[no-untyped-call]
        outputs = pcoll | "Write" >> write.with_outputs(FAILED_RECORDS)  # type: ignore[no-untyped-call]
        return KinesisWriteResult(outputs[FAILED_RECORDS])

    def display_data(self) -> dict[str, Any]:
        return self._spec.display_data()


class _Chunk:
    """Records handed to the producer in one call (or with bulk keys their data alone), and
    what is needed to report their failures (the elements, or with the per-window path their
    windowed values)."""

    __slots__ = ("anchors", "done_at", "finished", "future", "nbytes", "records", "started")

    def __init__(
        self,
        records: list[tuple[Any, ...]],
        anchors: list[Any],
        nbytes: int,
        finished: deque[_Chunk],
    ) -> None:
        self.records = records
        self.anchors = anchors
        self.nbytes = nbytes
        self.finished = finished
        self.started = time.monotonic()
        self.done_at = 0.0
        self.future: Any = None

    def stamp(self, _future: object) -> None:
        """The future's done callback (on the producer's loop thread, or in the DoFn's if the
        future was done already): note the time and queue the chunk to be settled."""
        self.done_at = time.monotonic()
        self.finished.append(self)


_GLOBAL_WINDOWS = (GlobalWindow(),)


class _WriteToKinesisFn(beam.DoFn):
    """The sink's DoFn: chunks elements to the process's shared producer, waits for the
    bundle's results in ``finish_bundle``, emits or raises the failures (module docstring).

    ``process`` takes only the element, so Beam calls it through its cheap invoker: this is
    the DoFn of globally windowed inputs (and of ``on_failure="raise"``)."""

    def __init__(self, spec: _WriteSpec) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._spec = spec

    # -- life cycle ----------------------------------------------------------------------------

    def setup(self) -> None:
        spec = self._spec
        self._record = make_record_fn(
            serializer=spec.serializer,
            data_field=spec.data_field,
            partition_key=spec.partition_key,
            explicit_hash_key=spec.explicit_hash_key,
            keyed=spec.keyed,
            record_id=spec.record_id,
        )
        # The default configuration (the data is the element, a random key each) keeps only
        # the data per element and draws the keys for a whole chunk at hand-off.
        self._bulk_keys = keys_in_bulk(self._record)
        if self._bulk_keys:
            self._take = self._take_data  # type: ignore[method-assign]
        self._handle = self._acquire()
        self._metrics = BeamMetrics()

    def _acquire(self) -> _producer_cache.ProducerHandle:
        spec = self._spec

        def make() -> BlockingProducer:
            return BlockingProducer(
                spec.stream, client_config=spec.client_config, producer_config=spec.producer_config
            )

        return _producer_cache.acquire(spec.producer_key, make)

    def start_bundle(self) -> None:
        if self._handle.producer.closed:
            self._handle.release()
            self._handle = self._acquire()
        self._records: list[Any] = []
        """Producer records, or with ``_bulk_keys`` their data alone."""
        self._anchors: list[Any] = []
        self._nbytes = 0
        self._chunks: dict[_Chunk, None] = {}
        """Chunks handed off and not settled yet, in hand-off order."""
        self._finished: deque[_Chunk] = deque()
        """Chunks whose results came, queued by their future's callback (any thread)."""
        self._failed: list[tuple[Any, FailedRecord]] = []
        self._refused: list[FailedRecord] = []
        self._written = 0
        self._bytes = 0
        self._aggregates: Counter[tuple[str, str]] = Counter()
        self._latencies: list[float] = []

    def process(self, element: Any) -> tuple[Any, ...]:
        return self._take(element, element)

    def _take(self, element: Any, anchor: Any) -> tuple[Any, ...]:
        """Add the element's record to the chunk; ``anchor`` is what a failure is reported
        with later (the element, or its windowed value)."""
        try:
            record = self._record(element)
        except ValidationError as exc:
            return self._refuse(element, exc)
        records = self._records
        records.append(record)
        self._anchors.append(anchor)
        self._nbytes += len(record[0])
        if len(records) >= CHUNK_RECORDS or self._nbytes >= CHUNK_BYTES:
            self._hand_off()
        return ()

    def _take_data(self, element: Any, anchor: Any) -> tuple[Any, ...]:
        """``_take`` of the default configuration: the data alone (keyed at hand-off)."""
        data = element
        if type(data) is not bytes:
            try:
                data = to_bytes(element)
            except ValidationError as exc:
                return self._refuse(element, exc)
        records = self._records
        records.append(data)
        self._anchors.append(anchor)
        self._nbytes += len(data)
        if len(records) >= CHUNK_RECORDS or self._nbytes >= CHUNK_BYTES:
            self._hand_off()
        return ()

    def finish_bundle(self) -> Iterator[Any]:
        if self._records:
            self._hand_off()
        if self._chunks:
            self._call(self._handle.producer.flush)
            chunks, self._chunks = self._chunks, {}
            self._finished.clear()
            for chunk in chunks:
                self._settle(chunk)
        self._report()
        for windowed, failed in self._failed:
            yield pvalue.TaggedOutput(FAILED_RECORDS, windowed.with_value(failed))
        self._failed = []

    def teardown(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle is not None:
            handle.release()

    def display_data(self) -> dict[str, Any]:
        return self._spec.display_data()

    # -- where failed records go ---------------------------------------------------------------

    def _element(self, anchor: Any) -> Any:
        """The element an anchor (what ``process`` kept per record) stands for."""
        return anchor

    def _windowed(self, anchor: Any) -> Any:
        """The windows and timestamp to output a later failure of this element at: the global
        window (its window) at the time the failure is known (its timestamp is not known)."""
        return WindowedValue(None, Timestamp.now(), _GLOBAL_WINDOWS)

    def _refuse(self, element: Any, exc: ValidationError) -> tuple[Any, ...]:
        """An element refused at once: returned from ``process``, so Beam outputs it in the
        element's own windows and at its timestamp."""
        failed = FailedRecord(element, VALIDATION_ERROR, str(exc))
        self._check([failed])
        self._refused.append(failed)
        return (pvalue.TaggedOutput(FAILED_RECORDS, failed),)

    # -- internals -------------------------------------------------------------------------------

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call the producer; if it is broken, drop it (the next bundle gets a new one)."""
        try:
            return fn(*args)
        except (ProducerClosedError, ProducerCrashedError):
            self._handle.discard()
            raise

    def _hand_off(self) -> None:
        chunk = _Chunk(self._records, self._anchors, self._nbytes, self._finished)
        self._records = []
        self._anchors = []
        self._nbytes = 0
        records = chunk.records
        if self._bulk_keys:
            # The chunk keeps the data alone: the keyed records die once the producer took
            # them, instead of living (and aging through the collector's generations) until
            # the chunk settles.
            records = list(zip(records, random_partition_keys(len(records)), strict=True))
        chunk.future = self._call(self._handle.producer.submit_many, records)
        self._chunks[chunk] = None
        chunk.future.add_done_callback(chunk.stamp)
        # Settle every finished chunk, not only a finished head: a chunk keeps its records'
        # data until it is settled, and the producer's memory budget no longer counts them
        # once they are written (large records behind a slow chunk would pile up outside it).
        # The futures' callbacks queue the finished ones: no look at every chunk in flight
        # (a hundred with the default budget) per hand-off.
        finished = self._finished
        while finished:
            done = finished.popleft()
            del self._chunks[done]
            self._settle(done)

    def _settle(self, chunk: _Chunk) -> None:
        """Take a finished chunk's results; keep only what failed."""
        result: BatchResult = chunk.future.result()
        self._written += result.succeeded_count
        aggregates = self._aggregates
        for shard_id, sequence_number, records in result.carriers():
            aggregates[(shard_id, sequence_number)] += records
        self._latencies.append((chunk.done_at - chunk.started) * 1000.0)
        nbytes = chunk.nbytes
        if result.failed_count:
            failures = []
            bulk = self._bulk_keys
            for index, rr in result.failures:
                record = chunk.records[index]
                nbytes -= len(record if bulk else record[0])
                anchor = chunk.anchors[index]
                failed = FailedRecord(
                    self._element(anchor),
                    rr.error_code or INTERNAL,
                    rr.error_message or "",
                    rr.attempts,
                )
                failures.append((anchor, failed))
            self._bytes += nbytes
            self._check([failed for _, failed in failures])
            self._failed.extend((self._windowed(anchor), failed) for anchor, failed in failures)
        else:
            self._bytes += nbytes

    def _check(self, failures: list[FailedRecord]) -> None:
        """Fail the bundle for failures that are the producer's, or with on_failure='raise'."""
        broken = [f for f in failures if f.error_code in BUNDLE_FAILURES]
        if broken:
            self._metrics.written(0, 0, dict(Counter(f.error_code for f in failures)))
            raise KinesisWriteError(
                f"{len(broken)} record(s) could not be written to {self._spec.stream!r} "
                f"because the producer failed ({_summary(broken)}); the bundle fails so that "
                "the runner retries it",
                broken,
            )
        if self._spec.on_failure == "raise":
            self._metrics.written(0, 0, dict(Counter(f.error_code for f in failures)))
            raise KinesisWriteError(
                f"{len(failures)} record(s) failed for good writing to "
                f"{self._spec.stream!r} ({_summary(failures)}); on_failure='raise' fails "
                "the bundle",
                failures,
            )

    def _report(self) -> None:
        failed = self._refused + [failed for _, failed in self._failed]
        metrics = self._metrics
        metrics.written(self._written, self._bytes, dict(Counter(f.error_code for f in failed)))
        if failed:
            logger.warning(
                "%d record(s) failed for good writing to %r (%s); they are in the %r output",
                len(failed),
                self._spec.stream,
                _summary(failed),
                FAILED_RECORDS,
            )
        aggregates = self._aggregates
        metrics.aggregates(list(aggregates.values()), self._latencies)
        if self._written or failed:
            metrics.producer(self._handle.metrics_delta())


class _WindowedWriteToKinesisFn(_WriteToKinesisFn):
    """The DoFn of inputs in other windows than the global one: ``process`` keeps each
    element's windowed value, so a failure reported later goes out in the element's windows and
    at its timestamp (at the cost of Beam's per-window invoker)."""

    def process(
        self, element: Any, windowed: Any = beam.DoFn.WindowedValueParam
    ) -> tuple[Any, ...]:
        return self._take(element, windowed)

    def _element(self, anchor: Any) -> Any:
        return anchor.value

    def _windowed(self, anchor: Any) -> Any:
        return anchor


def _item(value: object, label: str) -> Any:
    return DisplayDataItem(value, label=label)  # type: ignore[no-untyped-call]


def _summary(failures: list[FailedRecord]) -> str:
    """``Expired: 3, ValidationError: 1 (first: data: ...)``: counts by code, one example."""
    counts = Counter(f.error_code for f in failures)
    by_code = ", ".join(f"{code}: {n}" for code, n in counts.most_common())
    return f"{by_code}; first: {failures[0].error_message}"
