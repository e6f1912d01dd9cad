"""One table of what a failed Kinesis or DynamoDB call means, for every driver.

The producer's retrier, the consumer's shard readers (polling and enhanced fan-out), the lease
manager, the checkpoint stores and the Beam source all ask the same question when a call fails:
retry now, slow down, get a new iterator, give up on this record, or stop and tell the user?
They answer it here, from the AWS error code and, for codes the table does not know, the HTTP
status. The KPL and the KCL each keep such a table; one table here means the producer and
the readers cannot judge the same error differently.

Pure: this module imports no botocore and no aiohttp. Turning an exception into a code and a
status is duck-typed (:func:`error_details`); recognizing transport errors (no answer at all)
is the I/O layer's business (:func:`kinesis_core.aws.exceptions.error_kind`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType


class ErrorKind(enum.Enum):
    """What a failed call means for the caller."""

    THROTTLED = "throttled"
    """A rate limit: slow down, then retry (the producer's limiter adapts)."""
    TRANSIENT = "transient"
    """A service hiccup or no answer at all: retry with backoff."""
    EXPIRED = "expired"
    """The shard iterator expired: get a new one after the last record read."""
    NOT_FOUND = "not_found"
    """The stream, shard or consumer does not exist (any more)."""
    IN_USE = "in_use"
    """The resource is busy (being created or resharded, a subscription still open): retry
    later."""
    AUTH = "auth"
    """Credentials or permissions: no retry fixes it; fail fast and say so."""
    INVALID = "invalid"
    """The request, or one record of it, is invalid for good: fail it, never retry it."""
    CONFLICT = "conflict"
    """A conditional write lost to another writer: re-read, then decide."""
    FATAL = "fatal"
    """Anything else the service refused: raise it to the caller."""

    @property
    def retryable(self) -> bool:
        """Whether waiting and sending the same call again can succeed."""
        return self in _RETRYABLE


_RETRYABLE = frozenset({ErrorKind.THROTTLED, ErrorKind.TRANSIENT, ErrorKind.IN_USE})

INTERNAL = "Internal"
"""Our own code for a failure with no AWS answer (a network error, a timeout)."""
RECORD_COUNT_MISMATCH = "RecordCountMismatch"
"""Our own code for a PutRecords response whose record count differs from the request's."""
CERTIFICATE_VERIFY_FAILED = "CERTIFICATE_VERIFY_FAILED"
"""Our own code (OpenSSL's reason) for a connection whose TLS certificate this client does not
trust: no retry fixes that."""
MALFORMED_RESPONSE = "MalformedResponse"
"""Our own code for an answer that is not one: a body cut short, not the operation's JSON, an
error body that is not text, a GetRecords answer that neither goes on nor ends the shard."""

_CODES: dict[str, ErrorKind] = {}


def _kind(kind: ErrorKind, *codes: str) -> None:
    for code in codes:
        _CODES[code] = kind


_kind(
    ErrorKind.THROTTLED,
    "ProvisionedThroughputExceededException",  # Kinesis per shard; DynamoDB per table
    "LimitExceededException",  # Kinesis per stream/account; 1 SubscribeToShard/s per shard
    "KMSThrottlingException",
    "ThrottlingException",
    "Throttling",
    "RequestLimitExceeded",  # DynamoDB account limit
    "TooManyRequestsException",
    "RequestThrottled",
    "RequestThrottledException",
    "ThrottledException",
    "SlowDown",
)
_kind(
    ErrorKind.TRANSIENT,
    INTERNAL,
    RECORD_COUNT_MISMATCH,
    MALFORMED_RESPONSE,
    "InternalFailure",  # Kinesis, also per PutRecords record
    "InternalFailureException",
    "InternalServerError",  # DynamoDB
    "InternalError",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "RequestTimeout",
    "RequestTimeoutException",
    "PriorRequestNotComplete",
)
_kind(ErrorKind.EXPIRED, "ExpiredIteratorException")
_kind(ErrorKind.NOT_FOUND, "ResourceNotFoundException")
_kind(ErrorKind.IN_USE, "ResourceInUseException")
_kind(
    ErrorKind.AUTH,
    "AccessDeniedException",
    "AccessDenied",
    "UnrecognizedClientException",
    "InvalidSignatureException",
    "SignatureDoesNotMatch",
    "IncompleteSignature",
    "IncompleteSignatureException",
    "InvalidClientTokenId",
    "InvalidAccessKeyId",
    "ExpiredToken",
    "ExpiredTokenException",
    "MissingAuthenticationToken",
    "MissingAuthenticationTokenException",
    "NotAuthorized",
    "AuthFailure",
    "RequestExpired",  # the signature is too old: a skewed clock
    # The stream's KMS key refuses this principal (kms:GenerateDataKey, kms:Decrypt, the key
    # policy): permissions, like AccessDeniedException.
    "KMSAccessDeniedException",
)
_kind(
    ErrorKind.INVALID,
    "InvalidArgumentException",
    "ValidationException",
    "ValidationError",
    "SerializationException",
    "MissingParameter",
    "InvalidParameterValue",
    "InvalidParameterCombination",
)
# The stream's KMS key is disabled, pending deletion or otherwise unusable, gone, or the account
# is not subscribed to KMS (HTTP 400 on PutRecord(s), GetRecords, SubscribeToShard): every call
# on the stream fails the same way until someone fixes the key, so no retry and no split of a
# request helps. (KMSThrottlingException, above, is the one KMS error a retry gets past.)
_kind(
    ErrorKind.FATAL,
    CERTIFICATE_VERIFY_FAILED,
    "KMSDisabledException",
    "KMSInvalidStateException",
    "KMSNotFoundException",
    "KMSOptInRequired",
)
_kind(ErrorKind.CONFLICT, "ConditionalCheckFailedException", "TransactionConflictException")

ERROR_CODES: Mapping[str, ErrorKind] = MappingProxyType(_CODES)
"""AWS error code -> kind. Codes not listed fall back to the HTTP status (:func:`classify`)."""


def classify(code: str | None, http_status: int | None = None) -> ErrorKind:
    """The kind of a failure with AWS error ``code`` and HTTP status ``http_status``.

    ``code`` None means no AWS answer at all (connection refused or reset, a timeout):
    transient. A code the table does not know is judged by its status: 429 throttled, 401
    and 403 auth, 408 and 5xx transient, other 4xx fatal; with no status (an unknown
    per-record code in a PutRecords response) it is transient, as the KPL retries those until
    the record's TTL.
    """
    if code is not None:
        kind = _CODES.get(code)
        if kind is not None:
            return kind
    if http_status is None:
        return ErrorKind.TRANSIENT
    if http_status == 429:
        return ErrorKind.THROTTLED
    if http_status in (401, 403):
        return ErrorKind.AUTH
    if http_status == 408 or http_status >= 500:
        return ErrorKind.TRANSIENT
    if http_status >= 400:
        return ErrorKind.FATAL
    return ErrorKind.TRANSIENT


def _certificate_refused(exc: BaseException) -> bool:
    """Whether ``exc`` or an exception it was raised from says the peer's TLS certificate
    failed verification (botocore, aiohttp and our own clients all keep OpenSSL's text)."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if CERTIFICATE_VERIFY_FAILED in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def error_details(exc: BaseException) -> tuple[str | None, int | None]:
    """The AWS error code and HTTP status of a botocore ``ClientError`` (None, None for any
    other exception, but :data:`CERTIFICATE_VERIFY_FAILED` for a TLS certificate that failed
    verification), without importing botocore."""
    response = getattr(exc, "response", None)
    if not isinstance(response, Mapping):
        return (CERTIFICATE_VERIFY_FAILED if _certificate_refused(exc) else None), None
    error = response.get("Error")
    code = error.get("Code") if isinstance(error, Mapping) else None
    metadata = response.get("ResponseMetadata")
    status = metadata.get("HTTPStatusCode") if isinstance(metadata, Mapping) else None
    return (
        code if isinstance(code, str) and code else None,
        status if isinstance(status, int) else None,
    )


def error_message(exc: BaseException) -> str:
    """The service's message for a ``ClientError``, else the exception as text."""
    response = getattr(exc, "response", None)
    if isinstance(response, Mapping):
        error = response.get("Error")
        if isinstance(error, Mapping) and error.get("Message"):
            return str(error["Message"])
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
