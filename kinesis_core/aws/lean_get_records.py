"""GetRecords without botocore's per-call machinery (:mod:`kinesis_core.aws.lean_requests`).

A GetRecords call through an aiobotocore client costs CPU before anything reaches the
network (docs/performance.md, "Where a GetRecords call's CPU goes"). A polling
reader makes one call per shard per second even when the shard is idle, so at hundreds of
shards those calls are the consumer's whole cost. Yet every GetRecords of one stream differs
only in its iterator: after a stream's first call, which botocore sends, the calls write the
same JSON body by hand, on the client's own signer and HTTP session, and are parsed by the fast
parser.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping
from typing import Any

import msgspec

from kinesis_core.aws.fastparse import parse_get_records
from kinesis_core.aws.lean_requests import LeanRequests, Route, response_metadata

EVENT = "before-send.kinesis.GetRecords"


class LeanGetRecords(LeanRequests):
    """Sends one aiobotocore Kinesis client's GetRecords calls the lean way (one per client:
    :meth:`of`)."""

    OPERATION = "GetRecords"

    def route_key(self, request: Any) -> Hashable:
        body = request.body
        return json.loads(body).get("StreamId") if body else None

    async def get_records(
        self, iterator: str, limit: int, params: Mapping[str, str]
    ) -> dict[str, Any]:
        """GetRecords' answer in botocore's shape, its ``Records`` as the fast parser's
        ``WireRecord`` s (botocore's dicts on a call botocore sends); raises what botocore
        would raise."""

        async def by_botocore() -> dict[str, Any]:
            response: dict[str, Any] = await self._client.get_records(
                ShardIterator=iterator, Limit=limit, **params
            )
            return response

        async def lean(route: Route) -> dict[str, Any]:
            body = msgspec.json.encode({"ShardIterator": iterator, "Limit": limit, **params})
            raw, headers = await self.post(route, body)
            parsed = parse_get_records(raw)
            parsed["ResponseMetadata"] = response_metadata(headers)
            return parsed

        return await self.call(params.get("StreamId"), by_botocore, lean)
