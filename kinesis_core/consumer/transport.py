"""The read-transport seam: "records of this shard from this position, then children or an
error", whatever carries them.

Kinesis offers two ways to read a shard: polling (GetShardIterator, then GetRecords at most
five times a second, :mod:`.polling`) and enhanced fan-out (SubscribeToShard pushes events,
:mod:`.subscription`). Everything around a shard's reader is the same for both: where it starts
(a checkpoint, possibly inside a KPL aggregate, or an initial position), how records are
deaggregated and filtered by the shard's hash range, how a resume skips what the checkpoint
covers, what the end of a shard says (its children, or that it is gone), and how errors back
off. :class:`ShardRead` holds that common part as a sans-I/O state machine; a transport adds
only its calls.

A machine says what to do next (:meth:`ShardRead.next_action`): a transport call (a
:class:`Call` subclass the transport defines, or the :class:`CheckStream` every transport
executes), :class:`Wait` until a time, :class:`Ended`, or :class:`Failed`. A driver executes
calls through a transport object (:class:`AsyncTransport` for the asyncio consumer,
:class:`SyncTransport` for synchronous engines such as Beam's DoFns) and feeds the response
(:meth:`ShardRead.on_response`) or the error's kind (:meth:`ShardRead.on_error`) back.

A shard that seems to vanish (ResourceNotFound) or a stored position the service refuses
(ResourceNotFound, or InvalidArgument for a GetShardIterator at a sequence number) is never
taken for an end on its own: the machine asks for a fresh look at the stream
(:class:`CheckStream`: a listing and the stream's creation time) and lets
:func:`~.incarnation.judge_refusal` decide: gone for real (no longer listed), a position of
another incarnation of the stream (:class:`~.incarnation.StreamRecreatedError`), or one older
than the trim horizon (read again from TRIM_HORIZON, with :meth:`ShardRead.take_warning` for
the driver to log). The lineage, the ack frontier and the checkpoint stores sit
above this seam and never see which transport ran, so one checkpoint store serves both.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from kinesis_core.aggregation import deaggregate
from kinesis_core.backoff import ceiling
from kinesis_core.classify import ErrorKind
from kinesis_core.consumer.incarnation import Refusal, StreamFacts, judge_refusal
from kinesis_core.consumer.lineage import ShardNode, StartPoint
from kinesis_core.consumer.positions import TRIM_HORIZON, InitialPosition
from kinesis_core.errors import ConfigurationError, KinesisConnectorError
from kinesis_core.records import KinesisRecord, Position
from kinesis_core.shard_map import ShardInfo

Ack = Callable[[KinesisRecord], None]


class Call:
    """A request a transport executes for a machine (GetRecords, SubscribeToShard, ...)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class CheckStream(Call):
    """List the stream's shards and describe it (its creation time): what a refused position
    or a vanished shard means. Every transport executes it; the answer is a
    :class:`StreamView`."""


