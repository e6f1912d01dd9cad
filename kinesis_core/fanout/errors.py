"""Exceptions of the enhanced fan-out transport.

Service errors (an HTTP error answer, an ``exception`` event inside the stream) are raised as
botocore's ``ClientError``, exactly as the other Kinesis calls raise them, so the project's
classification by error code and HTTP status applies unchanged. Everything below the service
(connection refused, reset or cut mid-stream, an HTTP/2 RST_STREAM or GOAWAY, a read timeout,
bytes that are not a valid event stream) is a ``FanOutTransportError``: an ``OSError``, so code
that already treats OSError as "no answer, retry" renews the subscription.
"""

from __future__ import annotations

from kinesis_core.errors import ConfigurationError, KinesisConnectorError

INSTALL_HINT = "pip install 'kinesis-connectors[efo]'"


class FanOutTransportError(KinesisConnectorError, OSError):
    """The connection or the HTTP stream of a subscription failed; the message says how.

    Retryable: renew the subscription from the last continuation sequence number.
    """


class FanOutTimeoutError(FanOutTransportError, TimeoutError):
    """No byte arrived within the read timeout (or no connection within the connect timeout)."""


def missing_dependency(exc: ImportError) -> ConfigurationError:
    """The error to raise when the optional HTTP/2 library is not installed."""
    return ConfigurationError(
        "enhanced_fan_out",
        f"enhanced fan-out needs the optional library h2 ({exc}): {INSTALL_HINT}",
    )
