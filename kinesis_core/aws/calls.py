"""The requests an executor executes, as values (sans-I/O).

A :class:`Call` says what to ask the service; an executor (:mod:`kinesis_core.aws.executor`)
sends it, with or without a retry policy, and returns what it means. The machines return calls
and never send anything; the drivers hand them to an executor.

An :class:`ApiCall` is one Kinesis operation, perhaps paginated: ``operation`` names the
client's method, ``request(token)`` gives its arguments (``token`` None for the first page,
then the NextToken of the previous page), and ``parse(response)`` gives this page's part of
the answer and the next token (None: the last page). Both executors, the asyncio one and the
synchronous one, run every call through that one loop (:meth:`ApiCall.pages`). The shard
readers' calls (:mod:`kinesis_core.consumer.transport` and the transports' modules) name no
stream or shard: a reader's link to an executor adds them.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from kinesis_core.errors import MalformedResponseError
from kinesis_core.shards.info import ShardInfo
from kinesis_core.stream import StreamRef

LIST_SHARDS_PAGE = 1000
"""ListShards' largest page."""


class Call:
    """A request an executor executes."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing to do before ``until`` (the driver's clock): what a machine returns instead of
    a call while it backs off or paces itself."""

    until: float


class ApiCall(Call):
    """One service operation (paginated or not)."""

    __slots__ = ()

    operation: ClassVar[str]
    """The client's method: ``list_shards``, ``describe_stream_summary``, ..."""

    def request(self, token: str | None) -> dict[str, Any]:
        """The arguments of the first page (``token`` None) or of the page after ``token``."""
        raise NotImplementedError

    def parse(self, response: Mapping[str, Any]) -> tuple[Any, str | None]:
        """This page's answer and the token of the next page (None: no more)."""
        return response, None

    def pages(self) -> Generator[dict[str, Any], Mapping[str, Any], Any]:
        """The arguments of each page in turn, each sent the answer of the one before; it
        returns the call's answer (:func:`joined`). An executor's one loop for every call."""
        parts = []
        token: str | None = None
        while True:
            part, token = self.parse((yield self.request(token)))
            parts.append(part)
            if token is None:
                return joined(parts)

    @property
    def what(self) -> str:
        """The call in messages: ``ListShards of orders``."""
        return type(self).__name__


@dataclass(frozen=True, slots=True)
class ListShards(ApiCall):
    """Every shard ListShards lists (all pages) as :class:`ShardInfo`, optionally filtered
    (``shard_filter``: the API's ShardFilter). Later pages send only NextToken and MaxResults:
    Kinesis refuses a stream or a filter next to a token."""

    stream: StreamRef
    shard_filter: Mapping[str, Any] | None = None
    page_size: int = LIST_SHARDS_PAGE

    operation: ClassVar[str] = "list_shards"

    def request(self, token: str | None) -> dict[str, Any]:
        if token is not None:
            return {"NextToken": token, "MaxResults": self.page_size}
        kwargs: dict[str, Any] = {"MaxResults": self.page_size, **self.stream.params()}
        if self.shard_filter is not None:
            kwargs["ShardFilter"] = dict(self.shard_filter)
        return kwargs

    def parse(self, response: Mapping[str, Any]) -> tuple[list[ShardInfo], str | None]:
        """One page; :class:`MalformedResponseError` (transient) for an answer without a list
        of ``Shards``: taken for an empty page, it would make every shard look gone."""
        listed = response.get("Shards")
        if not isinstance(listed, list):
            raise MalformedResponseError("ListShards", f"no list of Shards: {response!r:.200}")
        shards = [ShardInfo.from_api(shard) for shard in listed]
        return shards, response.get("NextToken") or None

    @property
    def what(self) -> str:
        return f"ListShards of {self.stream}"


@dataclass(frozen=True, slots=True)
class DescribeStreamSummary(ApiCall):
    """The stream's summary (the response as it is: ``StreamDescriptionSummary``)."""

    stream: StreamRef

    operation: ClassVar[str] = "describe_stream_summary"

    def request(self, token: str | None) -> dict[str, Any]:
        return self.stream.params()

    @property
    def what(self) -> str:
        return f"DescribeStreamSummary of {self.stream}"


@dataclass(frozen=True, slots=True)
class RegisterStreamConsumer(ApiCall):
    """Register a consumer of the stream, with ``tags`` (``(key, value)`` pairs) if any; the
    answer is the ``Consumer`` description."""

    stream_arn: str
    consumer_name: str
    tags: tuple[tuple[str, str], ...] = ()

    operation: ClassVar[str] = "register_stream_consumer"

    def request(self, token: str | None) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"StreamARN": self.stream_arn, "ConsumerName": self.consumer_name}
        if self.tags:
            kwargs["Tags"] = dict(self.tags)
        return kwargs

    def parse(self, response: Mapping[str, Any]) -> tuple[Any, str | None]:
        return response["Consumer"], None


@dataclass(frozen=True, slots=True)
class DescribeStreamConsumer(ApiCall):
    """Describe a consumer by ARN, or by stream ARN and name; the answer is the
    ``ConsumerDescription``."""

    consumer_arn: str | None = None
    stream_arn: str | None = None
    consumer_name: str | None = None

    operation: ClassVar[str] = "describe_stream_consumer"

    def request(self, token: str | None) -> dict[str, Any]:
        if self.consumer_arn is not None:
            return {"ConsumerARN": self.consumer_arn}
        return {"StreamARN": self.stream_arn, "ConsumerName": self.consumer_name}

    def parse(self, response: Mapping[str, Any]) -> tuple[Any, str | None]:
        return response["ConsumerDescription"], None


@dataclass(frozen=True, slots=True)
class ListStreamConsumers(ApiCall):
    """The names of the stream's registered consumers (all pages)."""

    stream_arn: str

    operation: ClassVar[str] = "list_stream_consumers"

    def request(self, token: str | None) -> dict[str, Any]:
        kwargs = {"StreamARN": self.stream_arn}
        if token is not None:
            kwargs["NextToken"] = token
        return kwargs

    def parse(self, response: Mapping[str, Any]) -> tuple[list[str], str | None]:
        names = [consumer["ConsumerName"] for consumer in response.get("Consumers", ())]
        return names, response.get("NextToken") or None


@dataclass(frozen=True, slots=True)
class DeregisterStreamConsumer(ApiCall):
    """Deregister a consumer (the answer is empty)."""

    consumer_arn: str

    operation: ClassVar[str] = "deregister_stream_consumer"

    def request(self, token: str | None) -> dict[str, Any]:
        return {"ConsumerARN": self.consumer_arn}


def joined(pages: Sequence[Any]) -> Any:
    """The answer of a call from the answers of its pages: lists are joined, a single page's
    answer is itself."""
    if len(pages) == 1:
        return pages[0]
    joined_pages: list[Any] = []
    for page in pages:
        joined_pages.extend(page)
    return joined_pages
