"""Which shard owns a hash key: a cached ListShards snapshot with O(log N) prediction.

The producer predicts each record's shard locally so it can aggregate per shard; asking Kinesis
per record would cost a round trip. This follows the C++ KPL's ``shard_map.cc``:

- :class:`ShardMap` is sans-I/O. Its states are INVALID (no snapshot), UPDATING (a ListShards
  refresh is in flight) and READY (``predict`` answers). Events go in (``start``,
  ``refresh_succeeded``, ``refresh_failed``, ``retry_due``, ``invalidate``); decisions come
  out (start a refresh: ``True``; wait this many seconds, then send ``retry_due``).
- :class:`ShardMapDriver` runs the refreshes against an injected ``list_shards_fn`` (in
  production ``client.list_shards`` of an aiobotocore client; in tests a fake), and with a
  ``describe_fn`` learns the stream's maximum record size at every refresh and on demand.
- :func:`list_all_shards` is the paginated ListShards call that both use.
"""

from __future__ import annotations

import asyncio
import bisect
import enum
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from kinesis_core.classify import ErrorKind, classify, error_details, error_message
from kinesis_core.errors import ConfigurationError, KinesisConnectorError, ValidationError
from kinesis_core.hashing import (
    MAX_HASH_KEY,
    parse_explicit_hash_key,
)
from kinesis_core.record_size import RecordSizeLimit
from kinesis_core.stream import StreamRef

logger = logging.getLogger(__name__)

ListShardsFn = Callable[..., Awaitable[Mapping[str, Any]]]
"""``await fn(**ListShards kwargs)`` returns the ListShards response dict."""
DescribeFn = Callable[..., Awaitable[Mapping[str, Any]]]
"""``await fn(**DescribeStreamSummary kwargs)`` returns the DescribeStreamSummary response."""
Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[object]]

AT_LATEST: Mapping[str, str] = {"Type": "AT_LATEST"}
"""ShardFilter for the shards open now: all the producer can write to."""
AT_TRIM_HORIZON: Mapping[str, str] = {"Type": "AT_TRIM_HORIZON"}
"""ShardFilter for every shard still holding data, closed ones included."""


def _permanent(error: BaseException) -> bool:
    """A ListShards error that retrying will not fix: ``start()`` reports it at once."""
    return classify(*error_details(error)) in (
        ErrorKind.AUTH,
        ErrorKind.INVALID,
        ErrorKind.NOT_FOUND,
        ErrorKind.FATAL,
    )


@dataclass(frozen=True)
class ShardInfo:
    """One shard of a ListShards response, with hash keys and sequence numbers as ints."""

    shard_id: str
    start_hash_key: int
    end_hash_key: int
    parent_shard_id: str | None = None
    adjacent_parent_shard_id: str | None = None
    starting_sequence_number: int = 0
    ending_sequence_number: int | None = None

    @classmethod
    def from_api(cls, shard: Mapping[str, Any]) -> ShardInfo:
        """Parse one entry of ``ListShards["Shards"]`` (or ``DescribeStream``)."""
        hash_range = shard["HashKeyRange"]
        start = parse_explicit_hash_key(
            hash_range["StartingHashKey"], "HashKeyRange.StartingHashKey"
        )
        end = parse_explicit_hash_key(hash_range["EndingHashKey"], "HashKeyRange.EndingHashKey")
        if start > end:
            raise ValidationError(
                "HashKeyRange", f"{shard['ShardId']}: starting hash key {start} > ending {end}"
            )
        seq = shard.get("SequenceNumberRange", {})
        ending = seq.get("EndingSequenceNumber")
        return cls(
            shard_id=shard["ShardId"],
            start_hash_key=start,
            end_hash_key=end,
            parent_shard_id=shard.get("ParentShardId"),
            adjacent_parent_shard_id=shard.get("AdjacentParentShardId"),
            starting_sequence_number=int(seq.get("StartingSequenceNumber", 0)),
            ending_sequence_number=None if ending is None else int(ending),
        )

    @property
    def is_open(self) -> bool:
        """A shard is open until resharding gives it an ending sequence number."""
        return self.ending_sequence_number is None

    @property
    def hash_range(self) -> tuple[int, int]:
        """The closed interval [start, end] of hash keys this shard owns."""
        return (self.start_hash_key, self.end_hash_key)

    @property
    def parents(self) -> tuple[str, ...]:
        """Parent ids: one after a split, two after a merge, none for an original shard."""
        return tuple(
            p for p in (self.parent_shard_id, self.adjacent_parent_shard_id) if p is not None
        )

    def contains(self, hash_key: int) -> bool:
        return self.start_hash_key <= hash_key <= self.end_hash_key


