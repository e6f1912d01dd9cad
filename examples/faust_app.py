"""A Faust app without Kafka: read orders from Kinesis, enrich them, write them to another stream.

Three agents and a timer, on two streams:

- ``write_orders`` (a timer) writes a few orders per second into ``orders`` with
  ``KinesisChannel.send`` (the same object agents read);
- ``enrich`` reads ``orders`` with four concurrent actors and yields enriched orders, which
  ``KinesisSink`` writes into ``orders-enriched``; each order is acked, and so checkpointed,
  only after its enriched record is in Kinesis;
- ``report`` reads ``orders-enriched`` and logs what arrives.

Run it against the local emulator, from the repository root::

    python -m kinesis_core.local up --stream orders:2 --stream orders-enriched:1
    # in another shell, export the variables it printed, then:
    faust -A examples.faust_app worker --without-web -l info

``--without-web`` keeps Faust's web server (which binds 0.0.0.0) off. Checkpoints go to
``kinesis-checkpoints.sqlite3`` in the app's data folder, ``orders-enricher-data`` under the
system's temporary folder (not the working directory, which Faust would use by default;
``faust --datadir DIR`` chooses another): stop the worker (Ctrl-C) and start it again, and it
goes on where it stopped. ``ORDERS_TO_WRITE`` (default 200) caps the timer; ``ORDERS_STREAM``
and ``ENRICHED_STREAM`` rename the streams.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import faust

from faust_kinesis import KinesisChannel, KinesisSink, kinesis_sensor
from kinesis_core import ClientConfig
from kinesis_core.consumer import ConsumerConfig

logger = logging.getLogger(__name__)

ORDERS = os.environ.get("ORDERS_STREAM", "orders")
ENRICHED = os.environ.get("ENRICHED_STREAM", "orders-enriched")
TO_WRITE = int(os.environ.get("ORDERS_TO_WRITE", "200"))
TIERS = {"c-0": "gold", "c-1": "silver"}


class Order(faust.Record, serializer="json"):
    order_id: int
    customer: str
    amount: float


class EnrichedOrder(faust.Record, serializer="json"):
    order_id: int
    customer: str
    amount: float
    tier: str
    total_with_tax: float


# faust --datadir sets FAUST_DATADIR before this module is imported.
DATADIR = os.environ.get("FAUST_DATADIR") or str(
    Path(tempfile.gettempdir(), "orders-enricher-data")
)

app = faust.App("orders-enricher", web_enabled=False, datadir=DATADIR)
app.boot_strategy.enable_kafka = False  # Kinesis only: no Kafka broker, no Kafka consumer

client_config = ClientConfig.from_env()  # AWS_ENDPOINT_URL_KINESIS etc.
consumer_config = ConsumerConfig(checkpoint_interval=1.0, idle_interval=0.5)
orders = KinesisChannel(
    app,
    ORDERS,
    value_type=Order,
    client_config=client_config,
    consumer_config=consumer_config,
)
enriched_out = KinesisSink(app, ENRICHED, partition_key="customer", client_config=client_config)
enriched_in = KinesisChannel(
    app,
    ENRICHED,
    value_type=EnrichedOrder,
    client_config=client_config,
    consumer_config=consumer_config,
)
written = 0


@app.timer(interval=0.5)
async def write_orders() -> None:
    global written
    for _ in range(min(5, TO_WRITE - written)):
        order = Order(order_id=written, customer=f"c-{written % 4}", amount=10.0 + written)
        await orders.send(key=order.customer, value=order)
        written += 1


@app.agent(orders, sink=[enriched_out], concurrency=4)
async def enrich(stream: Any) -> AsyncIterator[EnrichedOrder]:
    async for order in stream:
        yield EnrichedOrder(
            order_id=order.order_id,
            customer=order.customer,
            amount=order.amount,
            tier=TIERS.get(order.customer, "standard"),
            total_with_tax=round(order.amount * 1.2, 2),
        )


@app.agent(enriched_in)
async def report(stream: Any) -> None:
    async for event in stream.events():
        order, message = event.value, event.message
        logger.info(
            "order %s of %s (%s): %.2f  [%s %s]",
            order.order_id,
            order.customer,
            order.tier,
            order.total_with_tax,
            message.shard_id,
            message.position,
        )


@app.timer(interval=10.0)
async def show_lag() -> None:
    for stream, stats in kinesis_sensor(app).asdict()["reading"].items():
        lag = {shard: s["millis_behind_latest"] for shard, s in stats["shards"].items()}
        logger.info("%s: %d events acked, lag (ms) %s", stream, stats["events_acked"], lag)
