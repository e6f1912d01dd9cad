"""Registered stream consumers: register or reuse by name, wait until ACTIVE, deregister.

Async, on an aiobotocore Kinesis client from ``kinesis_core.client.create_kinesis_client``; the
decisions (which call next, how long to back off, when to give up) are
``kinesis_core.fanout.registration.ConsumerActivation``'s.

A consumer ARN looks like
``arn:aws:kinesis:us-east-1:123456789012:stream/orders/consumer/reader:1700000000``: the stream
it belongs to is part of it, which ``parse_consumer_arn`` checks without a call.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any

from kinesis_core.backoff import ceiling
from kinesis_core.classify import ErrorKind
from kinesis_core.consumer.subscription import ConsumerCheck
from kinesis_core.errors import ConfigurationError
from kinesis_core.fanout.registration import (
    Active,
    Call,
    ConsumerActivation,
    ConsumerRegistrationError,
    Send,
    Wait,
)
from kinesis_core.stream import StreamRef

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


async def describe_stream_arn(client: Any, stream: str, *, attempts: int = 5) -> str:
    """The ARN of ``stream`` (a name or an ARN, the latter returned as it is).
    DescribeStreamSummary is retried on throttling and server errors, ``attempts`` times."""
    if stream.startswith("arn:"):
        return stream
    for attempt in range(1, attempts + 1):
        try:
            summary = await client.describe_stream_summary(**StreamRef.of(stream).params())
            return str(summary["StreamDescriptionSummary"]["StreamARN"])
        except Exception as exc:
            if _kind(exc) not in (ErrorKind.THROTTLED, ErrorKind.TRANSIENT) or attempt == attempts:
                raise
            await asyncio.sleep(ceiling(0.2, 5.0, attempt))
    raise AssertionError("unreachable")


async def register_consumer(
    client: Any,
    stream_arn: str,
    consumer_name: str,
    *,
    timeout: float = 120.0,
    clock: Callable[[], float] = time.monotonic,
    tags: Mapping[str, str] | Iterable[tuple[str, str]] = (),
) -> StreamConsumer:
    """Register ``consumer_name`` on the stream (with ``tags``, which then needs
    kinesis:TagResource too), or reuse the consumer of that name (its tags stay as they are),
    and wait until it is ACTIVE. ConsumerRegistrationError when the stream has all the
    consumers it takes (20, or 50 on an On-demand Advantage stream) or the consumer is not
    ACTIVE within ``timeout`` seconds; ClientError for other refusals."""
    check_consumer_name(consumer_name)
    machine = ConsumerActivation(
        consumer_name=consumer_name, stream=stream_arn, now=clock(), timeout=timeout
    )
    return await _drive(client, machine, stream_arn, clock, dict(check_consumer_tags(tags)))


async def wait_for_consumer(
    client: Any,
    consumer_arn: str,
    *,
    stream_arn: str | None = None,
    timeout: float = 120.0,
    clock: Callable[[], float] = time.monotonic,
) -> StreamConsumer:
    """Wait until the consumer ``consumer_arn`` is ACTIVE (checking first, when ``stream_arn``
    is given, that it belongs to that stream)."""
    parsed = (
        check_consumer_of_stream(consumer_arn, stream_arn)
        if stream_arn is not None
        else parse_consumer_arn(consumer_arn)
    )
    machine = ConsumerActivation(
        consumer_name=parsed.consumer_name,
        stream=parsed.stream_arn,
        consumer_arn=consumer_arn,
        now=clock(),
        timeout=timeout,
    )
    return await _drive(client, machine, parsed.stream_arn, clock)


async def deregister_consumer(
    client: Any,
    consumer_arn: str,
    *,
    wait: bool = True,
    timeout: float = 120.0,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Deregister the consumer; with ``wait``, until DescribeStreamConsumer no longer finds it.
    A consumer that is already gone is fine."""
    parse_consumer_arn(consumer_arn)
    try:
        await client.deregister_stream_consumer(ConsumerARN=consumer_arn)
    except Exception as exc:
        if _kind(exc) is not ErrorKind.NOT_FOUND:
            raise
        return
    deadline = clock() + timeout
    polls = 0
    while wait:
        try:
            response = await client.describe_stream_consumer(ConsumerARN=consumer_arn)
        except Exception as exc:
            kind = _kind(exc)
            if kind is ErrorKind.NOT_FOUND:
                return
            if kind not in (ErrorKind.TRANSIENT, ErrorKind.THROTTLED):
                raise
            status = "unknown"
        else:
            status = response["ConsumerDescription"]["ConsumerStatus"]
        if clock() >= deadline:
            raise ConsumerRegistrationError(
                f"consumer {consumer_arn} is still {status} {timeout:g} s after "
                "DeregisterStreamConsumer"
            )
        polls += 1
        await asyncio.sleep(ceiling(0.05, 2.0, polls))


async def consumer_check(client: Any, consumer_arn: str) -> ConsumerCheck:
    """DescribeStreamConsumer of ``consumer_arn``, as a fan-out reader's machine takes it:
    its status, or None when the consumer is not found. Other errors raise."""
    parsed = parse_consumer_arn(consumer_arn)
    try:
        response = await client.describe_stream_consumer(ConsumerARN=consumer_arn)
    except Exception as exc:
        if _kind(exc) is not ErrorKind.NOT_FOUND:
            raise
        status = None
    else:
        status = response["ConsumerDescription"]["ConsumerStatus"]
    return ConsumerCheck(consumer_arn, parsed.consumer_name, parsed.stream_name, status)


