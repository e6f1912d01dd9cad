"""The Faust app the Faust crash loop runs: ``faust -A reliability._faust_worker worker``.

Its settings come from ``RELIABILITY_*`` environment variables (endpoint, stream, datadir and
log). An agent reads the stream through a KinesisChannel, checkpoints in the default SQLite
file of the datadir, and logs every record before the event is acked (the agent's next
iteration acks it), in the crash loops' line format.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import faust

from faust_kinesis import KinesisChannel
from kinesis_core.consumer import ConsumerConfig
from kinesis_core.local import local_client_config
from reliability._children import APPLICATION, log_line

app = faust.App(
    APPLICATION,
    web_enabled=False,
    datadir=os.environ["RELIABILITY_DATADIR"],
    value_serializer="raw",
)
app.boot_strategy.enable_kafka = False
channel = KinesisChannel(
    app,
    os.environ["RELIABILITY_STREAM"],
    client_config=local_client_config(os.environ["RELIABILITY_ENDPOINT"]),
    application_name=APPLICATION,
    consumer_config=ConsumerConfig(checkpoint_interval=0.5, idle_interval=0.2),
)


@app.agent(channel)
async def process(events: Any) -> None:
    # Blocking writes on purpose: a record is logged before it is acked, nothing between.
    with open(os.environ["RELIABILITY_LOG"], "a") as log:  # noqa: ASYNC230
        async for event in events.events():
            message = event.message
            log_line(log, message.shard_id, message.position, event.value)
            await asyncio.sleep(0.002)  # a little work per record
