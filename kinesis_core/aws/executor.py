"""Executors: the one place where a call (:mod:`kinesis_core.aws.calls`) meets the network.

The machines return calls and never send them; the drivers hand each call to an executor:
:class:`AsyncExecutor` on an aiobotocore client (the asyncio consumer, the Faust channel, the
registration of fan-out consumers), :class:`SyncExecutor` on a botocore client (the Beam
source, whose fan-out subscriptions live on the process's event-loop thread). Both run an
:class:`~kinesis_core.aws.calls.ApiCall` the same way: every page of it, each page under the
caller's retry policy (:mod:`kinesis_core.aws.retry`: the error table decides what is retried,
the backoff how long to wait; a line is logged for each retry that comes, and an error that
ends the retries carries their history in its ``__notes__``). Without a policy a call is sent
once: the shard readers decide about their own failures.

A shard reader's calls name no stream or shard: a link (:meth:`AsyncExecutor.link`,
:meth:`SyncExecutor.link`) executes them for one shard. Links of one executor share two looks
at the stream: the answer to :class:`~.consumer.transport.CheckStream` (a listing and the
stream's creation time, one for every reader for ``view_max_age`` seconds: when many shards
meet a refusal at once, one look answers them all) and the listing that tells a fan-out
reader its shard closed (:class:`~.consumer.subscription.CheckShard`, ``listing_max_age``);
the fan-out readers' periodic looks at their stream consumer
(:class:`~.consumer.subscription.CheckConsumer` ``shared``) share one answer the same way.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import logging
import random
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from kinesis_core.aws.calls import (
    LIST_SHARDS_PAGE,
    ApiCall,
    Call,
    DescribeStreamConsumer,
    DescribeStreamSummary,
    ListShards,
)
from kinesis_core.aws.classify import ErrorKind, error_details, error_message
from kinesis_core.aws.client import call_deadline, error_kind, unreachable
from kinesis_core.aws.lean_get_records import LeanGetRecords
from kinesis_core.aws.lean_get_shard_iterator import LeanGetShardIterator
from kinesis_core.aws.retry import Retry, RetryPolicy
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
from kinesis_core.errors import ConfigurationError
from kinesis_core.fanout.registration import parse_consumer_arn
from kinesis_core.runtime.clock import (
    SYSTEM_BLOCKING_CLOCK,
    SYSTEM_CLOCK,
    BlockingClock,
    Clock,
    SleepingClock,
)
from kinesis_core.runtime.timeouts import within
from kinesis_core.shards.info import ShardInfo
from kinesis_core.stream import StreamRef

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

VIEW_MAX_AGE = 1.0
"""Seconds a :class:`~.consumer.transport.StreamView` serves every reader of an executor."""
LISTING_MAX_AGE = 15.0
"""Seconds a listing serves the fan-out readers' look-ups of their shards, and a
DescribeStreamConsumer answer their periodic looks at their consumer (half the default
``closed_check_interval``)."""


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


def _keep_history(error: BaseException, retry: Retry) -> None:
    """The attempts before ``error`` go with it (``__notes__``, shown by tracebacks and kept in
    :meth:`KinesisServiceError.wrap`'s message) when there were any before it."""
    if len(retry.attempts) > 1:
        notes = list(getattr(error, "__notes__", ()))
        error.__notes__ = [*notes, f"retried: {retry.history()}"]  # type: ignore[attr-defined]


def _failure(error: BaseException) -> str:
    code, _ = error_details(error)
    return f"{code}: {error_message(error)}" if code else error_message(error)


def _next_wait(retry: Retry | None, error: BaseException, now: float, what: str) -> float | None:
    """The wait before the next attempt after ``error`` (announced in the log), or None: raise
    it, with the history of the attempts before it."""
    if retry is None:
        return None
    delay = retry.failed(now, error, error_kind(error), unreachable=unreachable(error))
    if delay is None:
        _keep_history(error, retry)
    else:
        logger.warning("%s failed (%s); retrying in %.1f s", what, _failure(error), delay)
    return delay


def _begin(retry: RetryPolicy | Retry | None, now: float, rng: Callable[[], float]) -> Retry | None:
    if isinstance(retry, RetryPolicy):
        return retry.begin(now, rng)
    return retry


class _Shared(Generic[_T]):
    """One answer to ``fetch()`` shared by many callers, fetched again (by one of them at a
    time) once it is older than ``max_age`` seconds."""

    def __init__(self, fetch: Callable[[], Awaitable[_T]], max_age: float, clock: Clock) -> None:
        self._fetch = fetch
        self._max_age = max_age
        self._clock = clock
        self._value: tuple[float, _T] | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> _T:
        async with self._lock:
            if self._value is None or self._clock.now() - self._value[0] > self._max_age:
                value = await self._fetch()
                self._value = (self._clock.now(), value)
            return self._value[1]


class AsyncExecutor:
    """Executes calls on an aiobotocore Kinesis client (the caller owns it), waiting on
    ``clock``. ``fanout`` (a :class:`~kinesis_core.fanout.FanOutClient`) opens the
    subscriptions of fan-out readers. With ``lean_get_records`` the polling readers' GetRecords
    and GetShardIterator skip botocore's per-call machinery
    (:mod:`kinesis_core.aws.lean_get_records`, :mod:`kinesis_core.aws.lean_get_shard_iterator`)."""

    def __init__(
        self,
        client: Any,
        *,
        clock: Clock = SYSTEM_CLOCK,
        fanout: Any = None,
        view_max_age: float = VIEW_MAX_AGE,
        listing_max_age: float = LISTING_MAX_AGE,
        rng: Callable[[], float] = random.random,
        lean_get_records: bool = False,
    ) -> None:
        self.client = client
        self.clock = clock
        self.fanout = fanout
        self.lean = LeanGetRecords.of(client) if lean_get_records else None
        self.lean_iterators = LeanGetShardIterator.of(client) if lean_get_records else None
        self.call_deadline = call_deadline(client)
        """Seconds a polling reader's call may take in all (:func:`~.client.call_deadline`);
        past it, it fails with asyncio.TimeoutError, a transient error."""
        self._rng = rng
        self._view_max_age = view_max_age
        self._listing_max_age = listing_max_age
        self._views: dict[StreamRef, _Shared[StreamView]] = {}
        self._listings: dict[StreamRef, _Shared[list[ShardInfo]]] = {}
        self._consumer_looks: dict[str, _Shared[ConsumerCheck]] = {}

    async def execute(self, call: ApiCall, retry: RetryPolicy | Retry | None = None) -> Any:
        """The answer to ``call`` (every page of it), each request under ``retry`` (once
        without)."""
        run = _begin(retry, self.clock.now(), self._rng)
        method = getattr(self.client, call.operation)
        pages = call.pages()
        kwargs = next(pages)
        while True:
            response = await self._send(functools.partial(method, **kwargs), run, call.what)
            try:
                kwargs = pages.send(response)
            except StopIteration as done:
                return done.value

    async def attempt(
        self, operation: Callable[[], Awaitable[_T]], retry: RetryPolicy | Retry, what: str
    ) -> _T:
        """Run ``operation`` (several calls, a store's write) until it succeeds or ``retry``
        gives up; ``what`` names it in the log."""
        return await self._send(operation, _begin(retry, self.clock.now(), self._rng), what)

    async def _send(self, send: Callable[[], Awaitable[_T]], retry: Retry | None, what: str) -> _T:
        while True:
            try:
                result = await send()
            except Exception as exc:
                delay = _next_wait(retry, exc, self.clock.now(), what)
                if delay is None:
                    raise
                await self.clock.sleep(delay)
                continue
            if retry is not None:
                retry.succeeded()
            return result

    async def stream_view(self, stream: StreamRef) -> StreamView:
        """The answer to :class:`~.consumer.transport.CheckStream`, shared for
        ``view_max_age`` seconds."""
        shared = self._views.get(stream)
        if shared is None:

            async def look() -> StreamView:
                shards = await self.execute(ListShards(stream))
                return stream_view(shards, await self.execute(DescribeStreamSummary(stream)))

            shared = self._views[stream] = _Shared(look, self._view_max_age, self.clock)
        return await shared.get()

    async def shard_check(self, stream: StreamRef, shard_id: str) -> ShardCheck:
        """What a listing at most ``listing_max_age`` seconds old says of ``shard_id``."""
        shared = self._listings.get(stream)
        if shared is None:
            shared = self._listings[stream] = _Shared(
                functools.partial(self.execute, ListShards(stream)),
                self._listing_max_age,
                self.clock,
            )
        return shard_check(await shared.get(), shard_id)

    async def consumer_check(self, consumer_arn: str, *, shared: bool = False) -> ConsumerCheck:
        """DescribeStreamConsumer, as a fan-out reader's machine takes it: its status, or
        None when it is not found; other errors raise. ``shared``: an answer at most
        ``listing_max_age`` seconds old serves."""
        if shared:
            look = self._consumer_looks.get(consumer_arn)
            if look is None:
                look = self._consumer_looks[consumer_arn] = _Shared(
                    functools.partial(self.consumer_check, consumer_arn),
                    self._listing_max_age,
                    self.clock,
                )
            return await look.get()
        try:
            description = await self.execute(DescribeStreamConsumer(consumer_arn))
        except Exception as exc:
            if error_kind(exc) is not ErrorKind.NOT_FOUND:
                raise
            description = None
        return consumer_check(consumer_arn, description)

    def link(
        self, stream: StreamRef, shard_id: str, consumer_arn: str | None = None
    ) -> AsyncShardLink:
        """Executes the calls of one shard's reader (``consumer_arn``: its subscriptions')."""
        return AsyncShardLink(self, stream, shard_id, consumer_arn)


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
            return await self._executor.stream_view(self._stream)
        if isinstance(call, Subscribe):
            await self.aclose()
            self._subscription = await self._executor.fanout.subscribe(
                self._arn(), self._shard_id, call.starting_position
            )
            return self._subscription
        if isinstance(call, CheckShard):
            return await self._executor.shard_check(self._stream, self._shard_id)
        if isinstance(call, CheckConsumer):
            return await self._executor.consumer_check(self._arn(), shared=call.shared)
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


class SyncExecutor:
    """Executes calls on a botocore Kinesis client (the caller owns it), for a synchronous
    engine. Fan-out readers subscribe through a :class:`LoopFanOut`: the subscriptions live on
    the process's event-loop thread."""

    def __init__(
        self,
        client: Any,
        *,
        clock: BlockingClock = SYSTEM_BLOCKING_CLOCK,
        view_max_age: float = VIEW_MAX_AGE,
        listing_max_age: float = LISTING_MAX_AGE,
        rng: Callable[[], float] = random.random,
        loop_timeout: float = 60.0,
    ) -> None:
        self.client = client
        self.clock = clock
        self._rng = rng
        self._view_max_age = view_max_age
        self._listing_max_age = listing_max_age
        self._views: dict[StreamRef, tuple[float, StreamView]] = {}
        self._listings: dict[StreamRef, tuple[float, list[ShardInfo]]] = {}
        self._consumer_looks: dict[str, tuple[float, ConsumerCheck]] = {}
        self._loop_timeout = loop_timeout

    def execute(self, call: ApiCall, retry: RetryPolicy | Retry | None = None) -> Any:
        """The answer to ``call`` (every page of it), each request under ``retry`` (once
        without)."""
        run = _begin(retry, self.clock.now(), self._rng)
        method = getattr(self.client, call.operation)
        pages = call.pages()
        kwargs = next(pages)
        while True:
            response = self._send(functools.partial(method, **kwargs), run, call.what)
            try:
                kwargs = pages.send(response)
            except StopIteration as done:
                return done.value

    def attempt(self, operation: Callable[[], _T], retry: RetryPolicy | Retry, what: str) -> _T:
        """Run ``operation`` (a local store's step, say) until it succeeds or ``retry`` gives
        up; ``what`` names it in the log."""
        return self._send(operation, _begin(retry, self.clock.now(), self._rng), what)

    def _send(self, send: Callable[[], _T], retry: Retry | None, what: str) -> _T:
        while True:
            try:
                result = send()
            except Exception as exc:
                delay = _next_wait(retry, exc, self.clock.now(), what)
                if delay is None:
                    raise
                self.clock.sleep(delay)
                continue
            if retry is not None:
                retry.succeeded()
            return result

    def stream_view(self, stream: StreamRef) -> StreamView:
        """The answer to :class:`~.consumer.transport.CheckStream`, shared for
        ``view_max_age`` seconds."""
        at, view = self._views.get(stream, (float("-inf"), None))
        if view is None or self.clock.now() - at > self._view_max_age:
            shards = self.execute(ListShards(stream))
            view = stream_view(shards, self.execute(DescribeStreamSummary(stream)))
            self._views[stream] = (self.clock.now(), view)
        return view

    def shard_check(self, stream: StreamRef, shard_id: str) -> ShardCheck:
        """What a listing at most ``listing_max_age`` seconds old says of ``shard_id``."""
        at, shards = self._listings.get(stream, (float("-inf"), []))
        if self.clock.now() - at > self._listing_max_age:
            shards = self.execute(ListShards(stream))
            self._listings[stream] = (self.clock.now(), shards)
        return shard_check(shards, shard_id)

    def consumer_check(self, consumer_arn: str, *, shared: bool = False) -> ConsumerCheck:
        """DescribeStreamConsumer, as a fan-out reader's machine takes it. ``shared``: an
        answer at most ``listing_max_age`` seconds old serves."""
        if shared:
            at, check = self._consumer_looks.get(consumer_arn, (float("-inf"), None))
            if check is None or self.clock.now() - at > self._listing_max_age:
                check = self.consumer_check(consumer_arn)
                self._consumer_looks[consumer_arn] = (self.clock.now(), check)
            return check
        try:
            description = self.execute(DescribeStreamConsumer(consumer_arn))
        except Exception as exc:
            if error_kind(exc) is not ErrorKind.NOT_FOUND:
                raise
            description = None
        return consumer_check(consumer_arn, description)

    def link(
        self,
        stream: StreamRef,
        shard_id: str,
        fan_out: LoopFanOut | None = None,
        *,
        wake: threading.Event | None = None,
        prefetch: int = 2,
    ) -> SyncShardLink:
        """Executes the calls of one shard's reader; a fan-out reader's subscriptions
        (``fan_out``) read up to ``prefetch`` events ahead on the event-loop thread and set
        ``wake`` whenever one lands."""
        subscriber = None
        if fan_out is not None:
            subscriber = _Subscriber(fan_out, shard_id, wake, prefetch, self._loop_timeout)
        return SyncShardLink(self, stream, shard_id, fan_out, subscriber)


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
            return self._executor.stream_view(self._stream)
        if isinstance(call, Subscribe):
            return self._subscribing().subscribe(call.starting_position)
        if isinstance(call, CheckShard):
            return self._executor.shard_check(self._stream, self._shard_id)
        if isinstance(call, CheckConsumer) and self._fan_out is not None:
            return self._executor.consumer_check(self._fan_out.consumer_arn, shared=call.shared)
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


class _ListShardsClient:
    """A ``list_shards`` callable, as a client an executor takes."""

    def __init__(self, list_shards: Callable[..., Awaitable[Mapping[str, Any]]]) -> None:
        self.list_shards = list_shards


LISTING_RETRY = RetryPolicy(
    base=0.2, cap=2.0, attempts=5, retry_on=frozenset({ErrorKind.THROTTLED})
)
"""A page of a listing is sent again when the service throttles it (LimitExceeded: ListShards
allows 1000 calls/s per account, 100 per stream and second), up to five times."""


async def list_all_shards(
    client: object,
    stream: str | StreamRef,
    shard_filter: Mapping[str, Any] | None = None,
    *,
    page_size: int = LIST_SHARDS_PAGE,
    max_attempts: int = 5,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    rng: Callable[[], float] = random.random,
) -> list[ShardInfo]:
    """Every shard ListShards returns, following NextToken.

    ``client`` is an aiobotocore Kinesis client or a ``list_shards``-like async callable.
    ``stream`` is a name, an ARN or a :class:`StreamRef`. A page the service throttles is
    sent again (:data:`LISTING_RETRY`: up to ``max_attempts`` times, waiting on ``sleep``);
    other errors raise.
    """
    if not hasattr(client, "list_shards"):
        if not callable(client):
            raise TypeError(f"need a Kinesis client or a list_shards callable, got {client!r}")
        client = _ListShardsClient(client)
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ConfigurationError("max_attempts", f"must be an int >= 1, got {max_attempts!r}")
    policy = dataclasses.replace(LISTING_RETRY, attempts=max_attempts)
    executor = AsyncExecutor(client, clock=SleepingClock(sleep), rng=rng)
    call = ListShards(StreamRef.of(stream), shard_filter, page_size)
    shards: list[ShardInfo] = await executor.execute(call, policy)
    return shards