class RegisteredConsumer:
    """``async with`` a consumer that is ACTIVE inside the block.

    Give ``consumer_name`` (registered, with ``tags`` if any, or reused when it exists) or
    ``consumer_arn`` (checked against the stream, then waited for); ``deregister_on_close``
    deregisters it on exit. ``stream`` is a stream name or ARN.
    """

    def __init__(
        self,
        client: Any,
        stream: str,
        *,
        consumer_name: str | None = None,
        consumer_arn: str | None = None,
        deregister_on_close: bool = False,
        timeout: float = 120.0,
        tags: Mapping[str, str] | Iterable[tuple[str, str]] = (),
    ) -> None:
        if (consumer_name is None) == (consumer_arn is None):
            raise ConfigurationError(
                "consumer_name", "give exactly one of consumer_name and consumer_arn"
            )
        self._tags = check_consumer_tags(tags)
        if self._tags and consumer_arn is not None:
            raise ConfigurationError(
                "tags", "tag a consumer when it is registered by name, not one given by ARN"
            )
        self._client = client
        self._stream = stream
        self._name = consumer_name
        self._arn = consumer_arn
        self._deregister = deregister_on_close
        self._timeout = timeout
        self.consumer: StreamConsumer | None = None

    async def __aenter__(self) -> StreamConsumer:
        stream_arn = await describe_stream_arn(self._client, self._stream)
        if self._arn is not None:
            self.consumer = await wait_for_consumer(
                self._client, self._arn, stream_arn=stream_arn, timeout=self._timeout
            )
        else:
            assert self._name is not None
            self.consumer = await register_consumer(
                self._client, stream_arn, self._name, timeout=self._timeout, tags=self._tags
            )
        return self.consumer

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._deregister and self.consumer is not None:
            await deregister_consumer(
                self._client, self.consumer.consumer_arn, timeout=self._timeout
            )


async def _drive(
    client: Any,
    machine: ConsumerActivation,
    stream_arn: str,
    clock: Callable[[], float],
    tags: dict[str, str] | None = None,
) -> StreamConsumer:
    described: dict[str, Any] = {}
    while True:
        action = machine.next_action(clock())
        if isinstance(action, Active):
            return _consumer(described, stream_arn)
        if isinstance(action, Wait):
            await asyncio.sleep(max(0.0, action.until - clock()))
            continue
        assert isinstance(action, Send)
        try:
            if action.call is Call.REGISTER:
                tagged = {"Tags": tags} if tags else {}
                response = await client.register_stream_consumer(
                    StreamARN=stream_arn, ConsumerName=machine.consumer_name, **tagged
                )
                described = response["Consumer"]
            elif action.call is Call.DESCRIBE:
                if machine.consumer_arn is not None:
                    kwargs = {"ConsumerARN": machine.consumer_arn}
                else:
                    kwargs = {"StreamARN": stream_arn, "ConsumerName": machine.consumer_name}
                response = await client.describe_stream_consumer(**kwargs)
                described = response["ConsumerDescription"]
            else:
                names = await _consumer_names(client, stream_arn)
                machine.on_listed(names, clock())
                continue
        except Exception as exc:
            kind = _kind(exc)
            if kind is ErrorKind.IN_USE and action.call is Call.REGISTER:
                machine.on_in_use(clock())
            elif kind is ErrorKind.NOT_FOUND and action.call is Call.DESCRIBE:
                machine.on_not_found(clock())
            elif kind is ErrorKind.THROTTLED:
                # The machine lists the consumers to tell the 20-consumer limit from a rate.
                machine.on_limit_exceeded(action.call, clock())
            elif kind is ErrorKind.TRANSIENT:
                machine.on_transient_error(action.call, clock())
            else:
                raise
            continue
        machine.on_consumer(described["ConsumerARN"], described["ConsumerStatus"], clock())


async def _consumer_names(client: Any, stream_arn: str) -> list[str]:
    names: list[str] = []
    kwargs: dict[str, Any] = {"StreamARN": stream_arn}
    while True:
        response = await client.list_stream_consumers(**kwargs)
        names += [c["ConsumerName"] for c in response.get("Consumers", ())]
        token = response.get("NextToken")
        if not token:
            return names
        kwargs = {"StreamARN": stream_arn, "NextToken": token}


def _consumer(description: dict[str, Any], stream_arn: str) -> StreamConsumer:
    return StreamConsumer(
        consumer_name=description["ConsumerName"],
        consumer_arn=description["ConsumerARN"],
        stream_arn=description.get("StreamARN", stream_arn),
        status=description["ConsumerStatus"],
        creation_timestamp=description.get("ConsumerCreationTimestamp"),
    )



def _kind(exc: BaseException) -> ErrorKind | None:
    """The kind of what a call raised, by the client's table: a service error, or a transport
    failure (TRANSIENT, retried like a server error); None for anything else (our own
    ConsumerRegistrationError), which is raised as it is. Imported here: the module stays
    importable without aiobotocore, and a client that raised means it is loaded."""
    from kinesis_core.client import error_kind

    return error_kind(exc)