_SLOT_BITS = 12
_SLOT_SHIFT = 128 - _SLOT_BITS
_SLOTS = 1 << _SLOT_BITS


class ShardTable:
    """The open shards of a shard list, sorted by end hash key, for bisect lookups.

    The owner of ``h`` is the open shard with the smallest end hash key >= ``h``; ranges of
    open shards are contiguous, so ``bisect_left`` over the end keys finds it. Closed shards
    are dropped here (moto ignores ShardFilter and returns them too).

    ``_slots`` answers most lookups without the bisect (a third of ``predict``'s cost): the
    key space cut in 4096 slots by the top 12 bits of a key, each slot holding the position of
    the shard that bisect finds for every key in it, or -1 when that varies inside the slot.
    """

    __slots__ = ("_by_id", "_ends", "_ids", "_shards", "_slots", "_starts")

    def __init__(self, shards: Iterable[ShardInfo]) -> None:
        self._shards = tuple(sorted((s for s in shards if s.is_open), key=lambda s: s.end_hash_key))
        self._ends = tuple(s.end_hash_key for s in self._shards)
        self._starts = tuple(s.start_hash_key for s in self._shards)
        self._ids = tuple(s.shard_id for s in self._shards)
        self._by_id = {s.shard_id: s for s in self._shards}
        slots = [-1] * _SLOTS
        low = 0  # keys below this have an earlier shard's end >= them
        for i, shard in enumerate(self._shards):
            # Slots wholly inside [max(low, start), end]: bisect gives i and i owns them.
            first = (max(low, shard.start_hash_key) + (1 << _SLOT_SHIFT) - 1) >> _SLOT_SHIFT
            last = min((shard.end_hash_key + 1) >> _SLOT_SHIFT, _SLOTS)
            if first < last:
                slots[first:last] = [i] * (last - first)
            low = shard.end_hash_key + 1
        self._slots = slots

    @property
    def shards(self) -> tuple[ShardInfo, ...]:
        return self._shards

    def index(self, hash_key: int) -> int | None:
        """Position in :attr:`shards` of the owner of ``hash_key``; None if no shard owns it."""
        i = bisect.bisect_left(self._ends, hash_key)
        if i == len(self._ends) or self._starts[i] > hash_key:
            return None
        return i

    def owner(self, hash_key: int) -> ShardInfo | None:
        i = self.index(hash_key)
        return None if i is None else self._shards[i]

    def get(self, shard_id: str) -> ShardInfo | None:
        return self._by_id.get(shard_id)

    def __contains__(self, shard_id: object) -> bool:
        return shard_id in self._by_id

    def __len__(self) -> int:
        return len(self._shards)


def uniform_shards(count: int) -> list[ShardInfo]:
    """``count`` open shards splitting the key space evenly, as CreateStream does."""
    if count < 1:
        raise ValidationError("count", f"shard count must be >= 1, got {count}")
    step = (MAX_HASH_KEY + 1) // count
    return [
        ShardInfo(
            shard_id=f"shardId-{i:012d}",
            start_hash_key=i * step,
            end_hash_key=MAX_HASH_KEY if i == count - 1 else (i + 1) * step - 1,
        )
        for i in range(count)
    ]


class ShardMapState(enum.Enum):
    INVALID = "INVALID"
    """No usable snapshot: never refreshed, or the last refresh failed (a retry may be due)."""
    UPDATING = "UPDATING"
    """A refresh is in flight; ``predict`` returns None until it lands."""
    READY = "READY"
    """A snapshot is installed and ``predict`` answers."""


