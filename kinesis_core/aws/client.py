"""The one factory that builds every Kinesis and DynamoDB client from a
:class:`~kinesis_core.aws.config.ClientConfig`.

The fields left at ``None`` are resolved here, on the machine that makes the client, as
botocore resolves them (environment, shared config files, the default credential chain), with
``AWS_REGION`` as a fallback region; what only this machine can check (the profile, the CA
bundle, an endpoint from the environment) is checked before botocore would fail on it. Every
client made here masks credentials in botocore's logs
(:func:`~kinesis_core.aws.log_filter.mask_secrets_in_logs`), and a Kinesis client gets a
:class:`~kinesis_core.aws.direct_http.DirectHttp` for its lean calls.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import botocore.session
from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession
from botocore.config import Config
from botocore.configprovider import ConfiguredEndpointProvider

from kinesis_core.aws.config import (
    ClientConfig,
    Service,
    check_endpoint,
    check_region,
    env_value,
)
from kinesis_core.aws.direct_http import attach_direct_http
from kinesis_core.aws.http1_pool import ANSWER_TIMEOUT_READS
from kinesis_core.aws.log_filter import mask_secrets_in_logs
from kinesis_core.errors import ConfigurationError

if TYPE_CHECKING:
    from types_aiobotocore_dynamodb.client import DynamoDBClient
    from types_aiobotocore_kinesis.client import KinesisClient

__all__ = [
    "call_deadline",
    "create_botocore_client",
    "create_dynamodb_client",
    "create_kinesis_client",
]

LOG = logging.getLogger(__name__)

USER_AGENT_EXTRA = "kinesis-connectors"


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
            check_endpoint(name, configured)
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
        or env_value(os.environ, "AWS_REGION")
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
            stack.push_async_callback(attach_direct_http(client, config, http_config).close)
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
