"""FanOutClient and ShardSubscription: the subscription API the consumer's read seam drives.

A ``FanOutClient`` owns an aiobotocore client (for signing only) and the HTTP connections.
``subscribe`` sends a signed SubscribeToShard and returns once the response headers arrived;
``ShardSubscription.next_event`` decodes the next SubscribeToShardEvent when asked, and only
then: reading is the backpressure (HTTP/2 flow control, or a paused HTTP/1.1 socket), so an
application that does not ask buffers at most ``max_buffered_bytes`` per subscription plus the
one event being assembled.

A subscription ends normally (``next_event`` returns None) when the server ends the stream
(AWS: after 5 minutes) or when ``max_subscription_seconds`` have passed, which the client
enforces itself so that tests can renew every few seconds. Renew from the last event's
continuation sequence number with ``subscription.renewal_position()`` (AFTER_SEQUENCE_NUMBER).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from kinesis_core.aws.client import create_kinesis_client
from kinesis_core.aws.config import ClientConfig
from kinesis_core.consumer.subscription import (
    DEFAULT_MAX_BUFFERED_BYTES,
    MAX_SUBSCRIPTION_SECONDS,
    SubscribeEvent,
    check_subscription_options,
    renewal_position,
)
from kinesis_core.errors import ConfigurationError
from kinesis_core.fanout.errors import FanOutTimeoutError, FanOutTransportError, missing_dependency
from kinesis_core.fanout.eventstream import EventStreamDecoder, http_error
from kinesis_core.fanout.registration import parse_consumer_arn
from kinesis_core.fanout.signing import RequestSigner
from kinesis_core.lifecycle import LifecycleError, State

if TYPE_CHECKING:
    from kinesis_core.fanout.connection import ConnectionPool, HttpVersion, ResponseChannel

EVENT_STREAM_CONTENT_TYPE = "application/vnd.amazon.eventstream"
_ERROR_BODY_LIMIT = 64 * 1024
_STARTING_TYPES = frozenset(
    {"AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER", "TRIM_HORIZON", "LATEST", "AT_TIMESTAMP"}
)
_SHARD_ID = re.compile(r"^[a-zA-Z0-9_.-]{1,128}$")


class ShardSubscription:
    """One open SubscribeToShard stream. Not shared between tasks."""

    def __init__(
        self,
        channel: ResponseChannel,
        *,
        consumer_arn: str,
        shard_id: str,
        starting_position: Mapping[str, Any],
        deadline: float,
        read_timeout: float,
        on_close: Any = None,
    ) -> None:
        self.consumer_arn = consumer_arn
        self.shard_id = shard_id
        self.starting_position = dict(starting_position)
        self.continuation_sequence_number: str | None = None
        """The last delivered event's continuation sequence number (None before the first)."""
        self._channel = channel
        self._decoder = EventStreamDecoder()
        self._deadline = deadline
        self._read_timeout = read_timeout
        self._on_close = on_close
        self._ended = False
        self._failure: BaseException | None = None

    @property
    def ended(self) -> bool:
        """No more events: the stream ended, failed, or was closed."""
        return self._ended

    def renewal_position(self) -> dict[str, Any]:
        """Where the next subscription for this shard starts so that nothing is lost or
        repeated: after the last delivered continuation, or where this one started."""
        if self.continuation_sequence_number is None:
            return dict(self.starting_position)
        return renewal_position(self.continuation_sequence_number)

    async def next_event(self) -> SubscribeEvent | None:
        """The next event; None when the subscription ended normally (server end, or
        ``max_subscription_seconds``). Raises ClientError for a service error sent in the
        stream, FanOutTransportError (an OSError) when the connection or stream failed; a
        failed subscription raises the same error again if asked again."""
        if self._failure is not None:
            raise self._failure
        if self._ended:
            return None
        loop = asyncio.get_running_loop()
        try:
            while True:
                event = self._decoder.next_event()
                if event is not None:
                    if event.continuation_sequence_number is not None:
                        self.continuation_sequence_number = event.continuation_sequence_number
                    return event
                remaining = self._deadline - loop.time()
                if remaining <= 0:
                    self._end()
                    return None
                wait = min(self._read_timeout, remaining)
                data = await self._channel.read(self._decoder.bytes_wanted(), wait)
                if data is None:
                    if loop.time() >= self._deadline:
                        self._end()
                        return None
                    raise FanOutTimeoutError(
                        f"no data from {self._channel.peer} on the subscription to "
                        f"{self.shard_id} for {self._read_timeout:g} s (read timeout)"
                    )
                if not data:
                    if not self._decoder.idle:
                        raise FanOutTransportError(
                            f"{self._channel.peer} ended the subscription to {self.shard_id} "
                            "in the middle of an event"
                        )
                    self._end()
                    return None
                self._decoder.feed(data)
        except Exception as exc:
            self._failure = exc
            self._end()
            raise

    async def aclose(self) -> None:
        """Stop the subscription (cancels the HTTP/2 stream or closes the connection)."""
        self._end()

    async def __aenter__(self) -> ShardSubscription:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            self._channel.close()
            if self._on_close is not None:
                self._on_close(self)


