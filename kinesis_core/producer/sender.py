"""Sends one PutRecords request and reports what happened, never raising (seed 003).

Error mapping: a service error becomes its ``(code, message)`` and HTTP status; any other
exception (no answer at all: a refused or reset connection, a timeout, a malformed response)
becomes ``("Internal", ...)`` with no status. The Retrier classifies them through
:mod:`kinesis_core.classify`. A response whose record count differs from the request's is left
to the Retrier, which turns it into ``RecordCountMismatch`` for every record. Cancellation is
not an outcome: it propagates, and whoever cancelled fails the batch's records. botocore's own
retries must be off for this client (``max_attempts=1``): the Retrier does every retry, so
they cannot stack. The stream is named the way its :class:`~kinesis_core.stream.StreamRef`
says (``StreamARN`` when the user gave an ARN).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any, Protocol

from kinesis_core.classify import INTERNAL, error_details, error_message
from kinesis_core.producer.items import PutBatch
from kinesis_core.producer.retrier import SendOutcome
from kinesis_core.stream import StreamRef

_XML_ERROR = re.compile(r"<Code>([^<]+)</Code>\s*<Message>([^<]*)</Message>")
"""An error body in XML where botocore expected JSON (moto's auth layer answers so): botocore
then reports the HTTP status as the code and the whole body as the message."""


class PutRecordsClient(Protocol):
    """The one call the sender makes (an aiobotocore Kinesis client, or a fake in tests)."""

    async def put_records(self, **kwargs: Any) -> dict[str, Any]: ...


def error_of(exc: BaseException) -> tuple[str, str, int | None]:
    """The ``(code, message, HTTP status)`` the Retrier classifies, for an exception a request
    raised."""
    code, status = error_details(exc)
    if code is not None or status is not None:
        message = error_message(exc)
        if code is None or code.isdigit():
            found = _XML_ERROR.search(message)
            if found is not None:
                return found[1], found[2], status
        return code or INTERNAL, message, status
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return INTERNAL, f"{type(exc).__name__}: no response within the request timeout", None
    return INTERNAL, f"{type(exc).__name__}: {exc}", None


async def send_batch(
    client: PutRecordsClient,
    stream: StreamRef | str,
    batch: PutBatch,
    timeout: float,
    clock: Callable[[], float],
) -> SendOutcome:
    """PutRecords for ``batch`` with ``timeout`` seconds for the whole call."""
    entries = [kr.entry() for kr in batch.records]
    params = StreamRef.of(stream).params()
    started = clock()
    try:
        response = await asyncio.wait_for(client.put_records(**params, Records=entries), timeout)
        records = response["Records"]
    except Exception as exc:
        code, message, status = error_of(exc)
        return SendOutcome(started, clock(), error=(code, message), status=status)
    return SendOutcome(started, clock(), records=records)
