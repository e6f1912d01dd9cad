"""The lean calls' HTTP path: :class:`DirectHttp`, requests sent on the project's HTTP/1.1
client with the HTTP settings of a Kinesis client made by
:func:`~kinesis_core.aws.client.create_kinesis_client` (:func:`direct_http` finds a client's).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import urllib.parse
import weakref
from collections.abc import Mapping
from typing import Any

from botocore.config import Config

from kinesis_core.aws.botocore_private import proxy_url, tls_context
from kinesis_core.aws.config import ClientConfig, ca_bundle
from kinesis_core.aws.exceptions import transport_error
from kinesis_core.aws.http1 import ConnectionBroken
from kinesis_core.aws.http1_pool import Endpoint, Http1Pool

__all__ = ["KEEPALIVE_TIMEOUT", "DirectHttp", "attach_direct_http", "direct_http"]

LOG = logging.getLogger(__name__)

KEEPALIVE_TIMEOUT = 12.0
"""Seconds an idle pooled connection is kept (aiobotocore's default)."""


class DirectHttp:
    """Requests sent straight on :mod:`kinesis_core.aws.http1_pool`, this library's HTTP/1.1
    client, with the HTTP settings of a Kinesis client made by
    :func:`~kinesis_core.aws.client.create_kinesis_client` (:func:`direct_http`): the lean
    calls' way past aiobotocore's and aiohttp's per-request work
    (:mod:`kinesis_core.aws.lean_requests`).

    aiobotocore's ``AIOHTTPSession.send`` redoes for every request what does not change from
    one call of a reader to the next (the proxy lookup, a header multidict, a URL object, a
    botocore response object), and aiohttp builds a request and a response object, with their
    timers, for each. Here a request is one write of bytes made from a prefix kept per URL, and
    its answer is parsed into the status, the headers and the body. The settings are the
    client's: TLS verified against the same CA bundle (or not at all when ``verify`` is False),
    the connect and read timeouts, at most ``max_pool_connections`` connections, each kept
    alive 12 s. The TLS context is made at the first ``https`` request only: loading the CA
    bundle costs about 40 ms of CPU, which a client of a local ``http`` emulator never needs.
    Requests ask for the identity encoding and carry no cookies. Its transport errors are
    raised as botocore's exceptions, as aiobotocore raises them
    (:func:`~kinesis_core.aws.exceptions.transport_error`). A URL a proxy applies to
    (``HTTPS_PROXY`` and the like) is not sent here: :meth:`handles` says False, and its
    requests stay on the client's own session.
    """

    def __init__(self, config: ClientConfig, http_config: Config) -> None:
        self._config = config
        self._http_config = http_config
        self._pool: Http1Pool | None = None
        self._tls_lock: asyncio.Lock | None = None
        self._handles: dict[str, bool] = {}
        self._endpoints: dict[str, Endpoint] = {}
        """Each URL parsed, with its TLS context (None for ``http``)."""
        self._tls: ssl.SSLContext | None = None
        self._closed = False

    def handles(self, url: str) -> bool:
        """Whether requests to ``url`` are sent here: no proxy applies to it, and the client
        is open."""
        handled = self._handles.get(url)
        if handled is None:
            # botocore's rule: the configured proxies, else the environment's for the URL.
            http = self._http_config
            handled = self._handles[url] = proxy_url(url, http.proxies, http.proxies_config) is None
            if not handled:
                LOG.debug("requests to %s go through a proxy: the client's session sends them", url)
        return handled and not self._closed

    async def post(
        self, url: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        """POST ``body``: the answer's status, headers (names in lower case, as botocore gives
        them) and body; a transport failure raises botocore's exception for it."""
        endpoint = self._endpoints.get(url) or await self._endpoint(url)
        try:
            return await (self._pool or self._open()).post(endpoint, headers, body)
        except Exception as exc:
            raise transport_error(exc, url) from exc

    def _open(self) -> Http1Pool:
        if self._closed:
            raise ConnectionBroken("the client is closed", 0)
        http = self._http_config
        self._pool = Http1Pool(
            limit=http.max_pool_connections,
            connect_timeout=http.connect_timeout,
            read_timeout=http.read_timeout,
            keepalive_timeout=KEEPALIVE_TIMEOUT,
        )
        return self._pool

    async def _endpoint(self, url: str) -> Endpoint:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http or https URL: {url!r}")
        tls = await self._tls_context() if parts.scheme == "https" else None
        port = parts.port or (443 if tls is not None else 80)
        target = parts.path or "/"
        if parts.query:
            target = f"{target}?{parts.query}"
        endpoint = self._endpoints[url] = Endpoint.of(
            parts.scheme, parts.hostname, port, target, tls
        )
        return endpoint

    async def _tls_context(self) -> ssl.SSLContext:
        if self._tls_lock is None:
            self._tls_lock = asyncio.Lock()
        async with self._tls_lock:  # one context, however many first requests are in flight
            if self._tls is None:
                # The CA bundle is read from disk: off the event loop.
                self._tls = await asyncio.to_thread(self._ssl_context)
            return self._tls

    def _ssl_context(self) -> ssl.SSLContext:
        """aiobotocore's context for the client's ``verify``."""
        context = tls_context()
        bundle = ca_bundle(self._config)
        if self._config.verify is False:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            context.check_hostname = True
            if bundle is not None:
                context.load_verify_locations(bundle)
        return context

    async def close(self) -> None:
        self._closed = True
        if self._pool is not None:
            await self._pool.close()


_DIRECT: weakref.WeakKeyDictionary[Any, DirectHttp] = weakref.WeakKeyDictionary()


def attach_direct_http(client: Any, config: ClientConfig, http_config: Config) -> DirectHttp:
    """A :class:`DirectHttp` with ``client``'s settings (``config``, and ``http_config``, the
    botocore Config it was made with), which :func:`direct_http` finds from now on."""
    direct = _DIRECT[client] = DirectHttp(config, http_config)
    return direct


def direct_http(client: Any) -> DirectHttp | None:
    """The :class:`DirectHttp` of a Kinesis client made by
    :func:`~kinesis_core.aws.client.create_kinesis_client` (:func:`attach_direct_http`); None
    for any other client (its settings are not known here)."""
    try:
        return _DIRECT.get(client)
    except TypeError:  # an unhashable stand-in for a client
        return None
