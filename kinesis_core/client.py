"""Client configuration and the one factory that builds every Kinesis and DynamoDB client.

``ClientConfig`` is plain, frozen and picklable (Beam ships it to workers). A field left at
``None`` is resolved when a client is created, on the machine that creates it, the way botocore
resolves it (environment, shared config files, the default credential chain), plus one
convenience botocore lacks: ``AWS_REGION`` as a fallback region. ``ClientConfig.from_env()``
instead snapshots the environment's region, endpoints and profile into the fields.

Secrets never appear in ``repr``/``str`` (so not in logs or tracebacks either), also after a
pickle round trip; the pickle itself does carry them, since a worker needs them to sign requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Literal

import aiohttp
import botocore.session
from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession
from botocore.config import Config
from botocore.exceptions import ConnectionError as BotoConnectionError, HTTPClientError

from kinesis_core.classify import ErrorKind, classify, error_details
from kinesis_core.errors import ConfigurationError, ValidationError

if TYPE_CHECKING:
    from types_aiobotocore_dynamodb.client import DynamoDBClient
    from types_aiobotocore_kinesis.client import KinesisClient

__all__ = [
    "ClientConfig",
    "Service",
    "create_botocore_client",
    "create_dynamodb_client",
    "create_kinesis_client",
    "error_kind",
]

LOG = logging.getLogger(__name__)

Service = Literal["kinesis", "dynamodb"]

USER_AGENT_EXTRA = "kinesis-connectors"
_MASK = "'***'"
_SECRET_FIELDS = frozenset({"aws_secret_access_key", "aws_session_token"})


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
        for name in ("endpoint_url", "dynamodb_endpoint_url"):
            url = getattr(self, name)
            if url is not None and not url.startswith(("http://", "https://")):
                raise ValidationError(name, f"must start with http:// or https://, got {url!r}")
        for name in ("connect_timeout", "read_timeout"):
            if not getattr(self, name) > 0:
                raise ValidationError(name, f"must be > 0 seconds, got {getattr(self, name)!r}")
        if self.max_pool_connections < 1:
            raise ValidationError(
                "max_pool_connections", f"must be >= 1, got {self.max_pool_connections!r}"
            )
        if (self.aws_access_key_id is None) != (self.aws_secret_access_key is None):
            raise ValidationError(
                "aws_access_key_id",
                "aws_access_key_id and aws_secret_access_key go together: give both or neither",
            )
        if self.aws_session_token is not None and self.aws_access_key_id is None:
            raise ValidationError(
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


def _client_kwargs(
    config: ClientConfig,
    service: Service,
    session: botocore.session.Session,
    http_config: Config,
) -> dict[str, Any]:
    """Arguments of ``session.create_client`` for ``config``: the one place that maps fields."""
    region = (
        config.region_name
        or session.get_config_variable("region")
        or _env(os.environ, "AWS_REGION")
    )
    if not region:
        raise ConfigurationError(
            "region_name: no AWS region configured; pass ClientConfig(region_name=...) or set "
            "AWS_DEFAULT_REGION (or AWS_REGION), or a region in the AWS config profile"
        )
    endpoint_url = config.endpoint_for(service)
    if config.verify is False:
        LOG.warning(
            "TLS certificate verification is OFF for the %s client (%s): use this only against "
            "a local emulator",
            service,
            endpoint_url or "default endpoint",
        )
    LOG.debug("creating a %s client in %s from %r", service, region, config)
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
        raise ValidationError("max_attempts", f"must be >= 1, got {max_attempts!r}")
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


@contextlib.asynccontextmanager
async def _create_aio_client(
    config: ClientConfig, service: Service, max_attempts: int | None
) -> AsyncIterator[Any]:
    session = AioSession(profile=config.profile_name)
    kwargs = _client_kwargs(config, service, session, _http_config(config, max_attempts, AioConfig))
    async with session.create_client(service, **kwargs) as client:
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
    return session.create_client(service, **kwargs)


TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncio.TimeoutError,
    HTTPClientError,
    BotoConnectionError,
    aiohttp.ClientError,
)
"""No answer from the service (connection refused or reset, timeouts): worth retrying."""


def error_kind(exc: BaseException) -> ErrorKind | None:
    """How to treat an exception a Kinesis or DynamoDB call raised (the table in
    :mod:`kinesis_core.classify`); None when it is neither a service answer nor a transport
    error, i.e. a bug, to be raised as it is."""
    code, status = error_details(exc)
    if code is None and status is None and not isinstance(exc, TRANSPORT_ERRORS):
        return None
    return classify(code, status)
