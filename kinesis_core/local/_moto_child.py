"""The child process of :class:`~kinesis_core.local.moto_server.MotoServer`: moto's WSGI
application served by aiohttp, with connections kept open, and its Kinesis and DynamoDB calls
handed to moto's handlers without Flask (:class:`PastFlask`).

moto's own server is werkzeug's development server, which answers every request with
``Connection: close`` (werkzeug drains the socket after each answer, so it cannot keep a
connection): each call then pays for a new connection on both sides, which AWS, keeping
connections open, does not make a client pay. It is also threaded, and moto's Kinesis backend
is not thread-safe (two concurrent PutRecords on a shard can get the same sequence number and
one record is lost). Here aiohttp's HTTP/1.1 server keeps connections open, and the
application runs on its one event-loop thread, between two awaits: one request at a time by
construction. moto is CPU-bound under one GIL anyway, so that costs next to nothing.

It is the one module of kinesis_core that reaches into another library's internals (moto's
and Flask's), which the layering test allows here and nowhere else.

``main(["HOST", "PORT"])`` serves until stdin closes (the parent stopped us or died) or a
SIGINT or SIGTERM comes.
"""

from __future__ import annotations

import functools
import io
import os
import re
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import unquote_to_bytes

from aiohttp import web
from multidict import CIMultiDict

from kinesis_core.local.fault_proxy import HOP_BY_HOP

WsgiApp = Callable[[dict[str, Any], Callable[..., Callable[[bytes], Any]]], Iterable[bytes]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def environ_of(request: web.Request, body: bytes, host: str, port: int) -> dict[str, Any]:
    """The WSGI environ (PEP 3333) of ``request``, whose body was ``body``."""
    path, _, query = request.raw_path.partition("?")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": request.method,
        "SCRIPT_NAME": "",
        "PATH_INFO": unquote_to_bytes(path).decode("latin-1"),
        "QUERY_STRING": query,
        "REQUEST_URI": request.raw_path,
        "RAW_URI": request.raw_path,
        "SERVER_NAME": host,
        "SERVER_PORT": str(port),
        "SERVER_PROTOCOL": f"HTTP/{request.version.major}.{request.version.minor}",
        "REMOTE_ADDR": request.remote or "",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    for name, value in request.headers.items():
        key = name.upper().replace("-", "_")
        if key == "CONTENT_LENGTH":
            continue
        if key != "CONTENT_TYPE":
            key = f"HTTP_{key}"
        environ[key] = f"{environ[key]},{value}" if key in environ else value
    return environ


def wsgi_handler(app: WsgiApp, host: str, port: int) -> Handler:
    """An aiohttp handler that answers with ``app``; the app runs on the event loop's thread,
    so requests are served one at a time."""

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        written: list[bytes] = []
        started: list[tuple[str, list[tuple[str, str]]]] = []

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Callable[[bytes], Any]:
            if exc_info is not None and started:
                raise exc_info[1].with_traceback(exc_info[2])
            started[:] = [(status, headers)]
            return written.append

        chunks = app(environ_of(request, body, host, port), start_response)
        try:
            written.extend(chunks)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        status, headers = started[0]
        code, _, reason = status.partition(" ")
        return web.Response(
            status=int(code),
            reason=reason or None,
            headers=CIMultiDict((k, v) for k, v in headers if k.lower() not in HOP_BY_HOP),
            body=b"".join(written),
        )

    return handle


REQUEST_ID_IN_XML = r"(?<=<RequestId>).*(?=<\/RequestId>)"
"""The pattern moto's ``BaseResponse`` puts each answer's request id in with (``re.sub``)."""


class RequestIdOnlyInXml:
    """``re`` as ``moto.core.responses`` sees it: its ``re.sub`` of an answer's body with
    :data:`REQUEST_ID_IN_XML` returns a body without a ``<RequestId>`` tag (every JSON answer:
    Kinesis's, DynamoDB's) as it is, where the regex would scan all of it, at every character,
    to find nothing. Everything else is
    ``re``'s."""

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)

    @staticmethod
    def sub(pattern: Any, repl: Any, string: Any, count: int = 0, flags: int = 0) -> Any:
        if pattern == REQUEST_ID_IN_XML and isinstance(string, str) and "<RequestId>" not in string:
            return string
        return re.sub(pattern, repl, string, count=count, flags=flags)


DIRECT_SERVICES = frozenset({"kinesis", "dynamodb"})
"""The moto backends whose requests :class:`PastFlask` hands to moto's handler itself."""


