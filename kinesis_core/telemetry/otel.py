"""The OpenTelemetry side of :class:`~kinesis_core.telemetry.Telemetry`: instruments made once
per ``MeterProvider``, fed by the producers and consumers that report to it.

Counts and gauges are observable instruments: the producer's :class:`ProducerMetrics` and the
consumer's plain integer counters are read when the provider collects, so the hot paths pay no
OpenTelemetry call at all (the SDK's ``Counter.add`` is costly per call). Only
the histograms are recorded as things happen, once per PutRecords call, per delivered batch
or per reader call. A producer or consumer that closes hands its final counts to the
registry, so counters never go down. Imported only when telemetry is on.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry.metrics import CallbackOptions, Observation, get_meter_provider

from kinesis_core.telemetry.figures import Attrs, producer_figures, stream_attributes
from kinesis_core.telemetry.metered import MeteredStore, MeteredTransport
from kinesis_core.telemetry.names import (
    BUFFERING,
    CHECKPOINTS,
    CONSUMED,
    CONSUMER_DATA,
    CONSUMER_GROUP,
    DESTINATION,
    DUPLICATES,
    ERROR_TYPE,
    LAG,
    LEASE_CHANGE,
    LEASE_CHANGES,
    LEASES_HELD,
    MESSAGING_SYSTEM,
    METRICS,
    OPERATION,
    OPERATION_DURATION,
    PARTITION,
    PER_KINESIS_RECORD,
    PER_REQUEST,
    PROCESS_DURATION,
    RECORD_AGE,
    STORE_DURATION,
    STORE_KIND,
    STORE_OPERATION,
    SUBSCRIPTION_OUTCOME,
    SUBSCRIPTIONS,
    SYSTEM,
    Instrument,
    LeaseChange,
    SubscriptionOutcome,
)
from kinesis_core.telemetry.recorder import ConsumerRecorder

if TYPE_CHECKING:
    from kinesis_core.producer.items import PutBatch
    from kinesis_core.producer.metrics import MetricsSnapshot, ProducerMetrics
    from kinesis_core.producer.retrier import SendOutcome
    from kinesis_core.records import KinesisRecord
    from kinesis_core.telemetry.config import Telemetry

SCOPE = "kinesis_connectors"
"""The instrumentation scope (the meter's name)."""
SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)
"""The bucket bounds OpenTelemetry's messaging conventions give for durations in seconds."""
AGE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 86400)
"""Bounds for how old a delivered record is: from milliseconds to a day behind."""
COUNT_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


class Source(Protocol):
    def observe(self, name: str) -> Iterable[tuple[Attrs, float]]:
        """The current value of the observable metric ``name`` per attribute set (counters
        cumulative since the source started)."""


def _items(mapping: Mapping[Any, int]) -> list[tuple[Any, int]]:
    """A copy of a dict another thread may be adding keys to (the producer's event loop)."""
    while True:
        try:
            return list(mapping.items())
        except RuntimeError:  # changed size during iteration: look again
            continue


