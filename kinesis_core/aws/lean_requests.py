"""Kinesis calls without botocore's per-call machinery, on the client's own signer and HTTP session.

A call through an aiobotocore client costs CPU before anything reaches the network: a dozen
events through botocore's emitter, the endpoint rules, parameter validation, the user-agent
string rebuilt, the retry context, the serializer and the response parser
(docs/performance.md). The calls one reader or one producer makes differ only in their
arguments, so the first call of an operation to each endpoint goes through botocore, which
resolves the URL (AWS's endpoint rules), signs, and sends; a ``before-send`` hook notes the URL,
the User-Agent and the signing scope (a :class:`Route`). The calls after it send a JSON body
written by the caller, signed with the credentials of the client's own signer (its credential
chain, refreshed as botocore refreshes it), on the client's own HTTP session (its connection
pool, TLS settings, proxies, timeouts, and the transport errors botocore raises), or, for a
client made by :func:`~kinesis_core.aws.client.create_kinesis_client`, on the project's own
HTTP/1.1 client with that client's HTTP settings (:class:`~kinesis_core.aws.direct_http.DirectHttp`,
:mod:`kinesis_core.aws.http1_pool`). An error answer is raised as the client's modeled
exception with botocore's error shape, so the error table classifies it as botocore's would.
The signature is botocore's SigV4 (:class:`SigV4`) with the signing key kept for the day (one
HMAC of the string to sign per call, where botocore derives the key with four more) and plain
header dicts, where botocore builds and re-reads header objects. The first call on each route
is signed by botocore, and a route whose signature there differs from ours keeps botocore's
signer. A client that is not an aiobotocore client itself (a wrapper that counts or changes
calls), or lacks the pieces this needs (another SDK version), is used as it is:
:meth:`LeanRequests.of` returns None for it, and an unsigned client's calls stay botocore's.

Each operation is a subclass (:class:`~kinesis_core.aws.lean_get_records.LeanGetRecords`,
:class:`~kinesis_core.aws.lean_get_shard_iterator.LeanGetShardIterator`,
:class:`~kinesis_core.producer.sender.LeanPutRecords`) naming its ``OPERATION`` and how a request
tells which stream it is for (``route_key``): routes are learned per stream, as AWS may send
the calls of different streams to different endpoints. The calls made while a stream's first
is being prepared by botocore wait for it to be sent (:meth:`LeanRequests.call`).
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import http.client
import json
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass
from hashlib import sha256
from typing import Any, ClassVar, TypeVar
from urllib.parse import quote, urlsplit

from aiobotocore.client import AioBaseClient
from botocore.awsrequest import AWSPreparedRequest, AWSRequest
from botocore.utils import normalize_url_path

from kinesis_core.aws.botocore_private import http_session, request_signer
from kinesis_core.aws.direct_http import DirectHttp, direct_http
from kinesis_core.runtime.timeouts import within

logger = logging.getLogger(__name__)

CONTENT_TYPE = "application/x-amz-json-1.1"
_ALGORITHM = "AWS4-HMAC-SHA256"
_SIGV4 = f"{_ALGORITHM} "

_L = TypeVar("_L", bound="LeanRequests")
_T = TypeVar("_T")

_BY_CLIENT: weakref.WeakKeyDictionary[Any, dict[type[LeanRequests], LeanRequests]] = (
    weakref.WeakKeyDictionary()
)


@dataclass(frozen=True)
class Route:
    """Where botocore sent a call, and how it signed it: the ``url``, the ``user_agent``
    header and the SigV4 scope (``region``, ``service``) from its Authorization header."""

    url: str
    user_agent: str | None
    region: str
    service: str

    @functools.cached_property
    def host(self) -> str:
        """The host as SigV4 signs it (botocore's rule: lower case, IPv6 in brackets, no
        default port)."""
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        if parts.port is not None and parts.port != {"http": 80, "https": 443}.get(parts.scheme):
            host = f"{host}:{parts.port}"
        return host

    @functools.cached_property
    def path(self) -> str:
        """The URL's path as SigV4 signs it (botocore's normalization and quoting)."""
        return quote(normalize_url_path(urlsplit(self.url).path), safe="/~")


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
    JSON (a body that is not UTF-8 decoded with replacement characters, where botocore would
    raise UnicodeDecodeError)."""
    stripped = body.strip()
    if status >= 500 and (not stripped or stripped.startswith(b"<html>")):
        code, message = str(status), http.client.responses.get(status, "")
    else:
        document: Any = {}
        if body:
            text = body.decode("utf-8", "replace")
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


def response_metadata(headers: Mapping[str, str]) -> dict[str, Any]:
    """The ``ResponseMetadata`` botocore gives a successful answer."""
    return {
        "RequestId": headers.get("x-amzn-requestid", ""),
        "HTTPStatusCode": 200,
        "HTTPHeaders": headers,
        "RetryAttempts": 0,
    }


