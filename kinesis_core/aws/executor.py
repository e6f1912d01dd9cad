"""Executors: the one place where a call (:mod:`kinesis_core.aws.calls`) meets the network.

The machines return calls and never send them; the drivers hand each call to an executor:
:class:`AsyncExecutor` on an aiobotocore client (the asyncio consumer, the Faust channel, the
registration of fan-out consumers, the stores), :class:`SyncExecutor` on a botocore client (the
Beam source and the Spark source). Both carry out the same steps (:mod:`kinesis_core.aws.run`
decides them): every page of an :class:`~kinesis_core.aws.calls.ApiCall`, each page under the
caller's retry policy (:mod:`kinesis_core.aws.retry`: the error table decides what is retried,
the backoff how long to wait; a line is logged for each retry that comes, and an error that
ends the retries carries their history in its ``__notes__``). Without a policy a call is sent
once: the shard readers decide about their own failures. :meth:`AsyncExecutor.shared` and
:meth:`SyncExecutor.shared` let many callers share one answer for a while (the shard readers'
looks at their stream: :mod:`kinesis_core.consumer.links`, which also executes a shard
reader's own calls).
"""

from __future__ import annotations

import asyncio
import dataclasses
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
from kinesis_core.aws.run import GIVE_UP, Done, GiveUp, Run, Send, Wait
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


def _failure(error: BaseException) -> str:
    code, _ = error_details(error)
    return f"{code}: {error_message(error)}" if code else error_message(error)


def _fresh(at: float, now: float, max_age: float) -> bool:
    """Whether an answer got at ``at`` still serves at ``now``."""
    return now - at <= max_age


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
            value = self._value
            if value is None or not _fresh(value[0], self._clock.now(), self._max_age):
                value = self._value = (self._clock.now(), await self._fetch())
            return value[1]


class _Executor:
    """What both executors share: the runs they carry out (:class:`~.run.Run`) and the log
    line of each retry that comes."""

    def __init__(
        self,
        client: Any,
        clock: Clock | BlockingClock,
        view_max_age: float,
        listing_max_age: float,
        rng: Callable[[], float],
    ) -> None:
        self.client = client
        self._now = clock.now
        self._rng = rng
        self.view_max_age = view_max_age
        """Seconds a look at the stream serves every reader (:data:`VIEW_MAX_AGE`)."""
        self.listing_max_age = listing_max_age
        """Seconds a listing, or a look at a stream consumer, serves (:data:`LISTING_MAX_AGE`)."""

    def _run(self, call: ApiCall | None, retry: RetryPolicy | Retry | None) -> Run:
        """The run of ``call``'s pages (None: of an operation) under ``retry``."""
        if isinstance(retry, RetryPolicy):
            retry = retry.begin(self._now(), self._rng)
        return Run(None if call is None else call.pages(), retry)

    def _failed(self, run: Run, error: BaseException, what: str) -> Wait | GiveUp:
        """What follows ``error``; a retry that comes is announced in the log."""
        step = run.failed(self._now(), error, error_kind(error), unreachable=unreachable(error))
        if isinstance(step, Wait):
            logger.warning(
                "%s failed (%s); retrying in %.1f s", what, _failure(error), step.seconds
            )
        return step


class AsyncExecutor(_Executor):
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
        super().__init__(client, clock, view_max_age, listing_max_age, rng)
        self.clock = clock
        self.fanout = fanout
        self.lean = LeanGetRecords.of(client) if lean_get_records else None
        self.lean_iterators = LeanGetShardIterator.of(client) if lean_get_records else None
        self.call_deadline = call_deadline(client)
        """Seconds a polling reader's call may take in all (:func:`~.client.call_deadline`);
        past it, it fails with asyncio.TimeoutError, a transient error."""
        self._shared: dict[Hashable, _Shared[Any]] = {}

    async def execute(self, call: ApiCall, retry: RetryPolicy | Retry | None = None) -> Any:
        """The answer to ``call`` (every page of it), each request under ``retry`` (once
        without)."""
        method = getattr(self.client, call.operation)
        return await self._drive(self._run(call, retry), lambda kwargs: method(**kwargs), call.what)

    async def attempt(
        self, operation: Callable[[], Awaitable[_T]], retry: RetryPolicy | Retry, what: str
    ) -> _T:
        """Run ``operation`` (several calls, a store's write) until it succeeds or ``retry``
        gives up; ``what`` names it in the log."""
        answer: _T = await self._drive(self._run(None, retry), lambda _: operation(), what)
        return answer

    async def _drive(
        self, run: Run, send: Callable[[Mapping[str, Any]], Awaitable[Any]], what: str
    ) -> Any:
        step: Send | Wait | GiveUp | Done = run.start()
        while not isinstance(step, Done):
            if isinstance(step, Wait):
                await self.clock.sleep(step.seconds)
                step = run.waited()
                continue
            assert isinstance(step, Send)
            try:
                answer = await send(step.kwargs)
            except Exception as exc:
                step = self._failed(run, exc, what)
                if step is GIVE_UP:
                    raise
            else:
                step = run.answered(answer)
        return step.value

    async def shared(self, key: Hashable, fetch: Callable[[], Awaitable[_T]], max_age: float) -> _T:
        """``fetch()``'s answer, shared by every caller asking for ``key`` until it is older
        than ``max_age`` seconds (then fetched again, by one of them at a time)."""
        look = self._shared.get(key)
        if look is None:
            look = self._shared[key] = _Shared(fetch, max_age, self.clock)
        answer: _T = await look.get()
        return answer


class SyncExecutor(_Executor):
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
        super().__init__(client, clock, view_max_age, listing_max_age, rng)
        self.clock = clock
        self.loop_timeout = loop_timeout
        """Seconds a step of a fan-out subscription on the event-loop thread may take."""
        self._shared: dict[Hashable, tuple[float, Any]] = {}

    def execute(self, call: ApiCall, retry: RetryPolicy | Retry | None = None) -> Any:
        """The answer to ``call`` (every page of it), each request under ``retry`` (once
        without)."""
        method = getattr(self.client, call.operation)
        return self._drive(self._run(call, retry), lambda kwargs: method(**kwargs), call.what)

    def attempt(self, operation: Callable[[], _T], retry: RetryPolicy | Retry, what: str) -> _T:
        """Run ``operation`` (a local store's step, say) until it succeeds or ``retry`` gives
        up; ``what`` names it in the log."""
        answer: _T = self._drive(self._run(None, retry), lambda _: operation(), what)
        return answer

    def _drive(self, run: Run, send: Callable[[Mapping[str, Any]], Any], what: str) -> Any:
        step: Send | Wait | GiveUp | Done = run.start()
        while not isinstance(step, Done):
            if isinstance(step, Wait):
                self.clock.sleep(step.seconds)
                step = run.waited()
                continue
            assert isinstance(step, Send)
            try:
                answer = send(step.kwargs)
            except Exception as exc:
                step = self._failed(run, exc, what)
                if step is GIVE_UP:
                    raise
            else:
                step = run.answered(answer)
        return step.value

    def shared(self, key: Hashable, fetch: Callable[[], _T], max_age: float) -> _T:
        """``fetch()``'s answer, shared by every caller asking for ``key`` until it is older
        than ``max_age`` seconds."""
        value = self._shared.get(key)
        if value is None or not _fresh(value[0], self.clock.now(), max_age):
            value = self._shared[key] = (self.clock.now(), fetch())
        return cast("_T", value[1])


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