class Registry:
    """The instruments of one meter provider and the sources its observable ones read."""

    def __init__(self, provider: Any) -> None:
        meter = provider.get_meter(SCOPE)
        self._lock = threading.Lock()
        self._sources: list[Source] = []
        self._retired: dict[str, dict[Attrs, float]] = {}
        self.histograms: dict[str, Any] = {}
        for metric in METRICS:
            name, unit, text = metric.name, metric.unit, metric.description
            if metric.instrument is Instrument.HISTOGRAM:
                buckets: Sequence[float] = SECONDS_BUCKETS if unit == "s" else COUNT_BUCKETS
                if name == RECORD_AGE:
                    buckets = AGE_BUCKETS
                self.histograms[name] = meter.create_histogram(
                    name, unit, text, explicit_bucket_boundaries_advisory=buckets
                )
            elif metric.instrument is Instrument.COUNTER:
                meter.create_observable_counter(name, [self._callback(name, True)], unit, text)
            else:
                meter.create_observable_gauge(name, [self._callback(name, False)], unit, text)

    def _callback(
        self, name: str, cumulative: bool
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            with self._lock:
                sources = list(self._sources)
                totals = dict(self._retired.get(name, {})) if cumulative else {}
            for source in sources:
                for attrs, value in source.observe(name):
                    if cumulative:
                        totals[attrs] = totals.get(attrs, 0) + value
                    else:  # two consumers of one stream: the larger lag
                        totals[attrs] = max(totals.get(attrs, value), value)
            return [Observation(value, dict(attrs)) for attrs, value in totals.items()]

        return observe

    def add(self, source: Source) -> None:
        with self._lock:
            self._sources.append(source)

    def retire(self, source: Source) -> None:
        """``source`` stops: its counts so far stay in the counters' totals."""
        counters = [m.name for m in METRICS if m.instrument is Instrument.COUNTER]
        final = {name: list(source.observe(name)) for name in counters}
        with self._lock:
            if source not in self._sources:
                return
            self._sources.remove(source)
            for name, values in final.items():
                retired = self._retired.setdefault(name, {})
                for attrs, value in values:
                    retired[attrs] = retired.get(attrs, 0) + value


_registries: weakref.WeakKeyDictionary[Any, Registry] = weakref.WeakKeyDictionary()
_registries_lock = threading.Lock()


def registry(telemetry: Telemetry) -> Registry:
    """The registry of ``telemetry``'s meter provider (the global one if it names none)."""
    provider = telemetry.meter_provider
    if provider is None:
        provider = get_meter_provider()
    with _registries_lock:
        found = _registries.get(provider)
        if found is None:
            found = _registries[provider] = Registry(provider)
        return found


def _attrs(*pairs: tuple[str, str]) -> Attrs:
    return tuple(pairs)


# -- the producer --------------------------------------------------------------------------------


class ProducerTelemetry:
    """Reports one producer: the counters of its snapshots when the provider collects, and
    the histograms of each PutRecords call as it returns."""

    def __init__(
        self,
        telemetry: Telemetry,
        metrics: ProducerMetrics,
        snapshot: Callable[[], MetricsSnapshot],
    ) -> None:
        self._registry = registry(telemetry)
        self._metrics = metrics
        self._snapshot = snapshot
        self._shards = telemetry.shard_attribute
        self._base_dict = dict(stream_attributes(metrics.stream_name))
        self._op_dict = {**self._base_dict, OPERATION: "PutRecords"}
        self._failed_dicts: dict[str, dict[str, str]] = {}
        histograms = self._registry.histograms
        self._duration = histograms[OPERATION_DURATION]
        self._buffering = histograms[BUFFERING]
        self._per_kinesis_record = histograms[PER_KINESIS_RECORD]
        self._per_request = histograms[PER_REQUEST]
        metrics.on_request = self.on_request
        self._registry.add(self)

    def close(self) -> None:
        self._metrics.on_request = None
        self._registry.retire(self)

    def observe(self, name: str) -> Iterable[tuple[Attrs, float]]:
        while True:
            try:  # the producer's loop may add a key to a dict the snapshot copies
                snapshot = self._snapshot()
                break
            except RuntimeError:
                continue
        figures = producer_figures(snapshot, shard_attribute=self._shards)
        return [(attrs, value) for metric, attrs, value in figures if metric == name]

    def on_request(self, batch: PutBatch, outcome: SendOutcome) -> None:
        """One PutRecords call returned (from the retrier, on the producer's loop)."""
        error = outcome.error
        if error is None:
            attrs = self._op_dict
        else:
            attrs = self._failed_dicts.get(error[0]) or self._failed_dicts.setdefault(
                error[0], {**self._op_dict, ERROR_TYPE: error[0]}
            )
        self._duration.record(outcome.ended_at - outcome.started_at, attrs)
        records = batch.records
        users = batch.user_record_count
        started = outcome.started_at
        waited = sum(len(kr.records) * (started - kr.buffered_since) for kr in records)
        base = self._base_dict
        self._buffering.record(max(waited / users, 0.0), base)
        self._per_kinesis_record.record(users / len(records), base)
        self._per_request.record(len(records), base)


# -- the consumer --------------------------------------------------------------------------------


class ConsumerTelemetry(ConsumerRecorder):
    """Reports one consumer (the core Consumer or a Faust channel's reader) to OpenTelemetry.

    ``lag_source`` gives the MillisBehindLatest per shard read now (from the readers); without
    it, the last values passed to :meth:`lag` are reported. ``leases_held`` counts the leases
    the worker holds (None without leases).
    """

    enabled = True

    def __init__(
        self,
        telemetry: Telemetry,
        stream_name: str,
        application: str,
        operation: str,
        *,
        lag_source: Callable[[], Mapping[str, int | None]] | None = None,
        leases_held: Callable[[], int] | None = None,
    ) -> None:
        self._registry = registry(telemetry)
        self._shards = telemetry.shard_attribute
        self._base = _attrs(
            (MESSAGING_SYSTEM, SYSTEM), (DESTINATION, stream_name), (CONSUMER_GROUP, application)
        )
        self._system = _attrs((MESSAGING_SYSTEM, SYSTEM), (DESTINATION, stream_name))
        self._operation = operation
        self._lag_source = lag_source
        self._leases_held = leases_held
        self._lags: dict[str, int] = {}
        self._records: dict[str, int] = {}
        self._bytes: dict[str, int] = {}
        self._checkpoints: dict[str, int] = {}
        self._duplicates: dict[str, int] = {}
        self._lease_changes: dict[LeaseChange, int] = {}
        self._subscriptions: dict[tuple[SubscriptionOutcome, str | None, str], int] = {}
        self._dicts: dict[tuple[str, ...], dict[str, str]] = {}
        histograms = self._registry.histograms
        self._age = histograms[RECORD_AGE]
        self._process = histograms[PROCESS_DURATION]
        self._duration = histograms[OPERATION_DURATION]
        self._store = histograms[STORE_DURATION]
        self._registry.add(self)

    def close(self) -> None:
        self._registry.retire(self)

    # -- wrappers ------------------------------------------------------------------------------

    def transport(self, inner: Any, shard_id: str) -> Any:
        return MeteredTransport(inner, self, shard_id)

    def store(self, inner: Any) -> Any:
        return MeteredStore(inner, self)

    # -- attribute sets --------------------------------------------------------------------------

    def _dict(self, *key: str) -> dict[str, str]:
        """The attributes of an observation, made once per combination (the SDK copies them
        on every call)."""
        attrs = self._dicts.get(key)
        if attrs is None:
            attrs = self._dicts[key] = self._make(*key)
        return attrs

    def _make(self, kind: str, *values: str) -> dict[str, str]:
        base = dict(self._base)
        if kind == "shard":
            if self._shards:
                base[PARTITION] = values[0]
        elif kind == "operation":
            base = dict(self._system)
            base[OPERATION] = values[0]
            if values[1]:
                base[ERROR_TYPE] = values[1]
            if self._shards:
                base[PARTITION] = values[2]
        elif kind == "process":
            base[OPERATION] = "process"
        elif kind == "store":
            base = dict(self._system)
            base[STORE_KIND], base[STORE_OPERATION] = values[0], values[1]
            if values[2]:
                base[ERROR_TYPE] = values[2]
        return base

    def _shard(self, shard_id: str) -> Attrs:
        return (*self._base, (PARTITION, shard_id)) if self._shards else self._base

    # -- the recorder ----------------------------------------------------------------------------

    def delivered(self, shard_id: str, records: Sequence[KinesisRecord], now: float) -> None:
        n = len(records)
        if not n:
            return
        self._records[shard_id] = self._records.get(shard_id, 0) + n
        self._bytes[shard_id] = self._bytes.get(shard_id, 0) + sum(len(r.data) for r in records)
        arrival = records[-1].approximate_arrival_timestamp
        if arrival is not None:
            self._age.record(max(now - arrival.timestamp(), 0.0), self._dict("shard", shard_id))

    def processed(self, seconds: float) -> None:
        self._process.record(seconds, self._dict("process"))

    def lag(self, shard_id: str, millis_behind_latest: int) -> None:
        self._lags[shard_id] = millis_behind_latest

    def operation(self, shard_id: str, operation: str, seconds: float, error: str | None) -> None:
        key = shard_id if self._shards else ""
        self._duration.record(seconds, self._dict("operation", operation, error or "", key))

    def subscription(
        self, shard_id: str, outcome: SubscriptionOutcome, error: str | None = None
    ) -> None:
        key = (outcome, error, shard_id)
        self._subscriptions[key] = self._subscriptions.get(key, 0) + 1

    def checkpoint(self, shard_id: str) -> None:
        self._checkpoints[shard_id] = self._checkpoints.get(shard_id, 0) + 1

    def duplicates(self, shard_id: str, records: int) -> None:
        self._duplicates[shard_id] = self._duplicates.get(shard_id, 0) + records

    def lease(self, change: LeaseChange) -> None:
        self._lease_changes[change] = self._lease_changes.get(change, 0) + 1

    def store_call(self, kind: str, operation: str, seconds: float, error: str | None) -> None:
        self._store.record(seconds, self._dict("store", kind, operation, error or ""))

    # -- what the provider reads -------------------------------------------------------------

    def observe(self, name: str) -> Iterable[tuple[Attrs, float]]:
        if name == CONSUMED:
            return self._per_shard(self._records, ((OPERATION, self._operation),))
        if name == CONSUMER_DATA:
            return self._per_shard(self._bytes)
        if name == CHECKPOINTS:
            return self._per_shard(self._checkpoints)
        if name == DUPLICATES:
            return self._per_shard(self._duplicates)
        if name == LAG:
            return self._lag()
        if name == LEASE_CHANGES:
            return [
                ((*self._system, (LEASE_CHANGE, change.value)), n)
                for change, n in _items(self._lease_changes)
            ]
        if name == LEASES_HELD:
            return [] if self._leases_held is None else [(self._base, self._leases_held())]
        if name == SUBSCRIPTIONS:
            out = []
            for (outcome, error, shard_id), n in _items(self._subscriptions):
                attrs = (*self._system, (SUBSCRIPTION_OUTCOME, outcome.value))
                if error is not None:
                    attrs = (*attrs, (ERROR_TYPE, error))
                if self._shards:
                    attrs = (*attrs, (PARTITION, shard_id))
                out.append((attrs, n))
            return self._summed(out)
        return ()

    def _per_shard(self, counts: Mapping[str, int], extra: Attrs = ()) -> list[tuple[Attrs, float]]:
        return self._summed([((*self._shard(s), *extra), n) for s, n in _items(counts)])

    @staticmethod
    def _summed(values: Sequence[tuple[Attrs, float]]) -> list[tuple[Attrs, float]]:
        """Values of equal attribute sets added up (the shards, when they are no attribute)."""
        totals: dict[Attrs, float] = {}
        for attrs, value in values:
            totals[attrs] = totals.get(attrs, 0) + value
        return list(totals.items())

    def _lag(self) -> list[tuple[Attrs, float]]:
        lags = dict(_items(self._lags))
        while self._lag_source is not None:
            try:  # the consumer's loop may start a shard while this runs
                current = self._lag_source()
            except RuntimeError:
                continue
            lags.update((s, millis) for s, millis in current.items() if millis is not None)
            break
        if not lags:
            return []
        if self._shards:
            return [(self._shard(s), millis) for s, millis in lags.items()]
        return [(self._base, max(lags.values()))]