class ShardMap:
    """Sans-I/O shard map. Call the event methods; do what they return.

    ==================  ==============  ===============  ==============  ===================
    event               INVALID (idle)  INVALID (retry)  UPDATING        READY
    ==================  ==============  ===============  ==============  ===================
    start()             UPDATING, True  False            False           False
    refresh_succeeded   error           error            READY           error
    refresh_failed      error           error            INVALID, delay  error
    retry_due()         error           UPDATING         error           error
    invalidate(...)     False           False            False           guard: UPDATING/True
    ==================  ==============  ===============  ==============  ===================

    ``True`` means: start a refresh now (ListShards AT_LATEST, then ``refresh_succeeded`` or
    ``refresh_failed``). ``refresh_failed`` returns the delay after which to send
    ``retry_due``: 1 s doubling to 30 s, back to 1 s after a success.
    """

    def __init__(
        self,
        *,
        closed_shard_ttl: float = 60.0,
        min_backoff: float = 1.0,
        max_backoff: float = 30.0,
        clock: Clock = time.monotonic,
    ) -> None:
        if closed_shard_ttl < 0 or min_backoff <= 0 or max_backoff < min_backoff:
            raise ConfigurationError(
                "need closed_shard_ttl >= 0 and 0 < min_backoff <= max_backoff, got "
                f"{closed_shard_ttl}, {min_backoff}, {max_backoff}"
            )
        self._ttl = closed_shard_ttl
        self._min_backoff = min_backoff
        self._max_backoff = max_backoff
        self._clock = clock
        self._state = ShardMapState.INVALID
        self._retry_pending = False
        self._backoff = min_backoff
        self._table = ShardTable(())
        self._closed: dict[str, tuple[ShardInfo, float]] = {}
        self._updated_at = -math.inf
        self._refreshes = 0

    @property
    def state(self) -> ShardMapState:
        return self._state

    @property
    def updated_at(self) -> float:
        """Clock time of the last successful refresh (-inf before the first)."""
        return self._updated_at

    @property
    def retry_pending(self) -> bool:
        """INVALID after a failed refresh, waiting for ``retry_due``."""
        return self._retry_pending

    @property
    def refreshes(self) -> int:
        """Successful refreshes so far."""
        return self._refreshes

    @property
    def open_shards(self) -> tuple[ShardInfo, ...]:
        """Open shards of the last snapshot, by end hash key (kept while UPDATING/INVALID)."""
        return self._table.shards

    def predict(self, hash_key: int) -> str | None:
        """The shard that owns ``hash_key``, or None when not READY or no open shard owns it."""
        if self._state is not ShardMapState.READY:
            return None
        # The producer asks once per user record: the slot table, else ShardTable.index
        # inlined; one call instead of three.
        table = self._table
        top = hash_key >> _SLOT_SHIFT
        i = table._slots[top] if 0 <= top < _SLOTS else -1
        if i < 0:
            ends = table._ends
            i = bisect.bisect_left(ends, hash_key)
            if i == len(ends) or table._starts[i] > hash_key:
                return None
        return table._ids[i]

    def hash_range(self, shard_id: str) -> tuple[int, int] | None:
        """[start, end] of an open shard, or of a closed one for ``closed_shard_ttl`` seconds."""
        shard = self._table.get(shard_id)
        if shard is not None:
            return shard.hash_range
        closed = self._closed.get(shard_id)
        if closed is None:
            return None
        if closed[1] <= self._clock():
            self._closed.pop(shard_id, None)
            return None
        return closed[0].hash_range

    # Events.

    def start(self) -> bool:
        """The first refresh. True: start it now."""
        if self._state is not ShardMapState.INVALID or self._retry_pending:
            return False
        self._state = ShardMapState.UPDATING
        return True

    def refresh_succeeded(self, shards: Iterable[ShardInfo]) -> None:
        """Install a ListShards result; shards that left it (and closed shards in it) stay in
        ``hash_range`` for the TTL."""
        self._expect_updating("refresh_succeeded")
        now = self._clock()
        shards = list(shards)
        table = ShardTable(shards)
        for old in self._table.shards:
            if old.shard_id not in table:
                self._closed[old.shard_id] = (old, now + self._ttl)
        for shard in shards:
            if not shard.is_open:
                self._closed[shard.shard_id] = (shard, now + self._ttl)
        for shard in table.shards:
            self._closed.pop(shard.shard_id, None)
        self._purge(now)
        self._table = table
        self._state = ShardMapState.READY
        self._updated_at = now
        self._backoff = self._min_backoff
        self._refreshes += 1

    def learn(self, shards: Iterable[ShardInfo]) -> None:
        """Remember the hash ranges of ``shards`` that are not in the snapshot (closed ones, or
        newer ones) for the TTL: ``hash_range`` answers for them. Any state; predictions do
        not change. For a producer whose record landed on a shard born and closed between two
        refreshes (a fuller ListShards than AT_LATEST lists it)."""
        now = self._clock()
        for shard in shards:
            if shard.shard_id not in self._table:
                self._closed[shard.shard_id] = (shard, now + self._ttl)

    def refresh_failed(self) -> float:
        """The refresh failed: INVALID; returns the seconds to wait before ``retry_due``."""
        self._expect_updating("refresh_failed")
        delay = self._backoff
        self._backoff = min(self._backoff * 2, self._max_backoff)
        self._state = ShardMapState.INVALID
        self._retry_pending = True
        return delay

    def retry_due(self) -> None:
        """The backoff after a failed refresh elapsed: start the next attempt now."""
        if not self._retry_pending:
            raise RuntimeError(f"retry_due without a failed refresh (state {self._state.name})")
        self._retry_pending = False
        self._state = ShardMapState.UPDATING

    def invalidate(self, seen_at: float, predicted_shard_id: str | None) -> bool:
        """A record landed elsewhere than predicted. True: start a refresh now.

        ``seen_at`` is the clock time the prediction was used (the request was sent). Ignored
        when not READY (a refresh is already in flight or due), when ``seen_at <= updated_at``
        (a newer snapshot already covers it), or when the predicted shard is no longer open in
        the snapshot (a refresh would teach nothing new). So callers may invalidate liberally.
        """
        self._purge(self._clock())
        if self._state is not ShardMapState.READY or seen_at <= self._updated_at:
            return False
        if predicted_shard_id is not None and predicted_shard_id not in self._table:
            return False
        self._state = ShardMapState.UPDATING
        return True

    def _expect_updating(self, event: str) -> None:
        if self._state is not ShardMapState.UPDATING:
            raise RuntimeError(f"{event} while {self._state.name}: no refresh was in flight")

    def _purge(self, now: float) -> None:
        # list(): another thread may drop an entry in hash_range meanwhile.
        for sid, (_, until) in list(self._closed.items()):
            if until <= now:
                self._closed.pop(sid, None)


