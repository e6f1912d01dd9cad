"""The fault-injecting HTTP proxy: an aiohttp reverse proxy driven by a sans-I/O FaultPlan.

Put it between a client and kinesis-mock or moto on loopback; the plan (kinesis_core.local.faults)
decides per request whether to forward it or to inject a fault. Event-stream answers
(SubscribeToShard) are passed through as they flow, chunk by chunk, where the plan may delay
them or cut the connection mid-stream; every other answer is read whole first. With shard
limits, the proxy lists a stream's shards through the upstream (ListShards, with the headers of
the write that needed them) when the plan asks for them. Usable from
async code (`async with FaultProxy(...)`), from synchronous tests (`with FaultProxy(...)`, which
runs the proxy's event loop in a background thread) and from the command line (fault_cli).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import struct
import threading
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any

import aiohttp
from aiohttp import web

from kinesis_core.errors import ConfigurationError
from kinesis_core.lifecycle import LifecycleError, State
from kinesis_core.local.faults import (
    STREAMING_OPERATIONS,
    Action,
    Decision,
    FaultConfig,
    FaultPlan,
    FaultStats,
    Response,
    StreamCutter,
)
from kinesis_core.stream import StreamRef

_log = logging.getLogger(__name__)

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
    }
)
"""Headers that describe one connection (and the length, which aiohttp sets), not the message."""


class FaultProxy:
    """A reverse proxy on `host`:`port` (0: a free port) in front of `upstream_url`.

    The Host header and the body of forwarded requests are kept, so SigV4 signatures stay valid
    for everything but PutRecords calls whose records the plan failed (the emulators do not check
    signatures). Control methods (pause, resume, configure, stats) are safe from any thread.
    """

    def __init__(
        self,
        upstream_url: str,
        config: FaultConfig | None = None,
        *,
        seed: int = 0,
        host: str = "127.0.0.1",
        port: int = 0,
        upstream_timeout: float = 120.0,
    ) -> None:
        if not upstream_url.startswith(("http://", "https://")):
            raise ConfigurationError(
                "upstream_url", f"must start with http:// or https://, got {upstream_url!r}"
            )
        self.upstream_url = upstream_url.rstrip("/")
        self.plan = FaultPlan(config, seed)
        self._host = host
        self._port = port
        self._upstream_timeout = upstream_timeout
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._endpoint_url: str | None = None
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None
        self._listing: asyncio.Lock | None = None

    @property
    def endpoint_url(self) -> str:
        """http://host:port of the running proxy: give it to clients as their endpoint_url."""
        if self._endpoint_url is None:
            raise LifecycleError("FaultProxy", State.NEW, "give its endpoint_url")
        return self._endpoint_url

    @property
    def paused(self) -> bool:
        return self.plan.paused

    def pause(self) -> None:
        """Stop injecting: every request is forwarded untouched until resume()."""
        self.plan.paused = True

    def resume(self) -> None:
        self.plan.paused = False

    @contextlib.contextmanager
    def no_faults(self) -> Iterator[None]:
        """Pause injection inside the block (test set-up, final checks), then restore it."""
        was_paused = self.plan.paused
        self.plan.paused = True
        try:
            yield
        finally:
            self.plan.paused = was_paused

    def configure(self, config: FaultConfig) -> None:
        """Replace the rates from now on; the random sequence and the counters go on."""
        self.plan.config = config

    def stats(self) -> FaultStats:
        """What was injected so far, per kind and operation (`.summary()` for a log line)."""
        return self.plan.stats()

    async def start(self) -> None:
        """Bind the listening socket and start serving on the running event loop."""
        if self._runner is not None:
            raise LifecycleError("FaultProxy", State.RUNNING, "start again")
        self._listing = asyncio.Lock()
        self._session = aiohttp.ClientSession(
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=self._upstream_timeout),
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # handler_cancellation: a stalled request ends as soon as its client gives up.
        runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            handler_cancellation=True,
            shutdown_timeout=1.0,
        )
        await runner.setup()
        try:
            site = web.TCPSite(runner, self._host, self._port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            await self._session.close()
            raise
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self._endpoint_url = f"http://{host}:{port}"

    async def stop(self) -> None:
        """Close the listening socket and every connection, including stalled ones."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._endpoint_url = None

    async def __aenter__(self) -> FaultProxy:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def start_in_thread(self) -> None:
        """Start the proxy on its own event loop in a daemon thread (for synchronous code)."""
        if self._thread is not None:
            raise LifecycleError("FaultProxy", State.RUNNING, "start again")
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="fault-proxy", daemon=True)
        thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self.start(), loop).result()
        except BaseException:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()
            raise
        self._thread, self._thread_loop = thread, loop

    def stop_in_thread(self) -> None:
        """Stop a proxy started by start_in_thread and join its thread."""
        thread, loop = self._thread, self._thread_loop
        if thread is None or loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self.stop(), loop).result()
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()
            self._thread = self._thread_loop = None

    def __enter__(self) -> FaultProxy:
        self.start_in_thread()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_in_thread()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        target = request.headers.get("X-Amz-Target", "")
        content_type = request.headers.get("Content-Type", "")
        loop = asyncio.get_running_loop()
        decision = self.plan.decide(target, body, content_type, loop.time())
        if decision.action is Action.LEARN_SHARDS and decision.stream is not None:
            await self._learn_shards(request, decision.stream)
            decision = self.plan.decide(target, body, content_type, loop.time())
        if decision.delay > 0:
            await asyncio.sleep(decision.delay)
        if decision.action is Action.RESET:
            _reset(request)
            return web.Response()
        if decision.action is Action.LOSE_ANSWER:
            await self._forward(request, decision.body)
            _reset(request)
            return web.Response()
        if decision.action is Action.STALL:
            await asyncio.sleep(decision.stall_seconds)
            _close(request)
            return web.Response()
        if decision.action is Action.RESPOND and decision.response is not None:
            return _to_web(decision.response)
        if decision.operation in STREAMING_OPERATIONS:
            return await self._stream(request, decision)
        answer = self.plan.finish(decision, await self._forward(request, decision.body))
        if decision.action is Action.DRIP:
            return await self._drip(request, answer, decision.drip_seconds)
        if decision.action is not Action.TRUNCATE:
            return _to_web(answer)
        response = web.StreamResponse(status=answer.status, headers=_headers(answer))
        response.content_length = len(answer.body)
        await response.prepare(request)
        await response.write(answer.body[: decision.truncate_at(len(answer.body))])
        _close(request)
        return response

    async def _drip(
        self, request: web.Request, answer: Response, seconds: float
    ) -> web.StreamResponse:
        """Send ``answer`` one body byte every ``seconds``, until it is whole or the client
        hangs up."""
        response = web.StreamResponse(status=answer.status, headers=_headers(answer))
        response.content_length = len(answer.body)
        await response.prepare(request)
        try:
            for index in range(len(answer.body)):
                await asyncio.sleep(seconds)
                await response.write(answer.body[index : index + 1])
        except (ConnectionError, RuntimeError):  # the client gave up waiting
            return response
        await response.write_eof()
        return response

    async def _stream(self, request: web.Request, decision: Decision) -> web.StreamResponse:
        """Forward an answer that may be an event stream as it flows, with the stream faults."""
        assert self._session is not None
        try:
            async with self._session.request(
                request.method,
                self.upstream_url + request.path_qs,
                headers=_upstream_headers(request),
                data=decision.body,
                allow_redirects=False,
            ) as upstream:
                content_type = upstream.headers.get("Content-Type", "")
                if upstream.status != 200 or not content_type.startswith(_EVENT_STREAM):
                    payload = await upstream.read()
                    headers = tuple(upstream.headers.items())
                    return _to_web(Response(upstream.status, headers, payload))
                head = Response(200, tuple(upstream.headers.items()), b"")
                response = web.StreamResponse(status=200, headers=_headers(head))
                await response.prepare(request)
                cutter = StreamCutter(*decision.stream_cut) if decision.stream_cut else None
                async for chunk in upstream.content.iter_any():
                    if decision.chunk_delay > 0:
                        await asyncio.sleep(decision.chunk_delay)
                    cut = False
                    if cutter is not None:
                        chunk, cut = cutter.feed(chunk)
                    if chunk:
                        await response.write(chunk)
                    if cut:
                        _close(request)
                        return response
                await response.write_eof()
                return response
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            _log.warning("fault proxy: upstream %s failed: %r", self.upstream_url, exc)
            message = f"fault proxy: upstream {self.upstream_url} failed: {exc!r}"
            return _to_web(Response(502, (("Content-Type", "text/plain"),), message.encode()))

    async def _learn_shards(self, request: web.Request, stream: StreamRef) -> None:
        """List the shards of ``stream`` through the upstream for the shard limits, once at a
        time (the writes that wait for them all go on with the same map)."""
        loop = asyncio.get_running_loop()
        assert self._listing is not None
        async with self._listing:
            capacity = self.plan.capacity
            if capacity is None or not capacity.needs_shards(stream.name, loop.time()):
                return
            headers = _upstream_headers(request)
            headers["X-Amz-Target"] = "Kinesis_20131202.ListShards"
            headers["Content-Type"] = "application/x-amz-json-1.1"
            shards: list[Mapping[str, Any]] = []
            page: dict[str, str] = stream.params()
            while True:
                answer = await self._forward(request, json.dumps(page).encode(), headers)
                try:
                    listed: Any = json.loads(answer.body) if answer.status == 200 else None
                    shards += listed["Shards"]
                    token = listed.get("NextToken")
                except (ValueError, KeyError, TypeError):
                    _log.warning(
                        "fault proxy: cannot list the shards of %s for the shard limits "
                        "(HTTP %s): its records go unlimited for now",
                        stream.name,
                        answer.status,
                    )
                    self.plan.listing_failed(stream, loop.time())
                    return
                if not token:
                    break
                page = {"NextToken": token}
            self.plan.learn_shards(stream, shards, loop.time())

    async def _forward(
        self, request: web.Request, body: bytes, headers: dict[str, str] | None = None
    ) -> Response:
        assert self._session is not None
        if headers is None:
            headers = _upstream_headers(request)
        try:
            async with self._session.request(
                request.method,
                self.upstream_url + request.path_qs,
                headers=headers,
                data=body,
                allow_redirects=False,
            ) as upstream:
                payload = await upstream.read()
                return Response(
                    upstream.status,
                    tuple((k, v) for k, v in upstream.headers.items()),
                    payload,
                )
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            _log.warning("fault proxy: upstream %s failed: %r", self.upstream_url, exc)
            message = f"fault proxy: upstream {self.upstream_url} failed: {exc!r}"
            return Response(502, (("Content-Type", "text/plain"),), message.encode())


_EVENT_STREAM = "application/vnd.amazon.eventstream"


def _upstream_headers(request: web.Request) -> dict[str, str]:
    headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
    # No compression on loopback, so that the plan can read and rewrite bodies.
    headers["Accept-Encoding"] = "identity"
    return headers


def _headers(response: Response) -> list[tuple[str, str]]:
    return [(k, v) for k, v in response.headers if k.lower() not in HOP_BY_HOP]


def _to_web(response: Response) -> web.Response:
    return web.Response(status=response.status, headers=_headers(response), body=response.body)


def _close(request: web.Request) -> None:
    """Close the connection after flushing what was written (a FIN, the client sees EOF)."""
    if request.transport is not None:
        request.transport.close()


def _reset(request: web.Request) -> None:
    """Drop the connection with a TCP RST: the client sees 'connection reset by peer'."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()
