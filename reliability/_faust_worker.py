"""The Faust app the Faust crash loop runs: ``faust -A reliability._faust_worker worker``.

Its settings come from ``RELIABILITY_*`` environment variables (endpoint, stream, datadir and
log). An agent reads the stream through the KinesisChannel of ``_faust_app`` and logs every
record before the event is acked (the agent's next iteration acks it), in the crash loops'
line format.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from reliability._children import log_line
from reliability._faust_app import kinesis_app

app, channel = kinesis_app()


@app.agent(channel)
async def process(events: Any) -> None:
    # Blocking writes on purpose: a record is logged before it is acked, nothing between.
    with open(os.environ["RELIABILITY_LOG"], "a") as log:  # noqa: ASYNC230
        async for event in events.events():
            message = event.message
            log_line(log, message.shard_id, message.position, event.value)
            await asyncio.sleep(0.002)  # a little work per record