def _first_page_kwargs(
    stream: str | StreamRef, shard_filter: Mapping[str, Any] | None, page_size: int
) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"MaxResults": page_size, **StreamRef.of(stream).params()}
    if shard_filter is not None:
        kwargs["ShardFilter"] = dict(shard_filter)
    return kwargs


async def list_all_shards(
    client: object,
    stream: str | StreamRef,
    shard_filter: Mapping[str, Any] | None = None,
    *,
    page_size: int = 1000,
    max_attempts: int = 5,
    sleep: Sleep = asyncio.sleep,
) -> list[ShardInfo]:
    """Every shard ListShards returns, following NextToken.

    ``client`` is an aiobotocore Kinesis client or a ``list_shards``-like async callable.
    ``stream`` is a name, an ARN or a :class:`StreamRef`. Later pages send only NextToken (and
    MaxResults): Kinesis refuses StreamName or ShardFilter next to a NextToken.
    LimitExceededException is retried per page up to ``max_attempts`` times, waiting 0.2 s
    doubling; other errors propagate.
    """
    fn = getattr(client, "list_shards", client)
    if not callable(fn):
        raise TypeError(f"need a Kinesis client or a list_shards callable, got {client!r}")
    if max_attempts < 1:
        raise ConfigurationError(f"max_attempts must be >= 1, got {max_attempts}")
    kwargs = _first_page_kwargs(stream, shard_filter, page_size)
    shards: list[ShardInfo] = []
    while True:
        delay = 0.2
        for attempt in range(1, max_attempts + 1):
            try:
                response = await fn(**kwargs)
                break
            except Exception as exc:
                if error_details(exc)[0] != "LimitExceededException" or attempt == max_attempts:
                    raise
                await sleep(delay)
                delay *= 2
        shards.extend(ShardInfo.from_api(s) for s in response.get("Shards", ()))
        token = response.get("NextToken")
        if not token:
            return shards
        kwargs = {"NextToken": token, "MaxResults": page_size}


