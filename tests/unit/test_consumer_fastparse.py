"""The fast GetRecords parser gives what botocore's own parser gives."""

from __future__ import annotations

import base64
import json
from typing import Any

import botocore.session
import pytest
from botocore.parsers import JSONParser, create_parser

from kinesis_core.aws import fastparse
from kinesis_core.aws.classify import MALFORMED_RESPONSE, ErrorKind, error_details
from kinesis_core.aws.exceptions import error_kind
from kinesis_core.errors import MalformedResponseError
from kinesis_core.records import WireRecord

BODY = json.dumps(
    {
        "Records": [
            {
                "SequenceNumber": "49680446358758688350039136273873520000000000000000000002",
                "ApproximateArrivalTimestamp": 1_795_314_817.648,
                "Data": base64.b64encode(b"\xf3\x89hello").decode(),
                "PartitionKey": "pk-1",
                "EncryptionType": "NONE",
            },
            {
                "SequenceNumber": "49680446358758688350039136273873520000000000000000000003",
                "ApproximateArrivalTimestamp": 1_795_314_818,
                "Data": "",
                "PartitionKey": "pk-2",
            },
        ],
        "MillisBehindLatest": 12,
        "ChildShards": [
            {
                "ShardId": "shardId-000000000002",
                "ParentShards": ["shardId-000000000000"],
                "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "17"},
            }
        ],
    }
).encode()


def botocore_parse(body: bytes, status: int = 200, hook: bool = False) -> dict[str, Any]:
    """What the client returns, with or without the hook, run the way the endpoint runs it."""
    model = botocore.session.get_session().get_service_model("kinesis")
    operation = model.operation_model("GetRecords")
    response_dict: dict[str, Any] = {"body": body, "headers": {}, "status_code": status}
    customized: dict[str, Any] = {}
    if hook:
        fastparse._before_parse(response_dict=response_dict, customized_response_dict=customized)
    parsed = create_parser("json").parse(response_dict, operation.output_shape)
    parsed.update(customized)
    parsed.pop("ResponseMetadata", None)
    return parsed


def test_same_output_as_botocore() -> None:
    assert botocore_parse(BODY, hook=True) == botocore_parse(BODY)
    fast = botocore_parse(BODY, hook=True)["Records"][0]
    assert fast["Data"] == b"\xf3\x89hello"
    assert fast["ApproximateArrivalTimestamp"].utcoffset().total_seconds() == 0


@pytest.mark.parametrize(
    "body",
    [
        b'{"Records": [{"SequenceNumber": "1", "PartitionKey": "k"}]}',
        b'{"Records": [{"SequenceNumber": "1", "Data": "", "PartitionKey": "k",'
        b' "ApproximateArrivalTimestamp": "yesterday"}]}',
        b'{"Records": [{"SequenceNumber": "1", "Data": "no base64!", "PartitionKey": "k"}]}',
        b"[]",
        b"{}",
        b'{"Records": [], "NextShardIterator": "AAA"',
        b"<html><body>Sign in to the network</body></html>",
    ],
)
def test_a_200_that_is_no_get_records_answer_is_a_transient_malformed_response(
    body: bytes,
) -> None:
    response_dict: dict[str, Any] = {"body": body, "headers": {}, "status_code": 200}
    with pytest.raises(MalformedResponseError, match="malformed GetRecords answer") as raised:
        fastparse._before_parse(response_dict=response_dict, customized_response_dict={})
    assert error_kind(raised.value) is ErrorKind.TRANSIENT
    assert error_details(raised.value) == (MALFORMED_RESPONSE, 200)


def test_an_error_body_that_is_not_utf8_is_parsed_by_its_status() -> None:
    body = b"\xff\xfe\x00 gateway \x80"
    response_dict: dict[str, Any] = {"body": body, "headers": {}, "status_code": 500}
    fastparse._error_body_as_text(response_dict=response_dict)
    parsed = JSONParser().parse(response_dict, None)
    assert parsed["Error"]["Code"] == "500"
    assert parsed["ResponseMetadata"]["HTTPStatusCode"] == 500


def test_errors_are_left_to_botocore() -> None:
    error = b'{"__type": "ExpiredIteratorException", "message": "expired"}'
    assert botocore_parse(error, 400, hook=True) == botocore_parse(error, 400)


def local_client() -> Any:
    """A botocore Kinesis client that is never called (the tests emit its events)."""
    return botocore.session.get_session().create_client(
        "kinesis",
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def test_install_and_uninstall_on_a_client() -> None:
    client = local_client()

    def emit() -> dict[str, Any]:
        customized: dict[str, Any] = {}
        client.meta.events.emit(
            fastparse.EVENT,
            response_dict={"body": BODY, "headers": {}, "status_code": 200},
            customized_response_dict=customized,
        )
        return customized

    uninstall = fastparse.install(client)
    assert emit()["MillisBehindLatest"] == 12
    uninstall()
    assert emit() == {}
    assert fastparse.install(object())() is None


def test_installed_for_wire_records_the_records_stay_the_parsers() -> None:
    client = local_client()
    fastparse.install(client, wire=True)
    customized: dict[str, Any] = {}
    client.meta.events.emit(
        fastparse.EVENT,
        response_dict={"body": BODY, "headers": {}, "status_code": 200},
        customized_response_dict=customized,
    )
    first, second = customized["Records"]
    assert isinstance(first, WireRecord)
    assert (first.data, first.approximate_arrival_timestamp) == (
        b"\xf3\x89hello",
        1_795_314_817.648,
    )
    assert second.partition_key == "pk-2"
    assert customized["MillisBehindLatest"] == 12
