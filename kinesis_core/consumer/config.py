"""``ConsumerConfig``: how a consumer reads, beside ``ProducerConfig`` for how a producer writes.

One frozen, picklable value that the core :class:`~kinesis_core.consumer.Consumer`, the Faust
channel and the Beam source all take (``consumer_config=``), checked once when it is made, so
a mistake is reported where it was written rather than when a worker starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from kinesis_core.consumer.polling import MAX_GET_RECORDS_LIMIT, MIN_CALL_INTERVAL, PollingOptions
from kinesis_core.consumer.positions import LATEST, InitialPosition, parse_initial_position
from kinesis_core.errors import ConfigurationError
from kinesis_core.lease import LeaseConfig


@dataclass(frozen=True, kw_only=True)
class ConsumerConfig:
    """How a consumer reads a stream. Every field has a default; see docs/consumer.md.

    - ``application_name``: checkpoints (and leases) are kept per application and stream.
    - ``initial_position``: where a shard without a checkpoint starts: ``TRIM_HORIZON``,
      ``LATEST`` (also as strings, any case), ``AtTimestamp(t)`` or a datetime.
    - ``checkpoint_interval``: seconds between checkpoint writes (acked positions only).
    - ``shard_refresh_interval``: seconds between ListShards calls that find new shards.
    - ``close_timeout``: seconds ``close`` waits for the acks of delivered records.
    - ``auto_ack``: ack a record when the next one is asked for (after the loop body ran).
    - ``max_queued_batches``: batches read ahead of the application (the backpressure).
    - ``max_records_per_call``: GetRecords ``Limit`` (1 to 10,000).
    - ``idle_interval``: seconds a caught-up shard waits after an empty read (>= 0.2).
    - ``leases``: a :class:`~kinesis_core.lease.LeaseConfig`, or True for the KCL's
      defaults, to share the stream with other workers of the same application.
    """

    application_name: str = "default"
    initial_position: InitialPosition = LATEST
    checkpoint_interval: float = 5.0
    shard_refresh_interval: float = 30.0
    close_timeout: float = 30.0
    auto_ack: bool = False
    max_queued_batches: int = 8
    max_records_per_call: int = MAX_GET_RECORDS_LIMIT
    idle_interval: float = 1.0
    leases: LeaseConfig | bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.application_name, str) or not self.application_name:
            raise ConfigurationError(
                "application_name", f"must be a non-empty string, got {self.application_name!r}"
            )
        object.__setattr__(
            self, "initial_position", parse_initial_position(self.initial_position)
        )
        for name in ("checkpoint_interval", "shard_refresh_interval"):
            _seconds(name, getattr(self, name), minimum=0.0, inclusive=False)
        _seconds("close_timeout", self.close_timeout, minimum=0.0, inclusive=True)
        _seconds("idle_interval", self.idle_interval, minimum=MIN_CALL_INTERVAL, inclusive=True)
        if not isinstance(self.auto_ack, bool):
            raise ConfigurationError("auto_ack", f"must be True or False, got {self.auto_ack!r}")
        _integer("max_queued_batches", self.max_queued_batches, 1, None)
        _integer("max_records_per_call", self.max_records_per_call, 1, MAX_GET_RECORDS_LIMIT)
        if not isinstance(self.leases, (bool, LeaseConfig)):
            raise ConfigurationError(
                "leases", f"must be a LeaseConfig, True or False, got {self.leases!r:.80}"
            )

    @property
    def lease_config(self) -> LeaseConfig | None:
        """The lease settings, or None when this consumer reads alone."""
        if self.leases is True:
            return LeaseConfig()
        return self.leases or None

    @property
    def polling(self) -> PollingOptions:
        """The options of each shard's polling reader."""
        return PollingOptions(limit=self.max_records_per_call, idle_interval=self.idle_interval)


def _seconds(name: str, value: object, *, minimum: float, inclusive: bool) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok:
        assert isinstance(value, (int, float))
        ok = value >= minimum if inclusive else value > minimum
    if not ok:
        bound = ">=" if inclusive else ">"
        raise ConfigurationError(name, f"must be {bound} {minimum:g} seconds, got {value!r}")


def _integer(name: str, value: object, minimum: int, maximum: int | None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (
        maximum is not None and value > maximum
    ):
        span = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ConfigurationError(name, f"must be an int {span}, got {value!r}")
