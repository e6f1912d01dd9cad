"""What MotoServer's child changes in moto to serve faster gives moto's answers unchanged
(PastFlask: against moto's own application, in this process)."""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from kinesis_core.local._moto_child import (
    REQUEST_ID_IN_XML,
    BackendsByHost,
    PastFlask,
    RequestIdOnlyInXml,
)

shim = RequestIdOnlyInXml()


def test_a_body_without_the_tag_is_returned_as_it_is() -> None:
    body = '{"Records": [{"Data": "' + "A" * 40_000 + '"}], "MillisBehindLatest": 0}'
    assert shim.sub(REQUEST_ID_IN_XML, "req-1", body) is body
    assert re.sub(REQUEST_ID_IN_XML, "req-1", body) == body


def test_an_xml_body_gets_its_request_id_as_from_re() -> None:
    body = "<R><ResponseMetadata><RequestId>old</RequestId></ResponseMetadata></R>"
    expected = re.sub(REQUEST_ID_IN_XML, "req-1", body)
    assert shim.sub(REQUEST_ID_IN_XML, "req-1", body) == expected
    assert "<RequestId>req-1</RequestId>" in expected


def test_everything_else_is_res() -> None:
    assert shim.sub(r"a+", "b", "caaat") == "cbt"
    assert shim.compile is re.compile
    assert shim.IGNORECASE is re.IGNORECASE


# -- PastFlask: moto's Kinesis and DynamoDB handlers called without Flask ---------------------

_AUTH = (
    "AWS4-HMAC-SHA256 Credential=testing/20261126/us-east-1/{}/aws4_request, "
    "SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=00"
)
_TARGETS = {"kinesis": "Kinesis_20131202", "dynamodb": "DynamoDB_20120810"}


