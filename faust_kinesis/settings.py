"""What a KinesisChannel reads with, checked once when the channel is made.

The channel hands its reader one :class:`ReadSettings` value instead of itself, so the reader
depends on what it needs and not on the channel. The consumer's own settings are a core
:class:`~kinesis_core.consumer.ConsumerConfig`; four of its fields are the channel's to set,
because Faust decides them (the application name and start position default to the app's
consumer group and ``consumer_auto_offset_reset``) or the channel does (acks come from Faust;
shutdown waits ``drain_timeout`` for Faust's in-flight events, not the consumer).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kinesis_core.consumer import (
    LATEST,
    TRIM_HORIZON,
    ConsumerConfig,
    InitialPosition,
    parse_initial_position,
)
from kinesis_core.errors import ConfigurationError
from kinesis_core.stream import StreamRef

if TYPE_CHECKING:
    from kinesis_core.aws.config import ClientConfig
    from kinesis_core.checkpoint import CheckpointStore

CHANNEL_FIELDS = {
    "application_name": "pass application_name= to the channel",
    "initial_position": "pass initial_position= to the channel",
    "auto_ack": "Faust's acks ack the records",
    "close_timeout": "pass drain_timeout= to the channel",
}
"""The ConsumerConfig fields a KinesisChannel sets itself, and what to do instead."""

_DEFAULTS = ConsumerConfig()


def start_position(auto_offset_reset: str) -> InitialPosition:
    """Faust's own choice for a consumer group with no offsets: earliest or latest."""
    return LATEST if auto_offset_reset == "latest" else TRIM_HORIZON


def checked_consumer_config(config: object) -> ConsumerConfig:
    if not isinstance(config, ConsumerConfig):
        raise ConfigurationError(
            "consumer_config", f"must be a ConsumerConfig, got {type(config).__name__}"
        )
    return config


@dataclass(frozen=True, kw_only=True)
class ReadSettings:
    """How one KinesisChannel reads: the stream, where it checkpoints, how it acks.

    ``application_name`` and ``initial_position`` are None to follow the app (its id and its
    ``consumer_auto_offset_reset``), which is read when the consumer starts: an app's
    configuration may change after its channels are made.
    """

    stream: StreamRef
    client_config: ClientConfig | None = None
    checkpoint_store: CheckpointStore | None = None
    consumer_config: ConsumerConfig = field(default_factory=ConsumerConfig)
    application_name: str | None = None
    initial_position: InitialPosition | None = None
    safe_acks: bool = True
    drain_timeout: float = 30.0

    def __post_init__(self) -> None:
        config = checked_consumer_config(self.consumer_config)
        for name, instead in CHANNEL_FIELDS.items():
            if getattr(config, name) != getattr(_DEFAULTS, name):
                raise ConfigurationError(
                    "consumer_config", f"{name} is set by KinesisChannel: {instead}"
                )
        if self.application_name is not None and (
            not isinstance(self.application_name, str) or not self.application_name
        ):
            raise ConfigurationError(
                "application_name", f"must be a non-empty string, got {self.application_name!r}"
            )
        if self.initial_position is not None:
            object.__setattr__(
                self, "initial_position", parse_initial_position(self.initial_position)
            )
        if not isinstance(self.safe_acks, bool):
            raise ConfigurationError("safe_acks", f"must be True or False, got {self.safe_acks!r}")
        timeout = self.drain_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
            raise ConfigurationError("drain_timeout", f"must be >= 0 seconds, got {timeout!r}")

    def consumer_config_for(self, app_id: str, auto_offset_reset: str) -> ConsumerConfig:
        """The core consumer's configuration in an app with this id and offset reset."""
        return dataclasses.replace(
            self.consumer_config,
            application_name=self.application_name or app_id,
            initial_position=self.initial_position or start_position(auto_offset_reset),
            auto_ack=False,
            # The reader waits for Faust's in-flight events itself: the consumer cannot tell
            # which of the records it handed over Faust has thrown away.
            close_timeout=0.0,
        )
