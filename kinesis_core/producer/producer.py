"""The asyncio producer: drives the sans-I/O :class:`Pipeline` with a client, a clock and a timer.

Everything it does is move bytes and time: admit records into the pipeline (waiting for room in
the memory budget first), send the requests the pipeline has ready (at most ``max_connections``
at once), hand responses back, pass shard-map invalidations on, and wake the pipeline when its
next deadline comes. There is no task per record and no queue between stages.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from kinesis_core.backoff import Backoff
from kinesis_core.classify import ErrorKind, classify
from kinesis_core.errors import ConfigurationError, KinesisConnectorError, RecordTooLargeError
from kinesis_core.hashing import MAX_PUT_RECORDS_BYTES, MAX_RECORD_BYTES, validate_record
from kinesis_core.lifecycle import Event, Lifecycle, State
from kinesis_core.producer.config import ProducerConfig, record_cost
from kinesis_core.producer.metrics import MetricsHook, MetricsSnapshot, ProducerMetrics
from kinesis_core.producer.pipeline import Pipeline, record_cost_of
from kinesis_core.producer.result import (
    CANCELLED,
    INTERNAL,
    PRODUCER_CLOSED,
    SHUTDOWN,
    VALIDATION_ERROR,
    BatchResult,
    BatchSink,
    FutureSink,
    ProducerClosedError,
    ProducerCrashedError,
    ProducerFailedError,
    RecordResult,
    ResultFuture,
)
from kinesis_core.producer.sender import error_of, send_batch
from kinesis_core.shard_map_driver import ShardMapDriver, ShardMapTimeoutError
from kinesis_core.stream import StreamRef, stream_argument

if TYPE_CHECKING:
    from kinesis_core.client import ClientConfig
    from kinesis_core.producer.items import PutBatch

logger = logging.getLogger(__name__)

LOW_WATER = 0.9
"""Waiting puts are let in once the budget is below this fraction again (not record by record)."""
START_ATTEMPTS_UNREACHABLE = 3
"""``start`` gives up after this many ListShards attempts that reached no endpoint at all
(about 3 s when nothing listens on the port), instead of retrying for ``start_timeout``."""
START_TIMEOUT = 30.0
"""Seconds ``start`` retries ListShards errors that may pass (throttling, a 5xx)."""


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
    """

    def __init__(
        self,
        stream: str | StreamRef | None = None,
        *,
        client_config: ClientConfig | None = None,
        config: ProducerConfig | None = None,
        client: Any = None,
        on_metrics: MetricsHook | None = None,
        clock: Callable[[], float] = time.monotonic,
        stream_name: str | None = None,
    ) -> None:
        self.stream = stream_argument(stream, stream_name, "Producer")
        self.stream_name = self.stream.name
        self.config = config if config is not None else ProducerConfig()
        if not isinstance(self.config, ProducerConfig):
            raise ConfigurationError(
                f"config: must be a ProducerConfig, got {type(self.config).__name__}"
            )
        if client_config is not None:
            self.stream.check_endpoint(client_config.endpoint_url)
        self._client_config = client_config
        self._client = client
        self._on_metrics = on_metrics
        self._clock = clock
        self._metrics = ProducerMetrics(self.stream_name)
        self._lifecycle = Lifecycle(f"Producer({str(self.stream)!r})")
        self._error: BaseException | None = None
        self._landings_task: asyncio.Task[None] | None = None
        self._stack = contextlib.AsyncExitStack()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pipeline: Pipeline | None = None
        self._shard_map: ShardMapDriver | None = None
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._epoch = 0
        self._pending: dict[int, int] = {}
        self._flush_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._timer_when = float("inf")
        self._sending: set[asyncio.Task[None]] = set()
        self._metrics_task: asyncio.Task[None] | None = None
        self._telemetry: Any = None
        self._closed = asyncio.Event()

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Create the client, load the shard map (raises if the stream cannot be listed).

        An error no retry fixes (no such stream, credentials or permissions refused) raises at
        once, naming it; so does an endpoint that does not answer at all (a few seconds).
        """
        self._lifecycle.handle(Event.START, "start")
        self._loop = asyncio.get_running_loop()
        try:
            client = self._client
            if client is None:
                client = await self._stack.enter_async_context(self._create_client())
                self._client = client
            driver = ShardMapDriver(
                self.stream,
                client.list_shards,
                clock=self._clock,
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
            self._pipeline = Pipeline(
                self.config,
                predict=driver.map.predict,
                hash_range=driver.map.hash_range,
                metrics=self._metrics,
                record_limit=driver.record_limit,
                stream=str(self.stream),
            )
        except BaseException:
            self._lifecycle.handle(Event.START_FAILED)
            self._closed.set()
            await self._stack.aclose()
            raise
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
        if _unreachable_at_start(cause, START_ATTEMPTS_UNREACHABLE):
            return (
                f"{owner} could not start: no answer from the endpoint after "
                f"{START_ATTEMPTS_UNREACHABLE} attempts: {message}"
            )
        return f"{owner} could not start: {exc}"

    def _create_client(self) -> contextlib.AbstractAsyncContextManager[Any]:
        from kinesis_core.client import ClientConfig, create_kinesis_client

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
        self._wake_all_waiters()
        try:
            if self._error is None:
                try:
                    await asyncio.wait_for(self.flush(), timeout)
                except asyncio.TimeoutError:
                    pipeline = self._require_pipeline()
                    failed = pipeline.fail_all(
                        SHUTDOWN,
                        f"the producer was closed with timeout={timeout} s before this "
                        "record was written (a request in flight may still have written it)",
                        self._clock(),
                    )
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
        self, data: bytes, partition_key: str, explicit_hash_key: str | int | None = None
    ) -> RecordResult:
        """Write one record; returns its terminal result (never raises for a failed write).

        Raises :class:`~kinesis_core.errors.ValidationError` at once for bad input, and
        :class:`ProducerClosedError` once the producer is closing.
        """
        return await (await self.submit(data, partition_key, explicit_hash_key))

    async def submit(
        self, data: bytes, partition_key: str, explicit_hash_key: str | int | None = None
    ) -> asyncio.Future[RecordResult]:
        """Accept one record (waiting for room in the budget) and return its result's future.

        A record over the stream's maximum record size as last known waits for the stream to
        be asked again (a limit raised since lets it in) before it is refused."""
        pipeline = self._require_open()
        try:
            hash_key = validate_record(
                data, partition_key, explicit_hash_key, pipeline.record_bytes
            )
        except RecordTooLargeError as exc:
            if not pipeline.may_fit_later(exc.size):
                raise RecordTooLargeError(exc.size, exc.limit, pipeline.refusal(exc.size)) from None
            await self._check_record_limit()
            try:
                hash_key = validate_record(
                    data, partition_key, explicit_hash_key, pipeline.record_bytes
                )
            except RecordTooLargeError as again:
                raise RecordTooLargeError(
                    again.size, again.limit, pipeline.refusal(again.size)
                ) from None
        if type(data) is not bytes:
            data = bytes(data)
        cost = record_cost(data, partition_key)
        if self._waiters or not pipeline.has_room(cost):
            await self._wait_for_room(cost)
        future: asyncio.Future[RecordResult] = self._require_loop().create_future()
        ehk = None if explicit_hash_key is None else str(hash_key)
        self.accept_validated(data, partition_key, ehk, hash_key, future)
        self._pass_room_on()
        return future

    def accept_validated(
        self,
        data: bytes,
        partition_key: str,
        explicit_hash_key: str | None,
        hash_key: int,
        future: ResultFuture,
    ) -> None:
        """Admit one record already validated (``hash_key`` is what validation returned,
        ``explicit_hash_key`` its decimal form or None), without waiting for room: the caller
        has reserved it. ``future`` gets the result."""
        self.accept_validated_many(((data, partition_key, explicit_hash_key, hash_key, future),))

    def accept_validated_many(
        self, records: Iterable[tuple[bytes, str, str | None, int, ResultFuture]]
    ) -> None:
        """:meth:`accept_validated` for many records at once, with one look at what is due
        after them (for :class:`BlockingProducer`, which collects records from other threads).
        Raises, admitting none, if the producer is closed or failed."""
        pipeline = self._require_open()
        epoch = self._epoch
        now = self._clock()
        pending = self._pending
        register = pipeline.register
        admit_one = pipeline.admit_one
        sink_done = self._sink_done
        for data, partition_key, explicit_hash_key, hash_key, future in records:
            pending[epoch] = pending.get(epoch, 0) + 1
            sink = BatchSink(1, future, epoch, sink_done, single=True)
            sink.key = register(sink)
            admit_one(data, partition_key, explicit_hash_key, hash_key, sink.key, now)
        self._after_change()

    async def put_many(self, records: Iterable[Any]) -> BatchResult:
        """Write a batch of ``(data, partition_key[, explicit_hash_key])`` records.

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
        pipeline = self._require_open()
        if not isinstance(records, Sequence):
            records = list(records)
        future: asyncio.Future[BatchResult] = self._require_loop().create_future()
        end = len(records)
        if not end:
            future.set_result(BatchResult([], [], [], [], {}))
            return future
        epoch = self._epoch
        self._pending[epoch] = self._pending.get(epoch, 0) + 1
        sink = BatchSink(end, future, epoch, self._sink_done)
        sink.key = pipeline.register(sink)
        index = 0
        while index < end:
            # has_room(cost of the next record) is false exactly when admit_many would take
            # nothing, so every pass either waits or makes progress.
            cost = record_cost_of(records[index])
            if self._waiters or not pipeline.has_room(cost):
                try:
                    await self._wait_for_room(cost)
                except (ProducerClosedError, ProducerCrashedError) as exc:
                    for i in range(index, end):
                        sink.failed(i, PRODUCER_CLOSED, f"not accepted: {exc}", ())
                    break
                except BaseException:
                    # Cancelled while waiting: the rest never enters, but still gets a result
                    # (a flush must not wait for it forever).
                    for i in range(index, end):
                        sink.failed(i, CANCELLED, "put_many was cancelled before acceptance", ())
                    raise
            index = pipeline.admit_many(records, index, sink.key, self._clock())
            self._after_change()
        if pipeline.too_large:
            await self._admit_too_large(records, sink)
        self._pass_room_on()
        # Let the requests this batch completed start now: a caller that submits batch after
        # batch without waiting would otherwise keep the loop until the budget is full.
        return future

    async def _admit_too_large(self, records: Sequence[Any], sink: BatchSink) -> None:
        """Admit, or refuse, the records ``admit_many`` set aside as over the stream's limit
        (``Pipeline.too_large``), once the stream has been asked again."""
        pipeline = self._require_pipeline()
        indexes, pipeline.too_large = pipeline.too_large, []
        try:
            await self._check_record_limit()
        except BaseException:
            for index in indexes:
                sink.failed(index, CANCELLED, "put_many was cancelled before acceptance", ())
            raise
        for n, index in enumerate(indexes):
            record = records[index]
            data, partition_key = record[0], record[1]
            explicit_hash_key = record[2] if len(record) > 2 else None
            try:
                hash_key = validate_record(
                    data, partition_key, explicit_hash_key, pipeline.record_bytes
                )
            except RecordTooLargeError as exc:
                sink.failed(index, VALIDATION_ERROR, f"data: {pipeline.refusal(exc.size)}", ())
                continue
            cost = record_cost(data, partition_key)
            if self._waiters or not pipeline.has_room(cost):
                try:
                    await self._wait_for_room(cost)
                except BaseException as exc:
                    code = (
                        PRODUCER_CLOSED
                        if isinstance(exc, (ProducerClosedError, ProducerCrashedError))
                        else CANCELLED
                    )
                    for rest in indexes[n:]:
                        sink.failed(rest, code, f"not accepted: {exc!r}", ())
                    if code is CANCELLED:
                        raise
                    return
            ehk = None if explicit_hash_key is None else str(hash_key)
            pipeline.admit_one(
                bytes(data), partition_key, ehk, hash_key, sink.key, self._clock(), index
            )
            self._after_change()

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
        if self._pipeline is None:
            return
        epoch = self._epoch
        self._epoch += 1
        if not self._pending or min(self._pending) > epoch:
            return
        future: asyncio.Future[None] = self._require_loop().create_future()
        waiter = (epoch, future)
        self._flush_waiters.append(waiter)
        self._update_flushing()
        try:
            await future
        finally:
            self._flush_waiters.remove(waiter)
            self._update_flushing()
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
        return bool(self._waiters)

    @property
    def error(self) -> BaseException | None:
        """The exception that crashed the producer, if one did."""
        return self._error

    # -- internals: admission --------------------------------------------------------------

    def _require_open(self) -> Pipeline:
        self._raise_if_crashed()
        lifecycle = self._lifecycle
        if lifecycle.state is not State.RUNNING or self._pipeline is None:
            failure = self._pipeline.failure if self._pipeline is not None else None
            if failure is not None:
                code, message = failure
                raise ProducerFailedError(
                    f"{lifecycle.owner} stopped after {code}: {message} (no retry fixes that: "
                    "check the credentials and permissions, then make a new producer)",
                    code,
                )
            if lifecycle.state in (State.NEW, State.STARTING):
                lifecycle.require("accept records")
            raise ProducerClosedError(f"{lifecycle.owner} is closed: it accepts no more records")
        return self._pipeline

    def _require_loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None
        return self._loop

    def _require_pipeline(self) -> Pipeline:
        assert self._pipeline is not None
        return self._pipeline

    def _raise_if_crashed(self) -> None:
        if self._error is not None:
            raise ProducerCrashedError(
                f"producer of {self.stream_name!r} crashed: {self._error!r}"
            ) from self._error

    async def _wait_for_room(self, cost: int) -> None:
        """Queue (FIFO) until the budget has room for ``cost`` more bytes; raise if closed."""
        pipeline = self._require_pipeline()
        loop = self._require_loop()
        first = True
        while True:
            waiter: asyncio.Future[None] = loop.create_future()
            if first:
                self._waiters.append(waiter)
            else:  # woken but the room went to nobody else: keep our place at the head
                self._waiters.appendleft(waiter)
            first = False
            self._update_flushing()
            try:
                await waiter
            except BaseException:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                elif waiter.done() and not waiter.cancelled():
                    self._pass_room_on()
                raise
            self._require_open()
            if pipeline.has_room(cost):
                return

    def _update_flushing(self) -> None:
        """Send at once, without lingering, while anyone waits: for a flush, or for room.

        Lingering for fuller aggregates and requests only pays while records keep coming; a
        caller blocked on a full budget adds none until records already buffered finish.
        """
        pipeline = self._pipeline
        if pipeline is None:
            return
        urgent = bool(self._flush_waiters or self._waiters)
        if urgent != pipeline.flushing:
            pipeline.flushing = urgent
            if urgent:
                self._after_change()

    def _pass_room_on(self) -> None:
        """Wake the next waiter if there is still room below the low-water mark."""
        pipeline = self._pipeline
        if pipeline is None or not self._waiters:
            return
        config = self.config
        if pipeline.outstanding_records and (
            pipeline.outstanding_records > LOW_WATER * config.max_outstanding_records
            or pipeline.outstanding_bytes > LOW_WATER * config.max_outstanding_bytes
        ):
            return
        waiter = self._waiters.popleft()
        if not waiter.done():
            waiter.set_result(None)
        self._update_flushing()

    def _wake_all_waiters(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
        self._update_flushing()

    def _sink_done(self, sink: FutureSink) -> None:
        if self._pipeline is not None:
            self._pipeline.unregister(sink.key)
        epoch = sink.epoch
        left = self._pending[epoch] - 1
        if left:
            self._pending[epoch] = left
            return
        del self._pending[epoch]
        if self._flush_waiters:
            oldest = min(self._pending, default=self._epoch + 1)
            for waiting_epoch, future in self._flush_waiters:
                if waiting_epoch < oldest and not future.done():
                    future.set_result(None)

    # -- internals: sending and time -------------------------------------------------------

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
            self._after_change()
            self._pass_room_on()
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
            )
            invalidations = pipeline.on_outcome(batch, outcome, self._clock())
            shard_map = self._shard_map
            assert shard_map is not None
            for seen_at, predicted in invalidations:
                shard_map.invalidate(seen_at, predicted)
            if pipeline.failure is not None:
                self._stop_after(pipeline.failure)
            # This send is done with its connection: leave _sending before looking for the
            # next request, or a producer with every connection finishing at once stalls.
            self._sending.discard(asyncio.current_task())
            self._after_change()
            self._pass_room_on()
        except asyncio.CancelledError:
            pipeline.fail_batch(
                batch,
                SHUTDOWN,
                "the request was cancelled before its response came",
                self._clock(),
            )
            raise
        except Exception as exc:
            self._crash(exc)

    def _stop_after(self, failure: tuple[str, str]) -> None:
        """An error no retry fixes: the pipeline failed every record; refuse new ones."""
        if self._lifecycle.state is State.RUNNING:
            self._lifecycle.handle(Event.FAIL)
            code, message = failure
            logger.error(
                "%s stopped: %s: %s (every record it held failed)",
                self._lifecycle.owner,
                code,
                message,
            )
        self._wake_all_waiters()

    async def _resolve_landings(self) -> None:
        """Decide the aggregates written to a shard the map did not know: wait for the map's
        refresh, then list every shard (closed ones too) for those it still lacks."""
        pipeline = self._require_pipeline()
        driver = self._shard_map
        assert driver is not None
        retry = Backoff(1.0, 10.0)
        try:
            while pipeline.landings:
                await driver.wait_ready()
                if not pipeline.resolve_landings(self._clock()):
                    self._after_change()
                    continue
                listed_at = self._clock()
                try:
                    await driver.learn_all_shards()
                except Exception as exc:
                    delay = retry.failed("ListShards", self._clock())
                    logger.warning(
                        "%s: listing every shard failed (%r); trying again in %.1f s",
                        self._lifecycle.owner,
                        exc,
                        delay,
                    )
                    await asyncio.sleep(delay)
                    continue
                retry.succeeded("ListShards")
                pipeline.resolve_landings(
                    self._clock(),
                    final="not in a ListShards of every shard of the stream",
                    sent_before=listed_at,
                )
                self._after_change()
                self._pass_room_on()
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
            pipeline.fail_all(INTERNAL, f"the producer crashed: {exc!r}", self._clock())
        self._wake_all_waiters()
        for _, future in self._flush_waiters:
            if not future.done():
                future.set_result(None)

    # -- internals: metrics ----------------------------------------------------------------

    async def _report_metrics(self) -> None:
        while True:
            await asyncio.sleep(self.config.metrics_interval)
            self._emit_metrics()

    def _emit_metrics(self) -> None:
        assert self._on_metrics is not None
        try:
            self._on_metrics(self.metrics())
        except Exception:
            logger.exception("metrics hook of the producer of %r failed", self.stream_name)


def _unreachable_at_start(error: BaseException, attempts: int) -> bool:
    """``start`` gives up on an endpoint that no attempt reached, after a few attempts."""
    from kinesis_core.client import unreachable

    return attempts >= START_ATTEMPTS_UNREACHABLE and unreachable(error)
