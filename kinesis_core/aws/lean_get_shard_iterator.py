"""GetShardIterator without botocore's per-call machinery (:mod:`kinesis_core.aws.lean_requests`).

A polling reader gets an iterator when it starts a shard, when its iterator expires, and when
it takes a lease over: a consumer of 256 shards starts with 256 GetShardIterator calls at
once, and each would pay for botocore's per-call machinery (docs/performance.md). After a
stream's first call, which botocore sends, the calls write their JSON body by hand, as
:class:`~kinesis_core.aws.lean_get_records.LeanGetRecords` does; the calls made while that first
one is on its way wait for it (:meth:`~kinesis_core.aws.lean_requests.LeanRequests.call`).

``AT_TIMESTAMP`` stays botocore's: how a timestamp is written (seconds, with how many
decimals) is botocore's choice, which differs between its versions.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping
from typing import Any

import msgspec

from kinesis_core.aws.lean_requests import LeanRequests, Route, response_metadata
from kinesis_core.errors import MalformedResponseError

STREAM_FIELDS = ("StreamName", "StreamARN", "StreamId")
"""The arguments that name the stream, which the route is learned per (with a ``StreamARN``
or a ``StreamId``, AWS's endpoint rules send the calls of each stream to its own host)."""


def _route_key(params: Mapping[str, Any]) -> Hashable:
    return tuple(params.get(field) for field in STREAM_FIELDS)


class LeanGetShardIterator(LeanRequests):
    """Sends one aiobotocore Kinesis client's GetShardIterator calls the lean way (one per
    client: :meth:`of`)."""

    OPERATION = "GetShardIterator"

    def route_key(self, request: Any) -> Hashable:
        body = request.body
        return _route_key(json.loads(body) if body else {})

    async def get_shard_iterator(self, params: dict[str, Any]) -> dict[str, Any]:
        """GetShardIterator's answer for ``params`` (the stream, ``ShardId``,
        ``ShardIteratorType`` and its position) in botocore's shape; raises what botocore would
        raise."""

        async def by_botocore() -> dict[str, Any]:
            response: dict[str, Any] = await self._client.get_shard_iterator(**params)
            return response

        if "Timestamp" in params:
            return await by_botocore()

        async def lean(route: Route) -> dict[str, Any]:
            raw, headers = await self.post(route, msgspec.json.encode(params))
            try:
                answer: Any = msgspec.json.decode(raw)
            except msgspec.DecodeError as exc:
                raise MalformedResponseError(self.OPERATION, f"{exc}: {raw[:60]!r}") from None
            if not isinstance(answer, dict):
                raise MalformedResponseError(self.OPERATION, f"not a JSON object: {raw[:60]!r}")
            answer["ResponseMetadata"] = response_metadata(headers)
            return answer

        return await self.call(_route_key(params), by_botocore, lean)
