"""The lean PutRecords path: the body it writes, and what it signs and sends (a recording HTTP
session in place of the network; tests/integration/test_producer_volume.py runs it on moto)."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

from botocore.awsrequest import AWSRequest

from kinesis_core.aws.botocore_private import request_signer
from kinesis_core.aws.client import create_kinesis_client
from kinesis_core.aws.config import ClientConfig
from kinesis_core.producer import sender
from kinesis_core.producer.items import KinesisRecordOut
from kinesis_core.producer.sender import LeanPutRecords, put_records_body

AUTH = (
    "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261125/eu-west-1/kinesis/aws4_request, "
    "SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=abc"
)


def _kr(data: bytes, key: str, ehk: str | None = None) -> KinesisRecordOut:
    return KinesisRecordOut(data, key, ehk, [], "shardId-0", len(data) + len(key), 0, 0, 0, 0, 0)


def test_the_body_is_the_json_botocore_would_send() -> None:
    records = [_kr(b"\x00\xffdata", 'k"\\é'), _kr(b"", "plain", "12345")]
    body = json.loads(put_records_body({"StreamARN": "arn:aws:kinesis:x"}, records))
    assert body == {
        "StreamARN": "arn:aws:kinesis:x",
        "Records": [
            {"Data": base64.b64encode(b"\x00\xffdata").decode(), "PartitionKey": 'k"\\é'},
            {"Data": "", "PartitionKey": "plain", "ExplicitHashKey": "12345"},
        ],
    }


class _Answer:
    status_code = 200
    headers = {"x-amzn-requestid": "r-2"}
    content: Any = None


class _RecordingSession:
    def __init__(self, answer: bytes) -> None:
        self.sent: list[Any] = []
        self.answer = answer

    async def send(self, request: Any) -> _Answer:
        self.sent.append(request)
        answer = _Answer()

        async def read() -> bytes:
            return self.answer

        answer.content = read()
        return answer


def test_a_learned_route_is_signed_and_only_the_producers_requests_teach_it() -> None:
    config = ClientConfig(
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
    )
    answer = b'{"FailedRecordCount":0,"Records":[{"SequenceNumber":"7","ShardId":"shardId-0"}]}'

    async def main() -> tuple[Any, Any, list[Any]]:
        async with create_kinesis_client(config, max_attempts=1) as client:
            session = _RecordingSession(answer)
            lean = LeanPutRecords(client, request_signer(client), session)
            assert LeanPutRecords.of(client) is not lean  # of() makes its own, once
            request = AWSRequest(
                method="POST",
                url="https://lean.example/",
                data=b"{}",
                headers={"Authorization": AUTH, "User-Agent": "agent/1"},
            ).prepare()
            await client.meta.events.emit("before-send.kinesis.PutRecords", request=request)
            unlearned = lean.route((("StreamName", "s"),))  # not sent by the producer
            token = sender._STREAM.set((("StreamName", "s"),))
            try:
                await client.meta.events.emit("before-send.kinesis.PutRecords", request=request)
            finally:
                sender._STREAM.reset(token)
            entries = await lean.put_records({"StreamName": "s"}, [_kr(b"hi", "k")])
            return unlearned, session.sent, entries

    unlearned, sent, entries = asyncio.run(main())
    assert unlearned is None
    assert sent[0].url == "https://lean.example/"
    assert json.loads(sent[0].body) == {
        "StreamName": "s",
        "Records": [{"Data": "aGk=", "PartitionKey": "k"}],
    }
    assert sent[0].headers["X-Amz-Target"] == "Kinesis_20131202.PutRecords"
    assert "/eu-west-1/kinesis/aws4_request" in sent[0].headers["Authorization"]
    assert entries == [{"SequenceNumber": "7", "ShardId": "shardId-0"}]
