"""A worker of the lease scale-out suite: ``python -m reliability._lease_worker KINESIS DYNAMODB
STREAM APPLICATION NAME OUT``.

A core Consumer with leases on a DynamoDB lease table, deduplicating by record id (its dedup
windows in the lease rows); it appends one JSON line per record it delivers (``t`` time, ``w``
worker, ``s`` shard, ``q`` sequence number, ``u`` sub-sequence number, ``i`` the record id the
producer gave, ``d`` the record's number, its data), flushed before the record is acked, and
runs until SIGTERM (a graceful stop) or SIGKILL. Its log (``OUT`` with ``.log``) keeps the
lease manager's INFO lines.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time

FAILOVER = 3.0
RENEW = 0.5
TAKE = 2.0
CHECKPOINT_INTERVAL = 1.0


async def run(kinesis: str, dynamodb: str, stream: str, app: str, name: str, out: str) -> None:
    from kinesis_core.checkpoint import DynamoDBCheckpointStore
    from kinesis_core.consumer import TRIM_HORIZON, Consumer
    from kinesis_core.lease import LeaseConfig
    from kinesis_core.local import local_client_config
    from reliability._common import log_each_record_until

    config = local_client_config(kinesis, dynamodb_endpoint_url=dynamodb)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with (
        DynamoDBCheckpointStore(client_config=config) as store,
        Consumer(
            stream,
            client_config=config,
            checkpoint_store=store,
            application_name=app,
            initial_position=TRIM_HORIZON,
            checkpoint_interval=CHECKPOINT_INTERVAL,
            idle_interval=0.2,
            deduplicate=True,
            leases=LeaseConfig(
                worker_id=name,
                failover_time=FAILOVER,
                renew_interval=RENEW,
                take_interval=TAKE,
                parent_poll_interval=0.5,
                max_leases_to_steal=8,
            ),
        ) as consumer,
    ):
        await log_each_record_until(
            consumer,
            out,
            lambda record: {
                "t": time.time(),
                "w": name,
                "s": record.shard_id,
                "q": str(record.sequence_number),
                "u": record.sub_sequence_number,
                "i": record.record_id,
                "d": int(record.data),
            },
            stop,
        )


if __name__ == "__main__":
    logging.basicConfig(
        filename=sys.argv[-1].replace(".jsonl", ".log"),
        level=logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    asyncio.run(run(*sys.argv[1:]))
