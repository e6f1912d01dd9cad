"""Sans-I/O decoding of a SubscribeToShard event stream into typed events.

The body is a sequence of ``application/vnd.amazon.eventstream`` messages: a 12-byte prelude
(total length, headers length, CRC32), string headers, a JSON payload and a CRC32 of the whole
message. botocore's ``EventStreamBuffer`` checks the CRCs and parses the headers; this module
pulls exactly one message's bytes at a time (``bytes_wanted``), so a decoder never holds more
than the message it is assembling, and interprets the headers:

- ``:message-type event`` with ``:event-type initial-response``: AWS sends it first (payload
  ``{}``); kinesis-mock 0.6.2 does not, which is why botocore's own parser refuses the mock's
  stream. Skipped either way.
- ``:event-type SubscribeToShardEvent``: records, ContinuationSequenceNumber,
  MillisBehindLatest, ChildShards (JSON ``null`` from kinesis-mock; a list at shard end on AWS).
- ``:message-type exception`` (``:exception-type`` ResourceInUseException,
  ResourceNotFoundException, KMS*, InternalFailureException...) and ``:message-type error``
  (``:error-code``/``:error-message``): raised as botocore ``ClientError``.

Records are decoded by the consumer's fast parser into the ``WireRecord`` s GetRecords gives.
"""

from __future__ import annotations

import json
import logging
import struct
from typing import Any

from botocore.eventstream import EventStreamBuffer, ParserError
from botocore.exceptions import ClientError

from kinesis_core.aws.classify import ErrorKind, classify
from kinesis_core.aws.fastparse import parse_subscribe_event
from kinesis_core.consumer.subscription import SubscribeEvent
from kinesis_core.fanout.errors import FanOutTransportError

LOG = logging.getLogger(__name__)

OPERATION = "SubscribeToShard"
PRELUDE_LENGTH = 12
MAX_MESSAGE_LENGTH = PRELUDE_LENGTH + 128 * 1024 + 24 * 1024 * 1024 + 4
"""botocore's limits: 128 KiB of headers and 24 MiB of payload per message."""
_MIN_MESSAGE_LENGTH = PRELUDE_LENGTH + 4


def client_error(code: str, message: str, status: int) -> ClientError:
    """A botocore ClientError for SubscribeToShard, shaped as botocore's parser shapes one."""
    response = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, OPERATION)


def http_error(status: int, headers: list[tuple[str, str]], body: bytes) -> ClientError:
    """The ClientError of a non-200 answer to SubscribeToShard (a JSON 1.1 error body)."""
    code = ""
    message = ""
    try:
        parsed = json.loads(body) if body else {}
    except ValueError:
        parsed = {}
    if isinstance(parsed, dict):
        code = str(parsed.get("__type") or parsed.get("code") or "")
        message = str(parsed.get("message") or parsed.get("Message") or "")
    if not code:
        code = next((v for k, v in headers if k.lower() == "x-amzn-errortype"), "")
    # "aws.protocoltests#ResourceInUseException:http://..." -> "ResourceInUseException"
    code = code.split(":", 1)[0].rsplit("#", 1)[-1] or f"HTTP{status}"
    if not message:
        message = body[:500].decode("utf-8", "replace") or f"HTTP status {status}"
    return client_error(code, message, status)


class EventStreamDecoder:
    """Turns a SubscribeToShard body into ``SubscribeEvent``s, one message at a time.

    Feed it ``bytes_wanted()`` bytes or fewer, then call ``next_event()``; it returns None
    while the current message is incomplete.
    """

    def __init__(self) -> None:
        self._pending = bytearray()
        self._length: int | None = None
        self._buffer = EventStreamBuffer()
        self._messages = 0

    @property
    def idle(self) -> bool:
        """No partial message: a body may end here without losing anything."""
        return not self._pending

    def bytes_wanted(self) -> int:
        """How many more bytes complete the current message (or its prelude)."""
        if self._length is None:
            return PRELUDE_LENGTH - len(self._pending)
        return self._length - len(self._pending)

    def feed(self, data: bytes) -> None:
        if len(data) > self.bytes_wanted():
            raise ValueError(f"fed {len(data)} bytes, only {self.bytes_wanted()} wanted")
        self._pending += data
        if self._length is None and len(self._pending) == PRELUDE_LENGTH:
            (length,) = struct.unpack_from(">I", self._pending)
            if not _MIN_MESSAGE_LENGTH <= length <= MAX_MESSAGE_LENGTH:
                raise FanOutTransportError(
                    f"not an event stream: a message of {length} bytes announced "
                    f"(valid: {_MIN_MESSAGE_LENGTH}..{MAX_MESSAGE_LENGTH})"
                )
            self._length = length

    def next_event(self) -> SubscribeEvent | None:
        """The next SubscribeToShardEvent, None if more bytes are needed; raises ClientError
        for an exception or error message, FanOutTransportError for a corrupt message."""
        while self._length is not None and len(self._pending) == self._length:
            message_bytes = bytes(self._pending)
            self._pending.clear()
            self._length = None
            self._buffer.add_data(message_bytes)
            try:
                message = next(self._buffer)
            except ParserError as exc:
                raise FanOutTransportError(f"corrupt event-stream message: {exc}") from exc
            self._messages += 1
            event = self._interpret(message.headers, message.payload, len(message_bytes))
            if event is not None:
                return event
        return None

    def _interpret(
        self, headers: dict[str, Any], payload: bytes, size: int
    ) -> SubscribeEvent | None:
        message_type = headers.get(":message-type")
        if message_type == "exception":
            code = str(headers.get(":exception-type") or "UnknownException")
            status = 500 if classify(code) is ErrorKind.TRANSIENT else 400
            raise client_error(code, _payload_message(payload), status)
        if message_type == "error":
            # A failure of the stream itself, not of the request: a server-side status, so
            # that it is retried like any 5xx.
            code = str(headers.get(":error-code") or "InternalFailure")
            raise client_error(code, str(headers.get(":error-message") or ""), 500)
        event_type = headers.get(":event-type")
        if message_type != "event" or event_type != "SubscribeToShardEvent":
            if event_type != "initial-response" or self._messages != 1:
                LOG.debug("skipping event-stream message %s/%s", message_type, event_type)
            return None
        try:
            event = parse_subscribe_event(payload)
        except ValueError as exc:
            raise FanOutTransportError(f"malformed SubscribeToShardEvent payload: {exc}") from exc
        return SubscribeEvent(
            records=event.records,
            continuation_sequence_number=event.continuation_sequence_number,
            millis_behind_latest=event.millis_behind_latest,
            child_shards=event.child_shards or [],
            size=size,
        )


def _payload_message(payload: bytes) -> str:
    try:
        parsed = json.loads(payload) if payload else {}
    except ValueError:
        return payload[:500].decode("utf-8", "replace")
    if isinstance(parsed, dict):
        return str(parsed.get("message") or parsed.get("Message") or "")
    return ""
