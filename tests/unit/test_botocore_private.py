"""Every botocore private name the project uses (kinesis_core.aws.botocore_private), on real
botocore and aiobotocore clients: the ``botocore-lowest`` and ``botocore-newest`` nox sessions
run this module, so a botocore release that moves one of them fails here. The request signer
signs what the lean calls' route learning reads, and the HTTP session sends a request to a
loopback server and gives the answer in the shape the lean calls take."""

from __future__ import annotations

import asyncio
import os
import ssl
from typing import Any

import pytest
from botocore.awsrequest import AWSPreparedRequest, AWSRequest

from kinesis_core.aws.botocore_private import (
    cert_path,
    http_session,
    proxy_url,
    request_signer,
    tls_context,
)
from kinesis_core.aws.client import create_botocore_client, create_kinesis_client
from kinesis_core.aws.config import ClientConfig
from kinesis_core.aws.lean_get_records import LeanGetRecords
from kinesis_core.aws.lean_requests import route_of

CONFIG = ClientConfig(
    region_name="eu-west-1",
    endpoint_url="http://127.0.0.1:9",
    aws_access_key_id="AKIDEXAMPLE",
    aws_secret_access_key="secret",
    aws_session_token="token",
)
URL = "https://kinesis.eu-west-1.amazonaws.com/"
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")


class _StandIn:
    """A client of another SDK, or a wrapper: none of botocore's pieces."""


def test_the_signer_of_an_aiobotocore_client_signs_a_route_the_lean_calls_learn() -> None:
    async def main() -> tuple[Any, Any]:
        async with create_kinesis_client(CONFIG, max_attempts=1) as client:
            signer = request_signer(client)
            assert signer is not None
            auth = await signer.get_auth_instance("kinesis", "eu-west-1", "v4")
            request = AWSRequest(method="POST", url=URL, data=b"{}", headers={})
            auth.add_auth(request)
            return auth.credentials, request

    credentials, request = asyncio.run(main())
    assert (credentials.access_key, credentials.secret_key, credentials.token) == (
        "AKIDEXAMPLE",
        "secret",
        "token",
    )
    route = route_of(URL, request.headers)
    assert route is not None
    assert (route.region, route.service) == ("eu-west-1", "kinesis")
    assert request.headers["X-Amz-Security-Token"] == "token"


def test_a_botocore_client_has_a_signer_too() -> None:
    client = create_botocore_client(CONFIG, "kinesis")
    try:
        signer = request_signer(client)
        assert signer is not None
        assert signer.get_auth_instance("kinesis", "eu-west-1", "v4").credentials.token == "token"
    finally:
        client.close()


def test_a_client_without_botocores_pieces_has_none() -> None:
    assert request_signer(_StandIn()) is None
    assert http_session(_StandIn()) is None


async def _answer_once(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seen: list[bytes]
) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    seen.append(head + await reader.readexactly(length))
    body = b'{"Records":[]}'
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/x-amz-json-1.1\r\n"
        b"x-amzn-RequestId: req-1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    await writer.drain()
    writer.close()


def test_the_http_session_of_an_aiobotocore_client_sends_and_answers_as_the_lean_calls_read() -> (
    None
):
    seen: list[bytes] = []

    async def main() -> tuple[int, Any, bytes]:
        server = await asyncio.start_server(lambda r, w: _answer_once(r, w, seen), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        url = f"http://127.0.0.1:{port}/"
        try:
            async with create_kinesis_client(CONFIG, max_attempts=1) as client:
                session = http_session(client)
                assert session is not None
                request = AWSPreparedRequest(
                    "POST", url, {"X-Amz-Target": "Kinesis_20131202.GetRecords"}, b"{}", False
                )
                answer = await session.send(request)
                return answer.status_code, answer.headers, await answer.content
        finally:
            server.close()
            await server.wait_closed()

    status, headers, body = asyncio.run(main())
    assert (status, body) == (200, b'{"Records":[]}')
    assert headers["x-amzn-requestid"] == "req-1"
    assert seen[0].startswith(b"POST / HTTP/1.1\r\n")
    assert b"X-Amz-Target: Kinesis_20131202.GetRecords" in seen[0]


def test_a_client_made_here_has_every_piece_a_lean_sender_needs() -> None:
    async def main() -> bool:
        async with create_kinesis_client(CONFIG, max_attempts=1) as client:
            return LeanGetRecords.of(client) is not None

    assert asyncio.run(main())


def test_the_proxy_is_the_configured_one_else_the_environments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert proxy_url(URL, None, None) is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert proxy_url(URL, None, None) == "http://proxy.example:3128"
    monkeypatch.setenv("NO_PROXY", "kinesis.eu-west-1.amazonaws.com")
    assert proxy_url(URL, None, None) is None
    configured = {"https": "http://other.example:8080"}
    assert proxy_url(URL, configured, None) == "http://other.example:8080"


def test_the_tls_context_verifies_with_the_bundle_botocore_uses(tmp_path: Any) -> None:
    context = tls_context()
    assert isinstance(context, ssl.SSLContext)
    context.check_hostname = True
    bundle = cert_path(True)
    assert isinstance(bundle, str)
    assert os.path.exists(bundle)
    context.load_verify_locations(bundle)
    assert context.cert_store_stats()["x509_ca"] > 0
    own = str(tmp_path / "bundle.pem")
    assert cert_path(own) == own