def _environ(service: str, action: str, body: bytes, **headers: str) -> dict[str, Any]:
    environ: dict[str, Any] = {
        "REQUEST_METHOD": "POST",
        "SCRIPT_NAME": "",
        "PATH_INFO": "/",
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "4567",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": f"application/x-amz-json-1.{1 if service == 'kinesis' else 0}",
        "HTTP_HOST": "127.0.0.1:4567",
        "HTTP_X_AMZ_TARGET": f"{_TARGETS[service]}.{action}",
        "HTTP_AUTHORIZATION": _AUTH.format(service),
        "HTTP_X_AMZ_DATE": "20261126T050000Z",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    environ.update({f"HTTP_{name.upper()}": value for name, value in headers.items()})
    return environ


def _answer(app: Any, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
    """status, headers (request ids masked), body"""
    started: list[Any] = []
    chunks = app(environ, lambda status, headers, exc_info=None: started.append((status, headers)))
    body = b"".join(chunks)
    getattr(chunks, "close", lambda: None)()
    status, headers = started[0]
    masked = [(k, "<id>" if "requestid" in k.lower() else v) for k, v in headers]
    return status, masked, body


@pytest.fixture
def moto_apps() -> Iterator[tuple[Any, PastFlask]]:
    """moto's application as moto's server makes it, and the same one past Flask, on one set
    of backends (reset after the test)."""
    moto = pytest.importorskip("moto")
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    with moto.mock_aws():
        flask_app = DomainDispatcherApplication(create_backend_app)
        yield flask_app, PastFlask(flask_app)


def _same(
    apps: tuple[Any, PastFlask],
    service: str,
    action: str,
    body: dict[str, Any] | bytes,
    **headers: str,
) -> tuple[str, list[tuple[str, str]], bytes]:
    flask_app, past = apps
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    expected = _answer(flask_app, _environ(service, action, raw, **headers))
    assert _answer(past, _environ(service, action, raw, **headers)) == expected
    return expected


def test_kinesis_calls_are_answered_past_flask_as_through_it(moto_apps: Any) -> None:
    _, past = moto_apps
    environ = _environ("kinesis", "GetRecords", b"{}")
    assert past._handler(past._moto.get_application(environ), environ) is not None
    for name in ("s1", "s2"):  # the same call twice: one through each
        flask_status = _answer(
            moto_apps[0],
            _environ(
                "kinesis",
                "CreateStream",
                json.dumps({"StreamName": f"flask-{name}", "ShardCount": 2}).encode(),
            ),
        )
        past_status = _answer(
            past,
            _environ(
                "kinesis",
                "CreateStream",
                json.dumps({"StreamName": f"past-{name}", "ShardCount": 2}).encode(),
            ),
        )
        assert past_status == flask_status
    record = {"Data": "AAEC", "PartitionKey": "k"}
    put = [
        _answer(
            app,
            _environ("kinesis", "PutRecord", json.dumps({**record, "StreamName": name}).encode()),
        )
        for app, name in ((moto_apps[0], "flask-s1"), (past, "past-s1"))
    ]
    assert put[1] == put[0]
    stream = {"StreamName": "flask-s1"}
    _same(moto_apps, "kinesis", "DescribeStreamSummary", stream)
    shards = json.loads(_same(moto_apps, "kinesis", "ListShards", stream)[2])["Shards"]
    iterator = json.loads(
        _same(
            moto_apps,
            "kinesis",
            "GetShardIterator",
            {**stream, "ShardId": shards[0]["ShardId"], "ShardIteratorType": "TRIM_HORIZON"},
        )[2]
    )
    _same(moto_apps, "kinesis", "GetRecords", iterator)


def test_errors_are_answered_past_flask_as_through_it(moto_apps: Any) -> None:
    status, _, body = _same(moto_apps, "kinesis", "ListShards", {"StreamName": "none"})
    assert status.startswith("400")
    assert b"ResourceNotFoundException" in body
    _same(moto_apps, "kinesis", "ListShards", b'{"StreamNa')
    _same(moto_apps, "dynamodb", "DescribeTable", {"TableName": "none"})
    flask_app, past = moto_apps
    for app in (flask_app, past):  # an action moto lacks: raised, as through Flask
        with pytest.raises(NotImplementedError):
            _answer(app, _environ("kinesis", "NoSuchAction", b"{}"))


def test_a_request_with_an_origin_goes_through_flask(moto_apps: Any) -> None:
    _, headers, _ = _same(moto_apps, "kinesis", "ListStreams", {}, Origin="http://example.com")
    assert ("Access-Control-Allow-Origin", "http://example.com") in headers
    _, headers, _ = _same(moto_apps, "kinesis", "ListStreams", {})
    assert ("Access-Control-Allow-Origin", "*") in headers


def test_dynamodb_calls_are_answered_past_flask_as_through_it(moto_apps: Any) -> None:
    table = {
        "TableName": "leases",
        "KeySchema": [{"AttributeName": "k", "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": "k", "AttributeType": "S"}],
        "BillingMode": "PAY_PER_REQUEST",
    }
    flask_app, past = moto_apps
    environ = _environ("dynamodb", "GetItem", b"{}")
    assert past._handler(flask_app.get_application(environ), environ) is not None
    created = [
        _answer(
            app,
            _environ("dynamodb", "CreateTable", json.dumps({**table, "TableName": name}).encode()),
        )
        for app, name in ((flask_app, "flask-leases"), (past, "past-leases"))
    ]
    assert created[0][0] == created[1][0]
    assert [k for k, _ in created[0][1]] == [k for k, _ in created[1][1]]
    item = {"TableName": "flask-leases", "Item": {"k": {"S": "a"}, "v": {"N": "1"}}}
    _same(moto_apps, "dynamodb", "PutItem", item)
    _same(moto_apps, "dynamodb", "GetItem", {"TableName": "flask-leases", "Key": {"k": {"S": "a"}}})
    _same(
        moto_apps, "dynamodb", "PutItem", {**item, "ConditionExpression": "attribute_not_exists(k)"}
    )


def test_the_backend_of_a_host_is_moto_s_and_found_once(moto_apps: Any) -> None:
    dispatcher, _ = moto_apps
    asked: list[str | None] = []

    def find(host: str | None) -> Any:
        asked.append(host)
        return dispatcher.get_backend_for_host(host)

    remembered = BackendsByHost(find)
    hosts = ["kinesis.us-east-1.amazonaws.com", "dynamodb.eu-west-1.amazonaws.com", "nothing.test"]
    for host in hosts * 2:
        assert remembered(host) == dispatcher.get_backend_for_host(host)
    assert remembered("kinesis.us-east-1.amazonaws.com") == "kinesis"
    assert asked == [*hosts, "nothing.test"]  # a host no backend claims is asked again
