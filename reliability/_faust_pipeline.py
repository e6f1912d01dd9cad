"""The Faust pipeline the duplicates row runs: ``faust -A reliability._faust_pipeline worker``.

KinesisChannel (``RELIABILITY_STREAM``) -> agent -> KinesisSink (``RELIABILITY_OUTPUT``, with
``record_ids=True``): the agent yields every input's value unchanged, keyed by the record's
number (its first 9 bytes), after logging that number. Once its agent runs, it creates the file
``RELIABILITY_LOG`` + ``.ready``. The app and its channel are ``_faust_app``'s; the source
event is acked once the sink confirmed the write.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from faust_kinesis import KinesisSink
from kinesis_core.local import local_client_config
from reliability._faust_app import kinesis_app

app, channel = kinesis_app()
sink = KinesisSink(
    app,
    os.environ["RELIABILITY_OUTPUT"],
    client_config=local_client_config(os.environ["RELIABILITY_ENDPOINT"]),
    record_ids=True,
    partition_key=lambda value: value[:9].decode(),
)


@app.agent(channel, sink=[sink])
async def pipeline(values: Any) -> AsyncIterator[bytes]:
    # Blocking writes on purpose: a record is logged before its output is yielded.
    Path(os.environ["RELIABILITY_LOG"] + ".ready").touch()  # noqa: ASYNC240 - once, at start
    with open(os.environ["RELIABILITY_LOG"], "a") as log:  # noqa: ASYNC230
        async for value in values:
            log.write(value[:9].decode() + "\n")
            log.flush()
            await asyncio.sleep(0.005)  # a little work per record: the kills land mid-work
            yield value
