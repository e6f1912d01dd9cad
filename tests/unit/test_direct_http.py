"""kinesis_core.aws.direct_http.DirectHttp's choices without a server: which URLs it sends
(none a proxy applies to) and which botocore exception each transport failure becomes (the one
aiobotocore raises for aiohttp's error for the same failure)."""

from __future__ import annotations

import asyncio
import socket
import ssl

import pytest
from aiobotocore.config import AioConfig
from botocore.exceptions import (
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    ReadTimeoutError,
    SSLError,
)

from kinesis_core.aws.config import ClientConfig
from kinesis_core.aws.direct_http import DirectHttp, direct_http
from kinesis_core.aws.exceptions import transport_error
from kinesis_core.aws.http1 import ConnectionBroken, ConnectTimeout, MalformedAnswer, ReadTimeout

URL = "https://kinesis.eu-west-1.amazonaws.com/"


def _direct(**http: object) -> DirectHttp:
    return DirectHttp(ClientConfig(region_name="eu-west-1"), AioConfig(**http))


def test_a_url_without_a_proxy_is_sent_directly(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert _direct().handles(URL)


def test_a_url_a_proxy_applies_to_stays_on_the_clients_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert not _direct().handles(URL)
    monkeypatch.setenv("NO_PROXY", "kinesis.eu-west-1.amazonaws.com")
    assert _direct().handles(URL)
    monkeypatch.delenv("HTTPS_PROXY")
    assert not _direct(proxies={"https": "http://proxy.example:3128"}).handles(URL)


def test_a_closed_session_sends_nothing() -> None:
    direct = _direct()
    asyncio.run(direct.close())
    assert not direct.handles(URL)


def test_a_closed_session_opens_no_connection_when_asked_anyway() -> None:
    direct = _direct()

    async def main() -> None:
        await direct.close()
        with pytest.raises(ConnectionClosedError):
            await direct.post("http://127.0.0.1:9/", {}, b"{}")  # nothing listens at 9 either

    asyncio.run(main())


def test_a_client_not_made_here_has_none() -> None:
    assert direct_http(object()) is None
    assert direct_http([]) is None  # unhashable


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (ssl.SSLCertVerificationError("certificate verify failed"), SSLError),
        (ssl.SSLError("bad record mac"), SSLError),
        (ConnectionBroken("closed before answering", 0), ConnectionClosedError),
        (ConnectionBroken("closed in the body", 10), ConnectionClosedError),
        (ConnectionBroken("reset", 0, ConnectionResetError()), EndpointConnectionError),
        (MalformedAnswer("not an HTTP/1.x status line"), ConnectionClosedError),
        (ConnectTimeout("no connection in 5 s"), ConnectTimeoutError),
        (ReadTimeout("no answer for 30 s"), ReadTimeoutError),
        (ConnectionRefusedError(), EndpointConnectionError),
        (socket.gaierror(), EndpointConnectionError),
        (asyncio.TimeoutError(), ReadTimeoutError),
        (ValueError("anything else"), HTTPClientError),
    ],
)
def test_transport_failures_become_botocores_exceptions(
    failure: Exception, expected: type[Exception]
) -> None:
    """Each as aiobotocore raises aiohttp's error for the same failure."""
    error = transport_error(failure, URL)
    assert type(error) is expected