class SigV4:
    """SigV4 signatures of the lean requests (POST, no query string, a JSON body, the headers
    below), computed as botocore's ``SigV4Auth`` computes them, with the signing key of the
    last (secret, day, region, service) kept."""

    def __init__(self) -> None:
        self._key: tuple[tuple[str, str, str, str], bytes] | None = None
        # Per (route, target): the session token it was made for, the canonical request's text
        # before and after the X-Amz-Date value, and the signed header names.
        self._templates: dict[tuple[Route, str], tuple[str | None, str, str, str]] = {}
        self._second = -1
        self._date = ""

    def headers(
        self,
        route: Route,
        target: str,
        credentials: Any,
        body: bytes,
        amz_date: str | None = None,
    ) -> dict[str, str]:
        """The signed headers of a request on ``route`` (``amz_date``: its time,
        ``YYYYMMDDTHHMMSSZ``; now by default)."""
        if amz_date is None:
            amz_date = self._now()
        token = credentials.token or None
        template = self._templates.get((route, target))
        if template is None or template[0] != token:
            template = self._templates[route, target] = self._template(route, target, token)
        _, before_date, after_date, signed = template
        request = f"{before_date}{amz_date}{after_date}{sha256(body).hexdigest()}"
        day = amz_date[:8]
        scope = f"{day}/{route.region}/{route.service}/aws4_request"
        to_sign = f"{_ALGORITHM}\n{amz_date}\n{scope}\n{sha256(request.encode()).hexdigest()}"
        key = self._signing_key(credentials.secret_key, day, route.region, route.service)
        signature = hmac.digest(key, to_sign.encode(), "sha256").hex()
        headers = {"Content-Type": CONTENT_TYPE, "X-Amz-Target": target, "X-Amz-Date": amz_date}
        if token is not None:
            headers["X-Amz-Security-Token"] = token
        headers["Authorization"] = (
            f"{_SIGV4}Credential={credentials.access_key}/{scope}, "
            f"SignedHeaders={signed}, Signature={signature}"
        )
        return headers

    def _now(self) -> str:
        """The time as X-Amz-Date writes it, formatted once per second."""
        second = int(time.time())
        if second != self._second:
            self._second, self._date = second, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(second))
        return self._date

    @staticmethod
    def _template(route: Route, target: str, token: str | None) -> tuple[str | None, str, str, str]:
        """The canonical request of ``route`` and ``target`` around its X-Amz-Date value
        (botocore's: the header names in lower case, sorted, values with their whitespace
        runs made single spaces), and the signed header names."""
        canonical = {"content-type": CONTENT_TYPE, "host": route.host, "x-amz-target": target}
        if token is not None:
            canonical["x-amz-security-token"] = token
        canonical = {name: " ".join(value.split()) for name, value in canonical.items()}
        canonical["x-amz-date"] = "\0"
        names = sorted(canonical)
        signed = ";".join(names)
        lines = "\n".join(f"{name}:{canonical[name]}" for name in names)
        before_date, after_date = f"POST\n{route.path}\n\n{lines}\n\n{signed}\n".split("\0")
        return token, before_date, after_date, signed

    def _signing_key(self, secret: str, day: str, region: str, service: str) -> bytes:
        scope = (secret, day, region, service)
        if self._key is None or self._key[0] != scope:
            key = f"AWS4{secret}".encode()
            for part in (day, region, service, "aws4_request"):
                key = hmac.new(key, part.encode(), sha256).digest()
            self._key = (scope, key)
        return self._key[1]


