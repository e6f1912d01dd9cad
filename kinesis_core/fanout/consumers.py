"""Registered stream consumers, the async driver: register or reuse by name, wait until ACTIVE,
deregister; and the start every fan-out reader shares (:func:`open_fan_out`).

Every call goes through an :class:`~kinesis_core.aws.executor.AsyncExecutor` on an aiobotocore
Kinesis client from ``kinesis_core.aws.client.create_kinesis_client``, which retries each call's
throttling and server errors; the decisions (which call next, how long to wait for a consumer
that is not ACTIVE yet, when to give up) are
:class:`~kinesis_core.fanout.registration.ConsumerActivation`'s, and the ARN and name rules are
in :mod:`kinesis_core.fanout.registration` too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from kinesis_core.aws.backoff import Jitter
from kinesis_core.aws.calls import (
    DeregisterStreamConsumer,
    DescribeStreamConsumer,
    DescribeStreamSummary,
    ListStreamConsumers,
    RegisterStreamConsumer,
    Wait,
)
from kinesis_core.aws.classify import ErrorKind
from kinesis_core.aws.client import create_kinesis_client
from kinesis_core.aws.config import ClientConfig
from kinesis_core.aws.exceptions import error_kind
from kinesis_core.aws.executor import AsyncExecutor
from kinesis_core.aws.retry import NotYet, RetryPolicy, not_yet
from kinesis_core.consumer.links import LoopFanOut, consumer_look, take_look
from kinesis_core.consumer.subscription import ConsumerCheck
from kinesis_core.errors import ConfigurationError
from kinesis_core.fanout.registration import (
    Active,
    ConsumerActivation,
    ConsumerRegistrationError,
    Operation,
    Send,
    StreamConsumer,
    check_consumer_name,
    check_consumer_of_stream,
    check_consumer_tags,
    parse_consumer_arn,
)
from kinesis_core.runtime.clock import SYSTEM_CLOCK, Clock
from kinesis_core.stream import StreamRef

if TYPE_CHECKING:
    from kinesis_core.consumer.config import EnhancedFanOut
    from kinesis_core.fanout.client import FanOutClient
    from kinesis_core.runtime.loop_thread import LoopThread

logger = logging.getLogger(__name__)

DESCRIBE_RETRY = RetryPolicy(base=0.2, cap=5.0, attempts=5)
"""DescribeStreamSummary (the stream's ARN) on throttling and server errors."""
DEREGISTER_POLL = RetryPolicy(
    base=0.05, cap=2.0, jitter=Jitter.EQUAL, attempts=None, unknown=not_yet
)
"""The looks at a consumer being deregistered, until it is gone, and their throttling and
server errors (the deadline is the caller's timeout)."""


REGISTER_RETRY = RetryPolicy(
    base=0.05,
    cap=2.0,
    jitter=Jitter.EQUAL,
    attempts=None,
    retry_on=frozenset({ErrorKind.TRANSIENT}),
)
"""RegisterStreamConsumer on server errors, until the registration's deadline (its
LimitExceededException is the machine's: a rate, or the stream's consumer limit)."""
LOOK_RETRY = RetryPolicy(
    base=0.05,
    cap=2.0,
    jitter=Jitter.EQUAL,
    attempts=None,
    retry_on=frozenset({ErrorKind.THROTTLED, ErrorKind.TRANSIENT}),
)
"""DescribeStreamConsumer and ListStreamConsumers on throttling and server errors, until the
registration's deadline."""


class _StillThere(NotYet):
    def __init__(self, consumer_arn: str, status: str) -> None:
        super().__init__(f"consumer {consumer_arn} is {status}")
        self.status = status


def _executor(client: Any, clock: Clock) -> AsyncExecutor:
    return client if isinstance(client, AsyncExecutor) else AsyncExecutor(client, clock=clock)


async def describe_stream_arn(
    client: Any, stream: str, *, attempts: int = 5, clock: Clock = SYSTEM_CLOCK
) -> str:
    """The ARN of ``stream`` (a name or an ARN, the latter returned as it is).
    DescribeStreamSummary is retried on throttling and server errors, ``attempts`` times.
    ``client``: an aiobotocore Kinesis client, or an executor."""
    if stream.startswith("arn:"):
        return stream
    summary = await _executor(client, clock).execute(
        DescribeStreamSummary(StreamRef.of(stream)),
        dataclasses.replace(DESCRIBE_RETRY, attempts=attempts),
    )
    return str(summary["StreamDescriptionSummary"]["StreamARN"])


async def register_consumer(
    client: Any,
    stream_arn: str,
    consumer_name: str,
    *,
    timeout: float = 120.0,
    clock: Clock = SYSTEM_CLOCK,
    tags: Mapping[str, str] | Iterable[tuple[str, str]] = (),
) -> StreamConsumer:
    """Register ``consumer_name`` on the stream (with ``tags``, which then needs
    kinesis:TagResource too), or reuse the consumer of that name (its tags stay as they are),
    and wait until it is ACTIVE. ConsumerRegistrationError when the stream has all the
    consumers it takes (20, or 50 on an On-demand Advantage stream) or the consumer is not
    ACTIVE within ``timeout`` seconds; ClientError for other refusals."""
    check_consumer_name(consumer_name)
    executor = _executor(client, clock)
    machine = ConsumerActivation(
        consumer_name=consumer_name, stream=stream_arn, now=executor.clock.now(), timeout=timeout
    )
    return await _drive(executor, machine, stream_arn, check_consumer_tags(tags))


async def wait_for_consumer(
    client: Any,
    consumer_arn: str,
    *,
    stream_arn: str | None = None,
    timeout: float = 120.0,
    clock: Clock = SYSTEM_CLOCK,
) -> StreamConsumer:
    """Wait until the consumer ``consumer_arn`` is ACTIVE (checking first, when ``stream_arn``
    is given, that it belongs to that stream)."""
    parsed = (
        check_consumer_of_stream(consumer_arn, stream_arn)
        if stream_arn is not None
        else parse_consumer_arn(consumer_arn)
    )
    executor = _executor(client, clock)
    machine = ConsumerActivation(
        consumer_name=parsed.consumer_name,
        stream=parsed.stream_arn,
        consumer_arn=consumer_arn,
        now=executor.clock.now(),
        timeout=timeout,
    )
    return await _drive(executor, machine, parsed.stream_arn)


async def deregister_consumer(
    client: Any,
    consumer_arn: str,
    *,
    wait: bool = True,
    timeout: float = 120.0,
    clock: Clock = SYSTEM_CLOCK,
) -> None:
    """Deregister the consumer; with ``wait``, until DescribeStreamConsumer no longer finds it.
    A consumer that is already gone is fine."""
    parse_consumer_arn(consumer_arn)
    executor = _executor(client, clock)
    try:
        await executor.execute(DeregisterStreamConsumer(consumer_arn))
    except Exception as exc:
        if error_kind(exc) is not ErrorKind.NOT_FOUND:
            raise
        return
    if not wait:
        return

    async def gone() -> None:
        try:
            description = await executor.execute(DescribeStreamConsumer(consumer_arn))
        except Exception as exc:
            if error_kind(exc) is ErrorKind.NOT_FOUND:
                return
            raise
        raise _StillThere(consumer_arn, description["ConsumerStatus"])

    policy = dataclasses.replace(DEREGISTER_POLL, deadline=timeout)
    try:
        await executor.attempt(gone, policy, f"the look at deregistered consumer {consumer_arn}")
    except _StillThere as exc:
        raise ConsumerRegistrationError(
            f"consumer {consumer_arn} is still {exc.status} "
            f"{timeout:g} s after DeregisterStreamConsumer"
        ) from exc


async def consumer_check(client: Any, consumer_arn: str) -> ConsumerCheck:
    """DescribeStreamConsumer of ``consumer_arn``, as a fan-out reader's machine takes it:
    its status, or None when the consumer is not found. Other errors raise."""
    executor = _executor(client, SYSTEM_CLOCK)
    return await take_look(executor, consumer_look(executor, consumer_arn))


class RegisteredConsumer:
    """``async with`` a consumer that is ACTIVE inside the block.

    Give ``consumer_name`` (registered, with ``tags`` if any, or reused when it exists) or
    ``consumer_arn`` (checked against the stream, then waited for); ``deregister_on_close``
    deregisters it on exit. ``stream`` is a stream name or ARN; ``client`` an aiobotocore
    Kinesis client, or an executor.
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
        clock: Clock = SYSTEM_CLOCK,
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
        self._executor = _executor(client, clock)
        self._stream = stream
        self._name = consumer_name
        self._arn = consumer_arn
        self._deregister = deregister_on_close
        self._timeout = timeout
        self.consumer: StreamConsumer | None = None

    async def __aenter__(self) -> StreamConsumer:
        stream_arn = await describe_stream_arn(self._executor, self._stream)
        if self._arn is not None:
            self.consumer = await wait_for_consumer(
                self._executor, self._arn, stream_arn=stream_arn, timeout=self._timeout
            )
        else:
            assert self._name is not None
            self.consumer = await register_consumer(
                self._executor, stream_arn, self._name, timeout=self._timeout, tags=self._tags
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
                self._executor, self.consumer.consumer_arn, timeout=self._timeout
            )


async def open_fan_out(
    stack: contextlib.AsyncExitStack,
    client_config: ClientConfig,
    stream: StreamRef,
    efo: EnhancedFanOut,
    executor: AsyncExecutor | None = None,
) -> tuple[FanOutClient, str]:
    """The start every fan-out reader shares (the core consumer, the Faust channel, the Beam
    source): register (or reuse, or check) the stream consumer ``efo`` names and open the
    HTTP/2 client its subscriptions go through; both are closed by ``stack``. ``executor``
    (one of the caller's aiobotocore client) makes the calls; without one, a client of
    ``client_config`` is made for them. Returns the client and the consumer's ARN."""
    from kinesis_core.fanout.client import FanOutClient

    # Made first: it refuses to be made without h2, and nothing may be registered
    # then (a consumer costs money and counts toward the stream's 20).
    fanout = FanOutClient(
        client_config,
        max_subscription_seconds=efo.max_subscription_seconds,
        max_buffered_bytes=efo.max_buffered_bytes,
        http_version=efo.http_version,
    )
    if executor is None:
        executor = AsyncExecutor(
            await stack.enter_async_context(create_kinesis_client(client_config))
        )
    registered = await stack.enter_async_context(
        RegisteredConsumer(
            executor,
            str(stream),
            consumer_name=efo.consumer_name,
            consumer_arn=efo.consumer_arn,
            tags=efo.tags,
            deregister_on_close=efo.deregister_on_close,
            timeout=efo.register_timeout,
        )
    )
    await stack.enter_async_context(fanout)
    logger.info("reading %s by enhanced fan-out as consumer %s", stream, registered.consumer_arn)
    return fanout, registered.consumer_arn


def open_fan_out_on_loop(
    loop: LoopThread,
    client_config: ClientConfig,
    stream: StreamRef,
    efo: EnhancedFanOut,
    *,
    timeout: float = 60.0,
) -> tuple[LoopFanOut, Callable[[], None]]:
    """:func:`open_fan_out` on the event-loop thread ``loop``, for a synchronous engine (the
    Beam source): what its links subscribe through
    (:meth:`~kinesis_core.aws.executor.SyncExecutor.link`), and the function that closes it."""

    async def start() -> tuple[FanOutClient, str, contextlib.AsyncExitStack]:
        stack = contextlib.AsyncExitStack()
        try:
            client, arn = await open_fan_out(stack, client_config, stream, efo)
        except BaseException:
            await stack.aclose()
            raise
        return client, arn, stack

    client, arn, stack = loop.run(start(), timeout)
    return LoopFanOut(loop, client, arn), lambda: loop.run(stack.aclose(), timeout)


async def _drive(
    executor: AsyncExecutor,
    machine: ConsumerActivation,
    stream_arn: str,
    tags: tuple[tuple[str, str], ...] = (),
) -> StreamConsumer:
    """Carry out ``machine``'s actions until the consumer is ACTIVE. Each call's own failures
    are retried by the executor (:data:`REGISTER_RETRY`, :data:`LOOK_RETRY`) until the
    machine's deadline; a failure that outlasts them is the machine's to report."""
    clock = executor.clock
    left = max(0.0, machine.deadline - clock.now())
    register_errors = dataclasses.replace(REGISTER_RETRY, deadline=left).begin(clock.now())
    look_errors = dataclasses.replace(LOOK_RETRY, deadline=left).begin(clock.now())
    described: dict[str, Any] = {}
    while True:
        action = machine.next_action(clock.now())
        if isinstance(action, Active):
            return _consumer(described, stream_arn)
        if isinstance(action, Wait):
            await clock.sleep(max(0.0, action.until - clock.now()))
            continue
        assert isinstance(action, Send)
        try:
            if action.operation is Operation.REGISTER:
                described = await executor.execute(
                    RegisterStreamConsumer(stream_arn, machine.consumer_name, tags),
                    register_errors,
                )
            elif action.operation is Operation.DESCRIBE:
                if machine.consumer_arn is not None:
                    describe = DescribeStreamConsumer(consumer_arn=machine.consumer_arn)
                else:
                    describe = DescribeStreamConsumer(
                        stream_arn=stream_arn, consumer_name=machine.consumer_name
                    )
                described = await executor.execute(describe, look_errors)
            else:
                names = await executor.execute(ListStreamConsumers(stream_arn), look_errors)
                machine.on_listed(names, clock.now())
                continue
        except Exception as exc:
            kind = error_kind(exc)
            if kind is ErrorKind.IN_USE and action.operation is Operation.REGISTER:
                machine.on_in_use(clock.now())
            elif kind is ErrorKind.NOT_FOUND and action.operation is Operation.DESCRIBE:
                machine.on_not_found(clock.now())
            elif kind is ErrorKind.THROTTLED:
                # The machine lists the consumers to tell the 20-consumer limit from a rate.
                machine.on_limit_exceeded(action.operation, clock.now())
            elif kind is ErrorKind.TRANSIENT:
                machine.on_transient_error(action.operation, clock.now())
            else:
                raise
            continue
        machine.on_consumer(described["ConsumerARN"], described["ConsumerStatus"], clock.now())


def _consumer(description: dict[str, Any], stream_arn: str) -> StreamConsumer:
    return StreamConsumer(
        consumer_name=description["ConsumerName"],
        consumer_arn=description["ConsumerARN"],
        stream_arn=description.get("StreamARN", stream_arn),
        status=description["ConsumerStatus"],
        creation_timestamp=description.get("ConsumerCreationTimestamp"),
    )
