"""A shard reader's link to an executor: it carries out the calls of one shard's reading
machine (:mod:`.transport`, :mod:`.polling`, :mod:`.subscription`): the polling calls
(GetRecords and GetShardIterator, lean or through botocore), a fan-out reader's subscriptions,
and the looks at the stream, at the shard and at the stream consumer, which every link of one
executor shares for a while (:meth:`AsyncExecutor.shared
<kinesis_core.aws.executor.AsyncExecutor.shared>`: when many shards meet a refusal at once, one
look answers them all).

:func:`async_link` makes the links of the asyncio consumer, :func:`sync_link` those of the
synchronous engines (Beam, Spark), whose fan-out subscriptions live on the process's
event-loop thread (:class:`LoopFanOut`).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import threading
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from kinesis_core.aws.calls import (
    ApiCall,
    Call,
    DescribeStreamConsumer,
    DescribeStreamSummary,
    ListShards,
)
from kinesis_core.aws.classify import ErrorKind
from kinesis_core.aws.exceptions import error_kind
from kinesis_core.aws.executor import AsyncExecutor, SyncExecutor
from kinesis_core.aws.lean_get_records import LeanGetRecords
from kinesis_core.aws.lean_get_shard_iterator import LeanGetShardIterator
from kinesis_core.consumer.incarnation import StreamFacts
from kinesis_core.consumer.lineage import ShardNode
from kinesis_core.consumer.polling import GetIterator, GetRecords
from kinesis_core.consumer.subscription import (
    CheckConsumer,
    CheckShard,
    ConsumerCheck,
    NextEvent,
    ShardCheck,
    Subscribe,
)
from kinesis_core.consumer.transport import CheckStream, StreamView
from kinesis_core.fanout.registration import parse_consumer_arn
from kinesis_core.runtime.timeouts import within
from kinesis_core.shards.info import ShardInfo
from kinesis_core.stream import StreamRef

_T = TypeVar("_T")


def shard_check(shards: list[ShardInfo], shard_id: str) -> ShardCheck:
    """What a complete listing says of ``shard_id``."""
    info = next((s for s in shards if s.shard_id == shard_id), None)
    if info is None:
        return ShardCheck(listed=False, closed=False)
    children = ShardNode.children_of(shard_id, shards)
    return ShardCheck(listed=True, closed=not info.is_open, children=children)


def consumer_check(consumer_arn: str, description: Mapping[str, Any] | None) -> ConsumerCheck:
    """A fan-out reader's look at its stream consumer: DescribeStreamConsumer's description,
    or None when the consumer was not found."""
    parsed = parse_consumer_arn(consumer_arn)
    status = None if description is None else description["ConsumerStatus"]
    return ConsumerCheck(consumer_arn, parsed.consumer_name, parsed.stream_name, status)


def records_params(stream: StreamRef) -> dict[str, str]:
    """GetRecords names no stream (the iterator does), but passes its ``StreamId`` on."""
    return {} if stream.stream_id is None else {"StreamId": stream.stream_id}


def stream_view(shards: list[ShardInfo], summary: Mapping[str, Any]) -> StreamView:
    return StreamView(shards, StreamFacts.from_response(summary))


def _not_found(consumer_arn: str, error: Exception) -> ConsumerCheck:
    """A failed DescribeStreamConsumer as a look: the consumer is gone if it was not found;
    any other error raises."""
    if error_kind(error) is not ErrorKind.NOT_FOUND:
        raise error
    return consumer_check(consumer_arn, None)


@dataclass(frozen=True)
class Look(Generic[_T]):
    """A look at the stream, its shards or a stream consumer: the ``calls`` it makes, in
    turn, and its ``answer`` from theirs; ``failed``, if given, is its answer when a call
    fails (else the failure raises). With a ``key`` the links of one executor share it for
    ``max_age`` seconds (:meth:`AsyncExecutor.shared
    <kinesis_core.aws.executor.AsyncExecutor.shared>`)."""

    calls: tuple[ApiCall, ...]
    answer: Callable[..., _T]
    key: Hashable | None = None
    max_age: float = 0.0
    failed: Callable[[Exception], _T] | None = None

    def failure(self, error: Exception) -> _T:
        """The answer when a call failed with ``error``; without ``failed``, ``error`` raises."""
        if self.failed is None:
            raise error
        return self.failed(error)


def stream_look(executor: AsyncExecutor | SyncExecutor, stream: StreamRef) -> Look[StreamView]:
    """:class:`~.transport.CheckStream`'s answer: a listing and the stream's summary, shared
    for ``view_max_age`` seconds."""
    calls = (ListShards(stream), DescribeStreamSummary(stream))
    return Look(calls, stream_view, ("view", stream), executor.view_max_age)


def listing_look(
    executor: AsyncExecutor | SyncExecutor, stream: StreamRef
) -> Look[list[ShardInfo]]:
    """A listing of the stream, shared for ``listing_max_age`` seconds (a shard's look,
    :func:`shard_check`, reads it)."""
    return Look((ListShards(stream),), _listing, ("listing", stream), executor.listing_max_age)


def _listing(shards: list[ShardInfo]) -> list[ShardInfo]:
    return shards


def consumer_look(
    executor: AsyncExecutor | SyncExecutor, consumer_arn: str, *, shared: bool = False
) -> Look[ConsumerCheck]:
    """DescribeStreamConsumer, as a fan-out reader's machine takes it: its status, or None
    when it is not found; other errors raise. ``shared``: an answer at most
    ``listing_max_age`` seconds old serves."""
    return Look(
        (DescribeStreamConsumer(consumer_arn),),
        functools.partial(consumer_check, consumer_arn),
        ("consumer", consumer_arn) if shared else None,
        executor.listing_max_age,
        functools.partial(_not_found, consumer_arn),
    )


async def take_look(executor: AsyncExecutor, look: Look[_T]) -> _T:
    """``look``'s answer, from its calls on ``executor`` or shared."""

    async def fetch() -> _T:
        try:
            answers = [await executor.execute(call) for call in look.calls]
        except Exception as exc:
            return look.failure(exc)
        return look.answer(*answers)

    if look.key is None:
        return await fetch()
    return await executor.shared(look.key, fetch, look.max_age)


