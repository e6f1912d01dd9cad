"""Sans-I/O decisions of a registered consumer's life cycle: register or reuse, wait for ACTIVE;
and what a consumer ARN and a consumer name may look like.

RegisterStreamConsumer answers with the consumer in CREATING (kinesis-mock: for its
REGISTER_STREAM_CONSUMER_DURATION, 500 ms by default; AWS: several seconds), and
ResourceInUseException when a consumer of that name exists: then it is described and reused.
LimitExceededException means either a rate (5 calls/s, 5 consumers CREATING at once) or the
consumers a stream may have: 20, or 50 on an On-demand Advantage stream, which no call shows.
The consumers are listed to tell which: under 20 it is a rate, retried; from 50 the limit; in
between, retried a few times (a rate passes) before it is reported as the 20 limit. A consumer
that is DELETING is waited out and registered again. Every wait backs off (with jitter) until a
deadline, after which the machine fails with the last status it saw.

The driver (:mod:`kinesis_core.fanout.consumers`) asks ``next_action(now)``, performs it, and
reports what came back.

A consumer ARN looks like
``arn:aws:kinesis:us-east-1:123456789012:stream/orders/consumer/reader:1700000000``: the stream
it belongs to is part of it, which :func:`parse_consumer_arn` checks without a call.
"""

from __future__ import annotations

import enum
import random
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from kinesis_core.aws.backoff import ceiling
from kinesis_core.aws.calls import Wait
from kinesis_core.errors import ConfigurationError, KinesisConnectorError

MAX_CONSUMERS_PER_STREAM = 20
"""Registered consumers a provisioned or On-demand Standard stream takes."""
MAX_CONSUMERS_ON_DEMAND_ADVANTAGE = 50
"""Registered consumers an On-demand Advantage stream takes."""
LIMIT_RETRIES = 3
"""LimitExceededException with 20 to 49 consumers listed: retries before it counts as the
stream's limit (a rate limit passes within them)."""

_ARN = re.compile(
    r"^arn:(?P<partition>aws[a-zA-Z-]*):kinesis:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):"
    r"stream/(?P<stream>[a-zA-Z0-9_.-]{1,128})/consumer/(?P<consumer>[a-zA-Z0-9_.-]{1,128})"
    r":(?P<created>\d+)$"
)
_NAME = re.compile(r"^[a-zA-Z0-9_.-]{1,128}$")


@dataclass(frozen=True)
class ConsumerArn:
    """The parts of a consumer ARN."""

    arn: str
    partition: str
    region: str
    account_id: str
    stream_name: str
    consumer_name: str
    creation_timestamp: int

    @property
    def stream_arn(self) -> str:
        return (
            f"arn:{self.partition}:kinesis:{self.region}:{self.account_id}:"
            f"stream/{self.stream_name}"
        )


@dataclass(frozen=True)
class StreamConsumer:
    """A registered consumer as DescribeStreamConsumer describes it."""

    consumer_name: str
    consumer_arn: str
    stream_arn: str
    status: str
    creation_timestamp: datetime | None = None


def parse_consumer_arn(consumer_arn: str) -> ConsumerArn:
    """The parts of ``consumer_arn``; ConfigurationError naming the expected shape otherwise."""
    match = _ARN.match(consumer_arn) if isinstance(consumer_arn, str) else None
    if match is None:
        raise ConfigurationError(
            "consumer_arn",
            "must look like arn:aws:kinesis:REGION:ACCOUNT:stream/STREAM/consumer/NAME:"
            f"CREATION_TIMESTAMP, got {consumer_arn!r}",
        )
    return ConsumerArn(
        arn=consumer_arn,
        partition=match["partition"],
        region=match["region"],
        account_id=match["account"],
        stream_name=match["stream"],
        consumer_name=match["consumer"],
        creation_timestamp=int(match["created"]),
    )


