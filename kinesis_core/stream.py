"""A reference to a stream, by name or by ARN, and how every Kinesis call names it.

Users may name a stream either way. Calls differ in how they take it: ``StreamARN`` or
``StreamName`` (never an ARN in ``StreamName``: the service refuses it, or worse, treats it as
the name of a stream that does not exist). :class:`StreamRef` is the one value every producer,
consumer, shard map and adapter passes around, so that choice is made in one place.

A ``StreamRef`` may also carry the stream's ``StreamId`` (botocore: "reserved for future use";
the KPL 1.0.7 takes one with ``setStreamId``), which every call that names the stream then
passes on. botocore sends a call with a ``StreamId`` to the stream's own AWS endpoint
(``https://<id>.<suffix>.data-kinesis.<region>.amazonaws.com``) whatever ``endpoint_url``
says, so a ``StreamRef`` with an id is for AWS only, never for a local emulator or a proxy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kinesis_core.errors import ConfigurationError

_NAME = re.compile(r"[a-zA-Z0-9_.\-]{1,128}")
_ARN = re.compile(
    r"arn:aws[a-z\-]*:kinesis:(?P<region>[a-z0-9\-]+):(?P<account>\d{12}):stream/(?P<name>[^/]+)"
)
_STREAM_ID = re.compile(r"[a-z0-9]{20}-[a-z0-9]{3}")


@dataclass(frozen=True, slots=True)
class StreamRef:
    """A Kinesis stream: its name, its ARN when the user gave one, its ``StreamId`` if known."""

    name: str
    arn: str | None = None
    stream_id: str | None = None

    def __post_init__(self) -> None:
        if self.stream_id is not None and (
            not isinstance(self.stream_id, str) or _STREAM_ID.fullmatch(self.stream_id) is None
        ):
            raise ConfigurationError(
                "stream_id",
                "a StreamId is 20 lowercase letters or digits, '-', and 3 more "
                f"([a-z0-9]{{20}}-[a-z0-9]{{3}}), got {self.stream_id!r:.60}",
            )

    @classmethod
    def of(cls, value: str | StreamRef, field: str = "stream") -> StreamRef:
        """Parse a stream name or ARN; ``field`` names the argument in the error."""
        if isinstance(value, StreamRef):
            return value
        if not isinstance(value, str) or not value:
            raise ConfigurationError(field, f"must be a stream name or ARN, got {value!r:.80}")
        if value.startswith("arn:"):
            match = _ARN.fullmatch(value)
            if match is None:
                raise ConfigurationError(
                    field,
                    "not a Kinesis stream ARN (arn:aws:kinesis:REGION:ACCOUNT:stream/NAME): "
                    f"{value!r:.200}",
                )
            return cls(match["name"], value)
        if _NAME.fullmatch(value) is None:
            raise ConfigurationError(
                field,
                "a stream name is 1 to 128 characters of a-z, A-Z, 0-9, '_', '.' and '-', "
                f"got {value!r:.200}",
            )
        return cls(value)

    @property
    def region(self) -> str | None:
        """The region in the ARN, if one was given."""
        match = None if self.arn is None else _ARN.fullmatch(self.arn)
        return None if match is None else match["region"]

    def params(self) -> dict[str, str]:
        """``StreamARN`` when the ARN is known, else ``StreamName``, and ``StreamId`` when
        known: the arguments of a call."""
        params = {"StreamARN": self.arn} if self.arn is not None else {"StreamName": self.name}
        if self.stream_id is not None:
            params["StreamId"] = self.stream_id
        return params

    def check_endpoint(self, endpoint_url: str | None) -> None:
        """Refuse a ``StreamId`` with a custom endpoint: botocore would send the calls to AWS
        instead (see the module's docstring)."""
        if self.stream_id is not None and endpoint_url is not None:
            raise ConfigurationError(
                "stream",
                f"a StreamRef with stream_id={self.stream_id!r} is for AWS only: botocore sends "
                f"calls naming a StreamId to the stream's AWS endpoint, not to {endpoint_url}",
            )

    def __str__(self) -> str:
        return self.arn or self.name