@dataclass(frozen=True, slots=True)
class StreamView:
    """The answer to :class:`CheckStream`: a complete listing and the stream's facts."""

    shards: Sequence[ShardInfo]
    facts: StreamFacts


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing to do before ``until`` (the driver's clock)."""

    until: float


@dataclass(frozen=True, slots=True)
class Ended:
    """The shard is finished: read to its end (``children`` from the last response), or gone."""

    children: tuple[ShardNode, ...]
    gone: bool
    """True when the shard vanished (ResourceNotFound) rather than reaching its end."""


@dataclass(frozen=True, slots=True)
class Failed:
    """The reader gave up: ``reason`` says why (the driver raises it with the last error),
    or ``error`` is what to raise."""

    reason: str
    error: KinesisConnectorError | None = None


Action = Call | Wait | Ended | Failed


class ReadState(enum.Enum):
    CONNECTING = "connecting"
    """Needs a shard iterator (polling) or a subscription (fan-out) before it can read."""
    CHECKING = "checking"
    """A position was refused or the shard seemed to vanish: needs a look at the stream."""
    READING = "reading"
    ENDED = "ended"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Backoff:
    """A shard reader's backoff after failed calls, reset by the next success: the ceiling of
    :mod:`kinesis_core.backoff`, with equal jitter (at least half of it, so a reader that
    failed never comes back at once)."""

    base: float = 0.2
    maximum: float = 10.0

    def __post_init__(self) -> None:
        if not 0 < self.base <= self.maximum:
            raise ConfigurationError(
                f"backoff: need 0 < base <= maximum, got base={self.base}, maximum={self.maximum}"
            )

    def delay(self, failures: int, draw: float) -> float:
        """Seconds to wait after the ``failures``-th failure in a row; ``draw`` in [0, 1)."""
        return ceiling(self.base, self.maximum, failures) * (0.5 + 0.5 * draw)


def handled_by_reader(kind: ErrorKind | None) -> bool:
    """Whether a shard reader recovers from an error of this kind on its own; drivers raise
    the rest (auth, invalid, fatal, or no service error at all)."""
    return kind is not None and (kind.retryable or kind in (ErrorKind.EXPIRED, ErrorKind.NOT_FOUND))


MAX_UNEXPLAINED = 5
"""Failures in a row, the last of them a ResourceNotFound that a listing does not explain
(the shard is listed and no position was refused), before a reader gives up."""


class ShardRead:
    """The transport-independent half of one shard's reader (sans-I/O: ``now`` comes in).

    Subclasses implement :meth:`next_action` and :meth:`on_response` for their calls, and
    call :meth:`_deliver` with the raw records of each response, :meth:`_end` at the end of the
    shard, :meth:`_backoff` after a failure and :meth:`_progress` after a success.
    """

    transport: ClassVar[str]
    """``"polling"`` or ``"subscription"``: for status and metrics."""

    def __init__(
        self,
        node: ShardNode,
        start: StartPoint,
        backoff: Backoff,
        rng: Callable[[], float] = random.random,
        *,
        incarnation: int | None = None,
        stream: str = "",
    ) -> None:
        self.node = node
        self.shard_id = node.shard_id
        self.incarnation = incarnation
        """The creation time (epoch ms) of the stream this reader started on; None: unknown
        (a refused position is then never taken for another incarnation's by that)."""
        self.stream = stream
        """The stream's name, for messages."""
        self._backoff_policy = backoff
        self._rng = rng
        self._start = start
        self._skip_through: Position | None = None if isinstance(start, InitialPosition) else start
        self._last_sequence: int | None = None
        self._state = ReadState.CONNECTING
        self._not_before = 0.0
        self._failures = 0
        self._children: tuple[ShardNode, ...] = ()
        self._gone = False
        self._failed_reason = ""
        self._failed_error: KinesisConnectorError | None = None
        self._refused: int | None = None
        """The sequence number of the position the service refused, if one was."""
        self._warning: str | None = None
        self.millis_behind_latest: int | None = None
        self.last_error: ErrorKind | None = None
        self.caught_up = False
        """The last response reached the tip of the shard (MillisBehindLatest 0, nothing more
        waiting)."""
        self.idle = False
        """Caught up and the last response was empty: a quiet shard, whose watermark may move
        up to now."""
        self.data_read = False
        """The last response carried records (or their absence), not a connection step: only
        then do ``caught_up`` and ``idle`` speak of the last response."""
        self.connects = 0
        """Connection steps asked for: shard iterators (polling) or subscriptions (fan-out)."""

    @property
    def state(self) -> ReadState:
        return self._state

    @property
    def failures(self) -> int:
        """Failed calls in a row since the last success."""
        return self._failures

    # -- the transport's part ------------------------------------------------------------

    def next_action(self, now: float) -> Action:
        """What to do now. A returned call means "send it now" (rate limits count it)."""
        raise NotImplementedError

    def on_response(
        self, now: float, call: Call, response: Any, ack: Ack | None = None
    ) -> list[KinesisRecord]:
        """The response to ``call``: the user records to deliver, in shard order."""
        raise NotImplementedError

    def handles(self, call: Call, kind: ErrorKind | None) -> bool:
        """Whether this machine takes ``call``'s error of ``kind`` (:meth:`on_error`); the
        driver raises the others."""
        return handled_by_reader(kind)

    def refused_position(self, call: Call) -> int | None:
        """The sequence number ``call`` asked to read at or after, if it named one (a refusal
        of it is then judged as a refused position)."""
        return None

    def on_error(self, now: float, call: Call, kind: ErrorKind) -> None:
        """``call`` failed with an error of ``kind`` that :meth:`handles` accepts."""
        if not self.handles(call, kind):
            raise ValueError(f"{kind} errors are raised by the driver, not fed to the machine")
        self.last_error = kind
        self.caught_up = self.idle = self.data_read = False
        if isinstance(call, CheckStream) and kind is ErrorKind.NOT_FOUND:
            self._fail(f"stream {self.stream or '?'} no longer exists (deleted?)")
            return
        if kind in (ErrorKind.NOT_FOUND, ErrorKind.INVALID):
            self._refused = self.refused_position(call)
            self._state = ReadState.CHECKING
            return
        self._backoff(now)

    def on_stream_view(self, now: float, view: StreamView) -> None:
        """The answer to :class:`CheckStream`: decide what the refusal meant."""
        verdict = judge_refusal(
            self.shard_id, self._refused, view.shards, view.facts, self.incarnation, self.stream
        )
        self._refused = None
        if verdict.refusal is Refusal.GONE:
            self._state = ReadState.ENDED
            self._gone = True
        elif verdict.refusal is Refusal.RECREATED:
            self._fail(verdict.message, verdict.error)
        elif verdict.refusal is Refusal.TRIMMED:
            self._warning = verdict.message
            self._start = TRIM_HORIZON
            self._skip_through = None
            self._last_sequence = None
            self._state = ReadState.CONNECTING
        else:
            self._state = ReadState.CONNECTING
            self._backoff(now)
            if self._failures >= MAX_UNEXPLAINED:
                self._fail(
                    f"{self._failures} failures in a row, the last a ResourceNotFound for a "
                    "shard that ListShards still lists"
                )

    def take_warning(self) -> str | None:
        """A warning for the driver to log (once), e.g. that a checkpoint older than the trim
        horizon was skipped."""
        warning, self._warning = self._warning, None
        return warning

    # -- the common part -----------------------------------------------------------------

    def _check_action(self, now: float) -> Action | None:
        """The :class:`CheckStream` call a CHECKING machine needs, when it is due."""
        if self._state is not ReadState.CHECKING:
            return None
        if now < self._not_before:
            return Wait(self._not_before)
        return CheckStream()

    def _finished(self) -> Ended | Failed | None:
        if self._state is ReadState.ENDED:
            return Ended(self._children, self._gone)
        if self._state is ReadState.FAILED:
            return Failed(self._failed_reason, self._failed_error)
        return None

    def _deliver(self, raw: Sequence[Mapping[str, Any]], ack: Ack | None) -> list[KinesisRecord]:
        """Deaggregate ``raw`` with the shard's hash-range filter and drop what the start
        checkpoint covers (a resume inside an aggregate)."""
        if not raw:
            return []
        self._last_sequence = int(raw[-1]["SequenceNumber"])
        records = deaggregate(raw, self.shard_id, self.node.hash_range, ack)
        skip = self._skip_through
        if skip is not None:
            records = [r for r in records if (r.sequence_number, r.sub_sequence_number) > skip]
            if self._last_sequence > skip[0]:
                self._skip_through = None
        return records

    def _end(self, children: Sequence[Mapping[str, Any]] | None) -> None:
        """The shard reached its end; ``children`` are the ChildShards of the last response."""
        self._state = ReadState.ENDED
        self._children = tuple(ShardNode.from_child_shard(child) for child in children or ())

    def _fail(self, reason: str, error: KinesisConnectorError | None = None) -> None:
        self._state = ReadState.FAILED
        self._failed_reason = reason
        self._failed_error = error

    def _progress(self) -> None:
        self._failures = 0
        self.last_error = None

    def _backoff(self, now: float) -> None:
        self._failures += 1
        delay = self._backoff_policy.delay(self._failures, self._rng())
        self._not_before = max(self._not_before, now + delay)


class AsyncTransport(Protocol):
    """Executes a machine's calls on an event loop."""

    async def call(self, call: Call) -> Any:
        """The response of ``call``; raises what the service or the network raised."""
        ...

    async def aclose(self) -> None: ...


class SyncTransport(Protocol):
    """Executes a machine's calls from a synchronous engine (a Beam DoFn)."""

    def call(self, call: Call) -> Any: ...

    def close(self) -> None: ...
