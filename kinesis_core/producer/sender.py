"""Sends one PutRecords request and reports what happened, never raising.

Error mapping: a service error becomes its ``(code, message)`` and HTTP status (a 200 whose
body is no PutRecords answer on the lean path: ``MalformedResponse``,
:class:`~kinesis_core.errors.MalformedResponseError`); any other exception (no answer at all:
a refused or reset connection, a timeout, a malformed response through botocore) becomes
``("Internal", ...)`` with no status. The Retrier classifies them through
:mod:`kinesis_core.aws.classify`. A response whose record count differs from the request's is left
to the Retrier, which turns it into ``RecordCountMismatch`` for every record. Cancellation is
not an outcome: it propagates, and whoever cancelled fails the batch's records. botocore's own
retries must be off for this client (``max_attempts=1``): the Retrier does every retry, so
they cannot stack. The stream is named the way its :class:`~kinesis_core.stream.StreamRef`
says (``StreamARN`` when the user gave an ARN).

With :class:`LeanPutRecords` (``ProducerConfig(lean_put_records=True)``, the default) a
stream's requests after its first skip botocore's per-call machinery
(:mod:`kinesis_core.aws.lean_requests`): the JSON body is written here, each Kinesis record's
base64 once, without botocore's parameter validation and serializer.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Hashable, Mapping
from contextvars import ContextVar
from typing import Any, Protocol

from pybase64 import b64encode

from kinesis_core.aws.classify import INTERNAL, error_details, error_message
from kinesis_core.aws.lean_requests import LeanRequests, Route
from kinesis_core.errors import MalformedResponseError
from kinesis_core.producer.items import KinesisRecordOut, PutBatch
from kinesis_core.producer.retrier import SendOutcome
from kinesis_core.runtime.timeouts import within
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


_STREAM: ContextVar[Hashable] = ContextVar("kinesis_core.producer.sender._STREAM")
"""The route key of the PutRecords botocore is sending in this task (for ``route_key``)."""


class LeanPutRecords(LeanRequests):
    """Sends one aiobotocore Kinesis client's PutRecords calls the lean way (one per client:
    :meth:`of`)."""

    OPERATION = "PutRecords"

    def route_key(self, request: Any) -> Hashable:
        try:
            return _STREAM.get()
        except LookupError:  # a PutRecords of the application's own on this client
            raise ValueError("not a producer's request") from None

    async def put_records(
        self, params: Mapping[str, str], records: list[KinesisRecordOut]
    ) -> list[dict[str, Any]]:
        """PutRecords of ``records``: the response's ``Records``; raises what botocore would
        raise."""

        async def by_botocore() -> list[dict[str, Any]]:
            token = _STREAM.set(key)
            try:
                response = await self._client.put_records(
                    **params, Records=[kr.entry() for kr in records]
                )
            finally:
                _STREAM.reset(token)
            entries: list[dict[str, Any]] = response["Records"]
            return entries

        async def lean(route: Route) -> list[dict[str, Any]]:
            raw, _ = await self.post(route, put_records_body(params, records))
            try:
                entries = json.loads(raw)["Records"]
            except (ValueError, KeyError, TypeError) as exc:
                problem = f"{type(exc).__name__}: {exc} ({len(raw)} bytes: {raw[:60]!r})"
                raise MalformedResponseError(self.OPERATION, problem) from None
            if not isinstance(entries, list):
                raise MalformedResponseError(self.OPERATION, f"Records is not a list: {raw[:60]!r}")
            return entries

        key = tuple(params.items())
        return await self.call(key, by_botocore, lean)


def put_records_body(params: Mapping[str, str], records: list[KinesisRecordOut]) -> bytes:
    """The JSON body of a PutRecords request: ``params`` (how the stream is named) and one
    entry per Kinesis record, its data in base64 (pybase64's SIMD encoder, much faster than
    ``binascii``). One ``join`` writes the body: the base64 text (most of
    a request's bytes) is copied once."""
    dumps = json.dumps
    parts: list[bytes] = []
    opening = b'{"Records":[{"Data":"'
    for kr in records:
        ehk = kr.explicit_hash_key
        parts += (
            opening,
            b64encode(kr.data),
            b'","PartitionKey":',
            dumps(kr.partition_key).encode(),
            b"}" if ehk is None else b',"ExplicitHashKey":"%s"}' % ehk.encode(),
        )
        opening = b',{"Data":"'
    if not parts:
        parts.append(b'{"Records":[')
    stream = dumps(dict(params), separators=(",", ":")).encode()
    parts.append(b"]," + stream[1:])
    return b"".join(parts)


async def send_batch(
    client: PutRecordsClient,
    stream: StreamRef | str,
    batch: PutBatch,
    timeout: float,
    clock: Callable[[], float],
    lean: LeanPutRecords | None = None,
) -> SendOutcome:
    """PutRecords for ``batch`` with ``timeout`` seconds for the whole call (the lean way
    with ``lean``)."""
    params = StreamRef.of(stream).params()
    started = clock()
    try:
        async with within(timeout):
            if lean is not None:
                records = await lean.put_records(params, batch.records)
            else:
                entries = [kr.entry() for kr in batch.records]
                response = await client.put_records(**params, Records=entries)
                records = response["Records"]
    except Exception as exc:
        code, message, status = error_of(exc)
        return SendOutcome(started, clock(), error=(code, message), status=status)
    return SendOutcome(started, clock(), records=records)
