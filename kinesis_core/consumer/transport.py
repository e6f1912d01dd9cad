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

The machine is explicit, h11 style: its :class:`ReadState` changes only through
:data:`TRANSITIONS`, a table of (state, :class:`ReadEvent`) -> state with one entry for every
pair (as :mod:`kinesis_core.consumer.shard_consumer`'s), and an event the table does not allow
in the current state raises :class:`ReadProtocolError`. A machine says what to
do next (:meth:`ShardRead.next_action`): a transport call (a :class:`Call` subclass the
transport defines, or the :class:`CheckStream` every transport executes), :class:`Wait` until
a time, :class:`Ended`, or :class:`Failed`. A driver hands calls to an executor
(:mod:`kinesis_core.aws.executor`: a reader's link executes the calls of one shard) and feeds the
response (:meth:`ShardRead.on_response`) or the error's kind (:meth:`ShardRead.on_error`) back;
both return an :class:`Outcome`: the records to deliver and what the response said of the
shard's tip, the kind of a failure the machine took, a warning to log. The driver reads
nothing else off the machine.

A shard that seems to vanish (ResourceNotFound) or a stored position the service refuses
(ResourceNotFound, or InvalidArgument for a GetShardIterator at a sequence number) is never
taken for an end on its own: the machine asks for a fresh look at the stream
(:class:`CheckStream`: a listing and the stream's creation time) and lets
:func:`~.incarnation.judge_refusal` decide: gone for real (no longer listed), a position of
another incarnation of the stream (:class:`~.incarnation.StreamRecreatedError`), or one older
than the trim horizon (read again from TRIM_HORIZON, with a warning in the outcome). A fan-out
reader first asks whether its stream consumer is gone (:mod:`.subscription`). The lineage, the
ack frontier and the checkpoint stores sit above this seam and never see which transport ran,
so one checkpoint store serves both.

A shard ends only when the service says so: an answer that names its children (ChildShards),
or one that ends the shard without them (a null NextShardIterator, a last fan-out event)
while a listing shows the shard closed (:meth:`ShardRead._claim_end` asks for that look; AWS
always sends ChildShards at a shard's end, and the KCL refuses such an answer too). An
answer that ends an open shard, or has no records at all, is a bad answer (a proxy's page,
a truncated body): the machine counts it (:attr:`ShardRead.bad_answers`), backs off as after
a transient error and reads on from where it was, never skipping a record.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

from kinesis_core.aggregation import as_records, deaggregate
from kinesis_core.aws.backoff import Backoff
from kinesis_core.aws.calls import Call, Wait
from kinesis_core.aws.classify import ErrorKind
from kinesis_core.consumer.incarnation import Refusal, StreamFacts, judge_refusal
from kinesis_core.consumer.lineage import ShardNode, StartPoint
from kinesis_core.consumer.positions import TRIM_HORIZON, InitialPosition
from kinesis_core.errors import KinesisConnectorError
from kinesis_core.records import KinesisRecord, Position, WireRecord, wire_records
from kinesis_core.shards.info import ShardInfo

Ack = Callable[[KinesisRecord], None]


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


@dataclass(frozen=True, slots=True)
class Outcome:
    """What feeding a response or an error to a machine gave the driver."""

    records: list[KinesisRecord]
    """The user records to deliver, in shard order."""
    data: bool = False
    """The response carried records (or their absence): not a connection step or a look-up.
    Only then do ``caught_up`` and ``idle`` speak of the shard."""
    caught_up: bool = False
    """The response reached the tip of the shard (MillisBehindLatest 0, nothing more
    waiting)."""
    idle: bool = False
    """Caught up and the response was empty: a quiet shard, whose watermark may move up to
    now."""
    millis_behind_latest: int | None = None
    """The lag the data response reported."""
    error: ErrorKind | None = None
    """The call failed with an error of this kind, which the machine took (and backs off
    from, or looks into)."""
    warning: str | None = None
    """Something to log once (a checkpoint older than the trim horizon was skipped)."""


NOTHING = Outcome([])
"""The outcome of a step that gave nothing to deliver (a connection step, a look-up)."""


class ReadState(enum.Enum):
    CONNECTING = "connecting"
    """Needs a shard iterator (polling) or a subscription (fan-out) before it can read."""
    READING = "reading"
    CHECKING_CONSUMER = "checking_consumer"
    """Fan-out: a call was answered ResourceNotFound; is the stream consumer gone?"""
    CHECKING = "checking"
    """A position was refused or the shard seemed to vanish: needs a look at the stream."""
    ENDED = "ended"
    FAILED = "failed"


class ReadEvent(enum.Enum):
    """What happened to a shard's reader, as the transition table takes it."""

    CONNECTED = "connected"
    """A shard iterator, or a subscription, came back."""
    DATA = "data"
    """Records (or their absence) came, and the shard goes on."""
    LOOKED_UP = "looked_up"
    """A look-up while reading or connecting (is the shard closed? is the stream consumer
    still there?) was answered; the reader goes on."""
    DISCONNECTED = "disconnected"
    """The iterator expired, or the subscription ended or was cut: connect again."""
    RETRY = "retry"
    """A call failed with an error waiting fixes: back off, then the same step again."""
    REFUSED = "refused"
    """A position was refused, the shard was not found, or an answer ended the shard without
    naming its children: look at the stream."""
    RESUME = "resume"
    """The look at the stream found the shard open after an answer that ended it: read on
    with the same iterator."""
    DOUBTED_CONSUMER = "doubted_consumer"
    """Fan-out: ResourceNotFound; look at the stream consumer first."""
    CONSUMER_THERE = "consumer_there"
    """The stream consumer is there: look at the stream."""
    RESTART = "restart"
    """The look at the stream says: connect again (from the position, or the trim horizon)."""
    SHARD_ENDED = "shard_ended"
    """The shard was read to its end, or is gone."""
    GAVE_UP = "gave_up"
    """No retry fixes it (or too many failed): the reader fails."""


_S, _E = ReadState, ReadEvent
TRANSITIONS: Mapping[tuple[ReadState, ReadEvent], ReadState | None] = MappingProxyType(
    {
        (_S.CONNECTING, _E.CONNECTED): _S.READING,
        (_S.CONNECTING, _E.DATA): None,
        (_S.CONNECTING, _E.LOOKED_UP): _S.CONNECTING,
        (_S.CONNECTING, _E.DISCONNECTED): _S.CONNECTING,
        (_S.CONNECTING, _E.RETRY): _S.CONNECTING,
        (_S.CONNECTING, _E.REFUSED): _S.CHECKING,
        (_S.CONNECTING, _E.RESUME): None,
        (_S.CONNECTING, _E.DOUBTED_CONSUMER): _S.CHECKING_CONSUMER,
        (_S.CONNECTING, _E.CONSUMER_THERE): None,
        (_S.CONNECTING, _E.RESTART): None,
        (_S.CONNECTING, _E.SHARD_ENDED): _S.ENDED,
        (_S.CONNECTING, _E.GAVE_UP): _S.FAILED,
        (_S.READING, _E.CONNECTED): None,
        (_S.READING, _E.DATA): _S.READING,
        (_S.READING, _E.LOOKED_UP): _S.READING,
        (_S.READING, _E.DISCONNECTED): _S.CONNECTING,
        (_S.READING, _E.RETRY): _S.READING,
        (_S.READING, _E.REFUSED): _S.CHECKING,
        (_S.READING, _E.RESUME): None,
        (_S.READING, _E.DOUBTED_CONSUMER): _S.CHECKING_CONSUMER,
        (_S.READING, _E.CONSUMER_THERE): None,
        (_S.READING, _E.RESTART): None,
        (_S.READING, _E.SHARD_ENDED): _S.ENDED,
        (_S.READING, _E.GAVE_UP): _S.FAILED,
        (_S.CHECKING_CONSUMER, _E.CONNECTED): None,
        (_S.CHECKING_CONSUMER, _E.DATA): None,
        (_S.CHECKING_CONSUMER, _E.LOOKED_UP): None,
        (_S.CHECKING_CONSUMER, _E.DISCONNECTED): None,
        (_S.CHECKING_CONSUMER, _E.RETRY): _S.CONNECTING,
        (_S.CHECKING_CONSUMER, _E.REFUSED): None,
        (_S.CHECKING_CONSUMER, _E.RESUME): None,
        (_S.CHECKING_CONSUMER, _E.DOUBTED_CONSUMER): None,
        (_S.CHECKING_CONSUMER, _E.CONSUMER_THERE): _S.CHECKING,
        (_S.CHECKING_CONSUMER, _E.RESTART): None,
        (_S.CHECKING_CONSUMER, _E.SHARD_ENDED): None,
        (_S.CHECKING_CONSUMER, _E.GAVE_UP): _S.FAILED,
        (_S.CHECKING, _E.CONNECTED): None,
        (_S.CHECKING, _E.DATA): None,
        (_S.CHECKING, _E.LOOKED_UP): None,
        (_S.CHECKING, _E.DISCONNECTED): None,
        (_S.CHECKING, _E.RETRY): _S.CHECKING,
        (_S.CHECKING, _E.REFUSED): None,
        (_S.CHECKING, _E.RESUME): _S.READING,
        (_S.CHECKING, _E.DOUBTED_CONSUMER): None,
        (_S.CHECKING, _E.CONSUMER_THERE): None,
        (_S.CHECKING, _E.RESTART): _S.CONNECTING,
        (_S.CHECKING, _E.SHARD_ENDED): _S.ENDED,
        (_S.CHECKING, _E.GAVE_UP): _S.FAILED,
        (_S.ENDED, _E.CONNECTED): None,
        (_S.ENDED, _E.DATA): None,
        (_S.ENDED, _E.LOOKED_UP): None,
        (_S.ENDED, _E.DISCONNECTED): None,
        (_S.ENDED, _E.RETRY): None,
        (_S.ENDED, _E.REFUSED): None,
        (_S.ENDED, _E.RESUME): None,
        (_S.ENDED, _E.DOUBTED_CONSUMER): None,
        (_S.ENDED, _E.CONSUMER_THERE): None,
        (_S.ENDED, _E.RESTART): None,
        (_S.ENDED, _E.SHARD_ENDED): None,
        (_S.ENDED, _E.GAVE_UP): None,
        (_S.FAILED, _E.CONNECTED): None,
        (_S.FAILED, _E.DATA): None,
        (_S.FAILED, _E.LOOKED_UP): None,
        (_S.FAILED, _E.DISCONNECTED): None,
        (_S.FAILED, _E.RETRY): None,
        (_S.FAILED, _E.REFUSED): None,
        (_S.FAILED, _E.RESUME): None,
        (_S.FAILED, _E.DOUBTED_CONSUMER): None,
        (_S.FAILED, _E.CONSUMER_THERE): None,
        (_S.FAILED, _E.RESTART): None,
        (_S.FAILED, _E.SHARD_ENDED): None,
        (_S.FAILED, _E.GAVE_UP): None,
    }
)
"""Every (state, event): the state it leads to, or None: the event is not allowed there
(:class:`ReadProtocolError`). ENDED and FAILED allow none: the driver stops there."""


class ReadProtocolError(KinesisConnectorError, RuntimeError):
    """An event the transition table does not allow in the reader's state: a driver bug (a
    response fed twice, or to a machine that never asked for that call)."""


def transition(state: ReadState, event: ReadEvent) -> ReadState:
    """The state ``event`` leads to from ``state`` (:data:`TRANSITIONS`), or
    :class:`ReadProtocolError` when the table does not allow it."""
    target = TRANSITIONS[state, event]
    if target is None:
        raise ReadProtocolError(f"{event.name} is not allowed while {state.name}")
    return target


def handled_by_reader(kind: ErrorKind | None) -> bool:
    """Whether a shard reader recovers from an error of this kind on its own; drivers raise
    the rest (auth, invalid, fatal, or no service error at all)."""
    return kind is not None and (kind.retryable or kind in (ErrorKind.EXPIRED, ErrorKind.NOT_FOUND))


MAX_UNEXPLAINED = 5
"""Failures in a row, the last of them a ResourceNotFound that a listing does not explain
(the shard is listed and no position was refused), before a reader gives up."""


class ShardRead:
    """The transport-independent half of one shard's reader (sans-I/O: ``now`` comes in).

    Subclasses implement :meth:`next_action` and :meth:`on_response` for their calls. They
    move the state only through :meth:`_handle` (the table), and use :meth:`_deliver` for the
    raw records of a response, :meth:`_end` at the end of the shard, :meth:`_backoff` after a
    failure and :meth:`_progress` after a success.
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
        deaggregate: bool = True,
    ) -> None:
        self.node = node
        self.shard_id = node.shard_id
        self.deaggregate = deaggregate
        """False: each Kinesis record is delivered as it is (a KPL aggregate as one record of
        its KPL bytes, sub-sequence number 0, no hash-range filter): for a reader that wants
        positions, not user records."""
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
        self._millis_behind_latest: int | None = None
        self._last_error: ErrorKind | None = None
        self._connects = 0
        self._claimed_end = False
        """An answer ended the shard without naming its children: the look at the stream
        decides whether it did."""
        self._bad_answers = 0

    @property
    def state(self) -> ReadState:
        return self._state

    @property
    def failures(self) -> int:
        """Failed calls in a row since the last success."""
        return self._failures

    @property
    def last_error(self) -> ErrorKind | None:
        """The kind of the last failure, until a call succeeds."""
        return self._last_error

    @property
    def millis_behind_latest(self) -> int | None:
        """The lag the last data response reported (for status)."""
        return self._millis_behind_latest

    @property
    def bad_answers(self) -> int:
        """Answers taken for bad so far (:meth:`_bad_answer`), for metrics."""
        return self._bad_answers

    @property
    def last_sequence(self) -> int | None:
        """The sequence number of the last Kinesis record read (delivered or not: an aggregate
        the hash-range filter dropped counts); None before the first."""
        return self._last_sequence

    @property
    def connects(self) -> int:
        """Connection steps asked for: shard iterators (polling) or subscriptions (fan-out)."""
        return self._connects

    # -- the transport's part ------------------------------------------------------------

    def next_action(self, now: float) -> Action:
        """What to do now. A returned call means "send it now" (rate limits count it)."""
        raise NotImplementedError

    def on_response(self, now: float, call: Call, response: Any, ack: Ack | None = None) -> Outcome:
        """The response to ``call``."""
        raise NotImplementedError

    def handles(self, call: Call, kind: ErrorKind | None) -> bool:
        """Whether this machine takes ``call``'s error of ``kind`` (:meth:`on_error`); the
        driver raises the others."""
        return handled_by_reader(kind)

    def refused_position(self, call: Call) -> int | None:
        """The sequence number ``call`` asked to read at or after, if it named one (a refusal
        of it is then judged as a refused position)."""
        return None

    def on_error(self, now: float, call: Call, kind: ErrorKind) -> Outcome:
        """``call`` failed with an error of ``kind`` that :meth:`handles` accepts."""
        self._failed_call(call, kind)
        if isinstance(call, CheckStream) and kind is ErrorKind.NOT_FOUND:
            self._fail(f"stream {self.stream or '?'} no longer exists (deleted?)")
        elif kind in (ErrorKind.NOT_FOUND, ErrorKind.INVALID):
            self._refused = self.refused_position(call)
            self._handle(ReadEvent.REFUSED)
        else:
            self._handle(ReadEvent.RETRY)
            self._backoff(now)
        return Outcome([], error=kind)

    def on_stream_view(self, now: float, view: StreamView) -> Outcome:
        """The answer to :class:`CheckStream`: decide what the refusal meant."""
        verdict = judge_refusal(
            self.shard_id, self._refused, view.shards, view.facts, self.incarnation, self.stream
        )
        self._refused = None
        claimed, self._claimed_end = self._claimed_end, False
        if claimed and verdict.refusal is Refusal.RETRY:
            return self._judge_claimed_end(now, view)
        if verdict.refusal is Refusal.GONE:
            self._gone = True
            self._handle(ReadEvent.SHARD_ENDED)
        elif verdict.refusal is Refusal.RECREATED:
            self._fail(verdict.message, verdict.error)
        elif verdict.refusal is Refusal.TRIMMED:
            self._read_from_trim_horizon()
            self._handle(ReadEvent.RESTART)
            return Outcome([], warning=verdict.message)
        else:
            self._handle(ReadEvent.RESTART)
            self._restart_backoff(now)
        return NOTHING

    def _judge_claimed_end(self, now: float, view: StreamView) -> Outcome:
        """An answer ended the shard without its children, and the shard is listed: it ended
        if the listing shows it closed (its children are the listing's); otherwise the answer
        was bad, and the machine reads on."""
        info = next(s for s in view.shards if s.shard_id == self.shard_id)
        if not info.is_open:
            self._children = ShardNode.children_of(self.shard_id, view.shards)
            self._handle(ReadEvent.SHARD_ENDED)
            return NOTHING
        self._handle(ReadEvent.RESUME if self._resumable() else ReadEvent.RESTART)
        return self._bad_answer(
            now,
            f"an answer ended shard {self.shard_id} of {self.stream or '?'} without naming its "
            "children, yet ListShards shows it open",
        )

    def _resumable(self) -> bool:
        """Whether the machine can read on from where the last answer found it (polling:
        the iterator it read with), rather than connect again."""
        return False

    def _claim_end(self, children: Sequence[Mapping[str, Any]] | None) -> None:
        """An answer ends the shard: with ``children`` (ChildShards), it did; without, a look
        at the stream decides (:meth:`_judge_claimed_end`)."""
        if children:
            self._end(children)
        else:
            self._claimed_end = True
            self._handle(ReadEvent.REFUSED)

    def _bad_answer(self, now: float, reason: str) -> Outcome:
        """An answer that is not one (the state already moved): counted, and backed off from
        as from a transient error."""
        self._bad_answers += 1
        self._last_error = ErrorKind.TRANSIENT
        self._backoff(now)
        return Outcome(
            [],
            error=ErrorKind.TRANSIENT,
            warning=f"bad answer #{self._bad_answers} on {self.shard_id}: {reason}; "
            f"reading on after {self._not_before - now:.1f} s",
        )

    def _read_from_trim_horizon(self) -> None:
        """Forget every position: the next connection reads from the trim horizon."""
        self._start = TRIM_HORIZON
        self._skip_through = None
        self._last_sequence = None

    def _restart_backoff(self, now: float) -> None:
        """Connecting again after a look that explained nothing (the shard is listed, no
        position was refused): back off, and give up after :data:`MAX_UNEXPLAINED` such
        failures in a row."""
        self._backoff(now)
        if self._failures >= MAX_UNEXPLAINED:
            self._fail(
                f"{self._failures} failures in a row, the last a ResourceNotFound for a "
                "shard that ListShards still lists"
            )

    # -- the common part -----------------------------------------------------------------

    def _handle(self, event: ReadEvent) -> None:
        """Move the state as :data:`TRANSITIONS` says, or raise :class:`ReadProtocolError`."""
        self._state = self._expect(event)

    def _expect(self, event: ReadEvent) -> ReadState:
        """The state ``event`` leads to from here; :class:`ReadProtocolError` when the table
        does not allow it (checked before a response is taken apart)."""
        try:
            return transition(self._state, event)
        except ReadProtocolError as exc:
            raise ReadProtocolError(f"reader of {self.shard_id}: {exc}") from None

    def _failed_call(self, call: Call, kind: ErrorKind) -> None:
        """The checks every failure goes through before the machine decides."""
        if not self.handles(call, kind):
            raise ValueError(f"{kind} errors are raised by the driver, not fed to the machine")
        self._last_error = kind

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

    def _deliver(
        self, records: Sequence[WireRecord | Mapping[str, Any]], ack: Ack | None
    ) -> list[KinesisRecord]:
        """Deaggregate ``records`` with the shard's hash-range filter (unless
        :attr:`deaggregate` is off) and drop what the start checkpoint covers (a resume inside
        an aggregate)."""
        if not records:
            return []
        raw = wire_records(records)
        self._last_sequence = int(raw[-1].sequence_number)
        if self.deaggregate:
            out = deaggregate(raw, self.shard_id, self.node.hash_range, ack)
        else:
            out = as_records(raw, self.shard_id, ack)
        skip = self._skip_through
        if skip is not None:
            out = [r for r in out if r.position > skip]
            if self._last_sequence > skip[0]:
                self._skip_through = None
        return out

    def _end(self, children: Sequence[Mapping[str, Any]] | None) -> None:
        """The shard reached its end; ``children`` are the ChildShards of the last response."""
        self._children = tuple(ShardNode.from_child_shard(child) for child in children or ())
        self._handle(ReadEvent.SHARD_ENDED)

    def _fail(self, reason: str, error: KinesisConnectorError | None = None) -> None:
        self._failed_reason = reason
        self._failed_error = error
        self._handle(ReadEvent.GAVE_UP)

    def _progress(self) -> None:
        self._failures = 0
        self._last_error = None

    def _backoff(self, now: float) -> None:
        """One more failure in a row, and the wait after it."""
        self._failures += 1
        self._hold(now)

    def _hold(self, now: float) -> None:
        """Wait after the failures counted so far before the next call."""
        delay = self._backoff_policy.delay(self._failures, self._rng())
        self._not_before = max(self._not_before, now + delay)