class ShardMapTimeoutError(KinesisConnectorError, TimeoutError):
    """The shard map was not READY in time (the last ListShards error is the cause)."""


class ShardMapDriver:
    """Runs a :class:`ShardMap`'s refreshes in a background task of the running event loop.

    ``start()`` (or ``async with``) starts the first refresh and, with ``wait_on_start``,
    waits until the map is READY: it raises :class:`ShardMapTimeoutError` after
    ``start_timeout`` seconds, or at once on an error retrying cannot fix (no such stream,
    access denied), or when ``give_up(error, attempts)`` says so. With ``wait_on_start=False``
    records flow unpredicted until the map is ready. ``clock`` must be the clock the callers of
    ``invalidate`` read ``seen_at`` from.

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
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
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
        self.clock = clock
        self._list_shards_fn = list_shards_fn
        self._page_size = page_size
        self._wait_on_start = wait_on_start
        self._start_timeout = start_timeout
        self._sleep = sleep
        self._map = ShardMap(
            closed_shard_ttl=closed_shard_ttl,
            min_backoff=min_backoff,
            max_backoff=max_backoff,
            clock=clock,
        )
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Condition()
        self._attempts = 0
        self._last_error: BaseException | None = None
        self._closed = False
        self._starting = False
        """``start`` is waiting (fail fast): a failure it gives up on is not retried."""

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
            error = self._last_error
            return fail_fast and error is not None and self._hopeless(error)

        try:
            async with self._changed:
                await asyncio.wait_for(self._changed.wait_for(done), timeout)
        except asyncio.TimeoutError:
            raise ShardMapTimeoutError(
                f"shard map of stream {self.stream_name!r} not ready after {timeout} s "
                f"({self._attempts} ListShards attempts, last error: {self._last_error!r})"
            ) from self._last_error
        if self._map.state is not ShardMapState.READY:
            raise KinesisConnectorError(
                f"ListShards for stream {self.stream_name!r} failed: {self._last_error}"
            ) from self._last_error

    def _hopeless(self, error: BaseException) -> bool:
        """Whether a failing start gives up on ``error``: one no retry fixes, or one
        ``give_up`` refuses after this many attempts."""
        return _permanent(error) or (
            self._give_up is not None and self._give_up(error, self._attempts)
        )

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
        self._map.learn(shards)

    def invalidate(self, seen_at: float, predicted_shard_id: str | None) -> bool:
        """Ask for a refresh (see :meth:`ShardMap.invalidate`). True if one was started."""
        if self._closed or not self._map.invalidate(seen_at, predicted_shard_id):
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
        while True:
            self._attempts += 1
            if self._describe_fn is not None:
                await self._check_limit()
            try:
                shards = await list_all_shards(
                    self._list_shards_fn,
                    self._stream,
                    AT_LATEST,
                    page_size=self._page_size,
                    sleep=self._sleep,
                )
            except Exception as exc:
                self._last_error = exc
                delay = self._map.refresh_failed()
                # A start that gives up on this error raises it: announce no retry then.
                if not (self._starting and self._hopeless(exc)):
                    logger.warning(
                        "ListShards for stream %r failed (%r); retrying in %.1f s",
                        self.stream_name,
                        exc,
                        delay,
                    )
                await self._notify()
                await self._sleep(delay)
                self._map.retry_due()
                continue
            self._last_error = None
            self._map.refresh_succeeded(shards)
            logger.debug(
                "shard map of %r: %d open shards", self.stream_name, len(self._map.open_shards)
            )
            await self._notify()
            return

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()
