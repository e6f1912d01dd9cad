"""The Faust app a ``faust worker`` subprocess runs in the SIGKILL test.

It reads one Kinesis stream (settings from ``KC_*`` environment variables) with checkpoints in
the default SQLite file of its datadir, and logs every record it processes, before the
record is acked, as ``shard sequence sub-sequence value`` lines. With ``KC_WORKER`` (its
worker id) it shares the stream with the other workers through leases in the SQLite file
``KC_CHECKPOINTS``.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from faust_apps import kafka_free_app
from faust_kinesis import KinesisChannel
from kinesis_core.aws.config import ClientConfig
from kinesis_core.checkpoint import SQLiteCheckpointStore
from kinesis_core.consumer import ConsumerConfig
from kinesis_core.lease import LeaseConfig

APPLICATION = "crash-test"
WORKER = os.environ.get("KC_WORKER")

app = kafka_free_app(APPLICATION, Path(os.environ["KC_DATADIR"]), value_serializer="raw")
channel = KinesisChannel(
    app,
    os.environ["KC_STREAM"],
    client_config=ClientConfig(
        region_name=os.environ["KC_REGION"],
        endpoint_url=os.environ["KC_ENDPOINT"],
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ),
    consumer_config=ConsumerConfig(
        checkpoint_interval=0.1,
        idle_interval=0.2,
        max_records_per_call=10,
        leases=False
        if WORKER is None
        else LeaseConfig(
            worker_id=WORKER, failover_time=3.0, renew_interval=0.5, take_interval=1.0
        ),
    ),
    checkpoint_store=None
    if WORKER is None
    else SQLiteCheckpointStore(os.environ["KC_CHECKPOINTS"]),
)


@app.agent(channel)
async def process(events: Any) -> None:
    # Blocking writes on purpose: a record is logged before it is acked, nothing between.
    with open(os.environ["KC_LOG"], "a") as log:  # noqa: ASYNC230
        async for event in events.events():
            message = event.message
            log.write(
                f"{message.shard_id} {message.sequence_number} "
                f"{message.sub_sequence_number} {event.value.decode()}\n"
            )
            log.flush()
            await asyncio.sleep(0.003)
