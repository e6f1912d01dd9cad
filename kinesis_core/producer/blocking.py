"""A blocking facade over :class:`Producer` for synchronous code (Beam DoFns, scripts, notebooks).

All blocking producers of a process share one daemon thread running one event loop. Every
call hands its records over the same way (``Producer.hand_over``): validated in the caller's
thread and admitted under a lock into the pipeline's inbox, the loop woken once per burst of
hand-overs; the caller waits for the loop only when the pipeline says so (the memory budget is
full, or a record over the stream's maximum record size waits for the stream to be asked
again). The semantics and results are the asynchronous producer's: ``submit`` blocks while the
memory budget is full and returns a ``concurrent.futures.Future``; ``put`` blocks until the
record's result is known. Bad input raises in the caller's thread. After a fork the child starts
its own loop thread. Producers left open at interpreter exit are closed then (flushed, with
``record_ttl`` as the timeout), so buffered records are not dropped silently.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import logging
import weakref
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from kinesis_core.producer.config import ProducerConfig
from kinesis_core.producer.metrics import MetricsHook, MetricsSnapshot
from kinesis_core.producer.producer import Producer
from kinesis_core.producer.result import BatchResult, RecordResult
from kinesis_core.runtime.loop_thread import LoopThread
from kinesis_core.stream import StreamRef

if TYPE_CHECKING:
    from kinesis_core.aws.config import ClientConfig

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


class BlockingProducer:
    """Thread-safe, blocking twin of :class:`Producer`; use it as a context manager."""

    def __init__(
        self,
        stream: str | StreamRef,
        *,
        client_config: ClientConfig | None = None,
        producer_config: ProducerConfig | None = None,
        client: Any = None,
        on_metrics: MetricsHook | None = None,
    ) -> None:
        self.stream = StreamRef.of(stream)
        self.stream_name = self.stream.name
        self.config = producer_config if producer_config is not None else ProducerConfig()
        self._thread = LoopThread.get()
        self._producer = Producer(
            self.stream,
            client_config=client_config,
            producer_config=self.config,
            client=client,
            on_metrics=on_metrics,
        )
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
        *,
        record_id: str | None = None,
    ) -> RecordResult:
        """Write one record and block until its terminal result (``record_id``: as
        :meth:`Producer.put <kinesis_core.producer.Producer.put>`)."""
        return self.submit(data, partition_key, explicit_hash_key, record_id=record_id).result(
            timeout
        )

    def submit(
        self,
        data: bytes,
        partition_key: str,
        explicit_hash_key: str | int | None = None,
        *,
        record_id: str | None = None,
    ) -> concurrent.futures.Future[RecordResult]:
        """Accept one record (blocking while the budget is full); returns its result's future."""
        record = (
            (data, partition_key, explicit_hash_key)
            if record_id is None
            else (data, partition_key, explicit_hash_key, record_id)
        )
        return self._hand_over((record,), single=True)

    def put_many(self, records: Iterable[Any], timeout: float | None = None) -> BatchResult:
        """Write a batch and block until every record of it is finished."""
        return self.submit_many(records).result(timeout)

    def submit_many(self, records: Iterable[Any]) -> concurrent.futures.Future[BatchResult]:
        """Accept a batch (blocking while the budget is full); returns its result's future."""
        batch: Sequence[Any] = records if isinstance(records, Sequence) else list(records)
        return self._hand_over(batch)

    def _hand_over(
        self, records: Sequence[Any], *, single: bool = False
    ) -> concurrent.futures.Future[Any]:
        """Hand the records to the pipeline from this thread; wait on the loop only while the
        pipeline says the submission waits (for room, or for the stream's limit)."""
        self._thread.check_caller()
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        sub = self._producer.hand_over(records, future, single=single)
        if sub.unsettled:
            self._thread.run(self._producer.settle(sub))
        return future

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
