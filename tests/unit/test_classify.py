"""The one error table: every code it knows, the HTTP-status fallback, and exception details."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError, SSLError

from kinesis_core.aws.classify import (
    CERTIFICATE_VERIFY_FAILED,
    ERROR_CODES,
    INTERNAL,
    MALFORMED_RESPONSE,
    RECORD_COUNT_MISMATCH,
    ErrorKind,
    classify,
    error_details,
    error_message,
)
from kinesis_core.aws.exceptions import error_kind

T, R, E, N, U, A, V, C, F = (
    ErrorKind.THROTTLED,
    ErrorKind.TRANSIENT,
    ErrorKind.EXPIRED,
    ErrorKind.NOT_FOUND,
    ErrorKind.IN_USE,
    ErrorKind.AUTH,
    ErrorKind.INVALID,
    ErrorKind.CONFLICT,
    ErrorKind.FATAL,
)

EXPECTED: dict[str, ErrorKind] = {
    "ProvisionedThroughputExceededException": T,
    "LimitExceededException": T,
    "KMSThrottlingException": T,
    "ThrottlingException": T,
    "Throttling": T,
    "RequestLimitExceeded": T,
    "TooManyRequestsException": T,
    "RequestThrottled": T,
    "RequestThrottledException": T,
    "ThrottledException": T,
    "SlowDown": T,
    INTERNAL: R,
    RECORD_COUNT_MISMATCH: R,
    MALFORMED_RESPONSE: R,
    "InternalFailure": R,
    "InternalFailureException": R,
    "InternalServerError": R,
    "InternalError": R,
    "ServiceUnavailable": R,
    "ServiceUnavailableException": R,
    "RequestTimeout": R,
    "RequestTimeoutException": R,
    "PriorRequestNotComplete": R,
    "ExpiredIteratorException": E,
    "ResourceNotFoundException": N,
    "ResourceInUseException": U,
    "AccessDeniedException": A,
    "AccessDenied": A,
    "UnrecognizedClientException": A,
    "InvalidSignatureException": A,
    "SignatureDoesNotMatch": A,
    "IncompleteSignature": A,
    "IncompleteSignatureException": A,
    "InvalidClientTokenId": A,
    "InvalidAccessKeyId": A,
    "ExpiredToken": A,
    "ExpiredTokenException": A,
    "MissingAuthenticationToken": A,
    "MissingAuthenticationTokenException": A,
    "NotAuthorized": A,
    "AuthFailure": A,
    "RequestExpired": A,
    "KMSAccessDeniedException": A,
    "InvalidArgumentException": V,
    "ValidationException": V,
    "ValidationError": V,
    "SerializationException": V,
    "MissingParameter": V,
    "InvalidParameterValue": V,
    "InvalidParameterCombination": V,
    CERTIFICATE_VERIFY_FAILED: F,
    "KMSDisabledException": F,
    "KMSInvalidStateException": F,
    "KMSNotFoundException": F,
    "KMSOptInRequired": F,
    "ConditionalCheckFailedException": C,
    "TransactionConflictException": C,
}


def test_the_table_is_the_expected_table() -> None:
    """A code added to the table needs a row here, and every row here is in the table."""
    assert dict(ERROR_CODES) == EXPECTED


@pytest.mark.parametrize(("code", "kind"), sorted(EXPECTED.items()))
@pytest.mark.parametrize("status", [None, 400, 403, 500])
def test_a_known_code_wins_over_the_status(code: str, kind: ErrorKind, status: int | None) -> None:
    assert classify(code, status) is kind


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        (None, None, ErrorKind.TRANSIENT),  # no answer at all
        ("SomethingNew", None, ErrorKind.TRANSIENT),  # an unknown per-record code
        ("SomethingNew", 429, ErrorKind.THROTTLED),
        ("SomethingNew", 401, ErrorKind.AUTH),
        ("SomethingNew", 403, ErrorKind.AUTH),
        (None, 403, ErrorKind.AUTH),
        ("SomethingNew", 408, ErrorKind.TRANSIENT),
        ("SomethingNew", 500, ErrorKind.TRANSIENT),
        ("SomethingNew", 503, ErrorKind.TRANSIENT),
        (None, 502, ErrorKind.TRANSIENT),
        ("SomethingNew", 400, ErrorKind.FATAL),
        ("SomethingNew", 404, ErrorKind.FATAL),
        (None, 413, ErrorKind.FATAL),
    ],
)
def test_unknown_codes_fall_back_to_the_status(
    code: str | None, status: int | None, kind: ErrorKind
) -> None:
    assert classify(code, status) is kind


def test_retryable_kinds() -> None:
    assert {k for k in ErrorKind if k.retryable} == {
        ErrorKind.THROTTLED,
        ErrorKind.TRANSIENT,
        ErrorKind.IN_USE,
    }


def client_error(code: str, status: int, message: str = "it broke") -> ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, "PutRecords")


def test_details_and_message_of_a_client_error() -> None:
    exc = client_error("ResourceNotFoundException", 400, "Stream s not found")
    assert error_details(exc) == ("ResourceNotFoundException", 400)
    assert error_message(exc) == "Stream s not found"
    assert error_kind(exc) is ErrorKind.NOT_FOUND


def test_details_of_other_exceptions_are_empty() -> None:
    assert error_details(ValueError("x")) == (None, None)
    assert error_message(ValueError("bad value")) == "ValueError: bad value"
    assert error_message(asyncio.TimeoutError()) == "TimeoutError"


def test_transport_errors_are_transient_and_bugs_are_not_classified() -> None:
    assert error_kind(EndpointConnectionError(endpoint_url="http://127.0.0.1:1")) is R
    assert error_kind(ReadTimeoutError(endpoint_url="http://127.0.0.1:1")) is R
    assert error_kind(ConnectionResetError()) is R
    assert error_kind(asyncio.TimeoutError()) is R
    assert error_kind(KeyError("Records")) is None
    assert error_kind(TypeError("bug")) is None


def test_a_certificate_that_failed_verification_is_fatal_wherever_it_is_wrapped() -> None:
    """OpenSSL's CERTIFICATE_VERIFY_FAILED, in botocore's SSLError or raised from by another
    exception: no retry fixes it (before, it was a transient transport error, retried for 30 s
    by every caller)."""
    refused = ssl.SSLCertVerificationError(
        1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate"
    )
    botocore_error = SSLError(endpoint_url="https://127.0.0.1:1", error=refused)
    assert error_details(botocore_error) == (CERTIFICATE_VERIFY_FAILED, None)
    assert error_kind(botocore_error) is F
    wrapped = ConnectionError("TLS handshake failed")
    wrapped.__cause__ = refused
    assert error_kind(wrapped) is F
    other_tls_failure = SSLError(endpoint_url="https://127.0.0.1:1", error=ssl.SSLError(1, "EOF"))
    assert error_kind(other_tls_failure) is R
