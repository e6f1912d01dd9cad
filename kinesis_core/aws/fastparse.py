"""A fast parser of GetRecords answers and SubscribeToShard events.

botocore's generic parser walks the service model field by field and builds every arrival
timestamp through dateutil's local time zone, which costs more per record than all the rest of
the consumer. A GetRecords body is plain JSON with base64 data and epoch-second timestamps, so
``msgspec`` decodes it in C straight into :class:`WireRecord` s, base64 to bytes included.

The lean GetRecords path and fan-out use the records as they are. Hooked into a botocore
client's ``before-parse`` event (:func:`install`), the parser hands botocore its own shape
instead (``Data`` bytes, ``SequenceNumber`` str, timestamps as aware datetimes, in UTC rather
than local time), so other callers of that client see what botocore gives (or, installed with
``wire``, the records as they are). A 200 body that
is not a GetRecords answer (cut short, not JSON, bad base64, no ``Records``) raises
:class:`~kinesis_core.errors.MalformedResponseError`, which the error table calls transient,
on both paths; an error answer whose body is not UTF-8 (a proxy's binary 5xx) reaches
botocore's parser decoded with replacement characters, where it would raise
UnicodeDecodeError (:func:`install`, for every Kinesis operation).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import msgspec

from kinesis_core.errors import MalformedResponseError
from kinesis_core.records import WireRecord

EVENT = "before-parse.kinesis.GetRecords"
_UNIQUE_ID = "kinesis-connectors-fast-get-records"
ERROR_BODY_EVENT = "before-parse.kinesis"
_ERROR_BODY_ID = "kinesis-connectors-error-body-text"


class _GetRecordsOutput(msgspec.Struct, rename="pascal"):
    records: list[WireRecord]
    next_shard_iterator: str | None = None
    millis_behind_latest: int | None = None
    child_shards: list[dict[str, Any]] | None = None


class _SubscribeToShardEvent(msgspec.Struct, rename="pascal"):
    records: list[WireRecord] = []
    continuation_sequence_number: str | None = None
    millis_behind_latest: int | None = None
    child_shards: list[dict[str, Any]] | None = None


_GET_RECORDS = msgspec.json.Decoder(_GetRecordsOutput)
_SUBSCRIBE_EVENT = msgspec.json.Decoder(_SubscribeToShardEvent)


def parse_get_records(body: bytes) -> dict[str, Any]:
    """The GetRecords answer: ``Records`` as :class:`WireRecord` s, the other keys as botocore
    names them (absent when the body has none). Raises :class:`MalformedResponseError` (a
    ValueError) on a body that is not one."""
    try:
        page = _GET_RECORDS.decode(body)
    except msgspec.DecodeError as exc:
        raise MalformedResponseError("GetRecords", f"{exc} ({_shown(body)})") from None
    parsed: dict[str, Any] = {"Records": page.records}
    if page.next_shard_iterator is not None:
        parsed["NextShardIterator"] = page.next_shard_iterator
    if page.millis_behind_latest is not None:
        parsed["MillisBehindLatest"] = page.millis_behind_latest
    if page.child_shards is not None:
        parsed["ChildShards"] = page.child_shards
    return parsed


def parse_subscribe_event(payload: bytes) -> _SubscribeToShardEvent:
    """A SubscribeToShardEvent's JSON payload; raises :class:`MalformedResponseError` (a
    ValueError) on one that is not."""
    try:
        return _SUBSCRIBE_EVENT.decode(payload)
    except msgspec.DecodeError as exc:
        raise MalformedResponseError(
            "SubscribeToShardEvent", f"{exc} ({_shown(payload)})"
        ) from None


def _shown(body: bytes) -> str:
    """The start of a bad body, for a message."""
    return f"{len(body)} bytes: {body[:60]!r}"


class ArrivalTimes(dict[float, datetime]):
    """Epoch arrival times as aware UTC datetimes, each distinct value made once: records
    written by one PutRecords call share theirs, and so do an aggregate's user records."""

    def __missing__(self, seconds: float) -> datetime:
        stamp = self[seconds] = datetime.fromtimestamp(seconds, timezone.utc)
        return stamp

    def of(self, arrival: float | datetime | None) -> datetime | None:
        if arrival is None or isinstance(arrival, datetime):
            return arrival
        return self[arrival]


def botocore_records(records: list[WireRecord]) -> list[dict[str, Any]]:
    """``records`` in botocore's shape, the arrival time as an aware UTC datetime."""
    stamps = ArrivalTimes()
    shaped: list[dict[str, Any]] = []
    for record in records:
        entry: dict[str, Any] = {
            "SequenceNumber": record.sequence_number,
            "Data": record.data,
            "PartitionKey": record.partition_key,
        }
        arrival = stamps.of(record.approximate_arrival_timestamp)
        if arrival is not None:
            entry["ApproximateArrivalTimestamp"] = arrival
        if record.encryption_type is not None:
            entry["EncryptionType"] = record.encryption_type
        shaped.append(entry)
    return shaped


def _before_parse(
    response_dict: dict[str, Any],
    customized_response_dict: dict[str, Any],
    *,
    wire: bool = False,
    **_: Any,
) -> None:
    body = response_dict.get("body")
    if response_dict.get("status_code") != 200 or not isinstance(body, bytes):
        return
    parsed = parse_get_records(body)
    if not wire:
        parsed["Records"] = botocore_records(parsed["Records"])
    customized_response_dict.update(parsed)
    response_dict["body"] = b"{}"


def _error_body_as_text(response_dict: dict[str, Any], **_: Any) -> None:
    """botocore decodes an error body as UTF-8 and raises UnicodeDecodeError on one that is
    not (a proxy's binary 5xx): it gets the body with replacement characters instead, so the
    answer is classified by its status."""
    body = response_dict.get("body")
    status = response_dict.get("status_code")
    if not isinstance(body, bytes) or not isinstance(status, int) or status < 300:
        return
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        response_dict["body"] = body.decode("utf-8", "replace").encode("utf-8")


def guard_error_bodies(client: Any) -> None:
    """Hook :func:`_error_body_as_text` into every Kinesis operation of ``client`` (once; a
    client without an event system is left alone)."""
    events = getattr(getattr(client, "meta", None), "events", None)
    if events is not None:
        events.register(ERROR_BODY_EVENT, _error_body_as_text, unique_id=_ERROR_BODY_ID)


def _before_parse_wire(**kwargs: Any) -> None:
    _before_parse(**kwargs, wire=True)


def install(client: Any, *, wire: bool = False) -> Callable[[], None]:
    """Hook the fast parser into ``client`` (an aiobotocore or botocore Kinesis client), and
    :func:`guard_error_bodies`; returns the function that unhooks the parser. A client without
    an event system is left alone.

    With ``wire``, GetRecords' ``Records`` stay the parser's :class:`WireRecord` s (arrival
    times in epoch seconds), as the lean path gives them: for a client whose only GetRecords
    callers are the core's shard readers, which take them as they are (no dict, no datetime
    made per record)."""
    events = getattr(getattr(client, "meta", None), "events", None)
    if events is None:
        return lambda: None
    guard_error_bodies(client)
    handler = _before_parse_wire if wire else _before_parse
    events.register(EVENT, handler, unique_id=_UNIQUE_ID)
    return lambda: events.unregister(EVENT, unique_id=_UNIQUE_ID)
