"""GetRecords without botocore's per-call machinery, on the client's own signer and HTTP session.

A GetRecords call through an aiobotocore client costs about 0.7 ms of CPU before anything
reaches the network: a dozen events through botocore's emitter, the endpoint rules, parameter
validation, the user-agent string rebuilt, the retry context, the response parser
(docs/performance.md, "Where a GetRecords call's CPU goes"). A polling reader makes one call per
shard per second even when the shard is idle, so at hundreds of shards those calls are the
consumer's whole cost. Yet every GetRecords of one stream differs only in its iterator.

So the first call to each endpoint goes through botocore, which resolves the URL (AWS's endpoint
rules), signs, and sends; a ``before-send`` hook notes the URL, the User-Agent and the signing
scope. The calls after it write the same JSON body by hand, are signed by the client's own
signer (its credential chain, refreshed as botocore refreshes it), are sent on the client's own
HTTP session (its connection pool, TLS settings, proxies, timeouts, and the transport errors
botocore raises) and parsed by the fast parser. An error answer is raised as the client's
modeled exception with botocore's error shape, so the error table classifies it as before.
A client that is not an aiobotocore client itself (a wrapper that counts or changes calls), or
lacks the pieces this needs (another SDK version), is used as it is: :meth:`LeanGetRecords.of`
returns None for it, and an unsigned client's calls stay botocore's.
"""

from __future__ import annotations

import http.client
import json
import logging
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiobotocore.client import AioBaseClient
from botocore.awsrequest import AWSRequest

from kinesis_core.consumer.fastparse import parse_get_records

logger = logging.getLogger(__name__)

EVENT = "before-send.kinesis.GetRecords"
TARGET = "Kinesis_20131202.GetRecords"
CONTENT_TYPE = "application/x-amz-json-1.1"
_SIGV4 = "AWS4-HMAC-SHA256 "

_BY_CLIENT: weakref.WeakKeyDictionary[Any, LeanGetRecords] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Route:
    """Where botocore sent a GetRecords, and how it signed it: the ``url``, the ``user_agent``
    header and the SigV4 scope (``region``, ``service``) from its Authorization header."""

    url: str
    user_agent: str | None
    region: str
    service: str


def route_of(url: str, headers: Mapping[str, Any]) -> Route | None:
    """The route of a request botocore prepared, or None when it was not signed with SigV4."""
    values = {str(k).lower(): _text(v) for k, v in headers.items()}
    authorization = values.get("authorization", "")
    if not authorization.startswith(_SIGV4):
        return None
    # Credential=AKID/20261125/us-east-1/kinesis/aws4_request, SignedHeaders=..., Signature=...
    credential = authorization[len(_SIGV4) :].split(",", 1)[0].strip()
    scope = credential.partition("=")[2].split("/")
    if len(scope) != 5 or scope[4] != "aws4_request":
        return None
    return Route(url, values.get("user-agent"), region=scope[2], service=scope[3])


def error_response(status: int, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
    """botocore's error shape for a JSON 1.1 error answer, parsed as botocore's JSON parser does:
    an empty or HTML 5xx answer has the status as its code and the reason phrase as its
    message; otherwise the code is ``__type`` (after any ``#``), else the status, and the
    message is the body's ``message`` (or ``Message``), or the body itself when it is not
    JSON."""
    stripped = body.strip()
    if status >= 500 and (not stripped or stripped.startswith(b"<html>")):
        code, message = str(status), http.client.responses.get(status, "")
    else:
        document: Any = {}
        if body:
            text = body.decode("utf-8")
            try:
                document = json.loads(text)
            except ValueError:
                document = {"message": text}
        if not isinstance(document, dict):
            document = {}
        message = document.get("message", document.get("Message", ""))
        code = str(document.get("__type", str(status))).split(":", 1)[0].rsplit("#", 1)[-1]
    return {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {
            "RequestId": headers.get("x-amzn-requestid", ""),
            "HTTPStatusCode": status,
            "HTTPHeaders": dict(headers),
            "RetryAttempts": 0,
        },
    }


class LeanGetRecords:
    """Sends one aiobotocore Kinesis client's GetRecords calls the lean way (one per client:
    :meth:`of`)."""

    def __init__(self, client: Any, signer: Any, http_session: Any) -> None:
        # Weakly: the map of senders by client holds this sender as long as the client lives,
        # and a strong reference back would keep every client (and its service model) forever.
        self._client = weakref.proxy(client)
        self._signer = signer
        self._http = http_session
        self._routes: dict[str | None, Route] = {}
        client.meta.events.register(EVENT, self._learn)

    @classmethod
    def of(cls, client: Any) -> LeanGetRecords | None:
        """The lean sender of ``client``, or None when the client lacks what it needs."""
        if not isinstance(client, AioBaseClient):
            return None
        lean = _BY_CLIENT.get(client)
        if lean is None:
            signer = getattr(client, "_request_signer", None)
            endpoint = getattr(client, "_endpoint", None)
            http_session = getattr(endpoint, "http_session", None)
            events = getattr(getattr(client, "meta", None), "events", None)
            if (
                getattr(signer, "get_auth_instance", None) is None
                or getattr(http_session, "send", None) is None
                or events is None
            ):
                logger.debug("GetRecords goes through botocore: the client lacks %s", client)
                return None
            lean = _BY_CLIENT[client] = cls(client, signer, http_session)
        return lean

    def _learn(self, request: Any, **_: Any) -> None:
        route = route_of(str(request.url), request.headers)
        if route is None:
            return
        body = request.body
        try:
            stream_id = json.loads(body).get("StreamId") if body else None
        except ValueError:
            return
        self._routes.setdefault(stream_id, route)

    async def get_records(
        self, iterator: str, limit: int, params: Mapping[str, str]
    ) -> dict[str, Any]:
        """GetRecords' answer in botocore's shape; raises what botocore would raise."""
        route = self._routes.get(params.get("StreamId"))
        if route is None:
            response: dict[str, Any] = await self._client.get_records(
                ShardIterator=iterator, Limit=limit, **params
            )
            return response
        body = json.dumps({"ShardIterator": iterator, "Limit": limit, **params}).encode()
        headers = {"Content-Type": CONTENT_TYPE, "X-Amz-Target": TARGET}
        if route.user_agent is not None:
            headers["User-Agent"] = route.user_agent
        request = AWSRequest(method="POST", url=route.url, data=body, headers=headers)
        auth = await self._signer.get_auth_instance(route.service, route.region, "v4")
        auth.add_auth(request)
        answer = await self._http.send(request.prepare())
        raw = await answer.content
        if answer.status_code != 200:
            error = error_response(answer.status_code, answer.headers, raw)
            raise self._client.exceptions.from_code(error["Error"]["Code"])(error, "GetRecords")
        parsed = parse_get_records(raw)
        parsed["ResponseMetadata"] = {
            "RequestId": answer.headers.get("x-amzn-requestid", ""),
            "HTTPStatusCode": 200,
            "HTTPHeaders": answer.headers,
            "RetryAttempts": 0,
        }
        return parsed


def _text(value: Any) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)
