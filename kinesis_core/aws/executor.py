"""Executors: the one place where a call (:mod:`kinesis_core.aws.calls`) meets the network.

The machines return calls and never send them; the drivers hand each call to an executor:
:class:`AsyncExecutor` on an aiobotocore client (the asyncio consumer, the Faust channel, the
registration of fan-out consumers, the stores), :class:`SyncExecutor` on a botocore client (the
Beam source and the Spark source). Both run an :class:`~kinesis_core.aws.calls.ApiCall` the
same way: every page of it, each page under the caller's retry policy
(:mod:`kinesis_core.aws.retry`: the error table decides what is retried, the backoff how long
to wait; a line is logged for each retry that comes, and an error that ends the retries carries
their history in its ``__notes__``). Without a policy a call is sent once: the shard readers
decide about their own failures. :meth:`AsyncExecutor.shared` and :meth:`SyncExecutor.shared`
let many callers share one answer for a while (the shard readers' looks at their stream:
:mod:`kinesis_core.consumer.links`, which also executes a shard reader's own calls).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import random
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any, Generic, TypeVar, cast

from kinesis_core.aws.calls import LIST_SHARDS_PAGE, ApiCall, ListShards
from kinesis_core.aws.classify import ErrorKind, error_details, error_message
from kinesis_core.aws.client import call_deadline
from kinesis_core.aws.exceptions import error_kind, unreachable
from kinesis_core.aws.lean_get_records import LeanGetRecords
from kinesis_core.aws.lean_get_shard_iterator import LeanGetShardIterator
from kinesis_core.aws.retry import Retry, RetryPolicy
from kinesis_core.errors import ConfigurationError
from kinesis_core.runtime.clock import (
    SYSTEM_BLOCKING_CLOCK,
    SYSTEM_CLOCK,
    BlockingClock,
    Clock,
    SleepingClock,
)
from kinesis_core.shards.info import ShardInfo
from kinesis_core.stream import StreamRef

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

VIEW_MAX_AGE = 1.0
"""Seconds a look at the stream (a listing and its summary) serves every shard reader of an
executor."""
LISTING_MAX_AGE = 15.0
"""Seconds a listing serves the fan-out readers' look-ups of their shards, and a
DescribeStreamConsumer answer their periodic looks at their consumer (half the default
``closed_check_interval``)."""


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
        self.view_max_age = view_max_age
        """Seconds a look at the stream serves every reader (:data:`VIEW_MAX_AGE`)."""
        self.listing_max_age = listing_max_age
        """Seconds a listing, or a look at a stream consumer, serves (:data:`LISTING_MAX_AGE`)."""
        self._shared: dict[Hashable, _Shared[Any]] = {}

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

    async def shared(self, key: Hashable, fetch: Callable[[], Awaitable[_T]], max_age: float) -> _T:
        """``fetch()``'s answer, shared by every caller asking for ``key`` until it is older
        than ``max_age`` seconds (then fetched again, by one of them at a time)."""
        look = self._shared.get(key)
        if look is None:
            look = self._shared[key] = _Shared(fetch, max_age, self.clock)
        answer: _T = await look.get()
        return answer


class SyncExecutor:
    """Executes calls on a botocore Kinesis client (the caller owns it), for a synchronous
    engine. Fan-out readers subscribe through a
    :class:`~kinesis_core.consumer.links.LoopFanOut`: the subscriptions live on the process's
    event-loop thread."""

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
        self.view_max_age = view_max_age
        self.listing_max_age = listing_max_age
        self.loop_timeout = loop_timeout
        """Seconds a step of a fan-out subscription on the event-loop thread may take."""
        self._shared: dict[Hashable, tuple[float, Any]] = {}

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

    def shared(self, key: Hashable, fetch: Callable[[], _T], max_age: float) -> _T:
        """``fetch()``'s answer, shared by every caller asking for ``key`` until it is older
        than ``max_age`` seconds."""
        at, answer = self._shared.get(key, (float("-inf"), None))
        if key not in self._shared or self.clock.now() - at > max_age:
            answer = fetch()
            self._shared[key] = (self.clock.now(), answer)
        return cast("_T", answer)


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