def take_look_sync(executor: SyncExecutor, look: Look[_T]) -> _T:
    """:func:`take_look` on a synchronous executor."""

    def fetch() -> _T:
        try:
            answers = [executor.execute(call) for call in look.calls]
        except Exception as exc:
            return look.failure(exc)
        return look.answer(*answers)

    if look.key is None:
        return fetch()
    return executor.shared(look.key, fetch, look.max_age)


def async_link(
    executor: AsyncExecutor, stream: StreamRef, shard_id: str, consumer_arn: str | None = None
) -> AsyncShardLink:
    """Executes the calls of one shard's reader (``consumer_arn``: its subscriptions')."""
    return AsyncShardLink(executor, stream, shard_id, consumer_arn)


def sync_link(
    executor: SyncExecutor,
    stream: StreamRef,
    shard_id: str,
    fan_out: LoopFanOut | None = None,
    *,
    wake: threading.Event | None = None,
    prefetch: int = 2,
) -> SyncShardLink:
    """Executes the calls of one shard's reader on a synchronous executor; a fan-out reader's
    subscriptions (``fan_out``) read up to ``prefetch`` events ahead on the event-loop thread
    and set ``wake`` whenever one lands."""
    subscriber = None
    if fan_out is not None:
        subscriber = _Subscriber(fan_out, shard_id, wake, prefetch, executor.loop_timeout)
    return SyncShardLink(executor, stream, shard_id, fan_out, subscriber)


class AsyncLink(Protocol):
    """What a driver hands a shard reader's calls to, on an event loop."""

    async def call(self, call: Call) -> Any:
        """The response of ``call``; raises what the service or the network raised."""
        ...

    async def aclose(self) -> None: ...


class _ShardRequests:
    """The client calls of one shard's polling reader: GetRecords (with the stream's
    ``StreamId``, if any) and GetShardIterator (naming the stream and the shard)."""

    __slots__ = (
        "_client",
        "_lean",
        "_lean_iterators",
        "_records_params",
        "_shard_id",
        "_stream_params",
    )

    def __init__(
        self,
        client: Any,
        stream: StreamRef,
        shard_id: str,
        lean: LeanGetRecords | None = None,
        lean_iterators: LeanGetShardIterator | None = None,
    ) -> None:
        self._client = client
        self._lean = lean
        self._lean_iterators = lean_iterators
        self._stream_params = stream.params()
        self._records_params = records_params(stream)
        self._shard_id = shard_id

    def send(self, call: Call) -> Any:
        """The client's answer (or its awaitable) to a polling call; None for another call."""
        if isinstance(call, GetRecords):
            if self._lean is not None:
                return self._lean.get_records(call.iterator, call.limit, self._records_params)
            return self._client.get_records(
                ShardIterator=call.iterator, Limit=call.limit, **self._records_params
            )
        if isinstance(call, GetIterator):
            params = {**self._stream_params, "ShardId": self._shard_id, **call.params}
            if self._lean_iterators is not None:
                return self._lean_iterators.get_shard_iterator(params)
            return self._client.get_shard_iterator(**params)
        return None


class AsyncShardLink:
    """One shard's link to an :class:`AsyncExecutor`: polling calls, the looks at the stream,
    and at most one open subscription at a time (closed on every error, at its end, and by
    :meth:`aclose`)."""

    def __init__(
        self, executor: AsyncExecutor, stream: StreamRef, shard_id: str, consumer_arn: str | None
    ) -> None:
        self._executor = executor
        self._requests = _ShardRequests(
            executor.client, stream, shard_id, executor.lean, executor.lean_iterators
        )
        self._stream = stream
        self._shard_id = shard_id
        self._consumer_arn = consumer_arn
        self._subscription: Any = None

    async def call(self, call: Call) -> Any:
        polled = self._requests.send(call)
        if polled is not None:
            deadline = self._executor.call_deadline
            if deadline is None:
                return await polled
            async with within(deadline):
                return await polled
        if isinstance(call, NextEvent):
            return await self._next_event()
        if isinstance(call, CheckStream):
            return await take_look(self._executor, stream_look(self._executor, self._stream))
        if isinstance(call, Subscribe):
            await self.aclose()
            self._subscription = await self._executor.fanout.subscribe(
                self._arn(), self._shard_id, call.starting_position
            )
            return self._subscription
        if isinstance(call, CheckShard):
            shards = await take_look(self._executor, listing_look(self._executor, self._stream))
            return shard_check(shards, self._shard_id)
        if isinstance(call, CheckConsumer):
            check = consumer_look(self._executor, self._arn(), shared=call.shared)
            return await take_look(self._executor, check)
        raise TypeError(f"a shard reader's link cannot execute {call!r}")

    async def _next_event(self) -> Any:
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

    def _arn(self) -> str:
        if self._consumer_arn is None:
            raise TypeError("a polling reader's link has no stream consumer to subscribe as")
        return self._consumer_arn

    async def aclose(self) -> None:
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            await subscription.aclose()


