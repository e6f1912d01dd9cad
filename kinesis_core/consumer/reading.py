"""The I/O half of the read-transport seam: transports that execute a machine's calls, and
the asyncio loop that drives one shard's machine.

:func:`run_shard_read` is the same for every transport: ask the machine for its next action,
execute a call through the transport, classify an error through the one error table, feed the
outcome back, hand each non-empty batch to the consumer (which may block: that is the
backpressure), log what the machine warns of. Synchronous engines (the Beam source) drive a
machine with a :class:`~.transport.SyncTransport` the same way, one step at a time
(:func:`execute`). Every transport executes :class:`~.transport.CheckStream` (a listing and
the stream's creation time, :class:`AsyncStreamView` / :func:`sync_stream_view`).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, NoReturn, TypeVar

from kinesis_core.classify import ErrorKind, error_details, error_message
from kinesis_core.client import error_kind
from kinesis_core.consumer._gc import gc_paused
from kinesis_core.consumer.frontier import RecordBatch, ShardFrontier
from kinesis_core.consumer.incarnation import StreamFacts
from kinesis_core.consumer.lineage import ShardNode
from kinesis_core.consumer.polling import GetIterator, GetRecords
from kinesis_core.consumer.subscription import (
    PENDING,
    CheckConsumer,
    CheckShard,
    NextEvent,
    ShardCheck,
    Subscribe,
)
from kinesis_core.consumer.transport import (
    Ack,
    AsyncTransport,
    Call,
    CheckStream,
    Ended,
    Failed,
    ShardRead,
    StreamView,
    SyncTransport,
    Wait,
)
from kinesis_core.errors import KinesisServiceError
from kinesis_core.fanout.consumers import consumer_check
from kinesis_core.records import KinesisRecord
from kinesis_core.shard_map import ShardInfo, list_all_shards
from kinesis_core.stream import StreamRef

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

VIEW_MAX_AGE = 1.0
"""Seconds a :class:`~.transport.StreamView` serves every reader of a consumer: when many
shards meet a refusal at once (a stream deleted or trimmed), one look answers them all."""


class ShardReadError(KinesisServiceError):
    """A shard's reader gave up (a :class:`~.transport.Failed` action)."""