class LeanRequests:
    """Sends one aiobotocore Kinesis client's calls of ``OPERATION`` the lean way (one per
    client and operation: :meth:`of`)."""

    OPERATION: ClassVar[str]
    first_call_wait: float = 1.0
    """Seconds the calls made during a key's first call wait for it to be sent, at most: its
    preparation takes about a millisecond, unless fetching credentials stalls."""

    def __init__(
        self, client: Any, signer: Any, http_session: Any, direct: DirectHttp | None = None
    ) -> None:
        # Weakly: the map of senders by client holds this sender as long as the client lives,
        # and a strong reference back would keep every client (and its service model) forever.
        self._client = weakref.proxy(client)
        self._signer = signer
        self._http = http_session
        self._direct = direct
        self.sent = 0
        """Requests sent by :meth:`post` (those of unlearned routes are botocore's calls)."""
        self._routes: dict[Hashable, Route] = {}
        # Per route key: the first call on its way through botocore (to learn the route), which
        # the calls made meanwhile wait for (set once it is sent or ended); and the keys whose
        # requests botocore sent without a SigV4 signature (their calls never wait).
        self._learning: dict[Hashable, asyncio.Event] = {}
        self._unlearned: set[Hashable] = set()
        self._target = f"Kinesis_20131202.{self.OPERATION}"
        self._sigv4 = SigV4()
        # Per route: whether our signature of its first call was botocore's.
        self._own_signature: dict[Route, bool] = {}
        client.meta.events.register(f"before-send.kinesis.{self.OPERATION}", self._learn)

    @classmethod
    def of(cls: type[_L], client: Any) -> _L | None:
        """The lean sender of ``client``, or None when the client lacks what it needs."""
        if not isinstance(client, AioBaseClient):
            return None
        senders = _BY_CLIENT.setdefault(client, {})
        lean = senders.get(cls)
        if lean is None:
            signer = request_signer(client)
            session = http_session(client)
            events = getattr(getattr(client, "meta", None), "events", None)
            if signer is None or session is None or events is None:
                logger.debug("%s goes through botocore: the client lacks %s", cls.OPERATION, client)
                return None
            lean = senders[cls] = cls(client, signer, session, direct_http(client))
        assert isinstance(lean, cls)
        return lean

    def route_key(self, request: Any) -> Hashable:
        """Which stream a request botocore prepared is for (its routes are kept apart)."""
        raise NotImplementedError

    def route(self, key: Hashable) -> Route | None:
        """The route learned for ``key``'s stream, or None while none is."""
        return self._routes.get(key)

    async def call(
        self,
        key: Hashable,
        by_botocore: Callable[[], Awaitable[_T]],
        lean: Callable[[Route], Awaitable[_T]],
    ) -> _T:
        """``lean(route)`` once ``key``'s route is learned; until then ``by_botocore()``, which
        teaches it as botocore sends it. The calls made while a key's first call is being
        prepared wait for it to be sent, then go the lean way: a reader of hundreds of shards
        starts them all at once, and each would otherwise pay for a botocore call that only the
        first needs. A first call that fails or is cancelled before it
        is sent hands the learning to a waiting call. Waiting lasts at most
        :attr:`first_call_wait` seconds in all, then a call goes through botocore itself; so
        does every call of a key whose first call was answered without teaching a route (a
        request botocore did not sign with SigV4)."""
        deadline: float | None = None
        while True:
            route = self._routes.get(key)
            if route is not None:
                return await lean(route)
            if key in self._unlearned:
                return await by_botocore()
            first = self._learning.get(key)
            if first is None:
                self._learning[key] = first = asyncio.Event()
                try:
                    answer = await by_botocore()
                finally:
                    del self._learning[key]
                    first.set()
                if key not in self._routes:  # answered, yet taught nothing: no more waiting
                    self._unlearned.add(key)
                return answer
            loop = asyncio.get_running_loop()
            if deadline is None:
                deadline = loop.time() + self.first_call_wait
            try:
                async with within(max(0.0, deadline - loop.time())):
                    await first.wait()
            except asyncio.TimeoutError:
                return await by_botocore()

    def _learn(self, request: Any, **_: Any) -> None:
        """botocore's ``before-send``: the route of the request it is about to send, and the
        calls waiting for it may go."""
        try:
            key = self.route_key(request)
        except ValueError:
            return
        route = route_of(str(request.url), request.headers)
        if route is None:
            self._unlearned.add(key)
        else:
            self._routes.setdefault(key, route)
        first = self._learning.get(key)
        if first is not None:
            first.set()

    async def post(self, route: Route, body: bytes) -> tuple[bytes, Mapping[str, str]]:
        """Send ``body`` on ``route``; the answer's body and headers, or raise what botocore
        would raise."""
        auth = await self._signer.get_auth_instance(route.service, route.region, "v4")
        self.sent += 1
        if self._own_signature.get(route, False):
            headers = self._sigv4.headers(route, self._target, auth.credentials, body)
            if route.user_agent is not None:
                headers["User-Agent"] = route.user_agent
        else:
            headers = self._botocore_signed(route, auth, body)
        status: int
        raw: bytes
        answer_headers: Mapping[str, str]
        direct = self._direct
        if direct is not None and direct.handles(route.url):
            status, answer_headers, raw = await direct.post(route.url, headers, body)
        else:
            request = AWSPreparedRequest("POST", route.url, headers, body, stream_output=False)
            status, answer_headers, raw = await self._send(request)
        if status != 200:
            error = error_response(status, answer_headers, raw)
            raise self._client.exceptions.from_code(error["Error"]["Code"])(error, self.OPERATION)
        return raw, answer_headers

    async def _send(self, request: Any) -> tuple[int, Mapping[str, str], bytes]:
        """``request`` sent on the client's HTTP session."""
        answer = await self._http.send(request)
        raw: bytes = await answer.content
        return answer.status_code, answer.headers, raw

    def _botocore_signed(self, route: Route, auth: Any, body: bytes) -> dict[str, str]:
        """The request's headers signed by botocore's signer; on a route's first call, also
        whether our signature of it is the same (then the route's later calls are signed
        here)."""
        headers = {"Content-Type": CONTENT_TYPE, "X-Amz-Target": self._target}
        if route.user_agent is not None:
            headers["User-Agent"] = route.user_agent
        request = AWSRequest(method="POST", url=route.url, data=body, headers=headers)
        auth.add_auth(request)
        if route not in self._own_signature:
            ours = self._sigv4.headers(
                route, self._target, auth.credentials, body, request.headers["X-Amz-Date"]
            )
            same = ours["Authorization"] == request.headers["Authorization"]
            if not same:
                logger.debug("%s on %s keeps botocore's signer", self.OPERATION, route.url)
            self._own_signature[route] = same
        return {name: _text(value) for name, value in request.headers.items()}


def _text(value: Any) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)
