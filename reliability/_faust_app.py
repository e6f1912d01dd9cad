"""The Faust app of the reliability suites' workers, from ``RELIABILITY_*`` environment
variables: its endpoint, input stream and datadir (``_faust_worker``, ``_faust_pipeline``)."""

from __future__ import annotations

import os

import faust

from faust_kinesis import KinesisChannel
from kinesis_core.consumer import ConsumerConfig
from kinesis_core.local import local_client_config
from reliability._children import APPLICATION


def kinesis_app() -> tuple[faust.App, KinesisChannel]:
    """A Kafka-free app whose values are raw bytes, and a KinesisChannel on the input stream
    that checkpoints every 0.5 s into the default SQLite file of the datadir."""
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
    return app, channel
