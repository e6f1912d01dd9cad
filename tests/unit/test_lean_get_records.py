"""The lean GetRecords path's pure parts, and what it signs and sends (a recording HTTP
session in place of the network; the real servers are in tests/integration)."""

from __future__ import annotations

import asyncio
import gc
import json
import weakref
from collections.abc import Callable
from typing import Any
from unittest import mock

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import ReadOnlyCredentials

from kinesis_core.aws.botocore_private import request_signer
from kinesis_core.aws.client import create_kinesis_client
from kinesis_core.aws.config import ClientConfig
from kinesis_core.aws.lean_get_records import EVENT, LeanGetRecords
from kinesis_core.aws.lean_requests import CONTENT_TYPE, Route, SigV4, error_response, route_of

AUTH = (
    "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261125/eu-west-1/kinesis/aws4_request, "
    "SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=abc"
)


def test_a_route_takes_the_signing_scope_from_the_authorization_header() -> None:
    route = route_of(
        "https://kinesis.eu-west-1.amazonaws.com/",
        {"Authorization": AUTH.encode(), "User-Agent": b"Botocore/1 kinesis-connectors"},
    )
    assert route is not None
    assert (route.region, route.service) == ("eu-west-1", "kinesis")
    assert route.user_agent == "Botocore/1 kinesis-connectors"
    assert route_of("http://x/", {}) is None
    assert route_of("http://x/", {"Authorization": "Bearer token"}) is None
    assert route_of("http://x/", {"Authorization": "AWS4-HMAC-SHA256 Credential=a/b"}) is None


def test_error_answers_take_botocores_shape() -> None:
    typed = error_response(
        400,
        {"x-amzn-requestid": "r-1"},
        b'{"__type":"com.amazonaws.kinesis#ExpiredIteratorException","message":"too old"}',
    )
    assert typed["Error"] == {"Code": "ExpiredIteratorException", "Message": "too old"}
    assert typed["ResponseMetadata"]["RequestId"] == "r-1"
    assert typed["ResponseMetadata"]["HTTPStatusCode"] == 400
    capital = error_response(400, {}, b'{"__type":"LimitExceededException","Message":"slow"}')
    assert capital["Error"] == {"Code": "LimitExceededException", "Message": "slow"}
    assert error_response(503, {}, b"<html><b>busy</b></html>")["Error"] == {
        "Code": "503",
        "Message": "Service Unavailable",
    }
    assert error_response(500, {}, b"")["Error"] == {
        "Code": "500",
        "Message": "Internal Server Error",
    }
    assert error_response(400, {}, b"not json")["Error"] == {"Code": "400", "Message": "not json"}


class _Answer:
    status_code = 200
    headers = {"x-amzn-requestid": "r-2"}

    def __init__(self, body: bytes) -> None:
        self._body = body

    @property
    def content(self) -> Any:
        async def read() -> bytes:
            return self._body

        return read()


class _RecordingSession:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def send(self, request: Any) -> _Answer:
        self.sent.append(request)
        page = {"Records": [{"Data": "aGk=", "PartitionKey": "k", "SequenceNumber": "1"}]}
        return _Answer(
            json.dumps({**page, "NextShardIterator": "it-2", "MillisBehindLatest": 0}).encode()
        )


def _lean_calls(
    iterators: tuple[str, ...], *, token: str | None = None, sigv4: SigV4 | None = None
) -> tuple[list[Any], list[dict[str, Any]]]:
    """The requests a lean sender sent (and its answers) for GetRecords of ``iterators``, on a
    route learned from a botocore request signed for eu-west-1."""
    config = ClientConfig(
        region_name="eu-west-1",
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
        aws_session_token=token,
    )

    async def main() -> tuple[list[Any], list[dict[str, Any]]]:
        async with create_kinesis_client(config, max_attempts=1) as client:
            session = _RecordingSession()
            lean = LeanGetRecords(client, request_signer(client), session)
            if sigv4 is not None:
                lean._sigv4 = sigv4
            learned = AWSRequest(
                method="POST",
                url="https://lean.example/",
                data=b'{"ShardIterator":"it-1","Limit":5}',
                headers={"Authorization": AUTH, "User-Agent": "agent/1"},
            ).prepare()
            await client.meta.events.emit(EVENT, request=learned)
            answers = [await lean.get_records(iterator, 5, {}) for iterator in iterators]
            return session.sent, answers

    return asyncio.run(main())


