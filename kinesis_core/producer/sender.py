"""Sends one PutRecords request and reports what happened, never raising (seed 003).

Error mapping: a botocore ``ClientError`` becomes ``(Error.Code, Error.Message)``; any other
exception (network errors, timeouts, a malformed response) becomes ``("Internal", ...)``; a
response whose record count differs from the request's is left to the Retrier, which turns it
into ``RecordCountMismatch`` for every record. Cancellation is not an outcome: it propagates, and
whoever cancelled fails the batch's records. botocore's own retries must be off for this client
(``max_attempts=1``): the Retrier does every retry, so they cannot stack.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from botocore.exceptions import ClientError

from kinesis_core.producer.items import PutBatch
from kinesis_core.producer.result import INTERNAL
from kinesis_core.producer.retrier import SendOutcome


class PutRecordsClient(Protocol):
    """The one call the sender makes (an aiobotocore Kinesis client, or a fake in tests)."""

    async def put_records(self, **kwargs: Any) -> dict[str, Any]: ...


def error_of(exc: BaseException) -> tuple[str, str]:
    """The ``(code, message)`` the Retrier classifies, for an exception a request raised."""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return (str(error.get("Code") or INTERNAL), str(error.get("Message") or exc))
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return (INTERNAL, f"{type(exc).__name__}: no response within the request timeout")
    return (INTERNAL, f"{type(exc).__name__}: {exc}")


async def send_batch(
    client: PutRecordsClient,
    stream_name: str,
    batch: PutBatch,
    timeout: float,
    clock: Callable[[], float],
) -> SendOutcome:
    """PutRecords for ``batch`` with ``timeout`` seconds for the whole call."""
    entries = [kr.entry() for kr in batch.records]
    started = clock()
    try:
        response = await asyncio.wait_for(
            client.put_records(StreamName=stream_name, Records=entries), timeout
        )
        records = response["Records"]
    except Exception as exc:
        return SendOutcome(started, clock(), error=error_of(exc))
    return SendOutcome(started, clock(), records=records)