class Shared(Generic[_T]):
    """One answer to ``fetch()`` shared by many callers, fetched again (by one of them at a
    time) once it is older than ``max_age`` seconds."""

    def __init__(
        self,
        fetch: Callable[[], Awaitable[_T]],
        max_age: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._max_age = max_age
        self._clock = clock
        self._value: tuple[float, _T] | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> _T:
        async with self._lock:
            if self._value is None or self._clock() - self._value[0] > self._max_age:
                value = await self._fetch()
                self._value = (self._clock(), value)
            return self._value[1]


class AsyncStreamView(Shared[StreamView]):
    """The answer to :class:`~.transport.CheckStream` (ListShards, all pages, and
    DescribeStreamSummary) on an aiobotocore client, shared by the readers of a consumer."""

    def __init__(
        self,
        client: Any,
        stream: StreamRef,
        max_age: float = VIEW_MAX_AGE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        async def look() -> StreamView:
            shards = await list_all_shards(client, stream)
            summary = await client.describe_stream_summary(**stream.params())
            return StreamView(shards, StreamFacts.from_response(summary))

        super().__init__(look, max_age, clock)


class AsyncPolling:
    """GetShardIterator and GetRecords on an aiobotocore Kinesis client (the caller owns it),
    and the look at the stream (``view``: a consumer's shared one, or one of its own)."""

    def __init__(
        self, client: Any, stream: StreamRef, shard_id: str, view: AsyncStreamView | None = None
    ) -> None:
        self._client = client
        self._stream_params = stream.params()
        self._records_params = _stream_id(stream)
        self._shard_id = shard_id
        self._view = view or AsyncStreamView(client, stream)

    async def call(self, call: Call) -> Any:
        if isinstance(call, GetRecords):
            return await self._client.get_records(
                ShardIterator=call.iterator, Limit=call.limit, **self._records_params
            )
        if isinstance(call, GetIterator):
            return await self._client.get_shard_iterator(
                **self._stream_params, ShardId=self._shard_id, **call.params
            )
        if isinstance(call, CheckStream):
            return await self._view.get()
        raise TypeError(f"polling cannot execute {call!r}")

    async def aclose(self) -> None:
        """Nothing to release: the client is the caller's."""


def sync_list_shards(
    client: Any, stream: StreamRef, shard_filter: Mapping[str, Any] | None = None
) -> list[ShardInfo]:
    """ListShards through the core's paginating helper, on a synchronous botocore client."""

    async def call(**kwargs: Any) -> Any:
        return client.list_shards(**kwargs)

    return asyncio.run(list_all_shards(call, stream, shard_filter))


def sync_stream_view(client: Any, stream: StreamRef) -> StreamView:
    """The answer to :class:`~.transport.CheckStream` on a synchronous botocore client."""
    shards = sync_list_shards(client, stream)
    summary = client.describe_stream_summary(**stream.params())
    return StreamView(shards, StreamFacts.from_response(summary))


class SyncPolling:
    """The same calls on a synchronous botocore client (the caller owns it); ``view`` answers
    :class:`~.transport.CheckStream` (default: :func:`sync_stream_view`)."""

    def __init__(
        self,
        client: Any,
        stream: StreamRef,
        shard_id: str,
        view: Callable[[], StreamView] | None = None,
    ) -> None:
        self._client = client
        self._stream_params = stream.params()
        self._records_params = _stream_id(stream)
        self._shard_id = shard_id
        self._view = view or (lambda: sync_stream_view(client, stream))

    def call(self, call: Call) -> Any:
        if isinstance(call, GetRecords):
            return self._client.get_records(
                ShardIterator=call.iterator, Limit=call.limit, **self._records_params
            )
        if isinstance(call, GetIterator):
            return self._client.get_shard_iterator(
                **self._stream_params, ShardId=self._shard_id, **call.params
            )
        if isinstance(call, CheckStream):
            return self._view()
        raise TypeError(f"polling cannot execute {call!r}")

    def close(self) -> None:
        """Nothing to release: the client is the caller's."""


def _stream_id(stream: StreamRef) -> dict[str, str]:
    """GetRecords names no stream (the iterator does), but passes its ``StreamId`` on."""
    return {} if stream.stream_id is None else {"StreamId": stream.stream_id}


class AsyncShardListing:
    """One ListShards listing shared by the readers of a consumer, refreshed when older than
    ``max_age`` seconds: how a fan-out reader learns that its shard closed when the server
    does not say so (:class:`~.subscription.CheckShard`)."""

    def __init__(
        self,
        client: Any,
        stream: StreamRef,
        max_age: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._listing = Shared(lambda: list_all_shards(client, stream), max_age, clock)

    async def check(self, shard_id: str) -> ShardCheck:
        return shard_check(await self._listing.get(), shard_id)


def shard_check(shards: list[ShardInfo], shard_id: str) -> ShardCheck:
    """What a complete listing says of ``shard_id``."""
    info = next((s for s in shards if s.shard_id == shard_id), None)
    if info is None:
        return ShardCheck(listed=False, closed=False)
    children = tuple(ShardNode.from_shard_info(s) for s in shards if shard_id in s.parents)
    return ShardCheck(listed=True, closed=not info.is_open, children=children)


class AsyncSubscribing:
    """SubscribeToShard for one shard through a :class:`~kinesis_core.fanout.FanOutClient`
    (the caller owns it): one open subscription at a time, closed on every error, at its
    end, and by :meth:`aclose`. ``client`` (an aiobotocore Kinesis client) describes the
    consumer when the machine asks (:class:`~.subscription.CheckConsumer`)."""

    def __init__(
        self,
        fanout: Any,
        consumer_arn: str,
        shard_id: str,
        listing: AsyncShardListing,
        client: Any,
    ) -> None:
        self._fanout = fanout
        self._consumer_arn = consumer_arn
        self._shard_id = shard_id
        self._listing = listing
        self._client = client
        self._subscription: Any = None

    async def call(self, call: Call) -> Any:
        if isinstance(call, NextEvent):
            if self._subscription is None:
                return None
            try:
                event = await self._subscription.next_event()
            except BaseException:
                await self.aclose()
                raise
            if event is None:
                await self.aclose()
            return event
        if isinstance(call, Subscribe):
            await self.aclose()
            self._subscription = await self._fanout.subscribe(
                self._consumer_arn, self._shard_id, call.starting_position
            )
            return self._subscription
        if isinstance(call, CheckShard):
            return await self._listing.check(self._shard_id)
        if isinstance(call, CheckConsumer):
            return await consumer_check(self._client, self._consumer_arn)
        raise TypeError(f"a subscription cannot execute {call!r}")

    async def aclose(self) -> None:
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            await subscription.aclose()


class _Raised:
    """An error the prefetch task met, handed to the synchronous side to raise."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class SyncSubscribing:
    """SubscribeToShard for a synchronous engine (a Beam DoFn).

    The subscription lives on an event-loop thread (``loop``: a
    :class:`~kinesis_core.producer.blocking.LoopThread`), where a task reads up to
    ``prefetch`` events ahead. ``call(NextEvent)`` never blocks: it returns the next event,
    None when the subscription ended, or :data:`~.subscription.PENDING`; ``wake`` is set
    whenever an event lands, so the engine's wait ends early. Reading only ``prefetch`` ahead
    is the backpressure (HTTP/2 flow control stops the server beyond it). A subscription
    outlives calls and bundles until :meth:`close`. ``client``, an aiobotocore Kinesis client
    of that loop, describes the consumer when the machine asks.
    """

    def __init__(
        self,
        loop: Any,
        fanout: Any,
        consumer_arn: str,
        shard_id: str,
        check: Callable[[str], ShardCheck],
        wake: threading.Event,
        client: Any,
        *,
        prefetch: int = 2,
        timeout: float = 60.0,
    ) -> None:
        self._loop = loop
        self._fanout = fanout
        self._consumer_arn = consumer_arn
        self._shard_id = shard_id
        self._check = check
        self._client = client
        self._wake = wake
        self._prefetch = prefetch
        self._timeout = timeout
        self._items: collections.deque[Any] = collections.deque()
        self._pump: asyncio.Task[None] | None = None
        self._room: asyncio.Semaphore | None = None

    def call(self, call: Call) -> Any:
        if isinstance(call, NextEvent):
            if not self._items:
                return PENDING if self._pump is not None else None
            item = self._items.popleft()
            room = self._room
            if room is not None:
                self._loop.loop.call_soon_threadsafe(room.release)
            if isinstance(item, _Raised):
                self.close()
                raise item.error
            if item is None:
                self.close()
            return item
        if isinstance(call, Subscribe):
            self.close()
            self._loop.run(self._open(call.starting_position), self._timeout)
            return self._pump
        if isinstance(call, CheckShard):
            return self._check(self._shard_id)
        if isinstance(call, CheckConsumer):
            return self._loop.run(consumer_check(self._client, self._consumer_arn), self._timeout)
        raise TypeError(f"a subscription cannot execute {call!r}")

    async def _open(self, starting_position: dict[str, Any]) -> None:
        subscription = await self._fanout.subscribe(
            self._consumer_arn, self._shard_id, starting_position
        )
        self._room = asyncio.Semaphore(self._prefetch)
        self._pump = asyncio.create_task(self._read_ahead(subscription, self._room))

    async def _read_ahead(self, subscription: Any, room: asyncio.Semaphore) -> None:
        try:
            while True:
                await room.acquire()
                event = await subscription.next_event()
                self._items.append(event)
                self._wake.set()
                if event is None:
                    return
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._items.append(_Raised(exc))
            self._wake.set()
        finally:
            await subscription.aclose()

    def close(self) -> None:
        """Stop reading ahead and close the subscription (events not taken are dropped: the
        next subscription starts after the last one taken)."""
        pump, self._pump, self._room = self._pump, None, None
        self._items.clear()
        if pump is not None:
            self._loop.run(_cancel(pump), self._timeout)


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def _raise_failed(machine: ShardRead, failed: Failed, last: BaseException | None) -> NoReturn:
    if failed.error is not None:
        raise failed.error from last
    code, status = error_details(last) if last is not None else (None, None)
    detail = ""
    if last is not None:
        detail = f"; last error: {code + ': ' if code else ''}{error_message(last)}"
    raise ShardReadError(
        f"gave up reading {machine.shard_id}: {failed.reason}{detail}",
        code=code,
        kind=machine.last_error or ErrorKind.FATAL,
        http_status=status,
    ) from last


def _wrap(exc: Exception, machine: ShardRead, call: Call, where: str) -> KinesisServiceError:
    """A service error no reader recovers from, as a :class:`KinesisServiceError` naming the
    call and the shard."""
    what = f"{type(call).__name__} on {machine.shard_id}" + (f" of {where}" if where else "")
    return KinesisServiceError.wrap(exc, what)


def execute(
    machine: ShardRead,
    transport: SyncTransport,
    call: Call,
    now: Callable[[], float] = time.monotonic,
    ack: Ack | None = None,
    *,
    where: str = "",
) -> list[KinesisRecord] | None:
    """One synchronous step: execute ``call``, feed the outcome to ``machine``; the records to
    deliver, or None when the call failed with an error the machine handles. Other errors
    raise as :class:`KinesisServiceError` (bugs raise as they are); ``where`` names the stream
    in their messages."""
    try:
        response = transport.call(call)
    except Exception as exc:
        kind = error_kind(exc)
        if kind is None:
            raise
        if not machine.handles(call, kind):
            raise _wrap(exc, machine, call, where) from exc
        machine.on_error(now(), call, kind)
        return None
    records = machine.on_response(now(), call, response, ack)
    _log_warning(machine)
    return records


def _log_warning(machine: ShardRead) -> None:
    warning = machine.take_warning()
    if warning is not None:
        logger.warning("%s", warning)


async def run_shard_read(
    machine: ShardRead,
    transport: AsyncTransport,
    frontier: ShardFrontier,
    emit: Callable[[RecordBatch], Awaitable[None]],
    *,
    clock: Callable[[], float] = time.monotonic,
    where: str = "",
) -> Ended:
    """Drive ``machine`` until its shard ends; every non-empty batch is registered in
    ``frontier`` and then handed to ``emit``. Errors no reader recovers from raise as
    :class:`KinesisServiceError` (``where`` names the stream in their messages); a machine that
    gives up raises :class:`ShardReadError`."""
    last: BaseException | None = None
    while True:
        action = machine.next_action(clock())
        if isinstance(action, Ended):
            return action
        if isinstance(action, Failed):
            _raise_failed(machine, action, last)
        if isinstance(action, Wait):
            await asyncio.sleep(max(action.until - clock(), 0.0))
            continue
        assert isinstance(action, Call)
        try:
            response = await transport.call(action)
        except Exception as exc:
            kind = error_kind(exc)
            if kind is None:
                raise
            if not machine.handles(action, kind):
                raise _wrap(exc, machine, action, where) from exc
            last = exc
            machine.on_error(clock(), action, kind)
            continue
        batch = frontier.new_batch()
        with gc_paused():
            records = machine.on_response(clock(), action, response, batch.ack_record)
        _log_warning(machine)
        # The raw response (one dict per record) must not stay alive while emit blocks: a
        # large live heap makes every full garbage collection slow.
        del response
        if records:
            frontier.add(batch, records, machine.millis_behind_latest)
            try:
                await emit(batch)
            except BaseException:
                # Not handed over (cancelled while the queue was full): nobody can ack it.
                frontier.discard(batch)
                raise
