"""SubscribeToShard requests are signed exactly as botocore's own SigV4 signer signs them."""

from __future__ import annotations

import asyncio
import datetime
import json
from typing import Any

import h11
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from kinesis_core.aws.client import create_kinesis_client
from kinesis_core.aws.config import ClientConfig
from kinesis_core.fanout.connection import _CONNECTION_HEADERS
from kinesis_core.fanout.http11 import Http11ClientProtocol
from kinesis_core.fanout.signing import RequestSigner, SignedRequest
from tests.fakes.fanout import CONSUMER_ARN

NOW = datetime.datetime(2026, 3, 4, 5, 6, 7)
CONFIG = ClientConfig(
    region_name="us-east-1",
    aws_access_key_id="AKIDEXAMPLE",
    aws_secret_access_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
    aws_session_token="session-token-example",
)
POSITION = {
    "Type": "AT_SEQUENCE_NUMBER",
    "SequenceNumber": "49590338271490256608559692538361571095921575989136588898",
}


@pytest.fixture(autouse=True)
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda *a, **k: NOW)


def signed(config: ClientConfig = CONFIG, position: dict[str, Any] = POSITION) -> SignedRequest:
    async def main() -> SignedRequest:
        async with create_kinesis_client(config, max_attempts=1) as client:
            signer = RequestSigner(client)
            return await signer.subscribe_request(CONSUMER_ARN, "shardId-000000000001", position)

    return asyncio.run(main())


def reference_signature(request: SignedRequest, config: ClientConfig) -> dict[str, str]:
    """What botocore's signer, used directly, puts on the same request."""
    reference = AWSRequest(
        method="POST",
        url=request.url,
        data=request.body,
        headers={
            "X-Amz-Target": "Kinesis_20131202.SubscribeToShard",
            "Content-Type": "application/x-amz-json-1.1",
        },
    )
    credentials = Credentials(
        config.aws_access_key_id, config.aws_secret_access_key, config.aws_session_token
    )
    SigV4Auth(credentials, "kinesis", "us-east-1").add_auth(reference)
    return {k: v for k, v in reference.headers.items()}


def test_signature_matches_botocores_signer() -> None:
    request = signed()
    headers = dict(request.headers)
    reference = reference_signature(request, CONFIG)
    assert headers["Authorization"] == reference["Authorization"]
    assert headers["X-Amz-Date"] == reference["X-Amz-Date"] == "20260304T050607Z"
    assert headers["X-Amz-Security-Token"] == "session-token-example"
    assert (
        "Credential=AKIDEXAMPLE/20260304/us-east-1/kinesis/aws4_request" in headers["Authorization"]
    )
    assert headers["X-Amz-Target"] == "Kinesis_20131202.SubscribeToShard"
    assert headers["Content-Type"] == "application/x-amz-json-1.1"


def test_body_is_the_json_request() -> None:
    assert json.loads(signed().body) == {
        "ConsumerARN": CONSUMER_ARN,
        "ShardId": "shardId-000000000001",
        "StartingPosition": POSITION,
    }


def test_timestamp_position_is_serialized_by_botocore() -> None:
    at = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    body = json.loads(signed(position={"Type": "AT_TIMESTAMP", "Timestamp": at}).body)
    assert body["StartingPosition"] == {"Type": "AT_TIMESTAMP", "Timestamp": at.timestamp()}


def test_aws_endpoint_comes_from_botocores_rules() -> None:
    request = signed()
    assert request.url == "https://123456789012.data-kinesis.us-east-1.amazonaws.com/"
    assert (request.scheme, request.port, request.path) == ("https", 443, "/")


def test_configured_endpoint_is_used_and_host_is_signed_with_its_port() -> None:
    config = ClientConfig(
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:4567",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
    )
    request = signed(config)
    assert request.url == "http://127.0.0.1:4567/"
    assert request.authority == "127.0.0.1:4567"
    assert (
        dict(request.headers)["Authorization"]
        == reference_signature(request, config)["Authorization"]
    )


def test_the_wire_carries_the_signed_headers() -> None:
    request = signed()
    protocol = Http11ClientProtocol(max_buffered_bytes=1024)
    headers = [("Host", request.authority)]
    headers += [(k, v) for k, v in request.headers if k.lower() not in _CONNECTION_HEADERS]
    protocol.send_request("POST", request.path, headers, request.body)
    server = h11.Connection(h11.SERVER)
    server.receive_data(protocol.data_to_send())
    sent = server.next_event()
    assert isinstance(sent, h11.Request)
    on_wire = {k.decode(): v.decode() for k, v in sent.headers}
    for name in ("authorization", "x-amz-date", "x-amz-security-token", "x-amz-target"):
        assert on_wire[name] == dict((k.lower(), v) for k, v in request.headers)[name]
    assert on_wire["host"] == "123456789012.data-kinesis.us-east-1.amazonaws.com"


def test_repr_hides_the_signature_and_token() -> None:
    text = repr(signed())
    assert "session-token-example" not in text
    assert "Signature=" not in text
    assert "X-Amz-Target" in text


def test_bad_parameters_fail_in_botocore_validation() -> None:
    from botocore.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match="StartingPosition"):
        signed(position={"SequenceNumber": "1"})
