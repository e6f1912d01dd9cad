"""Exceptions shared by every layer.

Every error that is the caller's fault names the field and the limit it broke, so a user can fix
the input without reading our code.
"""

from __future__ import annotations

from collections.abc import Sequence

from kinesis_core.aws.classify import (
    CERTIFICATE_VERIFY_FAILED,
    MALFORMED_RESPONSE,
    ErrorKind,
    classify,
    error_details,
    error_message,
)


class KinesisConnectorError(Exception):
    """Base class of every exception this project raises."""


class ValidationError(KinesisConnectorError, ValueError):
    """Data refused before anything was sent (a record, an element, a key): names the field,
    the limit and what was seen. Bad arguments raise :class:`ConfigurationError`."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


class RecordTooLargeError(ValidationError):
    """A record's data plus partition key (``size`` bytes) is over ``limit`` bytes: the
    stream's maximum record size, or a cap the caller set."""

    def __init__(self, size: int, limit: int, message: str | None = None) -> None:
        super().__init__(
            "data",
            message or f"data plus partition key is {size} bytes, the limit is {limit} bytes",
        )
        self.size = size
        self.limit = limit


class ConfigurationError(KinesisConnectorError, ValueError):
    """An argument or configuration value is out of range or inconsistent with another one.

    ``field`` names the argument to change (of two that disagree, the one the message asks to
    change); the message says the limit and what was given. Bad *data* (a record, an element)
    raises :class:`ValidationError` instead.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


def shape_problem(value: object, names: Sequence[str], required: int) -> str | None:
    """What is wrong with ``value`` where a tuple of ``names`` was expected (the first
    ``required`` of them required): its type, or how many elements it has and which one is
    missing or how many are too many. None when its shape is right (a tuple or list of
    ``required`` to ``len(names)`` elements)."""
    if value is None:
        return "got None"
    if not isinstance(value, (tuple, list)):
        return f"got {type(value).__name__} {value!r:.40}"
    kind, count = type(value).__name__, len(value)
    elements = f"a {kind} of {count} element{'' if count == 1 else 's'}"
    if count < required:
        return f"got {elements}: {names[count]} (element {count}) is missing"
    extra = count - len(names)
    if extra > 0:
        return f"got {elements}, {'one' if extra == 1 else extra} too many (at most {len(names)})"
    return None


class NotAckableError(KinesisConnectorError, RuntimeError):
    """``KinesisRecord.ack()`` on a record no consumer delivered (made by hand, or by
    :func:`~kinesis_core.aggregation.deaggregate` without an ``ack``): no checkpoint waits for
    it, so acking it would do nothing."""


class EmulatorError(KinesisConnectorError, RuntimeError):
    """The local Kinesis emulator could not be installed, started or reached."""


class MalformedResponseError(KinesisConnectorError, ValueError):
    """An answer of ``operation`` that is not one (a proxy's page, a body cut short or not
    the operation's JSON, an error body that is not text, a GetRecords answer that neither goes
    on nor ends the shard). It has botocore's error shape (``response``), with the code
    :data:`~kinesis_core.aws.classify.MALFORMED_RESPONSE` and the answer's HTTP ``status``: the
    error table calls it transient, so it is retried as a 5xx is."""

    def __init__(self, operation: str, message: str, status: int = 200) -> None:
        super().__init__(f"malformed {operation} answer (HTTP {status}): {message}")
        self.operation = operation
        self.response = {
            "Error": {"Code": MALFORMED_RESPONSE, "Message": str(self)},
            "ResponseMetadata": {"HTTPStatusCode": status},
        }


class KinesisServiceError(KinesisConnectorError):
    """A Kinesis or DynamoDB call failed in a way no retry fixes (or its retries ran out).

    ``code`` and ``http_status`` are the service's (None for a network failure), ``kind`` the
    :class:`~kinesis_core.aws.classify.ErrorKind` the error table gives them; the original
    exception is the ``__cause__``.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str | None,
        kind: ErrorKind,
        http_status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.kind = kind
        self.http_status = http_status

    @classmethod
    def wrap(cls, exc: BaseException, doing: str) -> KinesisServiceError:
        """``doing`` says what failed (``"GetRecords on shardId-000000000001 of orders"``);
        raise the result ``from exc``. The notes of ``exc`` (the attempts before it, when an
        executor retried it) end the message."""
        code, status = error_details(exc)
        kind = classify(code, status)
        what = f"{code}: {error_message(exc)}" if code else error_message(exc)
        hint = CERTIFICATE_HINT if code == CERTIFICATE_VERIFY_FAILED else _HINTS.get(kind, "")
        notes = "".join(f"; {note}" for note in getattr(exc, "__notes__", ()))
        return cls(f"{doing} failed: {what}{hint}{notes}", code=code, kind=kind, http_status=status)


CERTIFICATE_HINT = (
    " (the endpoint's TLS certificate is not trusted: give the bundle of the CA that signed it"
    " as ClientConfig(verify=...) or AWS_CA_BUNDLE; no retry fixes that)"
)
"""What to do about a :data:`~.classify.CERTIFICATE_VERIFY_FAILED` failure."""
_HINTS = {
    ErrorKind.AUTH: " (check the credentials and the IAM permissions of this process)",
    ErrorKind.NOT_FOUND: " (check the stream name or ARN, and the region)",
}
