"""Faust connectors for Kinesis Data Streams: a channel agents read and write, and a sink.

See docs/faust.md.
"""

from faust_kinesis.channel import KinesisChannel
from faust_kinesis.message import KinesisMessage
from faust_kinesis.sensor import KinesisSensor, kinesis_sensor
from faust_kinesis.sink import KinesisSink

__all__ = [
    "KinesisChannel",
    "KinesisMessage",
    "KinesisSensor",
    "KinesisSink",
    "kinesis_sensor",
]