class _Pending:
    __slots__ = ()

    def __repr__(self) -> str:
        return "PENDING"


PENDING: Any = _Pending()
"""A synchronous link's answer to :class:`~.consumer.subscription.NextEvent` when no event is
waiting yet (it never blocks): the driver looks again shortly, and the machine never sees it."""


@dataclass(frozen=True)
class LoopFanOut:
    """Fan-out for synchronous links: a :class:`~kinesis_core.fanout.FanOutClient` (``client``)
    living on an event-loop thread (``loop``, a
    :class:`~kinesis_core.runtime.loop_thread.LoopThread`), and the stream consumer its
    subscriptions are made as (:func:`kinesis_core.fanout.consumers.open_fan_out_on_loop` opens
    one)."""

    loop: Any
    client: Any
    consumer_arn: str


class SyncLink(Protocol):
    """What a synchronous driver hands a shard reader's calls to."""

    def call(self, call: Call) -> Any: ...

    def close(self) -> None: ...


class SyncShardLink:
    """One shard's link to a :class:`SyncExecutor`. ``call(NextEvent())`` never blocks: it
    returns the next event, None when the subscription ended, or :data:`PENDING`."""

    def __init__(
        self,
        executor: SyncExecutor,
        stream: StreamRef,
        shard_id: str,
        fan_out: LoopFanOut | None,
        subscriber: _Subscriber | None,
    ) -> None:
        self._executor = executor
        self._requests = _ShardRequests(executor.client, stream, shard_id)
        self._stream = stream
        self._shard_id = shard_id
        self._fan_out = fan_out
        self._subscriber = subscriber

    def call(self, call: Call) -> Any:
        polled = self._requests.send(call)
        if polled is not None:
            return polled
        if isinstance(call, NextEvent):
            return self._subscribing().next_event()
        if isinstance(call, CheckStream):
            return take_look_sync(self._executor, stream_look(self._executor, self._stream))
        if isinstance(call, Subscribe):
            return self._subscribing().subscribe(call.starting_position)
        if isinstance(call, CheckShard):
            shards = take_look_sync(self._executor, listing_look(self._executor, self._stream))
            return shard_check(shards, self._shard_id)
        if isinstance(call, CheckConsumer) and self._fan_out is not None:
            check = consumer_look(self._executor, self._fan_out.consumer_arn, shared=call.shared)
            return take_look_sync(self._executor, check)
        raise TypeError(f"a shard reader's link cannot execute {call!r}")

    def _subscribing(self) -> _Subscriber:
        if self._subscriber is None:
            raise TypeError("a polling reader's link has no stream consumer to subscribe as")
        return self._subscriber

    def close(self) -> None:
        """Close the subscription, if one is open (events not taken are dropped: the next
        subscription starts after the last one taken)."""
        if self._subscriber is not None:
            self._subscriber.close()


class _Raised:
    """An error the prefetch task met, handed to the synchronous side to raise."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Subscriber:
    """A subscription on the event-loop thread, where a task reads up to ``prefetch`` events
    ahead (the backpressure: HTTP/2 flow control stops the server beyond it); ``wake`` is set
    whenever an event lands, so the engine's wait ends early. It outlives calls and bundles
    until :meth:`close`."""

    def __init__(
        self,
        fan_out: LoopFanOut,
        shard_id: str,
        wake: threading.Event | None,
        prefetch: int,
        timeout: float,
    ) -> None:
        self._loop = fan_out.loop
        self._fanout = fan_out.client
        self._consumer_arn = fan_out.consumer_arn
        self._shard_id = shard_id
        self._wake = wake or threading.Event()
        self._prefetch = prefetch
        self._timeout = timeout
        self._items: collections.deque[Any] = collections.deque()
        self._pump: asyncio.Task[None] | None = None
        self._room: asyncio.Semaphore | None = None

    def next_event(self) -> Any:
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

    def subscribe(self, starting_position: dict[str, Any]) -> Any:
        self.close()
        self._loop.run(self._open(starting_position), self._timeout)
        return self._pump

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
        pump, self._pump, self._room = self._pump, None, None
        self._items.clear()
        if pump is not None:
            self._loop.run(_cancel(pump), self._timeout)


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
