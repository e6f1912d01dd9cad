"""A blocking facade over :class:`Producer` for synchronous code (Beam DoFns, scripts, notebooks).

All blocking producers of a process share one daemon thread running one event loop. A batch
call hops onto it once; ``submit`` queues single records for it without waiting for it while
the budget has room. The semantics and
results are the asynchronous producer's: ``submit`` blocks while the memory budget is full and
returns a ``concurrent.futures.Future``; ``put`` blocks until the record's result is known.
Bad input raises in the caller's thread before anything crosses over (but a record over the
stream's maximum record size waits for the loop to ask the stream again). After a fork the
child starts its own loop thread. Producers left open at interpreter exit are closed then
(flushed, with ``record_ttl`` as the timeout), so buffered records are not dropped silently.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import threading
import weakref
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from kinesis_core.errors import RecordTooLargeError
from kinesis_core.hashing import validate_record
from kinesis_core.loop_thread import LoopThread
from kinesis_core.producer.config import ProducerConfig, record_cost
from kinesis_core.producer.metrics import MetricsHook, MetricsSnapshot
from kinesis_core.producer.producer import LOW_WATER, Producer
from kinesis_core.producer.result import BatchResult, RecordResult
from kinesis_core.stream import stream_argument

if TYPE_CHECKING:
    from kinesis_core.client import ClientConfig
    from kinesis_core.stream import StreamRef

logger = logging.getLogger(__name__)

T = TypeVar("T")


_open_producers: weakref.WeakSet[BlockingProducer] = weakref.WeakSet()


@atexit.register
def _close_open_producers() -> None:
    for producer in list(_open_producers):
        try:
            producer.close(timeout=producer.config.record_ttl)
        except Exception:
            logger.exception("closing the producer of %r at exit failed", producer.stream_name)


def _copy_outcome(target: concurrent.futures.Future[Any], source: asyncio.Future[Any]) -> None:
    if target.done():
        return
    if source.cancelled():
        target.cancel()
    elif (exc := source.exception()) is not None:
        target.set_exception(exc)
    else:
        target.set_result(source.result())


class BlockingProducer:
    """Thread-safe, blocking twin of :class:`Producer`; use it as a context manager."""

    def __init__(
        self,
        stream: str | StreamRef | None = None,
        *,
        client_config: ClientConfig | None = None,
        config: ProducerConfig | None = None,
        client: Any = None,
        on_metrics: MetricsHook | None = None,
        stream_name: str | None = None,
    ) -> None:
        self.stream = stream_argument(stream, stream_name, "BlockingProducer")
        self.stream_name = self.stream.name
        self.config = config if config is not None else ProducerConfig()
        self._thread = LoopThread.get()
        self._producer = Producer(
            self.stream,
            client_config=client_config,
            config=self.config,
            client=client,
            on_metrics=on_metrics,
        )
        self._lock = threading.Lock()
        self._inbox: list[
            tuple[bytes, str, str | None, int, int, concurrent.futures.Future[RecordResult]]
        ] = []
        self._reserved_records = 0
        self._reserved_bytes = 0
        self._thread.run(self._producer.start())
        _open_producers.add(self)

    def __enter__(self) -> BlockingProducer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def put(
        self,
        data: bytes,
        partition_key: str,
        explicit_hash_key: str | int | None = None,
        timeout: float | None = None,
    ) -> RecordResult:
        """Write one record and block until its terminal result."""
        return self.submit(data, partition_key, explicit_hash_key).result(timeout)

    def submit(
        self, data: bytes, partition_key: str, explicit_hash_key: str | int | None = None
    ) -> concurrent.futures.Future[RecordResult]:
        """Accept one record (blocking while the budget is full); returns its result's future.

        While the budget is clearly below its limit the record is reserved and queued for the
        loop thread without waiting for it (one wake-up of the loop per burst of records, not
        per record). Near the limit the call waits on the loop, in line with async callers.
        """
        self._thread.check_caller()
        result: concurrent.futures.Future[RecordResult] = concurrent.futures.Future()
        try:
            hash_key = validate_record(
                data, partition_key, explicit_hash_key, self._producer.record_bytes
            )
        except RecordTooLargeError:
            hash_key = None  # the loop asks the stream whether its limit was raised
        if hash_key is not None:
            if type(data) is not bytes:
                data = bytes(data)
            ehk = None if explicit_hash_key is None else str(hash_key)
            cost = record_cost(data, partition_key)
            with self._lock:
                reserved = self._reserve(cost)
                if reserved:
                    self._inbox.append((data, partition_key, ehk, hash_key, cost, result))
                    wake = len(self._inbox) == 1
            if reserved:
                if wake:
                    self._thread.loop.call_soon_threadsafe(self._drain_inbox)
                return result

        async def accept() -> None:
            future = await self._producer.submit(data, partition_key, explicit_hash_key)
            future.add_done_callback(lambda f: _copy_outcome(result, f))

        self._thread.run(accept())
        return result

    def _reserve(self, cost: int) -> bool:
        """Take room for one record ahead of the loop thread if the budget clearly has it.

        Records in the inbox count as outstanding until the loop admits them, and the loop
        counts a record as outstanding before it stops counting it as reserved, so the two
        together never under-count. Waiting async callers go first.
        """
        producer = self._producer
        config = self.config
        if producer.closed or producer.has_waiters:
            return False
        records = producer.outstanding_records + self._reserved_records + 1
        size = producer.outstanding_bytes + self._reserved_bytes + cost
        if (
            records > LOW_WATER * config.max_outstanding_records
            or size > LOW_WATER * config.max_outstanding_bytes
        ):
            return False
        self._reserved_records += 1
        self._reserved_bytes += cost
        return True

    def _drain_inbox(self) -> None:
        """On the loop thread: admit every reserved record, then release the reservations."""
        with self._lock:
            inbox, self._inbox = self._inbox, []
        try:
            self._producer.accept_validated_many(
                (data, partition_key, ehk, hash_key, result)
                for data, partition_key, ehk, hash_key, _, result in inbox
            )
        except Exception as exc:  # closed or crashed meanwhile: none was admitted
            for *_, result in inbox:
                result.set_exception(exc)
        with self._lock:
            self._reserved_records -= len(inbox)
            self._reserved_bytes -= sum(item[4] for item in inbox)

    def put_many(self, records: Iterable[Any], timeout: float | None = None) -> BatchResult:
        """Write a batch and block until every record of it is finished."""
        return self.submit_many(records).result(timeout)

    def submit_many(self, records: Iterable[Any]) -> concurrent.futures.Future[BatchResult]:
        """Accept a batch (blocking while the budget is full); returns its result's future."""
        batch: Sequence[Any] = records if isinstance(records, Sequence) else list(records)
        result: concurrent.futures.Future[BatchResult] = concurrent.futures.Future()

        async def accept() -> None:
            future = await self._producer.submit_many(batch)
            future.add_done_callback(lambda f: _copy_outcome(result, f))

        self._thread.run(accept())
        return result

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered and block until every record accepted so far finished."""
        self._thread.run(self._producer.flush(), timeout)

    def close(self, timeout: float | None = None) -> None:
        """Flush, wait (at most ``timeout`` seconds, then fail the rest) and release the client."""
        _open_producers.discard(self)
        self._thread.run(self._producer.close(timeout))

    def metrics(self) -> MetricsSnapshot:
        """Cumulative metrics now (taken on the loop thread, so they are consistent)."""

        async def snapshot() -> MetricsSnapshot:
            return self._producer.metrics()

        return self._thread.run(snapshot())

    @property
    def outstanding_records(self) -> int:
        return self._producer.outstanding_records

    @property
    def closed(self) -> bool:
        return self._producer.closed
