"""Client configuration and the one factory that builds every Kinesis and DynamoDB client.

``ClientConfig`` is plain, frozen and picklable (Beam ships it to workers). A field left at
``None`` is resolved when a client is created, on the machine that creates it, the way botocore
resolves it (environment, shared config files, the default credential chain), plus one
convenience botocore lacks: ``AWS_REGION`` as a fallback region. ``ClientConfig.from_env()``
instead snapshots the environment's region, endpoints and profile into the fields.

Secrets never appear in ``repr``/``str`` (so not in logs or tracebacks either), also after a
pickle round trip; the pickle itself does carry them, since a worker needs them to sign requests.
botocore's own DEBUG logs print the signed request headers; every client made here installs
:class:`SecretsFilter` on botocore's loggers, which masks the session token, the signature and
any secret key in them (docs/configuration.md says exactly what).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import re
import ssl
import threading
import urllib.parse
import weakref
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Literal

import aiohttp
import botocore.session
from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession
from botocore.config import Config
from botocore.configprovider import ConfiguredEndpointProvider
from botocore.exceptions import (
    ConnectionClosedError,
    ConnectionError as BotoConnectionError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    ReadTimeoutError,
    SSLError,
)
from botocore.httpsession import ProxyConfiguration, create_urllib3_context, get_cert_path
from botocore.utils import get_environ_proxies

from kinesis_core.aws.classify import ErrorKind, classify, error_details
from kinesis_core.aws.http1 import ConnectionBroken, ConnectTimeout, MalformedAnswer, ReadTimeout
from kinesis_core.aws.http1_pool import ANSWER_TIMEOUT_READS, Endpoint, Http1Pool
from kinesis_core.errors import ConfigurationError

if TYPE_CHECKING:
    from types_aiobotocore_dynamodb.client import DynamoDBClient
    from types_aiobotocore_kinesis.client import KinesisClient

__all__ = [
    "ClientConfig",
    "SecretsFilter",
    "Service",
    "create_botocore_client",
    "create_dynamodb_client",
    "create_kinesis_client",
    "error_kind",
    "mask_secrets_in_logs",
    "unreachable",
]

LOG = logging.getLogger(__name__)

Service = Literal["kinesis", "dynamodb"]

USER_AGENT_EXTRA = "kinesis-connectors"
_MASK = "'***'"
_SECRET_FIELDS = frozenset({"aws_secret_access_key", "aws_session_token"})
_STR_FIELDS = (
    "region_name",
    "endpoint_url",
    "dynamodb_endpoint_url",
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
    "profile_name",
)


def _env(environ: Mapping[str, str], *names: str) -> str | None:
    """The first of ``names`` set to a non-empty value (botocore also treats "" as unset)."""
    for name in names:
        value = environ.get(name)
        if value:
            return value
    return None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClientConfig:
    """How to reach Kinesis (and DynamoDB, for lease tables): region, endpoints, credentials, HTTP.

    ``verify`` is True (verify TLS with the default CA bundle or ``AWS_CA_BUNDLE``), a path to a
    CA bundle, or False, which must be asked for explicitly and logs a warning when a client is
    made. Timeouts are seconds. ``max_pool_connections`` caps concurrent HTTP connections per
    client (the KPL's default MaxConnections is 24).
    """

    region_name: str | None = None
    endpoint_url: str | None = None
    dynamodb_endpoint_url: str | None = None
    aws_access_key_id: str | None = None
    aws_secret_access_key: str | None = None
    aws_session_token: str | None = None
    profile_name: str | None = None
    verify: bool | str = True
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    max_pool_connections: int = 24

    def __post_init__(self) -> None:
        for name in _STR_FIELDS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                shown = "" if name in _SECRET_FIELDS else f" {value!r:.60}"
                raise ConfigurationError(
                    name, f"must be a str or None, got {type(value).__name__}{shown}"
                )
        if not isinstance(self.verify, (bool, str)):
            raise ConfigurationError(
                "verify",
                f"must be True, False or the path of a CA bundle (str), got "
                f"{type(self.verify).__name__} {self.verify!r:.60}",
            )
        for name in ("endpoint_url", "dynamodb_endpoint_url"):
            url = getattr(self, name)
            if url is not None:
                _check_endpoint(name, url)
        if self.region_name is not None:
            check_region(self.region_name)
        for name in ("connect_timeout", "read_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigurationError(
                    name, f"must be a number of seconds, got {type(value).__name__} {value!r:.60}"
                )
            if not value > 0:
                raise ConfigurationError(name, f"must be > 0 seconds, got {value!r}")
        pool = self.max_pool_connections
        if isinstance(pool, bool) or not isinstance(pool, int):
            raise ConfigurationError(
                "max_pool_connections", f"must be an int, got {type(pool).__name__} {pool!r:.60}"
            )
        if pool < 1:
            raise ConfigurationError("max_pool_connections", f"must be >= 1, got {pool!r}")
        if (self.aws_access_key_id is None) != (self.aws_secret_access_key is None):
            raise ConfigurationError(
                "aws_access_key_id",
                "aws_access_key_id and aws_secret_access_key go together: give both or neither",
            )
        if self.aws_session_token is not None and self.aws_access_key_id is None:
            raise ConfigurationError(
                "aws_session_token", "needs aws_access_key_id and aws_secret_access_key"
            )

    def __repr__(self) -> str:
        parts = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            shown = _MASK if f.name in _SECRET_FIELDS and value is not None else repr(value)
            parts.append(f"{f.name}={shown}")
        return f"{type(self).__name__}({', '.join(parts)})"

    __str__ = __repr__

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> ClientConfig:
        """Snapshot region, endpoints and profile from the standard AWS variables.

        Region: ``AWS_DEFAULT_REGION``, else ``AWS_REGION``. Endpoints: ``AWS_ENDPOINT_URL_KINESIS``
        / ``AWS_ENDPOINT_URL_DYNAMODB``, else ``AWS_ENDPOINT_URL``, none of them when
        ``AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true``. Profile: ``AWS_PROFILE``. Credentials are not
        copied: the default chain finds them where the client is made (so a pickled config does
        not carry them). ``overrides`` are field values that win over the environment.
        """
        env = os.environ if environ is None else environ
        ignore = _env(env, "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS") or ""
        ignore_endpoints = ignore.lower() == "true"
        values: dict[str, Any] = {
            "region_name": _env(env, "AWS_DEFAULT_REGION", "AWS_REGION"),
            "profile_name": _env(env, "AWS_PROFILE"),
        }
        if not ignore_endpoints:
            values["endpoint_url"] = _env(env, "AWS_ENDPOINT_URL_KINESIS", "AWS_ENDPOINT_URL")
            values["dynamodb_endpoint_url"] = _env(
                env, "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL"
            )
        values.update(overrides)
        return cls(**values)

    def endpoint_for(self, service: Service) -> str | None:
        """The explicit endpoint of ``service``, or None to let botocore resolve it."""
        return self.endpoint_url if service == "kinesis" else self.dynamodb_endpoint_url


_REGION = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$")
"""A region is one DNS label, as botocore requires (``validate_region_name``)."""


def check_region(region: str, source: str = "") -> None:
    """ConfigurationError unless ``region`` is a possible region name; ``source`` says where
    it came from when that is not the ``region_name`` field."""
    if not _REGION.match(region):
        raise ConfigurationError(
            "region_name",
            f"a region is 1 to 63 letters, digits and hyphens (e.g. us-east-1), got "
            f"{region!r}{source}",
        )


_USERINFO = re.compile(r"^([^:/?#]*:?//)?([^/?#]*)@")
"""The ``user[:password]@`` part of a URL's authority (with or without a scheme)."""


def _without_userinfo(url: str) -> str:
    """``url`` with any ``user:password@`` before its host shown as ``***@`` (for messages)."""
    return _USERINFO.sub(lambda m: f"{m.group(1) or ''}***@", url, count=1)


def _check_endpoint(name: str, url: str) -> None:
    """An endpoint URL botocore can connect to: http(s), a host, a valid port, and no
    ``user:password@`` (botocore would print it in its DEBUG lines and sign no request with
    it: every call fails after its retries). A message never shows a password."""
    if _USERINFO.match(url):
        raise ConfigurationError(
            name,
            "must not carry credentials (user:password@ before the host): Kinesis and DynamoDB "
            "take AWS credentials (aws_access_key_id and aws_secret_access_key, a profile, or "
            f"the default chain), and a proxy's go in HTTPS_PROXY; got {_without_userinfo(url)!r}",
        )
    if not url.startswith(("http://", "https://")):
        raise ConfigurationError(name, f"must start with http:// or https://, got {url!r}")
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname
    if not host or any(c.isspace() for c in host):
        raise ConfigurationError(
            name, f"must name a host (http://HOST[:PORT], e.g. http://127.0.0.1:4567), got {url!r}"
        )
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0 or (port is None and parts.netloc.endswith(":")):
        raise ConfigurationError(name, f"must have a port 1 to 65535 (or none), got {url!r}")


def _check_local_files(config: ClientConfig, session: botocore.session.Session) -> None:
    """What only the machine that makes a client can check: that the profile exists and the
    CA bundle is there (botocore would fail on the first call, raw or after every retry)."""
    profile = config.profile_name or session.profile
    if profile is not None and profile not in session.available_profiles:
        files = [
            os.path.expanduser(session.get_config_variable(name))
            for name in ("config_file", "credentials_file")
        ]
        source = "" if config.profile_name else " (from AWS_PROFILE)"
        raise ConfigurationError(
            "profile_name",
            f"no profile {profile!r}{source} in {' or '.join(files)}; the profiles there are "
            f"{sorted(session.available_profiles)}",
        )
    bundle, source = config.verify, ""
    if bundle is True:
        bundle, source = session.get_config_variable("ca_bundle"), " (AWS_CA_BUNDLE or ca_bundle)"
    if isinstance(bundle, str) and not os.path.exists(bundle):
        raise ConfigurationError(
            "verify",
            f"the CA bundle {bundle!r}{source} does not exist; give the path of a CA bundle "
            "(PEM), True (botocore's bundle) or False (no verification, local emulators only)",
        )


def _check_configured_endpoint(
    config: ClientConfig, service: Service, session: botocore.session.Session
) -> None:
    """The endpoint botocore finds itself when the config names none (``AWS_ENDPOINT_URL*``
    or the AWS config file's ``services`` section) is checked as the field would be."""
    if session.get_config_variable("ignore_configured_endpoint_urls"):
        return
    configured = ConfiguredEndpointProvider(
        full_config=session.full_config,
        scoped_config=session.get_scoped_config(),
        client_name=service,
    ).provide()
    if configured:
        name = "endpoint_url" if service == "kinesis" else "dynamodb_endpoint_url"
        try:
            _check_endpoint(name, configured)
        except ConfigurationError as exc:
            raise ConfigurationError(
                name, f"{exc.reason} (from AWS_ENDPOINT_URL* or the AWS config file)"
            ) from None


def _client_kwargs(
    config: ClientConfig,
    service: Service,
    session: botocore.session.Session,
    http_config: Config,
) -> dict[str, Any]:
    """Arguments of ``session.create_client`` for ``config``: the one place that maps fields."""
    _check_local_files(config, session)
    region = (
        config.region_name
        or session.get_config_variable("region")
        or _env(os.environ, "AWS_REGION")
    )
    if not region:
        raise ConfigurationError(
            "region_name",
            "no AWS region configured; pass ClientConfig(region_name=...) or set "
            "AWS_DEFAULT_REGION (or AWS_REGION), or a region in the AWS config profile",
        )
    if region != config.region_name:
        check_region(region, " (from the environment or the AWS config profile)")
    endpoint_url = config.endpoint_for(service)
    if endpoint_url is None:
        _check_configured_endpoint(config, service, session)
    if config.verify is False:
        LOG.warning(
            "TLS certificate verification is OFF for the %s client (%s): use this only against "
            "a local emulator",
            service,
            endpoint_url or "default endpoint",
        )
    LOG.debug("creating a %s client in %s from %r", service, region, config)
    mask_secrets_in_logs(config.aws_secret_access_key, config.aws_session_token)
    return {
        "region_name": region,
        "endpoint_url": endpoint_url,
        # None lets botocore apply AWS_CA_BUNDLE / ca_bundle; True would override them.
        "verify": None if config.verify is True else config.verify,
        "aws_access_key_id": config.aws_access_key_id,
        "aws_secret_access_key": config.aws_secret_access_key,
        "aws_session_token": config.aws_session_token,
        "config": http_config,
    }


def _http_config(
    config: ClientConfig, max_attempts: int | None, config_class: type[Config]
) -> Config:
    if max_attempts is not None and max_attempts < 1:
        raise ConfigurationError("max_attempts", f"must be >= 1, got {max_attempts!r}")
    options: dict[str, Any] = {
        "connect_timeout": config.connect_timeout,
        "read_timeout": config.read_timeout,
        "max_pool_connections": config.max_pool_connections,
        "user_agent_extra": USER_AGENT_EXTRA,
    }
    if max_attempts is not None:
        # botocore's retries["max_attempts"] counts retries only (1 would mean two attempts);
        # total_max_attempts counts the first attempt too, as AWS_MAX_ATTEMPTS does.
        options["retries"] = {"mode": "standard", "total_max_attempts": max_attempts}
    return config_class(**options)


_DATA_LOADERS: dict[str, Any] = {}
"""botocore's data loader of each data path, shared by every session made here."""


def _share_data_loader(session: botocore.session.Session) -> None:
    """Give ``session`` the data loader of the sessions made before it with the same data path.

    A loader caches the JSON it reads (the service model, the endpoint rules, the partitions),
    and a session's first client reads it all: about 40 ms of the 50 a client costs to make.
    Every Producer, Consumer, Beam DoFn and Faust transport makes its own session, so sharing
    the loader makes each client after the first cost about 9 ms. The loaded data is only read,
    as the clients of one session already share it."""
    path = str(session.get_config_variable("data_path"))
    loader = _DATA_LOADERS.setdefault(path, session.get_component("data_loader"))
    session.register_component("data_loader", loader)


def ca_bundle(config: ClientConfig) -> str | None:
    """The CA bundle path botocore verifies ``config``'s TLS connections with, None when
    verification is off."""
    if config.verify is False:
        return None
    if isinstance(config.verify, str):
        return config.verify
    session = botocore.session.Session(profile=config.profile_name)
    verify: str | bool = (
        session.get_config_variable("ca_bundle") or os.environ.get("REQUESTS_CA_BUNDLE") or True
    )
    path = get_cert_path(verify)
    return path if isinstance(path, str) else None


KEEPALIVE_TIMEOUT = 12.0
"""Seconds an idle pooled connection is kept (aiobotocore's default)."""


class DirectHttp:
    """Requests sent straight on :mod:`kinesis_core.aws.http1_pool`, this library's HTTP/1.1 client,
    with the HTTP settings of a Kinesis client made by :func:`create_kinesis_client`
    (:func:`direct_http`): the lean calls' way past aiobotocore's and aiohttp's per-request
    work (:mod:`kinesis_core.aws.lean_requests`).

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
    raised as botocore's exceptions, as aiobotocore raises them (:func:`transport_error`). A
    URL a proxy applies to (``HTTPS_PROXY`` and the like) is not sent here: :meth:`handles`
    says False, and its requests stay on the client's own session.
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
            proxies = ProxyConfiguration(
                proxies=self._http_config.proxies or get_environ_proxies(url),
                proxies_settings=self._http_config.proxies_config,
            )
            handled = self._handles[url] = proxies.proxy_url_for(url) is None
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
        context: ssl.SSLContext = create_urllib3_context()
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


def transport_error(exc: Exception, url: str) -> Exception:
    """The botocore exception aiobotocore raises for ``exc``, a failure of
    :mod:`kinesis_core.aws.http1`'s while it sent a request to ``url``: aiohttp's error for the
    same failure is what aiobotocore maps."""
    error: Exception
    if isinstance(exc, ssl.SSLError):  # aiohttp's ClientSSLError
        error = SSLError(endpoint_url=url, error=exc)
    elif isinstance(exc, ConnectionBroken) and exc.reset is not None:  # ClientOSError
        error = EndpointConnectionError(endpoint_url=url, error=exc)
    elif isinstance(exc, (ConnectionBroken, MalformedAnswer)):
        # aiohttp's ServerDisconnectedError, ClientPayloadError and BadStatusLine
        error = ConnectionClosedError(error=exc, request=None, endpoint_url=url)
    elif isinstance(exc, ConnectTimeout):
        error = ConnectTimeoutError(endpoint_url=url, error=exc)
    elif isinstance(exc, (ReadTimeout, asyncio.TimeoutError)):
        error = ReadTimeoutError(endpoint_url=url, error=exc)
    elif isinstance(exc, OSError):  # ClientConnectorError; socket.gaierror is one too
        error = EndpointConnectionError(endpoint_url=url, error=exc)
    else:
        error = HTTPClientError(error=exc)
    return error


_DIRECT: weakref.WeakKeyDictionary[Any, DirectHttp] = weakref.WeakKeyDictionary()


def direct_http(client: Any) -> DirectHttp | None:
    """The :class:`DirectHttp` of a Kinesis client made by :func:`create_kinesis_client`;
    None for any other client (its settings are not known here)."""
    try:
        return _DIRECT.get(client)
    except TypeError:  # an unhashable stand-in for a client
        return None


@contextlib.asynccontextmanager
async def _create_aio_client(
    config: ClientConfig, service: Service, max_attempts: int | None
) -> AsyncIterator[Any]:
    session = AioSession(profile=config.profile_name)
    http_config = _http_config(config, max_attempts, AioConfig)
    kwargs = _client_kwargs(config, service, session, http_config)
    _share_data_loader(session)
    async with contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(session.create_client(service, **kwargs))
        if service == "kinesis":
            direct = _DIRECT[client] = DirectHttp(config, http_config)
            stack.push_async_callback(direct.close)
        yield client


def create_kinesis_client(
    config: ClientConfig, *, max_attempts: int | None = None
) -> contextlib.AbstractAsyncContextManager[KinesisClient]:
    """An aiobotocore Kinesis client (``async with``); one per event loop.

    ``max_attempts`` sets botocore's standard retry mode with that many attempts in total,
    the first one included (1 = no retries, for callers that retry themselves); None keeps
    botocore's default (or ``AWS_RETRY_MODE`` / ``AWS_MAX_ATTEMPTS``).
    """
    return _create_aio_client(config, "kinesis", max_attempts)


def create_dynamodb_client(
    config: ClientConfig, *, max_attempts: int | None = None
) -> contextlib.AbstractAsyncContextManager[DynamoDBClient]:
    """An aiobotocore DynamoDB client (``async with``) at ``config.dynamodb_endpoint_url``."""
    return _create_aio_client(config, "dynamodb", max_attempts)


def create_botocore_client(
    config: ClientConfig, service: Service, *, max_attempts: int | None = None
) -> Any:
    """A synchronous botocore client, for tools and tests; ``close()`` it when done."""
    session = botocore.session.Session(profile=config.profile_name)
    kwargs = _client_kwargs(config, service, session, _http_config(config, max_attempts, Config))
    _share_data_loader(session)
    return session.create_client(service, **kwargs)


TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncio.TimeoutError,
    HTTPClientError,
    BotoConnectionError,
    aiohttp.ClientError,
)
"""No answer from the service (connection refused or reset, timeouts): worth retrying."""


def call_deadline(client: Any) -> float | None:
    """Seconds one call of ``client`` may take in all: its connect timeout plus
    :data:`~kinesis_core.aws.http1_pool.ANSWER_TIMEOUT_READS` read timeouts (botocore's read
    timeout bounds each read of the socket, not the answer: one dripped a byte a second never
    ends). None for a client without botocore's config."""
    config = getattr(getattr(client, "meta", None), "config", None)
    connect = getattr(config, "connect_timeout", None)
    read = getattr(config, "read_timeout", None)
    if not isinstance(connect, (int, float)) or not isinstance(read, (int, float)):
        return None
    return connect + ANSWER_TIMEOUT_READS * read


def error_kind(exc: BaseException) -> ErrorKind | None:
    """How to treat an exception a Kinesis or DynamoDB call raised (the table in
    :mod:`kinesis_core.aws.classify`); None when it is neither a service answer nor a transport
    error, i.e. a bug, to be raised as it is."""
    code, status = error_details(exc)
    if code is None and status is None and not isinstance(exc, TRANSPORT_ERRORS):
        return None
    return classify(code, status)


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says no connection to the endpoint could be made at all (nothing
    listens there, the name does not resolve, the connect timed out), as opposed to a
    connection that failed after it was made."""
    return isinstance(
        exc,
        (
            EndpointConnectionError,
            ConnectTimeoutError,
            ConnectionRefusedError,
            aiohttp.ClientConnectorError,
        ),
    )


class SecretsFilter(logging.Filter):
    """Masks credentials in the records of the loggers it is installed on (botocore's).

    botocore's DEBUG records print the signed request (``Sending http request``: every
    header) and the canonical request it signed (``CanonicalRequest``): both hold the session
    token, and the request holds the SigV4 signature, which replays that request for minutes
    (botocore.auth also logs it alone, as ``Signature:`` and the hex on the next line).
    A parsed STS or SSO answer holds a secret key and a token. This replaces, in the
    formatted message, the value of every ``x-amz-security-token`` header or query parameter,
    every ``Signature=`` or ``Signature:``, every ``SecretAccessKey``/``SessionToken``/
    ``secretAccessKey``/``sessionToken`` field (JSON, XML or repr) and every secret value a
    :class:`ClientConfig` of this process handed to a client, with ``***``. The access key id
    stays: it names the credentials, it is not one (AWS prints it in errors too).
    """

    _PATTERNS = (
        re.compile(r"(x-amz-security-token['\"]?\s*[:=]\s*b?['\"]?)([^'\"\s,}&]+)", re.I),
        re.compile(r"(Signature[=:]\s*)([0-9a-fA-F]{16,})"),
        re.compile(
            r"(['\"]?(?:SecretAccessKey|SessionToken|aws_secret_access_key|aws_session_token)"
            r"['\"]?\s*[:=]\s*['\"]?)([^'\"\s,}]+)",
            re.I,
        ),
        re.compile(r"(<(SecretAccessKey|SessionToken)>)([^<]*)(?=</\2>)", re.I),
    )

    def __init__(self) -> None:
        super().__init__()
        self._secrets: set[str] = set()
        self._ordered: list[str] = []
        self._lock = threading.Lock()

    def add_secret(self, value: str) -> None:
        """Mask this exact value wherever it appears."""
        with self._lock:
            self._secrets.add(value)
            # Longest first: a secret that begins with another one ("secret" and
            # "secret/abc") must be masked whole, not left with its tail showing.
            self._ordered = sorted(self._secrets, key=len, reverse=True)

    def mask(self, text: str) -> str:
        """``text`` with every credential in it replaced by ``***``."""
        for pattern in self._PATTERNS:
            text = pattern.sub(r"\1***", text)
        for secret in self._ordered:
            if secret in text:
                text = text.replace(secret, "***")
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken record: let the handler report it as it would
            return True
        masked = self.mask(message)
        if masked != message:
            record.msg = masked
            record.args = None
        return True


SECRETS_FILTER = SecretsFilter()
"""The one filter every botocore logger gets (``mask_secrets_in_logs`` installs it)."""
_LOGGER_PREFIXES = ("botocore", "aiobotocore", "boto3", "urllib3")
_LOGGERS = ("botocore.endpoint", "botocore.auth", "botocore.parsers", "aiobotocore.endpoint")


def mask_secrets_in_logs(*secrets: str | None) -> None:
    """Install :data:`SECRETS_FILTER` on every botocore, aiobotocore, boto3 and urllib3
    logger there is (and on the few that log requests, made now if need be), and have it mask
    ``secrets`` too. Idempotent; every client made by this module calls it. A logging filter
    only sees the records of the logger it is on, hence one per logger."""
    for secret in secrets:
        if secret:
            SECRETS_FILTER.add_secret(secret)
    names = {
        name
        for name in list(logging.Logger.manager.loggerDict)
        if name.startswith(_LOGGER_PREFIXES)
    }
    names.update(_LOGGERS)
    for name in names:
        logger = logging.getLogger(name)
        if SECRETS_FILTER not in logger.filters:
            logger.addFilter(SECRETS_FILTER)
