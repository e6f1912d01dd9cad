"""Lease managers on moto's DynamoDB, with the races of a loaded table: the owner's writes land
between another worker's scan and its request for the lease (issue 21: a worker that joined
took no lease for about 12 s)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from kinesis_core.checkpoint import Checkpoint, DynamoDBCheckpointStore, Sentinel
from kinesis_core.lease import LeaseConfig, LeaseManager

pytestmark = pytest.mark.integration

STREAM = "stream"
SHARDS = ("s1", "s2", "s3", "s4")


class RenewedMeanwhile(DynamoDBCheckpointStore):
    """Each scan is followed by ``meanwhile`` before it answers: as if the scan was slow and
    the owners wrote to their leases while it ran."""

    meanwhile: Callable[[], Awaitable[None]] | None = None

    async def list(self, application: str, stream: str) -> list[Checkpoint]:
        rows = await super().list(application, stream)
        if self.meanwhile is not None:
            await self.meanwhile()
        return rows


def worker(store: DynamoDBCheckpointStore, app: str, name: str) -> LeaseManager:
    config = LeaseConfig(
        worker_id=name,
        failover_time=10,
        renew_interval=1,
        take_interval=60,
        max_leases_to_steal=2,
    )
    return LeaseManager(
        store,
        app,
        STREAM,
        config,
        eligible=lambda: set(SHARDS),
    )


def test_a_lease_is_asked_for_even_when_its_owner_renewed_during_the_scan(
    moto_server: Any,
) -> None:
    config = moto_server.client_config()
    app = f"races-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        async with (
            DynamoDBCheckpointStore(client_config=config) as owner_store,
            RenewedMeanwhile(client_config=config) as joiner_store,
        ):
            owner = worker(owner_store, app, "owner")
            for shard_id in SHARDS:
                await owner.create(shard_id, Sentinel.TRIM_HORIZON, [], None)
            assert sorted(await owner.take_round()) == list(SHARDS)
            for shard_id in SHARDS:
                assert await owner.write(shard_id, (5, 0))
            await joiner_store.heartbeat(app, STREAM, "joiner")

            async def checkpoint_all() -> None:
                for shard_id in SHARDS:
                    assert await owner.write(shard_id, (6, 0))

            joiner_store.meanwhile = checkpoint_all
            joiner = worker(joiner_store, app, "joiner")
            asked = await joiner.take_round()
            assert len(asked) == 2
            for shard_id in asked:
                row = await owner_store.get(app, STREAM, shard_id)
                assert row is not None
                assert (row.owner, row.checkpoint_owner) == ("joiner", "owner")
            await asyncio.gather(owner.close(), joiner.close())

    asyncio.run(main())
