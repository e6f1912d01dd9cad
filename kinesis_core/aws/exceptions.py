"""The exceptions a call of the call path raises, sorted: what kind each is by the error
table (:func:`error_kind`), whether it reached no endpoint at all (:func:`unreachable`), and
the botocore exception for a failure of the project's HTTP/1.1 client (:func:`transport_error`).
"""

from __future__ import annotations

import asyncio
import ssl

import aiohttp
from botocore.exceptions import (
    ConnectionClosedError,
    ConnectionError as BotoConnectionError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    ReadTimeoutError,
    SSLError,
)

from kinesis_core.aws.classify import ErrorKind, classify, error_details
from kinesis_core.aws.http1 import ConnectionBroken, ConnectTimeout, MalformedAnswer, ReadTimeout

__all__ = ["TRANSPORT_ERRORS", "error_kind", "transport_error", "unreachable"]


def transport_error(exc: Exception, url: str) -> Exception:
    """The botocore exception aiobotocore raises for ``exc``, a failure of
    :mod:`kinesis_core.aws.http1`'s while it sent a request to ``url``: aiohttp's error for the
    same failure is what aiobotocore maps."""
    error: Exception
    if isinstance(exc, ssl.SSLError):  # aiohttp's ClientSSLError
        error = SSLError(endpoint_url=url, error=exc)
    elif isinstance(exc, ConnectionBroken) and exc.reset is not None:  # ClientOSError
        error = EndpointConnectionError(endpoint_url=url, error=exc)
    elif isinstance(exc, (ConnectionBroken, MalformedAnswer)):
        # aiohttp's ServerDisconnectedError, ClientPayloadError and BadStatusLine
        error = ConnectionClosedError(error=exc, request=None, endpoint_url=url)
    elif isinstance(exc, ConnectTimeout):
        error = ConnectTimeoutError(endpoint_url=url, error=exc)
    elif isinstance(exc, (ReadTimeout, asyncio.TimeoutError)):
        error = ReadTimeoutError(endpoint_url=url, error=exc)
    elif isinstance(exc, OSError):  # ClientConnectorError; socket.gaierror is one too
        error = EndpointConnectionError(endpoint_url=url, error=exc)
    else:
        error = HTTPClientError(error=exc)
    return error


TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncio.TimeoutError,
    HTTPClientError,
    BotoConnectionError,
    aiohttp.ClientError,
)
"""No answer from the service (connection refused or reset, timeouts): worth retrying."""


def error_kind(exc: BaseException) -> ErrorKind | None:
    """How to treat an exception a Kinesis or DynamoDB call raised (the table in
    :mod:`kinesis_core.aws.classify`); None when it is neither a service answer nor a transport
    error, i.e. a bug, to be raised as it is."""
    code, status = error_details(exc)
    if code is None and status is None and not isinstance(exc, TRANSPORT_ERRORS):
        return None
    return classify(code, status)


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says no connection to the endpoint could be made at all (nothing
    listens there, the name does not resolve, the connect timed out), as opposed to a
    connection that failed after it was made."""
    return isinstance(
        exc,
        (
            EndpointConnectionError,
            ConnectTimeoutError,
            ConnectionRefusedError,
            aiohttp.ClientConnectorError,
        ),
    )
