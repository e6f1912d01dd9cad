"""The logging filter that keeps credentials out of botocore's logs.

botocore's own DEBUG logs print the signed request headers; every client made by
:mod:`.client` installs :class:`SecretsFilter` on botocore's loggers
(:func:`mask_secrets_in_logs`), which masks the session token, the signature and any secret
key in them (docs/configuration.md says exactly what).
"""

from __future__ import annotations

import logging
import re
import threading

__all__ = ["SECRETS_FILTER", "SecretsFilter", "mask_secrets_in_logs"]


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