class PastFlask:
    """moto's application (``DomainDispatcherApplication``), where a request that Flask would
    only pass on to a moto handler is passed on here: a Kinesis or DynamoDB call, to a path
    that moto's URL map sends to ``convert_to_flask_response(<Response class>.dispatch)``,
    without an ``Origin`` header.

    Flask's part of such a request (the request context pushed and popped, the after-request
    hooks, a class made per request by a debug-mode helper) is a large share of moto's CPU
    time serving small calls, and it does nothing to the answer but what is done here, as
    Flask and moto do it: the request is moto's ``BackendRequest`` of the same environ, the
    handler is called as ``convert_to_flask_response`` calls it (a ``ClientError`` becomes a
    400 with its message), the answer is a Flask ``Response``, and flask-cors's header for a
    request without an ``Origin`` (``Access-Control-Allow-Origin: *``, unless moto's global
    CORS is off) is added.
    An ``HTTPException`` escaping the handler is answered as Flask in debug mode (moto's app
    runs in it) answers it, with itself, except a ``BadRequestKeyError``, which propagates, as
    every other exception does. Every other request goes to Flask."""

    def __init__(self, moto: Any) -> None:
        from botocore.exceptions import ClientError
        from flask import Response
        from moto import settings
        from moto.core.utils import convert_to_flask_response
        from moto.moto_api import recorder
        from moto.moto_server.werkzeug_app import BackendRequest
        from werkzeug.exceptions import BadRequestKeyError, HTTPException

        self._moto = moto
        self._response = Response
        self._view_type = convert_to_flask_response
        self._request = BackendRequest
        self._recorder = recorder
        self._client_error = ClientError
        self._http_exception = HTTPException
        self._trapped = BadRequestKeyError
        self._cors = not settings.DISABLE_GLOBAL_CORS
        self._handlers: dict[tuple[Any, str, str], Callable[..., Any] | None] = {}

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        app = self._moto.get_application(environ)
        handler = None if "HTTP_ORIGIN" in environ else self._handler(app, environ)
        if handler is None:
            result: Iterable[bytes] = app(environ, start_response)
            return result
        answer: Iterable[bytes] = self._answer(handler, environ)(environ, start_response)
        return answer

    def _handler(self, app: Any, environ: dict[str, Any]) -> Callable[..., Any] | None:
        """moto's handler that Flask would call for this request (with no arguments from
        the URL), or None."""
        key = (app, environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""))
        if key not in self._handlers:
            self._handlers[key] = self._match(app, environ)
        return self._handlers[key]

    def _match(self, app: Any, environ: dict[str, Any]) -> Callable[..., Any] | None:
        if getattr(app, "service", None) not in DIRECT_SERVICES:
            return None
        try:
            endpoint, args = app.url_map.bind_to_environ(environ).match()
        except self._http_exception:  # not found, a redirect: Flask's to answer
            return None
        view = app.view_functions.get(endpoint)
        if args or not isinstance(view, self._view_type):
            return None
        callback: Callable[..., Any] = view.callback
        return callback

    def _answer(self, handler: Callable[..., Any], environ: dict[str, Any]) -> Any:
        """The WSGI response of moto's handler, as Flask would send it."""
        request = self._request(environ)
        response: Any
        try:
            self._recorder._record_request(request)
            try:
                result = handler(request, request.raw_url, dict(request.headers))
            except self._client_error as exc:
                result = 400, {}, exc.response["Error"]["Message"]
            status, headers, content = result if len(result) == 3 else (200, {}, result)
            response = self._response(response=content, status=status, headers=headers)
            if request.method == "HEAD" and "content-length" in headers:
                response.headers["Content-Length"] = headers["content-length"]
        except self._trapped:
            raise
        except self._http_exception as exc:
            response = exc.get_response(environ)
        if self._cors and "Access-Control-Allow-Origin" not in response.headers:
            response.headers["Access-Control-Allow-Origin"] = "*"
        return response


class BackendsByHost:
    """``DomainDispatcherApplication.get_backend_for_host``, remembered per host. moto looks
    the host up in its list of backends and then tries its URL patterns one by one (about a
    hundred ``re.match`` for a Kinesis host) for every request. The backend of a host does not
    change (the list and the patterns are fixed when the application is made). A host that no
    backend claims is looked up again each time, as moto does (it prints a warning for it each
    time)."""

    def __init__(self, find: Callable[[str | None], Any]) -> None:
        self._find = find
        self._found: dict[str | None, Any] = {}

    def __call__(self, host: str | None) -> Any:
        backend = self._found.get(host)
        if backend is None:
            backend = self._find(host)
            if backend is not None:
                self._found[host] = backend
        return backend


def _serve_faster() -> None:
    """What moto redoes for every request and need not: list its package's directory to route
    it (an ``os.listdir`` and an ``isdir`` per entry; the list does not change), list a
    response class's methods (``inspect.getmembers``; the classes do not change), and search
    JSON bodies for an XML tag (:class:`RequestIdOnlyInXml`)."""
    from moto import backends
    from moto.core import responses, utils

    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules
    # Names moto.core.responses imported, so not in its __all__ for mypy.
    responses.method_names_from_class = functools.cache(utils.method_names_from_class)  # type: ignore[attr-defined]
    responses.re = RequestIdOnlyInXml()  # type: ignore[attr-defined,assignment]


def _exit_when_stdin_closes() -> None:
    sys.stdin.buffer.read()
    os.kill(os.getpid(), signal.SIGKILL)  # at once: nobody is left to answer


def main(argv: list[str]) -> None:
    host, port = argv[0], int(argv[1])
    threading.Thread(target=_exit_when_stdin_closes, daemon=True).start()
    os.environ.setdefault("MOTO_PORT", str(port))  # as moto's server does: its URLs name it
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    _serve_faster()
    dispatcher = DomainDispatcherApplication(create_backend_app)
    dispatcher.get_backend_for_host = BackendsByHost(dispatcher.get_backend_for_host)  # type: ignore[method-assign]
    moto = PastFlask(dispatcher)
    app = web.Application(client_max_size=0)  # no limit on a request's size, as werkzeug's
    app.router.add_route("*", "/{tail:.*}", wsgi_handler(moto, host, port))
    try:
        web.run_app(app, host=host, port=port, print=None, access_log=None)
    except OSError as exc:  # the port is taken: say so, and exit without waiting for stdin
        print(f"moto could not listen on {host}:{port}: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(1) from exc
