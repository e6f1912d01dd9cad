"""Reading a shard by enhanced fan-out: SubscribeToShard, then the events it pushes (sans-I/O).

:class:`SubscriptionRead` subscribes at most once per ``subscribe_interval``, counted from the
answer to the previous call (Kinesis allows one SubscribeToShard per second per shard and
consumer, counted where it receives them), reads events one at a time (the
transport asks the server for more only when the reader takes one: that is the backpressure),
renews the subscription when it ends (after at most five minutes on AWS) from the last
ContinuationSequenceNumber so nothing is lost or read twice, backs off on ResourceInUse (the
previous subscription is still open), LimitExceeded, ResourceNotFound, internal failures and
connections cut mid-stream, and gives up (:class:`~.transport.Failed`) after
``max_failures`` failures in a row with no event in between. A shard ends at an event with
no ContinuationSequenceNumber, whose ChildShards go to the lineage as with polling (an event
without either ends the shard only if a listing shows it closed; on an open shard it is a
bad answer, counted, and the reader subscribes again from the last continuation). The start
point, the skip past a checkpoint inside an aggregate and the hash-range filter are the
common part (:class:`~.transport.ShardRead`), so checkpoints mean the same in both modes.

A ResourceNotFoundException (from the subscribe or mid-stream) makes the reader describe its
stream consumer (:class:`CheckConsumer`) before it backs off: a consumer that is gone
(deregistered, or its stream deleted) fails the reader at once, naming it. When the consumer is
still there, the shard, the stream or the position was not found: the reader looks at the
stream (:class:`~.transport.CheckStream`) and decides by the polling reader's rule
(:func:`~.incarnation.judge_refusal`): a shard no longer listed is gone, a stream created
again fails the reader, a position the service refused (a subscribe at a sequence number
answered ResourceNotFound or InvalidArgument) is another incarnation's or older than the trim
horizon (read from TRIM_HORIZON, with a warning), and anything else subscribes again after the
backoff.

A server that never sends that last event (kinesis-mock 0.6.2 keeps a closed shard's
subscription open with empty events) is covered too: a reader that is caught up at the tip
looks up its shard in a listing every ``closed_check_interval`` seconds
(:class:`CheckShard`); once the shard is known closed, the next empty event at the tip means
every record was delivered (a closed shard takes no more writes), and the shard ends with the
children the listing names.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kinesis_core.aws.backoff import Backoff, Jitter
from kinesis_core.aws.calls import Call, Wait
from kinesis_core.aws.classify import ErrorKind
from kinesis_core.consumer.lineage import ShardNode, StartPoint
from kinesis_core.consumer.positions import InitialPosition
from kinesis_core.consumer.transport import (
    NOTHING,
    Ack,
    Action,
    CheckStream,
    Outcome,
    ReadEvent,
    ReadState,
    ShardRead,
)
from kinesis_core.errors import ConfigurationError
from kinesis_core.records import WireRecord


def renewal_position(continuation_sequence_number: str) -> dict[str, str]:
    """The StartingPosition that renews a subscription after an event with this continuation
    sequence number: AFTER_SEQUENCE_NUMBER, as the KCL's FanOutRecordsPublisher reconnects (the
    continuation is the sequence number of the last record delivered, or of the last record
    before the subscription's start when no record came)."""
    return {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": continuation_sequence_number}


MAX_SUBSCRIPTION_SECONDS = 300.0
"""AWS ends a subscription after 5 minutes."""
DEFAULT_MAX_BUFFERED_BYTES = 2 * 1024 * 1024
"""Per subscription: about one second of a shard's 2 MiB/s of fan-out throughput."""
MIN_BUFFERED_BYTES = 65_535
"""HTTP/2's smallest flow-control window."""
HTTP_VERSIONS = ("auto", "h2", "http/1.1")


def check_subscription_options(
    max_subscription_seconds: float, max_buffered_bytes: int, http_version: str
) -> None:
    """The options subscriptions are made with (``EnhancedFanOut`` and ``FanOutClient`` take
    them): a ConfigurationError naming the first one out of bounds."""
    if not 0 < max_subscription_seconds <= MAX_SUBSCRIPTION_SECONDS:
        raise ConfigurationError(
            "max_subscription_seconds",
            f"must be in (0, {MAX_SUBSCRIPTION_SECONDS:g}] seconds, "
            f"got {max_subscription_seconds!r}",
        )
    if (
        isinstance(max_buffered_bytes, bool)
        or not isinstance(max_buffered_bytes, int)
        or max_buffered_bytes < MIN_BUFFERED_BYTES
    ):
        raise ConfigurationError(
            "max_buffered_bytes",
            f"must be an int >= {MIN_BUFFERED_BYTES} (HTTP/2's smallest window), "
            f"got {max_buffered_bytes!r}",
        )
    if http_version not in HTTP_VERSIONS:
        raise ConfigurationError(
            "http_version", f"must be 'auto', 'h2' or 'http/1.1', got {http_version!r}"
        )


SUBSCRIPTION_BACKOFF = Backoff(0.5, 10.0, Jitter.EQUAL)


@dataclass(frozen=True, slots=True)
class SubscriptionOptions:
    """Tuning of a fan-out reader; the defaults follow the service limits."""

    subscribe_interval: float = 1.1
    """Seconds from the answer to one SubscribeToShard call on a shard to the next call (the
    service allows one per second, counted where it receives them, which is somewhere between
    sending and answering: pacing from the answer keeps any two arrivals this far apart, and
    the 0.1 s above 1 s is the margin)."""
    pending_interval: float = 0.05
    """Seconds before a synchronous driver looks again when no event was waiting."""
    backoff: Backoff = SUBSCRIPTION_BACKOFF
    """After failed calls: the base doubling up to the maximum, with jitter."""
    max_failures: int = 20
    """Failures in a row (no event in between) before the reader gives up with an error."""
    closed_check_interval: float = 30.0
    """Seconds between listings of a caught-up shard, to learn that it closed when the server
    does not say so in an event; and between looks at the stream consumer while a subscription
    is open, to learn that it was deregistered (the service may keep a live subscription open
    until it ends)."""

    def __post_init__(self) -> None:
        if self.subscribe_interval < 1.0:
            raise ConfigurationError(
                "subscribe_interval",
                f"must be >= 1 s (one SubscribeToShard per second per shard), "
                f"got {self.subscribe_interval!r}",
            )
        if not 0 < self.pending_interval <= 1.0:
            raise ConfigurationError(
                "pending_interval", f"must be in (0, 1] seconds, got {self.pending_interval!r}"
            )
        if self.max_failures < 1:
            raise ConfigurationError("max_failures", f"must be >= 1, got {self.max_failures!r}")
        if not self.closed_check_interval > 0:
            raise ConfigurationError(
                "closed_check_interval", f"must be > 0 seconds, got {self.closed_check_interval!r}"
            )


@dataclass(frozen=True, slots=True)
class Subscribe(Call):
    """SubscribeToShard from ``starting_position`` (the API's StartingPosition)."""

    starting_position: dict[str, Any]


@dataclass(frozen=True, slots=True)
class NextEvent(Call):
    """The next event of the open subscription. The response is a :class:`SubscribeEvent`,
    or None when the subscription ended normally."""


@dataclass(frozen=True, slots=True)
class CheckShard(Call):
    """Look the shard up in a (recent) ListShards listing. The response is a
    :class:`ShardCheck`."""


@dataclass(frozen=True, slots=True)
class ShardCheck:
    """What a listing says of a shard: ``listed`` False when it is gone (past retention);
    ``closed`` with its ``children`` when it was split or merged."""

    listed: bool
    closed: bool
    children: tuple[ShardNode, ...] = ()


@dataclass(frozen=True, slots=True)
class CheckConsumer(Call):
    """Describe the stream consumer the subscriptions are made as (DescribeStreamConsumer):
    is it gone? The response is a :class:`ConsumerCheck`. After a ResourceNotFoundException
    the look is fresh; the periodic look and the one before a renewal are ``shared``: an answer
    the executor got for another shard's reader of the same consumer serves while it is
    recent (``listing_max_age``), so a stream of many shards does not spend the
    DescribeStreamConsumer rate."""

    shared: bool = False


@dataclass(frozen=True, slots=True)
class ConsumerCheck:
    """What DescribeStreamConsumer says of the consumer ``consumer_name`` of ``stream``:
    ``status`` ACTIVE, CREATING or DELETING; None when it is not found."""

    consumer_arn: str
    consumer_name: str
    stream: str
    status: str | None

    @property
    def gone(self) -> bool:
        """Deregistered (or being deregistered): no subscription will succeed again."""
        return self.status in (None, "DELETING")


@dataclass(frozen=True, slots=True)
class SubscribeEvent:
    """One SubscribeToShardEvent.

    ``records`` are GetRecords' records, as the fast parser decodes them (``WireRecord``) or
    as botocore does.
    ``continuation_sequence_number`` is where the next subscription starts
    (:func:`renewal_position`); AWS leaves it out at the end of a shard, where
    ``child_shards`` (GetRecords' ChildShards shape) lists the children. ``size`` is the
    event's length on the wire, for memory accounting.
    """

    records: Sequence[WireRecord | Mapping[str, Any]]
    continuation_sequence_number: str | None
    millis_behind_latest: int | None
    child_shards: Sequence[Mapping[str, Any]] = ()
    size: int = 0

    @property
    def shard_ended(self) -> bool:
        """The event says the shard is closed and this was its last event (AWS: no
        ContinuationSequenceNumber; kinesis-mock 0.6.2 never says so over a subscription, see
        docs/efo.md). The reader trusts it only with ChildShards, or when a listing shows the
        shard closed."""
        return bool(self.child_shards) or self.continuation_sequence_number is None


def starting_position(start: InitialPosition) -> dict[str, Any]:
    """The StartingPosition of an initial position."""
    if start.timestamp is not None:
        return {"Type": "AT_TIMESTAMP", "Timestamp": start.timestamp}
    return {"Type": start.sentinel.value}


class SubscriptionRead(ShardRead):
    """The decisions of one shard's fan-out reader."""

    transport = "subscription"

    def __init__(
        self,
        node: ShardNode,
        start: StartPoint,
        options: SubscriptionOptions | None = None,
        *,
        rng: Callable[[], float] = random.random,
        incarnation: int | None = None,
        stream: str = "",
        deaggregate: bool = True,
    ) -> None:
        self.options = options or SubscriptionOptions()
        super().__init__(
            node,
            start,
            self.options.backoff,
            rng,
            incarnation=incarnation,
            stream=stream,
            deaggregate=deaggregate,
        )
        self._continuation: str | None = None
        self._next_subscribe_at = 0.0
        self._closed = not node.is_open
        self._closed_children: tuple[ShardNode, ...] = ()
        self._next_check_at = 0.0
        self._at_tip = False
        """The last event was empty and at the tip: a look-up may tell that the shard closed."""
        self._next_consumer_check_at: float | None = None
        """When to look at the stream consumer next while reading (set at the first
        subscription: the consumer was described just before it)."""
        self._renewing = False
        """A subscription ended or was cut: look at the stream consumer before subscribing
        again."""

    def next_action(self, now: float) -> Action:
        finished = self._finished() or self._check_action(now)
        if finished is not None:
            return finished
        if self._state is ReadState.READING:
            if now < self._not_before:
                return Wait(self._not_before)
            if self._next_consumer_check_at is not None and now >= self._next_consumer_check_at:
                self._next_consumer_check_at = now + self.options.closed_check_interval
                return CheckConsumer(shared=True)
            if self._at_tip and not self._closed and now >= self._next_check_at:
                self._next_check_at = now + self.options.closed_check_interval
                return CheckShard()
            return NextEvent()
        if self._state is ReadState.CHECKING_CONSUMER:
            # Before the backoff: a consumer that is gone should fail the reader at once.
            return CheckConsumer()
        if self._renewing:
            if now < self._not_before:
                return Wait(self._not_before)
            return CheckConsumer(shared=True)
        due = max(self._not_before, self._next_subscribe_at)
        if now < due:
            return Wait(due)
        self._next_subscribe_at = now + self.options.subscribe_interval
        self._connects += 1
        return Subscribe(self._starting_position())

    def _starting_position(self) -> dict[str, Any]:
        if self._continuation is not None:
            return renewal_position(self._continuation)
        if self._last_sequence is not None:
            return {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": str(self._last_sequence)}
        if isinstance(self._start, InitialPosition):
            return starting_position(self._start)
        return {"Type": "AT_SEQUENCE_NUMBER", "SequenceNumber": str(self._start[0])}

    def on_response(self, now: float, call: Call, response: Any, ack: Ack | None = None) -> Outcome:
        if isinstance(call, Subscribe):
            self._handle(ReadEvent.CONNECTED)
            self._paced(now)
            self._not_before = 0.0
            self._at_tip = False
            if self._next_consumer_check_at is None:
                self._next_consumer_check_at = now + self.options.closed_check_interval
            return NOTHING
        if isinstance(call, CheckShard):
            return self.on_check(response)
        if isinstance(call, CheckConsumer):
            return self.on_consumer(response)
        if isinstance(call, CheckStream):
            return self.on_stream_view(now, response)
        if response is None:
            # The subscription ended (five minutes, or the server closed it): renew it from
            # the continuation, as soon as the subscribe rate allows, once the stream consumer
            # is known to be still there.
            self._handle(ReadEvent.DISCONNECTED)
            self._renewing = True
            return NOTHING
        return self.on_event(response, ack)

    def on_event(self, event: SubscribeEvent, ack: Ack | None = None) -> Outcome:
        """One SubscribeToShardEvent: the user records to deliver, in shard order."""
        self._expect(ReadEvent.DATA)
        self._progress()
        records = self._deliver(event.records, ack)
        millis = event.millis_behind_latest
        self._millis_behind_latest = millis
        continuation = event.continuation_sequence_number
        if continuation is not None:
            self._continuation = continuation
        if event.shard_ended:
            if self._closed and not event.child_shards:
                self._children = self._closed_children
                self._handle(ReadEvent.SHARD_ENDED)
            else:
                self._claim_end(event.child_shards)
            return Outcome(records, data=True, millis_behind_latest=millis)
        if self._closed and millis == 0 and not event.records:
            # At the tip of a shard known to be closed: nothing more can come.
            self._children = self._closed_children
            self._handle(ReadEvent.SHARD_ENDED)
            return Outcome(records, data=True, millis_behind_latest=millis)
        self._handle(ReadEvent.DATA)
        caught_up = millis == 0
        self._at_tip = caught_up and not event.records
        return Outcome(
            records, data=True, caught_up=caught_up, idle=self._at_tip, millis_behind_latest=millis
        )

    def _paced(self, now: float) -> None:
        """A SubscribeToShard call was answered (or failed) at ``now``: it reached the service
        before that, so the next one goes ``subscribe_interval`` after it at the earliest."""
        self._next_subscribe_at = max(
            self._next_subscribe_at, now + self.options.subscribe_interval
        )

    def on_consumer(self, check: ConsumerCheck) -> Outcome:
        """DescribeStreamConsumer's answer: a consumer that is gone fails the reader now. When
        it is still there after a ResourceNotFoundException, the shard or the stream was not
        found: look at the stream; after a periodic look, or one before a renewal, the reader
        goes on."""
        if check.gone:
            self._fail(
                f"stream consumer {check.consumer_name!r} of stream {check.stream!r} is gone "
                f"({check.status or 'not found'} by DescribeStreamConsumer, "
                f"{check.consumer_arn}): it was deregistered, or its stream deleted, while this "
                "reader subscribed as it"
            )
        elif self._state is ReadState.CHECKING_CONSUMER:
            self._handle(ReadEvent.CONSUMER_THERE)
        else:
            self._renewing = False
            self._handle(ReadEvent.LOOKED_UP)
        return NOTHING

    def on_check(self, check: ShardCheck) -> Outcome:
        """A listing's view of the shard (the response to :class:`CheckShard`)."""
        if not check.listed:
            self._gone = True
            self._handle(ReadEvent.SHARD_ENDED)
            return NOTHING
        self._handle(ReadEvent.LOOKED_UP)
        if check.closed:
            self._closed = True
            self._closed_children = check.children
        return NOTHING

    def handles(self, call: Call, kind: ErrorKind | None) -> bool:
        """Also InvalidArgument for a subscribe at a sequence number: a refused position."""
        if kind is ErrorKind.INVALID:
            return self.refused_position(call) is not None
        return super().handles(call, kind)

    def refused_position(self, call: Call) -> int | None:
        if isinstance(call, Subscribe) and "SequenceNumber" in call.starting_position:
            return int(call.starting_position["SequenceNumber"])
        return None

    def on_error(self, now: float, call: Call, kind: ErrorKind) -> Outcome:
        """Every failure (of the subscribe or mid-stream) closes the subscription: subscribe
        again after a backoff, from where the last event left off; give up after
        ``max_failures`` in a row. A look at the stream that fails is the common part's."""
        if isinstance(call, CheckStream):
            return super().on_error(now, call, kind)
        self._failed_call(call, kind)
        if isinstance(call, Subscribe):
            self._paced(now)
        self._failures += 1
        if self._failures >= self.options.max_failures:
            what = {Subscribe: "SubscribeToShard", CheckConsumer: "DescribeStreamConsumer"}.get(
                type(call), "the subscription"
            )
            self._fail(
                f"{what} failed {self._failures} times in a row ({kind.value})"
                + (
                    "; does the consumer still exist, and is it ACTIVE?"
                    if kind is ErrorKind.NOT_FOUND
                    else ""
                )
            )
        elif kind is ErrorKind.NOT_FOUND and isinstance(call, (Subscribe, NextEvent)):
            self._refused = self.refused_position(call)
            self._handle(ReadEvent.DOUBTED_CONSUMER)
        elif kind is ErrorKind.INVALID:
            self._refused = self.refused_position(call)
            self._handle(ReadEvent.REFUSED)
        elif isinstance(call, CheckConsumer) and self._state is ReadState.READING:
            # The periodic look failed: the subscription goes on, and the look comes again
            # after the backoff.
            self._next_consumer_check_at = now
            self._handle(ReadEvent.RETRY)
            self._hold(now)
        else:
            cut = self._state is ReadState.READING
            self._handle(ReadEvent.DISCONNECTED if cut else ReadEvent.RETRY)
            self._renewing = self._renewing or cut
            self._hold(now)
        return Outcome([], error=kind)

    def _restart_backoff(self, now: float) -> None:
        """The failure was counted (and checked against ``max_failures``) when it came."""
        self._hold(now)

    def _read_from_trim_horizon(self) -> None:
        super()._read_from_trim_horizon()
        self._continuation = None


def event_from_api(payload: Mapping[str, Any]) -> SubscribeEvent:
    """A SubscribeToShardEvent as botocore parses it (or as our own parser gives it)."""
    return SubscribeEvent(
        records=payload.get("Records") or (),
        continuation_sequence_number=payload.get("ContinuationSequenceNumber"),
        millis_behind_latest=payload.get("MillisBehindLatest"),
        child_shards=payload.get("ChildShards") or (),
    )
