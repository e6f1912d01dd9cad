"""The asyncio driver of a :class:`~kinesis_core.shards.shard_map.ShardMap`: its ListShards
refreshes in a background task, and the stream's maximum record size (DescribeStreamSummary).

:class:`ShardMapDriver` runs the refreshes against an injected ``list_shards_fn`` (in
production ``client.list_shards`` of an aiobotocore client; in tests a fake), through
:func:`~kinesis_core.aws.executor.list_all_shards` (every page, a throttled page sent again), and
with a ``describe_fn`` learns the stream's maximum record size at every refresh and on demand.
A failed refresh is retried through the executor
(:meth:`~kinesis_core.aws.executor.AsyncExecutor.attempt`) under :func:`refresh_policy`, on the
driver's clock; the policy of the refreshes a waiting start waits for also says when that start
gives up. The map only keeps the state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any

from kinesis_core.aws.backoff import Jitter
from kinesis_core.aws.classify import ErrorKind, classify, error_details, error_message
from kinesis_core.aws.executor import AsyncExecutor, list_all_shards
from kinesis_core.aws.retry import RetryPolicy
from kinesis_core.errors import ConfigurationError, KinesisConnectorError
from kinesis_core.runtime.clock import Clock, SleepingClock, time_of
from kinesis_core.runtime.timeouts import within
from kinesis_core.shards.info import AT_LATEST, AT_TRIM_HORIZON, ShardInfo
from kinesis_core.shards.record_size import RecordSizeLimit
from kinesis_core.shards.shard_map import ShardMap, ShardMapState
from kinesis_core.stream import StreamRef

logger = logging.getLogger(__name__)

_NO_CLIENT = object()
"""The refresh executor only runs :meth:`AsyncExecutor.attempt`: it calls no client."""

ListShardsFn = Callable[..., Awaitable[Mapping[str, Any]]]
"""``await fn(**ListShards kwargs)`` returns the ListShards response dict."""
DescribeFn = Callable[..., Awaitable[Mapping[str, Any]]]
"""``await fn(**DescribeStreamSummary kwargs)`` returns the DescribeStreamSummary response."""
Sleep = Callable[[float], Awaitable[object]]


def refresh_policy(
    min_backoff: float,
    max_backoff: float,
    give_up: Callable[[BaseException, int], bool] | None = None,
) -> RetryPolicy:
    """How a failed refresh is tried again: every failure, without end (the producer cannot
    predict shards until one works) unless ``give_up(error, attempts)`` says to stop (a
    waiting start's rule), waiting ``min_backoff`` seconds doubling to ``max_backoff``, back to
    ``min_backoff`` for the next refresh. No jitter (see :func:`_top`): one producer refreshes
    its map alone."""
    if not 0 < min_backoff <= max_backoff:
        raise ConfigurationError(
            "min_backoff",
            f"need 0 < min_backoff <= max_backoff, got {min_backoff}, {max_backoff}",
        )
    return RetryPolicy(
        base=min_backoff,
        cap=max_backoff,
        jitter=Jitter.EQUAL,
        attempts=None,
        retry_on=frozenset(ErrorKind),
        unknown=ErrorKind.TRANSIENT,
        give_up=give_up,
    )


def _top() -> float:
    """The draw that puts an EQUAL-jittered wait at its ceiling: the fixed schedule."""
    return 1.0


def _permanent(error: BaseException) -> bool:
    """A ListShards error that retrying will not fix: ``start()`` reports it at once."""
    return classify(*error_details(error)) in (
        ErrorKind.AUTH,
        ErrorKind.INVALID,
        ErrorKind.NOT_FOUND,
        ErrorKind.FATAL,
    )


class ShardMapTimeoutError(KinesisConnectorError, TimeoutError):
    """The shard map was not READY in time (the last ListShards error is the cause)."""


class ShardMapDriver:
    """Runs a :class:`ShardMap`'s refreshes in a background task of the running event loop.

    ``start()`` (or ``async with``) starts the first refresh and, with ``wait_on_start``,
    waits until the map is READY: it raises :class:`ShardMapTimeoutError` after
    ``start_timeout`` seconds, or at once on an error retrying cannot fix (no such stream,
    access denied), or when ``give_up(error, attempts)`` says so. With ``wait_on_start=False``
    records flow unpredicted until the map is ready. ``clock`` (a :class:`Clock`, or a bare time
    function such as ``time.monotonic``) must be the clock the callers of ``invalidate`` read
    ``seen_at`` from; the driver waits on ``sleep``, else on the clock's ``sleep`` (a
    :class:`Clock`), else on ``asyncio.sleep``.

    With ``describe_fn`` (``client.describe_stream_summary``), every refresh first asks
    DescribeStreamSummary for the stream's maximum record size (:attr:`record_limit`), and
    :meth:`check_record_limit` asks again on demand. A failed DescribeStreamSummary never fails
    a refresh: the limit keeps its last value (1 MiB at first) and says why.
    """

    def __init__(
        self,
        stream_name: str | StreamRef,
        list_shards_fn: ListShardsFn,
        *,
        closed_shard_ttl: float = 60.0,
        min_backoff: float = 1.0,
        max_backoff: float = 30.0,
        page_size: int = 1000,
        wait_on_start: bool = True,
        start_timeout: float | None = 30.0,
        clock: Clock | Callable[[], float] = time.monotonic,
        sleep: Sleep | None = None,
        give_up: Callable[[BaseException, int], bool] | None = None,
        describe_fn: DescribeFn | None = None,
        limit_check_interval: float = 1.0,
    ) -> None:
        self.stream_name = str(stream_name)
        self._describe_fn = describe_fn
        self._limit = RecordSizeLimit(min_interval=limit_check_interval)
        self._limit_task: asyncio.Task[None] | None = None
        self._stream = stream_name
        self._give_up = give_up
        self.clock = time_of(clock)
        """The driver's time function (a :class:`Clock`'s ``now``)."""
        if sleep is None:
            clock_sleep = getattr(clock, "sleep", None)
            sleep = asyncio.sleep if clock_sleep is None else clock_sleep
        self._list_shards_fn = list_shards_fn
        self._page_size = page_size
        self._wait_on_start = wait_on_start
        self._start_timeout = start_timeout
        self._sleep = sleep
        self._policy = refresh_policy(min_backoff, max_backoff)
        self._start_policy = refresh_policy(min_backoff, max_backoff, self._hopeless)
        """The policy of the refreshes a waiting ``start`` waits for: it gives up on a failure
        no retry fixes, or one ``give_up`` refuses."""
        self._map = ShardMap(closed_shard_ttl=closed_shard_ttl)
        self._executor = AsyncExecutor(_NO_CLIENT, clock=SleepingClock(sleep, self.clock), rng=_top)
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Condition()
        self._attempts = 0
        self._last_error: BaseException | None = None
        self._closed = False
        self._starting = False
        """``start`` is waiting: the refreshes it starts run under :attr:`_start_policy`."""
        self._gave_up = False
        """The start policy gave up on the last refresh: a waiting ``start`` raises its error."""

    @property
    def map(self) -> ShardMap:
        return self._map

    @property
    def record_limit(self) -> RecordSizeLimit:
        """The stream's maximum record size as last learned (1 MiB until then)."""
        return self._limit

    async def check_record_limit(self) -> RecordSizeLimit:
        """The stream's maximum record size from a DescribeStreamSummary that started after
        this call (several callers share one call; one call per ``limit_check_interval`` at
        most). Without a ``describe_fn``, the limit as it is."""
        if self._describe_fn is None:
            return self._limit
        asked_at = self.clock()
        while not self._limit.checked_since(asked_at):
            task = self._limit_task
            if task is None or task.done():
                task = self._limit_task = asyncio.get_running_loop().create_task(
                    self._paced_limit_check(), name=f"record-limit:{self.stream_name}"
                )
            await asyncio.shield(task)
        return self._limit

    async def _paced_limit_check(self) -> None:
        delay = self._limit.next_check(self.clock())
        if delay > 0:
            await self._sleep(delay)
        await self._check_limit(paced=True)

    async def _check_limit(self, *, paced: bool = False) -> None:
        """One DescribeStreamSummary into :attr:`record_limit` (``paced``: asked for by a
        record); never raises."""
        assert self._describe_fn is not None
        started = self.clock()
        if paced:
            self._limit.started(started)
        try:
            response = await self._describe_fn(**StreamRef.of(self._stream).params())
            summary = response["StreamDescriptionSummary"]
        except Exception as exc:
            code = error_details(exc)[0]
            reason = f"DescribeStreamSummary failed: {code or type(exc).__name__}: " + (
                error_message(exc)
            )
            if reason != self._limit.error:
                logger.warning(
                    "stream %r: %s; the maximum record size stays %d bytes",
                    self.stream_name,
                    reason,
                    self._limit.bytes,
                )
            self._limit.failed(reason, started)
            return
        if self._limit.answered(summary, started):
            logger.info(
                "stream %r: maximum record size %d bytes", self.stream_name, self._limit.bytes
            )

    @property
    def last_error(self) -> BaseException | None:
        """The error of the last failed ListShards refresh, if the last refresh failed."""
        return self._last_error

    async def start(self) -> None:
        if self._closed:
            raise RuntimeError("ShardMapDriver is closed")
        if self._wait_on_start:
            self._starting = True
        if self._map.start():
            self._spawn()
        if self._wait_on_start:
            try:
                await self.wait_ready(self._start_timeout, fail_fast=True)
            except BaseException:
                await self.close()
                raise
            finally:
                self._starting = False

    async def wait_ready(self, timeout: float | None = None, *, fail_fast: bool = False) -> None:
        """Wait until the map is READY (e.g. after an accepted ``invalidate``).

        With ``fail_fast``, a refresh failure with a permanent error code raises at once.
        """

        def done() -> bool:
            if self._map.state is ShardMapState.READY:
                return True
            return fail_fast and self._gave_up

        try:
            async with within(timeout), self._changed:
                await self._changed.wait_for(done)
        except asyncio.TimeoutError:
            raise ShardMapTimeoutError(
                f"shard map of stream {self.stream_name!r} not ready after {timeout} s "
                f"({self._attempts} ListShards attempts, last error: {self._last_error!r})"
            ) from self._last_error
        if self._map.state is not ShardMapState.READY:
            raise KinesisConnectorError(
                f"ListShards for stream {self.stream_name!r} failed: {self._last_error}"
            ) from self._last_error

    def _hopeless(self, error: BaseException, attempts: int) -> bool:
        """Whether a waiting start gives up on ``error``, after ``attempts`` failed attempts:
        one no retry fixes, or one ``give_up`` refuses."""
        return _permanent(error) or (self._give_up is not None and self._give_up(error, attempts))

    async def learn_all_shards(self) -> None:
        """List every shard of the stream, closed ones included (AT_TRIM_HORIZON), and let
        the map remember their hash ranges (:meth:`ShardMap.learn`)."""
        shards = await list_all_shards(
            self._list_shards_fn,
            self._stream,
            AT_TRIM_HORIZON,
            page_size=self._page_size,
            sleep=self._sleep,
        )
        self._map.learn(shards, self.clock())

    def hash_range(self, shard_id: str) -> tuple[int, int] | None:
        """:meth:`ShardMap.hash_range` now."""
        return self._map.hash_range(shard_id, self.clock())

    def invalidate(self, seen_at: float, predicted_shard_id: str | None) -> bool:
        """Ask for a refresh (see :meth:`ShardMap.invalidate`). True if one was started."""
        if self._closed or not self._map.invalidate(seen_at, predicted_shard_id, self.clock()):
            return False
        self._spawn()
        return True

    async def close(self) -> None:
        """Stop any refresh in flight. The map keeps its last snapshot."""
        self._closed = True
        for task in (self._task, self._limit_task):
            if task is not None and not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._task = self._limit_task = None

    async def __aenter__(self) -> ShardMapDriver:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _spawn(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._refresh(), name=f"shard-map-refresh:{self.stream_name}"
        )

    async def _refresh(self) -> None:
        policy = self._start_policy if self._starting else self._policy
        try:
            shards = await self._executor.attempt(
                self._refresh_once, policy, f"ListShards for stream {self.stream_name!r}"
            )
        except Exception as exc:
            if exc is not self._last_error:  # not a refresh's failure: a bug
                raise
            # The start policy gave up on it: the waiting start raises it (wait_ready).
            self._gave_up = True
            await self._notify()
            return
        self._last_error = None
        self._map.refresh_succeeded(shards, self.clock())
        logger.debug(
            "shard map of %r: %d open shards", self.stream_name, len(self._map.open_shards)
        )
        await self._notify()

    async def _refresh_once(self) -> list[ShardInfo]:
        """One attempt at a refresh; a failure leaves the map INVALID (and wakes the waiters
        of ``wait_ready``) until the executor tries again, if the policy says so."""
        if self._map.retry_pending:
            self._map.retry_due()
        self._attempts += 1
        if self._describe_fn is not None:
            await self._check_limit()
        try:
            return await list_all_shards(
                self._list_shards_fn,
                self._stream,
                AT_LATEST,
                page_size=self._page_size,
                sleep=self._sleep,
            )
        except Exception as exc:
            self._last_error = exc
            self._map.refresh_failed()
            await self._notify()
            raise

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()
