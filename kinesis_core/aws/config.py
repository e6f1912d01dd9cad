"""How to reach Kinesis and DynamoDB: :class:`ClientConfig`, and the checks of its fields.

``ClientConfig`` is plain, frozen and picklable (Beam ships it to workers). A field left at
``None`` is resolved when a client is created (:mod:`.client`), on the machine that creates
it, the way botocore resolves it (environment, shared config files, the default credential
chain), plus one convenience botocore lacks: ``AWS_REGION`` as a fallback region.
``ClientConfig.from_env()`` instead snapshots the environment's region, endpoints and profile
into the fields.

Secrets never appear in ``repr``/``str`` (so not in logs or tracebacks either), also after a
pickle round trip; the pickle itself does carry them, since a worker needs them to sign
requests.
"""

from __future__ import annotations

import dataclasses
import os
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any, Literal

import botocore.session

from kinesis_core.aws.botocore_private import cert_path
from kinesis_core.errors import ConfigurationError

__all__ = ["ClientConfig", "Service", "ca_bundle", "check_endpoint", "check_region", "env_value"]

Service = Literal["kinesis", "dynamodb"]

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


def env_value(environ: Mapping[str, str], *names: str) -> str | None:
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
                check_endpoint(name, url)
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
        ignore = env_value(env, "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS") or ""
        ignore_endpoints = ignore.lower() == "true"
        values: dict[str, Any] = {
            "region_name": env_value(env, "AWS_DEFAULT_REGION", "AWS_REGION"),
            "profile_name": env_value(env, "AWS_PROFILE"),
        }
        if not ignore_endpoints:
            values["endpoint_url"] = env_value(env, "AWS_ENDPOINT_URL_KINESIS", "AWS_ENDPOINT_URL")
            values["dynamodb_endpoint_url"] = env_value(
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


def check_endpoint(name: str, url: str) -> None:
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
    path = cert_path(verify)
    return path if isinstance(path, str) else None
