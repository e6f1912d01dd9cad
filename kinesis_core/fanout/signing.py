"""Signed SubscribeToShard requests, built by botocore itself.

The request goes through an aiobotocore Kinesis client made by ``create_kinesis_client`` (the
same ClientConfig mapping as every other call): botocore validates the parameters, resolves the
endpoint (with AWS's endpoint rules, which send a call with a ConsumerARN to
``https://<account>.data-kinesis.<region>.amazonaws.com``), serializes the JSON 1.1 body, gets
credentials from its chain (refreshing them when they expire) and signs with SigV4 for the
service ``kinesis``. A ``before-send`` handler then takes the signed request away before
botocore would send it over HTTP/1.1, and our own HTTP/2 or HTTP/1.1 client sends it.

The signed headers carry the signature and, with temporary credentials, the session token:
``SignedRequest``'s repr leaves them out, and nothing here logs them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from kinesis_core.errors import ConfigurationError

EVENT = "before-send.kinesis.SubscribeToShard"
_SECRET_HEADERS = frozenset({"authorization", "x-amz-security-token"})
_DEFAULT_PORTS = {"https": 443, "http": 80}


@dataclass(frozen=True, repr=False)
class SignedRequest:
    """A signed POST: where to send it, its headers (name, value) and its body."""

    url: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    @property
    def scheme(self) -> str:
        return urlsplit(self.url).scheme

    @property
    def host(self) -> str:
        host = urlsplit(self.url).hostname
        if not host:
            raise ConfigurationError("endpoint_url", f"endpoint URL {self.url!r} has no host")
        return host

    @property
    def port(self) -> int:
        parts = urlsplit(self.url)
        return parts.port or _DEFAULT_PORTS[parts.scheme]

    @property
    def authority(self) -> str:
        """host[:port] as signed: SigV4 signs the Host header botocore derived from the URL."""
        return urlsplit(self.url).netloc

    @property
    def path(self) -> str:
        parts = urlsplit(self.url)
        return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    def __repr__(self) -> str:
        shown = [(k, "***" if k.lower() in _SECRET_HEADERS else v) for k, v in self.headers]
        return f"SignedRequest(url={self.url!r}, headers={shown!r}, body={self.body!r})"


class _Captured(Exception):
    """Carries the signed request out of botocore's send path."""

    def __init__(self, request: Any) -> None:
        super().__init__("request captured before sending")
        self.request = request


def _capture(request: Any, **_: Any) -> None:
    raise _Captured(request)


class RequestSigner:
    """Builds signed SubscribeToShard requests with an aiobotocore Kinesis client.

    The client must be made with ``max_attempts=1`` (the capture is an exception to botocore,
    which must not retry it) and is used for nothing else.
    """

    def __init__(self, client: Any) -> None:
        self._client = client
        client.meta.events.register(EVENT, _capture, unique_id="kinesis-connectors-efo-capture")

    async def subscribe_request(
        self, consumer_arn: str, shard_id: str, starting_position: Mapping[str, Any]
    ) -> SignedRequest:
        """The signed request; botocore's ParamConfigurationError for bad parameters."""
        try:
            await self._client.subscribe_to_shard(
                ConsumerARN=consumer_arn, ShardId=shard_id, StartingPosition=dict(starting_position)
            )
        except _Captured as captured:
            return _to_signed(captured.request)
        raise RuntimeError("botocore sent SubscribeToShard instead of handing it over")


def _to_signed(request: Any) -> SignedRequest:
    headers = tuple(
        (str(name), value.decode("latin-1") if isinstance(value, bytes) else str(value))
        for name, value in request.headers.items()
    )
    body = request.body
    if isinstance(body, str):
        body = body.encode()
    return SignedRequest(url=str(request.url), headers=headers, body=bytes(body or b""))