class FanOutClient:
    """Opens SubscribeToShard subscriptions; use as ``async with`` (or call ``aclose``).

    ``max_subscription_seconds``: end each subscription after this long (AWS's 5 minutes at
    most). ``max_buffered_bytes``: unread body bytes per subscription (the HTTP/2 stream
    window, or the HTTP/1.1 read budget). ``http_version``: "auto" (TLS: ALPN, h2 preferred;
    http://: HTTP/1.1), "h2" (http://: h2c with prior knowledge) or "http/1.1".
    ``max_streams_per_connection``: our cap on subscriptions per HTTP/2 connection (the
    server's MAX_CONCURRENT_STREAMS applies too).
    """

    def __init__(
        self,
        client_config: ClientConfig,
        *,
        max_subscription_seconds: float = MAX_SUBSCRIPTION_SECONDS,
        max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES,
        http_version: HttpVersion = "auto",
        max_streams_per_connection: int = 100,
    ) -> None:
        check_subscription_options(max_subscription_seconds, max_buffered_bytes, http_version)
        if max_streams_per_connection < 1:
            raise ConfigurationError(
                "max_streams_per_connection", f"must be >= 1, got {max_streams_per_connection!r}"
            )
        try:
            from kinesis_core.fanout import connection
        except ImportError as exc:
            raise missing_dependency(exc) from exc
        self.client_config = client_config
        self.max_subscription_seconds = max_subscription_seconds
        self.max_buffered_bytes = max_buffered_bytes
        self._pool: ConnectionPool = connection.ConnectionPool(
            client_config,
            http_version=http_version,
            max_buffered_bytes=max_buffered_bytes,
            max_streams_per_connection=max_streams_per_connection,
        )
        self._exit = contextlib.AsyncExitStack()
        self._signer: RequestSigner | None = None
        self._start_lock = asyncio.Lock()
        self._subscriptions: set[ShardSubscription] = set()
        self._closed = False

    @property
    def connections(self) -> int:
        """Open HTTP/2 connections."""
        return self._pool.connections

    @property
    def subscriptions(self) -> int:
        """Subscriptions not yet ended."""
        return len(self._subscriptions)

    async def start(self) -> None:
        """Create the signing client (done by ``async with`` or the first ``subscribe``)."""
        async with self._start_lock:
            if self._closed:
                raise LifecycleError("FanOutClient", State.CLOSED, "start")
            if self._signer is None:
                client = await self._exit.enter_async_context(
                    create_kinesis_client(self.client_config, max_attempts=1)
                )
                self._signer = RequestSigner(client)

    async def subscribe(
        self, consumer_arn: str, shard_id: str, starting_position: Mapping[str, Any]
    ) -> ShardSubscription:
        """Open a subscription; returns once the server answered 200 with an event stream.

        Raises ConfigurationError for bad arguments, ClientError for an error answer (status and
        code as AWS sent them), FanOutTransportError when no answer came. Errors the server
        sends inside the stream (kinesis-mock's ResourceInUseException, AWS's mid-stream
        failures) come from ``next_event``.
        """
        _validate(consumer_arn, shard_id, starting_position)
        if self._signer is None:
            await self.start()
        assert self._signer is not None
        request = await self._signer.subscribe_request(consumer_arn, shard_id, starting_position)
        timeout = self.client_config.read_timeout
        channel = await self._pool.open(request)
        try:
            status, headers = await channel.head(timeout)
            if status != 200:
                raise http_error(status, headers, await _read_all(channel, timeout))
            content_type = next((v for k, v in headers if k.lower() == "content-type"), "")
            if not content_type.startswith(EVENT_STREAM_CONTENT_TYPE):
                raise FanOutTransportError(
                    f"{channel.peer} answered SubscribeToShard with {content_type!r}, "
                    f"not {EVENT_STREAM_CONTENT_TYPE}"
                )
        except BaseException:
            channel.close()
            raise
        loop = asyncio.get_running_loop()
        subscription = ShardSubscription(
            channel,
            consumer_arn=consumer_arn,
            shard_id=shard_id,
            starting_position=starting_position,
            deadline=loop.time() + self.max_subscription_seconds,
            read_timeout=timeout,
            on_close=self._subscriptions.discard,
        )
        self._subscriptions.add(subscription)
        return subscription

    async def aclose(self) -> None:
        """End every subscription and close the connections."""
        self._closed = True
        for subscription in list(self._subscriptions):
            await subscription.aclose()
        await self._pool.aclose()
        await self._exit.aclose()

    async def __aenter__(self) -> FanOutClient:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


async def _read_all(channel: ResponseChannel, timeout: float) -> bytes:
    """The (small) body of an error answer, up to a limit."""
    body = bytearray()
    while len(body) < _ERROR_BODY_LIMIT:
        try:
            data = await channel.read(_ERROR_BODY_LIMIT - len(body), timeout)
        except FanOutTransportError:
            break
        if not data:
            break
        body += data
    return bytes(body)


def _validate(consumer_arn: str, shard_id: str, starting_position: Mapping[str, Any]) -> None:
    parse_consumer_arn(consumer_arn)
    if not isinstance(shard_id, str) or not _SHARD_ID.match(shard_id):
        raise ConfigurationError(
            "shard_id", f"must be 1..128 characters of [a-zA-Z0-9_.-], got {shard_id!r}"
        )
    kind = starting_position.get("Type") if isinstance(starting_position, Mapping) else None
    if kind not in _STARTING_TYPES:
        raise ConfigurationError(
            "starting_position",
            f"Type must be one of {sorted(_STARTING_TYPES)}, got {starting_position!r}",
        )
    if kind in ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER"):
        sequence = starting_position.get("SequenceNumber")
        if not isinstance(sequence, str) or not sequence.isdigit():
            raise ConfigurationError(
                "starting_position", f"{kind} needs a decimal SequenceNumber, got {sequence!r}"
            )
    if kind == "AT_TIMESTAMP" and starting_position.get("Timestamp") is None:
        raise ConfigurationError("starting_position", "AT_TIMESTAMP needs a Timestamp")
