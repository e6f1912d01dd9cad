"""The asyncio producer: drives the sans-I/O :class:`Pipeline` with a client, a clock and a timer.

Everything it does is move bytes and time, and execute what the pipeline decided: hand records
over (``hand_over``, from the loop or from a blocking caller's thread), wait while the pipeline
says a caller waits for room, send the requests the pipeline has ready (at most
``max_connections`` at once), hand responses back, pass shard-map invalidations on, resolve the
futures of finished records and wake the callers and flushes the pipeline names
(``Pipeline.outputs``), and wake the pipeline when its next deadline comes. There is no task
per record and no queue between stages.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets
import threading
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from kinesis_core.aws.classify import CERTIFICATE_VERIFY_FAILED, ErrorKind, classify
from kinesis_core.aws.executor import AsyncExecutor
from kinesis_core.aws.retry import RetryPolicy
from kinesis_core.errors import CERTIFICATE_HINT, ConfigurationError, KinesisConnectorError
from kinesis_core.lifecycle import Event, Lifecycle, State
from kinesis_core.producer.admission import Standing, Submission
from kinesis_core.producer.config import ProducerConfig
from kinesis_core.producer.metrics import MetricsHook, MetricsSnapshot, ProducerMetrics
from kinesis_core.producer.pipeline import Pipeline
from kinesis_core.producer.result import (
    CANCELLED,
    INTERNAL,
    SHUTDOWN,
    BatchResult,
    ProducerClosedError,
    ProducerCrashedError,
    ProducerFailedError,
    RecordResult,
)
from kinesis_core.producer.sender import LeanPutRecords, error_of, send_batch
from kinesis_core.producer.shard_map_driver import ShardMapDriver, ShardMapTimeoutError
from kinesis_core.runtime.clock import SYSTEM_CLOCK, Clock
from kinesis_core.runtime.heap import freeze_start_up_heap
from kinesis_core.runtime.timeouts import within
from kinesis_core.serde import RecordSerializer, serialized
from kinesis_core.shards.hashing import MAX_PUT_RECORDS_BYTES, MAX_RECORD_BYTES
from kinesis_core.stream import StreamRef
from kinesis_core.tracing import TraceInjector

if TYPE_CHECKING:
    from kinesis_core.aws.config import ClientConfig
    from kinesis_core.producer.items import PutBatch

logger = logging.getLogger(__name__)

START_ATTEMPTS_UNREACHABLE = 3
"""``start`` gives up after this many ListShards attempts that reached no endpoint at all
(about 3 s when nothing listens on the port), instead of retrying for ``start_timeout``."""
START_TIMEOUT = 30.0
"""Seconds ``start`` retries ListShards errors that may pass (throttling, a 5xx)."""
LANDING_LISTING_RETRY = RetryPolicy(
    base=1.0, cap=10.0, attempts=None, retry_on=frozenset(ErrorKind), unknown=ErrorKind.TRANSIENT
)
"""The listing of every shard that decides where aggregates landed is tried until it works,
whatever fails (the records it decides wait for it)."""


class Producer:
    """KPL-equivalent asyncio producer for one stream.

    ``async with Producer("orders", client_config=ClientConfig.from_env()) as producer:``
    then ``result = await producer.put(data, key)``, or for volume
    ``batch = await producer.put_many(records)``. ``submit``/``submit_many`` return a future
    as soon as the records are accepted, so one coroutine can keep many in flight. ``stream``
    is a stream name, a stream ARN (every call then names the stream by its ARN) or a
    :class:`~kinesis_core.stream.StreamRef`.

    ``client``, when given, is used instead of creating one from ``client_config`` (it must
    have botocore's retries off) and is not closed by the producer.

    ``clock`` (:class:`~kinesis_core.runtime.clock.Clock`) is the time the producer reads and
    waits on: its deadlines, its shard map's refreshes and its retries.

    ``serializer`` (:class:`~kinesis_core.serde.RecordSerializer`, e.g.
    ``kinesis_schema_registry.GlueSerializer``) turns the values given to ``put``, ``submit``,
    ``put_many`` and ``submit_many`` into the records' data; ``hand_over`` (the blocking
    producer's way in) takes bytes as they are.
    """

    def __init__(
        self,
        stream: str | StreamRef,
        *,
        client_config: ClientConfig | None = None,
        producer_config: ProducerConfig | None = None,
        client: Any = None,
        on_metrics: MetricsHook | None = None,
        clock: Clock = SYSTEM_CLOCK,
        serializer: RecordSerializer | None = None,
    ) -> None:
        self.stream = StreamRef.of(stream)
        self._serializer = serializer
        self.stream_name = self.stream.name
        self.config = producer_config if producer_config is not None else ProducerConfig()
        if not isinstance(self.config, ProducerConfig):
            raise ConfigurationError(
                "producer_config",
                f"must be a ProducerConfig, got {type(self.config).__name__}",
            )
        if client_config is not None:
            self.stream.check_endpoint(client_config.endpoint_url)
        self._client_config = client_config
        self._client = client
        self._on_metrics = on_metrics
        self._time = clock
        self._clock = clock.now
        self._metrics = ProducerMetrics(self.stream_name)
        self._lifecycle = Lifecycle(f"Producer({str(self.stream)!r})")
        self._trace = TraceInjector(self._lifecycle.owner) if self.config.trace_context else None
        self._error: BaseException | None = None
        self._landings_task: asyncio.Task[None] | None = None
        self._stack = contextlib.AsyncExitStack()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pipeline: Pipeline | None = None
        self._shard_map: ShardMapDriver | None = None
        self._loop_thread = -1
        """The identifier of the thread running the loop (``hand_over`` admits at once there)."""
        self._timer: asyncio.TimerHandle | None = None
        self._timer_when = float("inf")
        self._sending: set[asyncio.Task[None]] = set()
        self._metrics_task: asyncio.Task[None] | None = None
        self._telemetry: Any = None
        self._lean: LeanPutRecords | None = None
        self._closed = asyncio.Event()
        self.session = secrets.token_urlsafe(9)
        """This producer's random session id: the first part of its automatic record ids
        (``ProducerConfig.record_ids``)."""

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Create the client, load the shard map (raises if the stream cannot be listed).

        An error no retry fixes (no such stream, credentials or permissions refused) raises at
        once, naming it; so does an endpoint that does not answer at all (a few seconds).
        """
        self._lifecycle.handle(Event.START, "start")
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        try:
            client = self._client
            if client is None:
                client = await self._stack.enter_async_context(self._create_client())
                self._client = client
            driver = ShardMapDriver(
                self.stream,
                client.list_shards,
                clock=self._clock,
                sleep=self._time.sleep,
                start_timeout=START_TIMEOUT,
                give_up=_unreachable_at_start,
                describe_fn=client.describe_stream_summary,
            )
            try:
                await driver.start()
            except ShardMapTimeoutError as exc:
                raise ShardMapTimeoutError(self._start_failure(exc)) from exc.__cause__
            except KinesisConnectorError as exc:
                raise KinesisConnectorError(self._start_failure(exc)) from exc.__cause__
            self._stack.push_async_callback(driver.close)
            self._shard_map = driver
            if self.config.lean_put_records:
                self._lean = LeanPutRecords.of(client)
            self._pipeline = Pipeline(
                self.config,
                predict=driver.map.predict,
                predict_many=driver.map.predict_many,
                hash_range=driver.hash_range,
                metrics=self._metrics,
                record_limit=driver.record_limit,
                stream=str(self.stream),
                lock=threading.Lock(),
                session=self.session,
            )
        except BaseException:
            self._lifecycle.handle(Event.START_FAILED)
            self._closed.set()
            await self._stack.aclose()
            raise
        freeze_start_up_heap()
        if self._on_metrics is not None:
            self._metrics_task = self._loop.create_task(self._report_metrics())
        if self.config.telemetry is not None:
            from kinesis_core.telemetry.otel import ProducerTelemetry

            self._telemetry = ProducerTelemetry(self.config.telemetry, self._metrics, self.metrics)
        self._lifecycle.handle(Event.STARTED)

    def _start_failure(self, exc: KinesisConnectorError) -> str:
        """Why ``start`` failed, in words: what ListShards answered, and what to check."""
        cause = exc.__cause__
        owner = self._lifecycle.owner
        if cause is None:
            return f"{owner} could not start: {exc}"
        code, message, status = error_of(cause)
        kind = classify(code, status)
        if kind is ErrorKind.AUTH:
            return (
                f"{owner} could not start: ListShards was refused with {code}"
                + (f" (HTTP {status})" if status else "")
                + f": {message}. The credentials are wrong, expired or lack permission "
                "(kinesis:ListShards, kinesis:PutRecords on the stream): no retry fixes that"
            )
        if code == CERTIFICATE_VERIFY_FAILED:
            return f"{owner} could not start: {message}{CERTIFICATE_HINT}"
        if _unreachable_at_start(cause, START_ATTEMPTS_UNREACHABLE):
            return (
                f"{owner} could not start: no answer from the endpoint after "
                f"{START_ATTEMPTS_UNREACHABLE} attempts: {message}"
            )
        return f"{owner} could not start: {exc}"

    def _create_client(self) -> contextlib.AbstractAsyncContextManager[Any]:
        from kinesis_core.aws.client import create_kinesis_client
        from kinesis_core.aws.config import ClientConfig

        base = self._client_config if self._client_config is not None else ClientConfig.from_env()
        client_config = dataclasses.replace(
            base,
            max_pool_connections=self.config.max_connections,
            connect_timeout=self.config.connect_timeout,
            read_timeout=self.config.request_timeout_for(MAX_PUT_RECORDS_BYTES),
        )
        return create_kinesis_client(client_config, max_attempts=1)

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self, timeout: float | None = None) -> None:
        """Flush, wait for every accepted record to finish, then release the client.

        After ``timeout`` seconds, the records still unfinished fail with ``ShutdownTimeout``
        (a request in flight then may or may not have been written). Without a timeout this
        waits at most about ``record_ttl``: by then every record has succeeded or expired.
        Raises :class:`ProducerCrashedError` if a task of the producer failed.
        """
        state = self._lifecycle.state
        if state in (State.CLOSING, State.CLOSED):
            await self._closed.wait()
            self._raise_if_crashed()
            return
        self._lifecycle.handle(Event.CLOSE)
        if state is State.NEW:
            self._closed.set()
            return
        if self._pipeline is not None:
            self._pipeline.stop(self._closed_message())
            self._execute()
        try:
            if self._error is None:
                try:
                    async with within(timeout):
                        await self.flush()
                except asyncio.TimeoutError:
                    pipeline = self._require_pipeline()
                    failed = pipeline.fail_all(
                        SHUTDOWN,
                        f"the producer was closed with timeout={timeout} s before this "
                        "record was written (a request in flight may still have written it)",
                        self._clock(),
                    )
                    self._resolve()
                    logger.warning(
                        "producer of %r closed with %d records unfinished after %s s",
                        self.stream_name,
                        failed,
                        timeout,
                    )
                except ProducerCrashedError:
                    pass
            await self._stop_tasks()
            if self._on_metrics is not None:
                self._emit_metrics()
        finally:
            if self._telemetry is not None:
                self._telemetry.close()
            await self._stack.aclose()
            self._lifecycle.handle(Event.CLOSED)
            self._closed.set()
        self._raise_if_crashed()

    async def _stop_tasks(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        tasks = list(self._sending)
        if self._metrics_task is not None:
            tasks.append(self._metrics_task)
        if self._landings_task is not None:
            tasks.append(self._landings_task)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- putting records -------------------------------------------------------------------

    async def put(
        self,
        data: bytes,
        partition_key: str,
        explicit_hash_key: str | int | None = None,
        *,
        record_id: str | None = None,
    ) -> RecordResult:
        """Write one record; returns its terminal result (never raises for a failed write).

        ``record_id`` (with ``ProducerConfig(record_ids=True)``) is the record's id, carried
        in its aggregate's tags; without one it gets an automatic id.
        Raises :class:`~kinesis_core.errors.ValidationError` at once for bad input, and
        :class:`ProducerClosedError` once the producer is closing.
        """
        return await (
            await self.submit(data, partition_key, explicit_hash_key, record_id=record_id)
        )

    async def submit(
        self,
        data: bytes,
        partition_key: str,
        explicit_hash_key: str | int | None = None,
        *,
        record_id: str | None = None,
    ) -> asyncio.Future[RecordResult]:
        """Accept one record (waiting for room in the budget) and return its result's future.

        A record over the stream's maximum record size as last known waits for the stream to
        be asked again (a limit raised since lets it in) before it is refused."""
        self._require_open()
        if self._serializer is not None:
            (data,) = await self._serializer.serialize((data,))
        future: asyncio.Future[RecordResult] = self._require_loop().create_future()
        record = (
            (data, partition_key, explicit_hash_key)
            if record_id is None
            else (data, partition_key, explicit_hash_key, record_id)
        )
        sub = self.hand_over((record,), future, single=True)
        if sub.unsettled:
            await self.settle(sub)
        return future

    async def put_many(self, records: Iterable[Any]) -> BatchResult:
        """Write a batch of ``(data, partition_key[, explicit_hash_key[, record_id]])`` records
        (or :class:`Record` s).

        Returns one :class:`BatchResult` once every record is finished. A record with bad
        input does not stop the others: it fails at once with code ``ValidationError``.
        """
        return await (await self.submit_many(records))

    async def submit_many(self, records: Iterable[Any]) -> asyncio.Future[BatchResult]:
        """Accept a batch (waiting for room as needed) and return its result's future.

        No future or task is made per record. A batch bigger than the budget is accepted in
        parts as room frees up; if the producer closes meanwhile, the records not yet
        accepted fail with code ``ProducerClosed``.
        """
        self._require_open()
        if not isinstance(records, Sequence):
            records = list(records)
        if self._serializer is not None:
            records = await serialized(self._serializer, records)
        future: asyncio.Future[BatchResult] = self._require_loop().create_future()
        sub = self.hand_over(records, future)
        if sub.unsettled:
            await self.settle(sub)
        return future

    def hand_over(self, records: Sequence[Any], future: Any, *, single: bool = False) -> Submission:
        """Validate ``records`` and offer them to the pipeline: the one way in, from the loop
        or from any other thread (:class:`BlockingProducer` calls it from its callers'
        threads). ``future`` (of the caller's kind) gets the :class:`BatchResult`, or with
        ``single`` the one record's :class:`RecordResult`.

        Returns at once, without a trip through the loop when called from another thread:
        the submission is admitted, or waits for room or for a fresh look at the stream's
        maximum record size (``unsettled``: then ``await settle(sub)`` on the loop). Raises
        if the producer is not running, and with ``single`` for bad input.
        """
        pipeline = self._require_open()
        if self._trace is not None:
            records = self._trace.records(records)
        sub = pipeline.submission(records, self._clock(), future, single=single)
        if not sub.sink.remaining:  # nothing to admit: an empty batch, or every record refused
            future.set_result(sub.sink.result())
            return sub
        standing, wake = pipeline.offer(sub)
        if standing is Standing.REFUSED:
            raise self._refusal()
        if threading.get_ident() == self._loop_thread:
            self._admit()
        elif wake:
            self._require_loop().call_soon_threadsafe(self._admit)
        return sub

    async def settle(self, sub: Submission) -> None:
        """On the loop: wait until a submission of ``hand_over`` is admitted, then settle the
        records it set aside as over the stream's limit (the stream is asked again). A
        ``single`` record raises what refused it; a batch's refused records fail in its
        result (``ProducerClosed``, ``ValidationError``), and if the caller is cancelled
        while it waits, the records not yet accepted fail ``Cancelled``."""
        pipeline = self._require_pipeline()
        try:
            if sub.standing is Standing.WAITING:
                waker: asyncio.Future[None] = self._require_loop().create_future()
                if pipeline.wait_for(sub, waker):
                    await waker
            if sub.too_large:
                await self._check_record_limit()
                rest = pipeline.admit_too_large(sub, self._clock())
                self._execute()
                await self.settle(rest)
                if rest.error is not None:
                    raise rest.error
        except asyncio.CancelledError:
            pipeline.withdraw(
                sub, CANCELLED, "put_many was cancelled before acceptance", self._clock()
            )
            self._execute()
            raise
        if sub.sink.single and sub.standing is Standing.REFUSED:
            raise self._refusal()

    async def _check_record_limit(self) -> None:
        """Ask the stream for its maximum record size again (see ``ShardMapDriver``)."""
        driver = self._shard_map
        assert driver is not None
        await driver.check_record_limit()

    async def flush(self) -> None:
        """Send everything buffered now and wait until every record accepted so far finished.

        Records accepted while it waits are sent too, but not waited for.
        """
        self._raise_if_crashed()
        pipeline = self._pipeline
        if pipeline is None:
            return
        flush = pipeline.flush()
        if flush is None:
            return
        flush.waker = future = self._require_loop().create_future()
        self._after_change()  # nothing lingers while a flush waits
        try:
            await future
        finally:
            pipeline.forget(flush)
        self._raise_if_crashed()

    # -- observing -------------------------------------------------------------------------

    def metrics(self) -> MetricsSnapshot:
        """Cumulative metrics now (KPL names via ``as_kpl_metrics()``)."""
        return self._metrics.snapshot(self._clock(), self.outstanding_records)

    @property
    def outstanding_records(self) -> int:
        """Records accepted and not finished yet (the KPL's UserRecordsPending)."""
        return 0 if self._pipeline is None else self._pipeline.outstanding_records

    @property
    def record_bytes(self) -> int:
        """The largest data plus partition key a record may have now (the stream's maximum
        record size, or ``max_record_bytes`` if smaller); 1 MiB before ``start``."""
        if self._pipeline is None:
            return min(self.config.max_record_bytes, MAX_RECORD_BYTES)
        return self._pipeline.record_bytes

    @property
    def outstanding_bytes(self) -> int:
        return 0 if self._pipeline is None else self._pipeline.outstanding_bytes

    @property
    def closed(self) -> bool:
        """Closing, closed, or stopped by an error: it accepts no more records."""
        return self._lifecycle.stopping

    @property
    def state(self) -> State:
        return self._lifecycle.state

    @property
    def has_waiters(self) -> bool:
        """Whether callers wait for room in the budget (they go first)."""
        return self._pipeline is not None and bool(self._pipeline.admission.waiting)

    @property
    def error(self) -> BaseException | None:
        """The exception that crashed the producer, if one did."""
        return self._error

    # -- internals: admission --------------------------------------------------------------

    def _require_open(self) -> Pipeline:
        self._raise_if_crashed()
        if self._lifecycle.state is not State.RUNNING or self._pipeline is None:
            raise self._refusal()
        return self._pipeline

    def _refusal(self) -> Exception:
        """Why no record is accepted: the producer crashed, failed, is not started or closed."""
        lifecycle = self._lifecycle
        if self._error is not None:
            crashed = ProducerCrashedError(
                f"producer of {self.stream_name!r} crashed: {self._error!r}"
            )
            crashed.__cause__ = self._error
            return crashed
        failure = self._pipeline.failure if self._pipeline is not None else None
        if failure is not None:
            code, message = failure
            return ProducerFailedError(
                f"{lifecycle.owner} stopped after {code}: {message} (no retry fixes that: "
                "check the credentials and permissions, then make a new producer)",
                code,
            )
        if lifecycle.state in (State.NEW, State.STARTING):
            lifecycle.require("accept records")
        return ProducerClosedError(self._closed_message())

    def _closed_message(self) -> str:
        return f"{self._lifecycle.owner} is closed: it accepts no more records"

    def _require_loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None
        return self._loop

    def _require_pipeline(self) -> Pipeline:
        assert self._pipeline is not None
        return self._pipeline

    def _raise_if_crashed(self) -> None:
        if self._error is not None:
            raise self._refusal()

    # -- internals: executing the pipeline's decisions -------------------------------------

    def _admit(self) -> None:
        """Take what the admission let in (records handed over on any thread) into the
        pipeline, and execute what follows."""
        try:
            self._require_pipeline().admit(self._clock())
            self._execute()
        except Exception as exc:
            self._crash(exc)

    def _execute(self) -> None:
        """After a pipeline event: resolve and wake what it names, stop if it failed for
        good, start the sends it has ready and re-arm the timer."""
        self._resolve()
        pipeline = self._require_pipeline()
        if pipeline.failure is not None:
            self._stop_after(pipeline.failure)
        self._after_change()

    def _resolve(self) -> None:
        """Resolve the futures of the callers whose records are all finished, and wake the
        callers and flushes the pipeline decided (``Pipeline.outputs``)."""
        results, decided, flushed = self._require_pipeline().outputs()
        for sink in results:
            future = sink.future
            if not future.done():  # the caller may have cancelled it
                future.set_result(sink.result())
        for sub in decided:
            _wake(sub.waker)
        for flush in flushed:
            _wake(flush.waker)

    def _after_change(self) -> None:
        """Start the sends the pipeline has ready and re-arm the timer."""
        pipeline = self._require_pipeline()
        loop = self._require_loop()
        while pipeline.ready and len(self._sending) < self.config.max_connections:
            batch = pipeline.next_batch(self._clock(), len(self._sending))
            if batch is None:
                break
            task = loop.create_task(self._send(batch))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        if pipeline.landings and self._landings_task is None:
            self._landings_task = loop.create_task(self._resolve_landings())
        when = pipeline.next_deadline(self._clock())
        if when is None or when >= self._timer_when:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_when = when
        self._timer = loop.call_later(max(0.0, when - self._clock()), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_when = float("inf")
        try:
            self._require_pipeline().poll(self._clock())
            self._execute()
        except Exception as exc:
            self._crash(exc)

    async def _send(self, batch: PutBatch) -> None:
        pipeline = self._require_pipeline()
        try:
            outcome = await send_batch(
                self._client,
                self.stream,
                batch,
                self.config.request_timeout_for(batch.size),
                self._clock,
                self._lean,
            )
            invalidations = pipeline.on_outcome(batch, outcome, self._clock())
            shard_map = self._shard_map
            assert shard_map is not None
            for seen_at, predicted in invalidations:
                shard_map.invalidate(seen_at, predicted)
            # This send is done with its connection: leave _sending before looking for the
            # next request, or a producer with every connection finishing at once stalls.
            self._sending.discard(asyncio.current_task())
            self._execute()
        except asyncio.CancelledError:
            pipeline.fail_batch(
                batch,
                SHUTDOWN,
                "the request was cancelled before its response came",
                self._clock(),
            )
            self._resolve()
            raise
        except Exception as exc:
            self._crash(exc)

    def _stop_after(self, failure: tuple[str, str]) -> None:
        """An error no retry fixes: the pipeline failed every record and refuses new ones."""
        if self._lifecycle.state is State.RUNNING:
            self._lifecycle.handle(Event.FAIL)
            code, message = failure
            logger.error(
                "%s stopped: %s: %s (every record it held failed)",
                self._lifecycle.owner,
                code,
                message,
            )

    async def _resolve_landings(self) -> None:
        """Decide the aggregates written to a shard the map did not know: wait for the map's
        refresh, then list every shard (closed ones too) for those it still lacks; the listing
        is retried (:data:`LANDING_LISTING_RETRY`) until it works."""
        pipeline = self._require_pipeline()
        driver = self._shard_map
        assert driver is not None
        executor = AsyncExecutor(self._client, clock=self._time)
        what = f"{self._lifecycle.owner}: the listing of every shard"
        try:
            while pipeline.landings:
                await driver.wait_ready()
                unknown = pipeline.resolve_landings(self._clock())
                self._execute()
                if not unknown:
                    continue
                listed_at = self._clock()
                await executor.attempt(driver.learn_all_shards, LANDING_LISTING_RETRY, what)
                pipeline.resolve_landings(
                    self._clock(),
                    final="not in a ListShards of every shard of the stream",
                    sent_before=listed_at,
                )
                self._execute()
        except Exception as exc:
            self._crash(exc)
        finally:
            self._landings_task = None

    def _crash(self, exc: BaseException) -> None:
        """Fail every unfinished record with ``Internal`` and refuse new ones: never hang."""
        if self._error is not None:
            return
        self._error = exc
        if self._lifecycle.state is State.RUNNING:
            self._lifecycle.handle(Event.FAIL)
        logger.error("producer of %r crashed", self.stream_name, exc_info=exc)
        pipeline = self._pipeline
        if pipeline is not None:
            reason = f"the producer crashed: {exc!r}"
            pipeline.stop(reason, crashed=True)
            pipeline.fail_all(INTERNAL, reason, self._clock())
            self._resolve()

    # -- internals: metrics ----------------------------------------------------------------

    async def _report_metrics(self) -> None:
        while True:
            await self._time.sleep(self.config.metrics_interval)
            self._emit_metrics()

    def _emit_metrics(self) -> None:
        assert self._on_metrics is not None
        try:
            self._on_metrics(self.metrics())
        except Exception:
            logger.exception("metrics hook of the producer of %r failed", self.stream_name)


def _unreachable_at_start(error: BaseException, attempts: int) -> bool:
    """``start`` gives up on an endpoint that no attempt reached, after a few attempts."""
    from kinesis_core.aws.exceptions import unreachable

    return attempts >= START_ATTEMPTS_UNREACHABLE and unreachable(error)


def _wake(waker: asyncio.Future[None] | None) -> None:
    """Wake a caller waiting on ``waker`` (None: it stopped waiting, or never had to)."""
    if waker is not None and not waker.done():
        waker.set_result(None)