def check_consumer_name(name: object, field: str = "consumer_name") -> str:
    """A valid consumer name (1 to 128 of ``[a-zA-Z0-9_.-]``), or ConfigurationError."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigurationError(
            field, f"a consumer name is 1..128 characters of [a-zA-Z0-9_.-], got {name!r}"
        )
    return name


MAX_CONSUMER_TAGS = 50


def check_consumer_tags(
    tags: Mapping[str, str] | Iterable[tuple[str, str]], field: str = "tags"
) -> tuple[tuple[str, str], ...]:
    """Tags for RegisterStreamConsumer as ``(key, value)`` pairs: at most 50, keys of 1 to 128
    characters not starting with ``aws:``, values of 0 to 256; ConfigurationError otherwise."""
    pairs = tuple(tags.items() if isinstance(tags, Mapping) else tags)
    if len(pairs) > MAX_CONSUMER_TAGS:
        raise ConfigurationError(field, f"at most {MAX_CONSUMER_TAGS} tags, got {len(pairs)}")
    for pair in pairs:
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise ConfigurationError(field, f"must map keys to values, got {pair!r:.80}")
        key, value = pair
        if not isinstance(key, str) or not 1 <= len(key) <= 128 or key.startswith("aws:"):
            raise ConfigurationError(
                field, f"a tag key is 1 to 128 characters, not starting with 'aws:', got {key!r}"
            )
        if not isinstance(value, str) or len(value) > 256:
            raise ConfigurationError(
                field, f"the value of tag {key!r} must be a str of at most 256 characters"
            )
    if len({key for key, _ in pairs}) != len(pairs):
        raise ConfigurationError(field, "a tag key appears twice")
    return pairs


def check_consumer_of_stream(consumer_arn: str, stream_arn: str) -> ConsumerArn:
    """Parse ``consumer_arn`` and check that it is a consumer of ``stream_arn``."""
    parsed = parse_consumer_arn(consumer_arn)
    if parsed.stream_arn != stream_arn:
        raise ConfigurationError(
            "consumer_arn",
            f"{consumer_arn} is a consumer of {parsed.stream_arn}, not of {stream_arn}",
        )
    return parsed


class ConsumerRegistrationError(KinesisConnectorError, RuntimeError):
    """The consumer could not be registered or did not become ACTIVE; the message says why."""


class Operation(enum.Enum):
    """What :class:`ConsumerActivation` asks its driver to call (the driver makes the
    :class:`~kinesis_core.aws.calls.ApiCall`)."""

    REGISTER = "RegisterStreamConsumer"
    DESCRIBE = "DescribeStreamConsumer"
    LIST = "ListStreamConsumers"


@dataclass(frozen=True)
class Send:
    """Make this call now."""

    operation: Operation


@dataclass(frozen=True)
class Active:
    """The consumer is ACTIVE: done."""

    consumer_arn: str


Action = Send | Wait | Active


class ConsumerActivation:
    """Register ``consumer_name`` (or describe ``consumer_arn``) until it is ACTIVE.

    With ``consumer_arn`` the machine only describes (an ARN cannot be registered): a consumer
    that is not found fails at once.
    """

    def __init__(
        self,
        *,
        consumer_name: str,
        stream: str,
        now: float,
        timeout: float = 120.0,
        consumer_arn: str | None = None,
        backoff_base: float = 0.05,
        backoff_max: float = 2.0,
        rng: Callable[[], float] = random.random,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {timeout}")
        self.consumer_name = consumer_name
        self.stream = stream
        self.consumer_arn = consumer_arn
        self.status: str | None = None
        self._by_arn = consumer_arn is not None
        self._deadline = now + timeout
        self._timeout = timeout
        self._base = backoff_base
        self._max = backoff_max
        self._rng = rng
        self._waits = 0
        self._limit_hits = 0
        self._next: Action = Send(Operation.DESCRIBE if self._by_arn else Operation.REGISTER)
        self._after_wait = self._next

    @property
    def deadline(self) -> float:
        """When the machine gives up waiting for ACTIVE (on the clock of its ``now``)."""
        return self._deadline

    def next_action(self, now: float) -> Action:
        action = self._next
        if isinstance(action, Wait) and now >= action.until:
            self._next = self._after_wait
            return self._next
        return action

    # -- what came back ---------------------------------------------------------------------

    def on_consumer(self, consumer_arn: str, status: str, now: float) -> None:
        """Register or Describe returned the consumer with this status."""
        self.consumer_arn = consumer_arn
        self.status = status
        if status == "ACTIVE":
            self._next = Active(consumer_arn)
        elif status == "DELETING" and not self._by_arn:
            self._wait(now, Send(Operation.DESCRIBE))
        elif status == "DELETING":
            raise ConsumerRegistrationError(
                f"consumer {consumer_arn} of stream {self.stream} is being deregistered"
            )
        else:
            self._wait(now, Send(Operation.DESCRIBE))

    def on_in_use(self, now: float) -> None:
        """Register said a consumer of this name exists: reuse it."""
        self._next = Send(Operation.DESCRIBE)

    def on_not_found(self, now: float) -> None:
        """Describe found no such consumer (deleted meanwhile, or a wrong ARN)."""
        if self._by_arn:
            raise ConsumerRegistrationError(
                f"consumer {self.consumer_arn} not found on stream {self.stream}: an ARN "
                "given directly must name a registered consumer"
            )
        self.status = None
        self._wait(now, Send(Operation.REGISTER))

    def on_limit_exceeded(self, call: Operation, now: float) -> None:
        """The call got LimitExceededException: find out which limit, or back off."""
        if call is Operation.REGISTER:
            self._next = Send(Operation.LIST)
        else:
            self._wait(now, Send(call))

    def on_listed(self, consumer_names: list[str], now: float) -> None:
        """The stream's consumers, after Register hit LimitExceededException."""
        count = len(consumer_names)
        if self.consumer_name in consumer_names:
            self._next = Send(Operation.DESCRIBE)
            return
        if count >= MAX_CONSUMERS_PER_STREAM:
            self._limit_hits += 1
            if count >= MAX_CONSUMERS_ON_DEMAND_ADVANTAGE or self._limit_hits > LIMIT_RETRIES:
                raise ConsumerRegistrationError(
                    f"stream {self.stream} already has {count} registered consumers: a stream "
                    f"takes {MAX_CONSUMERS_PER_STREAM} (provisioned and On-demand Standard) or "
                    f"{MAX_CONSUMERS_ON_DEMAND_ADVANTAGE} (On-demand Advantage); deregister one "
                    f"of {sorted(consumer_names)} or reuse one by name"
                )
        self._wait(now, Send(Operation.REGISTER))

    def on_transient_error(self, call: Operation, now: float) -> None:
        """Throttling or a server error: try the same call again after a backoff."""
        self._wait(now, Send(call))

    # -- internals --------------------------------------------------------------------------

    def _wait(self, now: float, then: Send) -> None:
        """Back off before ``then``; the last wait ends at the deadline, and a wait asked for
        after it gives up."""
        if now >= self._deadline:
            raise self._gave_up()
        self._waits += 1
        delay = ceiling(self._base, self._max, self._waits)
        self._after_wait = then
        self._next = Wait(min(self._deadline, now + delay * (0.5 + 0.5 * self._rng())))

    def _gave_up(self) -> ConsumerRegistrationError:
        what = self.consumer_arn or f"consumer {self.consumer_name!r}"
        seen = f"still {self.status}" if self.status else "not registered"
        return ConsumerRegistrationError(
            f"{what} of stream {self.stream} is {seen} after {self._timeout:g} s; "
            "gave up waiting for ACTIVE"
        )