def test_a_learned_route_is_signed_with_the_clients_credentials_and_token() -> None:
    [sent, signed_here], [answer, _] = _lean_calls(("it-1", "it-2"), token="session-token")
    assert signed_here.headers["X-Amz-Security-Token"] == "session-token"
    assert sent.url == "https://lean.example/"
    assert json.loads(sent.body) == {"ShardIterator": "it-1", "Limit": 5}
    assert sent.headers["X-Amz-Target"] == "Kinesis_20131202.GetRecords"
    assert sent.headers["User-Agent"] == "agent/1"
    assert sent.headers["X-Amz-Security-Token"] == "session-token"
    authorization = sent.headers["Authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/kinesis/aws4_request" in authorization
    assert answer["Records"][0].data == b"hi"
    assert answer["NextShardIterator"] == "it-2"
    assert answer["ResponseMetadata"]["RequestId"] == "r-2"


def test_a_wrapped_client_keeps_its_own_get_records() -> None:
    class Counting:
        def __init__(self, client: Any) -> None:
            self._client = client

        def __getattr__(self, name: str) -> Any:
            return getattr(self._client, name)

    async def main() -> tuple[Any, Any]:
        config = ClientConfig(region_name="us-east-1", endpoint_url="http://127.0.0.1:9")
        async with create_kinesis_client(config, max_attempts=1) as client:
            return LeanGetRecords.of(Counting(client)), LeanGetRecords.of(client)

    wrapped, plain = asyncio.run(main())
    assert wrapped is None
    assert plain is not None


def test_a_client_with_a_lean_sender_is_freed_when_its_user_drops_it() -> None:
    """The senders are kept per client in a weak map; a sender holding its client strongly kept
    every client a process ever made alive (with its service model: about 30,000 objects that
    each full garbage collection then walked)."""

    async def main() -> weakref.ref[Any]:
        config = ClientConfig(region_name="us-east-1", endpoint_url="http://127.0.0.1:9")
        async with create_kinesis_client(config, max_attempts=1) as client:
            assert LeanGetRecords.of(client) is LeanGetRecords.of(client)
            return weakref.ref(client)

    client = asyncio.run(main())
    gc.collect()
    assert client() is None


def _botocore_signed(url: str, credentials: Any, body: bytes, user_agent: str) -> Any:
    request = AWSRequest(
        method="POST",
        url=url,
        data=body,
        headers={
            "Content-Type": CONTENT_TYPE,
            "X-Amz-Target": "Kinesis_20131202.GetRecords",
            "User-Agent": user_agent,
        },
    )
    SigV4Auth(credentials, "kinesis", "eu-west-1").add_auth(request)
    return request


def test_our_sigv4_signature_is_botocores() -> None:
    body = b'{"ShardIterator": "it-1", "Limit": 10000}'
    signer = SigV4()
    for url in (
        "https://kinesis.eu-west-1.amazonaws.com/",
        "https://kinesis.eu-west-1.amazonaws.com:443/",
        "http://127.0.0.1:4567/",
        "http://127.0.0.1:4567",
        "http://[::1]:4567/a path/~x",
    ):
        for token in (None, "  a  session token "):
            credentials = ReadOnlyCredentials("AKIDEXAMPLE", "secret/key+", token)
            theirs = _botocore_signed(url, credentials, body, "agent/1")
            date = theirs.headers["X-Amz-Date"]
            route = Route(url, "agent/1", region="eu-west-1", service="kinesis")
            ours = signer.headers(route, "Kinesis_20131202.GetRecords", credentials, body, date)
            assert ours["Authorization"] == theirs.headers["Authorization"], (url, token)
            assert ours.get("X-Amz-Security-Token") == theirs.headers.get("X-Amz-Security-Token")


def _botocore_signings(calls: Callable[[], Any]) -> int:
    """How many requests botocore's signer signed while ``calls`` ran."""
    with mock.patch.object(
        SigV4Auth, "add_auth", autospec=True, side_effect=SigV4Auth.add_auth
    ) as add:
        calls()
    return add.call_count


def test_after_a_routes_first_call_the_signature_is_ours_and_botocores() -> None:
    answers: list[Any] = []
    signed_by_botocore = _botocore_signings(
        lambda: answers.append(_lean_calls(("it-1", "it-2", "it-3")))
    )
    sent, _ = answers[0]
    credentials = ReadOnlyCredentials("AKIDEXAMPLE", "secret", None)
    for request in sent:
        theirs = AWSRequest(
            method="POST",
            url=request.url,
            data=request.body,
            headers={
                "Content-Type": CONTENT_TYPE,
                "X-Amz-Target": "Kinesis_20131202.GetRecords",
            },
        )
        auth = SigV4Auth(credentials, "kinesis", "eu-west-1")
        theirs.context["timestamp"] = request.headers["X-Amz-Date"]
        auth._modify_request_before_signing(theirs)
        signature = auth.signature(
            auth.string_to_sign(theirs, auth.canonical_request(theirs)), theirs
        )
        assert request.headers["Authorization"].endswith(f"Signature={signature}")
    assert signed_by_botocore == 1, "only the route's first call is botocore's to sign"


def test_a_route_whose_signature_differs_from_botocores_keeps_botocores_signer() -> None:
    class Wrong(SigV4):
        def headers(self, *args: Any, **kwargs: Any) -> dict[str, str]:
            headers = super().headers(*args, **kwargs)
            headers["Authorization"] += "-wrong"
            return headers

    answers: list[Any] = []
    signed_by_botocore = _botocore_signings(
        lambda: answers.append(_lean_calls(("it-1", "it-2", "it-3"), sigv4=Wrong()))
    )
    sent, _ = answers[0]
    assert not any(request.headers["Authorization"].endswith("-wrong") for request in sent)
    assert signed_by_botocore == 3
