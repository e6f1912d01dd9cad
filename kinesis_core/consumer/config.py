"""``ConsumerConfig``: how a consumer reads, beside ``ProducerConfig`` for how a producer writes.

One frozen, picklable value that the core :class:`~kinesis_core.consumer.Consumer`, the Faust
channel and the Beam source all take (``consumer_config=``), checked once when it is made, so
a mistake is reported where it was written rather than when a worker starts.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from kinesis_core.consumer.incarnation import ON_STREAM_RECREATED, OnStreamRecreated
from kinesis_core.consumer.polling import (
    MAX_GET_RECORDS_LIMIT,
    MIN_CALL_INTERVAL,
    READ_BYTES_PER_SECOND,
    PollingOptions,
)
from kinesis_core.consumer.positions import LATEST, InitialPosition, parse_initial_position
from kinesis_core.consumer.shard_dedup import Deduplicate
from kinesis_core.consumer.subscription import (
    DEFAULT_MAX_BUFFERED_BYTES,
    MAX_SUBSCRIPTION_SECONDS,
    SubscriptionOptions,
    check_subscription_options,
)
from kinesis_core.errors import ConfigurationError
from kinesis_core.fanout.registration import (
    check_consumer_name,
    check_consumer_tags,
    parse_consumer_arn,
)
from kinesis_core.lease import LeaseConfig
from kinesis_core.telemetry.config import Telemetry


@dataclass(frozen=True, kw_only=True)
class EnhancedFanOut:
    """Read with enhanced fan-out (SubscribeToShard) instead of polling; see docs/efo.md.

    - ``consumer_name``: register a consumer of this name, or reuse the one that exists
      (None: the application name); or ``consumer_arn``: a consumer registered beforehand.
    - ``deregister_on_close``: deregister the consumer when the reader closes (a registered
      consumer costs money by the hour; leave it registered when several workers share it).
    - ``max_subscription_seconds``: renew each subscription after this long (AWS ends them
      after 300 s; lower it to exercise renewal).
    - ``http_version``: "auto" (TLS: ALPN, h2 preferred; http://: HTTP/1.1), "h2" or
      "http/1.1".
    - ``max_buffered_bytes``: unread bytes per subscription (the HTTP/2 flow-control window):
      the memory a slow application can make a shard's subscription hold.
    - ``register_timeout``: seconds to wait for the consumer to become ACTIVE.
    - ``max_failures``: failed subscribes or cut streams in a row (no event in between) before
      a shard's reader gives up with an error.
    - ``closed_check_interval``: seconds between listings of a caught-up shard, for servers
      that do not end a closed shard's subscription (kinesis-mock), and between looks at the
      stream consumer while a subscription is open (a deregistered one fails the reader).
    - ``tags``: tags (a mapping, kept as ``(key, value)`` pairs) of the consumer when this
      reader registers it (RegisterStreamConsumer ``Tags``, which needs kinesis:TagResource
      too); a consumer of that name that exists already keeps its own.
    """

    consumer_name: str | None = None
    consumer_arn: str | None = None
    deregister_on_close: bool = False
    max_subscription_seconds: float = MAX_SUBSCRIPTION_SECONDS
    http_version: Literal["auto", "h2", "http/1.1"] = "auto"
    max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES
    register_timeout: float = 120.0
    max_failures: int = 20
    closed_check_interval: float = 30.0
    tags: Mapping[str, str] | tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.consumer_name is not None and self.consumer_arn is not None:
            raise ConfigurationError(
                "consumer_name", "give consumer_name or consumer_arn, not both"
            )
        object.__setattr__(self, "tags", check_consumer_tags(self.tags))
        if self.tags and self.consumer_arn is not None:
            raise ConfigurationError(
                "tags", "tag a consumer when it is registered by name, not one given by ARN"
            )
        if self.consumer_name is not None:
            check_consumer_name(self.consumer_name)
        if self.consumer_arn is not None:
            parse_consumer_arn(self.consumer_arn)
        check_subscription_options(
            self.max_subscription_seconds, self.max_buffered_bytes, self.http_version
        )
        _seconds("register_timeout", self.register_timeout, minimum=0.0, inclusive=False)
        self.subscription  # noqa: B018 (validates max_failures and closed_check_interval)

    @property
    def subscription(self) -> SubscriptionOptions:
        """The options of each shard's fan-out reader."""
        return SubscriptionOptions(
            max_failures=self.max_failures, closed_check_interval=self.closed_check_interval
        )


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
    - ``max_idle_interval``: None (the default), or the seconds up to which the wait doubles
      while a shard stays empty (back to ``idle_interval`` at its first record): fewer calls
      on idle shards, for up to this much latency when one wakes up.
    - ``max_read_bytes_per_second``: bytes of data a polling reader reads from one shard per
      second at most: after a response of n bytes the next GetRecords waits until n / this
      after the call. Kinesis serves 2 MiB/s per shard (the default) and throttles the calls
      of the next 5 s after a 10 MiB response; raise it only for an emulator.
    - ``start_timeout``: seconds ``start`` retries a listing that may succeed later
      (throttling, a 5xx, a stream still being created) before it raises.
    - ``leases``: a :class:`~kinesis_core.lease.LeaseConfig`, or True for the KCL's
      defaults, to share the stream with other workers of the same application.
    - ``enhanced_fan_out``: an :class:`EnhancedFanOut`, or True for one whose consumer is
      named after the application: read by SubscribeToShard instead of polling. Checkpoints
      are the same either way, so an application can switch on one store.
    - ``on_stream_recreated``: what a start does with stored checkpoints of an earlier stream
      of the same name (deleted and created again, told apart by its creation time):
      ``"fail"`` raises :class:`~kinesis_core.consumer.incarnation.StreamRecreatedError`,
      ``"reset"`` starts those shards over at ``initial_position``, with a WARNING. See
      docs/checkpoints.md.
    - ``telemetry``: OpenTelemetry metrics (a :class:`~kinesis_core.telemetry.Telemetry`;
      docs/operations.md); None (the default): off, and nothing of OpenTelemetry is imported.
    - ``lean_get_records``: send polling readers' GetRecords and GetShardIterator on the
      client's signer and HTTP session without botocore's per-call machinery (less CPU per
      call; see docs/performance.md). False sends every call through botocore, for a
      client whose events the application hooks itself.
    - ``deduplicate``: a :class:`~kinesis_core.consumer.shard_dedup.Deduplicate`, or True for
      its defaults: drop records whose id (given by their producer) was delivered before,
      with a window per shard kept in its checkpoint (docs/effectively-once.md).
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
    max_idle_interval: float | None = None
    max_read_bytes_per_second: float = READ_BYTES_PER_SECOND
    start_timeout: float = 30.0
    leases: LeaseConfig | bool = False
    enhanced_fan_out: EnhancedFanOut | bool = False
    on_stream_recreated: OnStreamRecreated = "fail"
    telemetry: Telemetry | None = None
    lean_get_records: bool = True
    deduplicate: Deduplicate | bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.application_name, str) or not self.application_name:
            raise ConfigurationError(
                "application_name", f"must be a non-empty string, got {self.application_name!r}"
            )
        object.__setattr__(self, "initial_position", parse_initial_position(self.initial_position))
        # An infinite interval would mean "never" (no checkpoint, no new shard, no read after
        # the first empty one); an infinite timeout means "wait as long as it takes".
        for name in ("checkpoint_interval", "shard_refresh_interval"):
            _seconds(name, getattr(self, name), minimum=0.0, inclusive=False, finite=True)
        _seconds("close_timeout", self.close_timeout, minimum=0.0, inclusive=True)
        _seconds("start_timeout", self.start_timeout, minimum=0.0, inclusive=True)
        _seconds(
            "idle_interval",
            self.idle_interval,
            minimum=MIN_CALL_INTERVAL,
            inclusive=True,
            finite=True,
        )
        if self.max_idle_interval is not None:
            _seconds(
                "max_idle_interval",
                self.max_idle_interval,
                minimum=self.idle_interval,
                inclusive=True,
                finite=True,
            )
        if (
            not isinstance(self.max_read_bytes_per_second, (int, float))
            or isinstance(self.max_read_bytes_per_second, bool)
            or not self.max_read_bytes_per_second > 0
        ):
            raise ConfigurationError(
                "max_read_bytes_per_second",
                f"must be a number of bytes > 0, got {self.max_read_bytes_per_second!r}",
            )
        for name in ("auto_ack", "lean_get_records"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ConfigurationError(name, f"must be True or False, got {value!r}")
        _integer("max_queued_batches", self.max_queued_batches, 1, None)
        _integer("max_records_per_call", self.max_records_per_call, 1, MAX_GET_RECORDS_LIMIT)
        if not isinstance(self.leases, (bool, LeaseConfig)):
            raise ConfigurationError(
                "leases", f"must be a LeaseConfig, True or False, got {self.leases!r:.80}"
            )
        if not isinstance(self.deduplicate, (bool, Deduplicate)):
            raise ConfigurationError(
                "deduplicate",
                f"must be a Deduplicate, True or False, got {self.deduplicate!r:.80}",
            )
        if not isinstance(self.enhanced_fan_out, (bool, EnhancedFanOut)):
            raise ConfigurationError(
                "enhanced_fan_out",
                f"must be an EnhancedFanOut, True or False, got {self.enhanced_fan_out!r:.80}",
            )
        if self.enhanced_fan_out is True:
            check_consumer_name(self.application_name, "application_name")
        if self.telemetry is not None and not isinstance(self.telemetry, Telemetry):
            raise ConfigurationError(
                "telemetry", f"must be a Telemetry or None, got {type(self.telemetry).__name__}"
            )
        if self.on_stream_recreated not in ON_STREAM_RECREATED:
            raise ConfigurationError(
                "on_stream_recreated",
                f"must be 'fail' or 'reset', got {self.on_stream_recreated!r:.80}",
            )

    @property
    def lease_config(self) -> LeaseConfig | None:
        """The lease settings, or None when this consumer reads alone."""
        if self.leases is True:
            return LeaseConfig()
        return self.leases or None

    @property
    def dedup(self) -> Deduplicate | None:
        """The dedup bounds, or None when this consumer delivers duplicates as they come."""
        if self.deduplicate is True:
            return Deduplicate()
        return self.deduplicate or None

    @property
    def fan_out(self) -> EnhancedFanOut | None:
        """The fan-out settings with the consumer named, or None when reading by polling."""
        efo = self.enhanced_fan_out
        if efo is False:
            return None
        if efo is True:
            efo = EnhancedFanOut()
        if efo.consumer_name is None and efo.consumer_arn is None:
            efo = dataclasses.replace(efo, consumer_name=self.application_name)
        return efo

    @property
    def polling(self) -> PollingOptions:
        """The options of each shard's polling reader."""
        return PollingOptions(
            limit=self.max_records_per_call,
            idle_interval=self.idle_interval,
            max_idle_interval=self.max_idle_interval,
            max_bytes_per_second=self.max_read_bytes_per_second,
        )


def _seconds(
    name: str, value: object, *, minimum: float, inclusive: bool, finite: bool = False
) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok:
        assert isinstance(value, (int, float))
        ok = (value >= minimum if inclusive else value > minimum) and (
            not finite or math.isfinite(value)
        )
    if not ok:
        bound = ">=" if inclusive else ">"
        also = " (and finite)" if finite else ""
        raise ConfigurationError(name, f"must be {bound} {minimum:g} seconds{also}, got {value!r}")


def _integer(name: str, value: object, minimum: int, maximum: int | None) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < minimum
        or (maximum is not None and value > maximum)
    ):
        span = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ConfigurationError(name, f"must be an int {span}, got {value!r}")
