"""Every use of botocore's and aiobotocore's private names, in one place.

The lean calls (:mod:`.lean_requests`) sign with a client's own request signer and send on its
own HTTP session, which botocore keeps in private attributes (``_request_signer``,
``_endpoint``); :class:`~.direct_http.DirectHttp` chooses proxies and builds its TLS context
with the helpers of botocore's HTTP session module (``botocore.httpsession``, not documented
as API). A botocore release may move any of them: each is reached here, through a small
function that says what it returns when the piece is missing, and
tests/unit/test_botocore_private.py, which the ``botocore-lowest`` and ``botocore-newest`` nox
sessions run, checks each on real clients. No other module of the project touches such a name
(tests/unit/test_layering.py).
"""

from __future__ import annotations

import ssl
from typing import Any

from botocore.httpsession import ProxyConfiguration, create_urllib3_context, get_cert_path
from botocore.utils import get_environ_proxies

__all__ = ["cert_path", "http_session", "proxy_url", "request_signer", "tls_context"]


def request_signer(client: Any) -> Any | None:
    """The request signer of a botocore or aiobotocore ``client`` (with its credential
    chain), or None when the client has none that can sign (``get_auth_instance``)."""
    signer = getattr(client, "_request_signer", None)
    return signer if getattr(signer, "get_auth_instance", None) is not None else None


def http_session(client: Any) -> Any | None:
    """The HTTP session ``client`` sends its requests on (its connection pool, TLS settings,
    proxies and timeouts), or None when it has none that can ``send``."""
    session = getattr(getattr(client, "_endpoint", None), "http_session", None)
    return session if getattr(session, "send", None) is not None else None


def proxy_url(url: str, proxies: dict[str, str] | None, proxies_config: Any) -> str | None:
    """The proxy botocore's HTTP session sends a request to ``url`` through, None for none:
    the client's ``proxies`` (its botocore Config's), else the environment's for the URL."""
    configuration = ProxyConfiguration(
        proxies=proxies or get_environ_proxies(url), proxies_settings=proxies_config
    )
    found: str | None = configuration.proxy_url_for(url)
    return found


def tls_context() -> ssl.SSLContext:
    """A new TLS client context with botocore's settings (ciphers, options), before any
    verification is set up."""
    context: ssl.SSLContext = create_urllib3_context()
    return context


def cert_path(verify: str | bool) -> str | bool:
    """The CA bundle botocore verifies with for ``verify`` (a path, or True: its default
    bundle, certifi's)."""
    path: str | bool = get_cert_path(verify)
    return path
