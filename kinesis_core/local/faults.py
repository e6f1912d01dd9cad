"""Sans-I/O fault plan of the fault-injecting proxy (kinesis_core.local.fault_proxy).

Given a seed, a FaultConfig and one request (its X-Amz-Target, body and content type), the plan
decides what the proxy does with it: forward it untouched, answer with an AWS error the way the
service would, fail some records of a PutRecords call, reset or stall the connection, cut the
answer short, lose the answer after the service did the call, answer with something that is not an
answer (an empty 200 ``{}``, a 200 that is not JSON, a captive portal's HTML page, a body 5 bytes
short of its Content-Length, a 500 whose body is not UTF-8, an answer dripped a byte at a time), or
add latency first. Streaming answers (SubscribeToShard's event stream, which lasts minutes) are
forwarded chunk by chunk and can be delayed per chunk or cut after a number of events or bytes
(``StreamCutter`` finds the place). With shard limits (``FaultConfig.shard_limits``) it also
throttles the records over their shard's write limits, as AWS does
(kinesis_core.local.shard_limits), and asks the driver to list a stream's shards first
(``Action.LEARN_SHARDS``). It does no I/O, so the same seed and the same sequence of requests
always give the same faults, and unit tests need no network.
"""

from __future__ import annotations

import enum
import json
import random
import struct
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kinesis_core.errors import ConfigurationError
from kinesis_core.local.shard_limits import (
    THROTTLED,
    ShardCapacity,
    ShardLimits,
    ShardUse,
    request_stream,
)
from kinesis_core.stream import StreamRef


class FaultKind(str, enum.Enum):
    """What the proxy can inject. The value is the name used by the CLI and in the counters."""

    THROTTLE = "throttle"
    """HTTP 400 ProvisionedThroughputExceededException for the whole request."""
    LIMIT_EXCEEDED = "limit_exceeded"
    """HTTP 400 LimitExceededException (control-plane calls: ListShards, DescribeStream...)."""
    INTERNAL_ERROR = "internal_error"
    """HTTP 500 InternalFailure (Kinesis) / InternalServerError (DynamoDB)."""
    SERVICE_UNAVAILABLE = "service_unavailable"
    """HTTP 503 ServiceUnavailable."""
    EXPIRED_ITERATOR = "expired_iterator"
    """HTTP 400 ExpiredIteratorException, GetRecords only."""
    RESET = "reset"
    """Close the connection with a TCP RST, no answer; the request never reaches upstream."""
    STALL = "stall"
    """Hold the connection without an answer for stall_seconds, then close it (client timeouts)."""
    TRUNCATE = "truncate"
    """Forward, then send the headers and only part of the upstream body, and close."""
    PUT_RECORD_THROTTLE = "put_record_throttle"
    """Per record of PutRecords: ErrorCode ProvisionedThroughputExceededException."""
    PUT_RECORD_INTERNAL_ERROR = "put_record_internal_error"
    """Per record of PutRecords: ErrorCode InternalFailure."""
    LATENCY = "latency"
    """Delay before anything else happens: latency_ms plus a uniform jitter."""
    STREAM_CUT = "stream_cut"
    """Forward a streaming answer, then close the connection after stream_cut_after_events
    event-stream messages (or stream_cut_after_bytes body bytes), mid-stream."""
    STREAM_DELAY = "stream_delay"
    """Hold every chunk of a streaming answer for stream_delay_ms before forwarding it."""
    SHARD_LIMIT = "shard_limit"
    """ProvisionedThroughputExceededException for a record over its shard's write limits
    (FaultConfig.shard_limits): per record of PutRecords, for the whole of a PutRecord."""
    EMPTY_ANSWER = "empty_answer"
    """HTTP 200 with the body ``{}`` (SubscribeToShard: one event whose payload is ``{}``)."""
    NOT_JSON = "not_json"
    """HTTP 200 with a body that is not JSON (SubscribeToShard: one event with such a
    payload)."""
    HTML_PAGE = "html_page"
    """HTTP 200 with a captive portal's HTML page."""
    SHORT_BODY = "short_body"
    """Forward, then send upstream's answer with its Content-Length but the body 5 bytes
    short, and close."""
    BINARY_5XX = "binary_5xx"
    """HTTP 500 with a body that is not UTF-8."""
    DRIP = "drip"
    """Forward, then send upstream's answer one body byte every drip_seconds."""
    LOST_ANSWER = "lost_answer"
    """Forward (the service does the call: a write is written), then drop the answer: the
    connection is reset and the client sees a failure. PutRecords only, unless the rule's
    operations say otherwise."""


REQUEST_KINDS = (
    FaultKind.THROTTLE,
    FaultKind.LIMIT_EXCEEDED,
    FaultKind.INTERNAL_ERROR,
    FaultKind.SERVICE_UNAVAILABLE,
    FaultKind.EXPIRED_ITERATOR,
    FaultKind.RESET,
    FaultKind.STALL,
    FaultKind.TRUNCATE,
    FaultKind.STREAM_CUT,
    FaultKind.EMPTY_ANSWER,
    FaultKind.NOT_JSON,
    FaultKind.HTML_PAGE,
    FaultKind.SHORT_BODY,
    FaultKind.BINARY_5XX,
    FaultKind.DRIP,
    FaultKind.LOST_ANSWER,
)
"""Mutually exclusive per request: one draw picks at most one of them."""
MALFORMED_KINDS = (
    FaultKind.EMPTY_ANSWER,
    FaultKind.NOT_JSON,
    FaultKind.HTML_PAGE,
    FaultKind.SHORT_BODY,
    FaultKind.BINARY_5XX,
    FaultKind.DRIP,
)
"""The answers that are not answers (docs/reliability.md, "Malformed answers")."""
SHORT_BY = 5
"""Bytes a short_body answer lacks."""
_EVENT_KINDS = frozenset({FaultKind.EMPTY_ANSWER, FaultKind.NOT_JSON})
"""Malformed answers a streaming operation gets as one event with that payload."""
_WHOLE_ANSWER_KINDS = frozenset({FaultKind.TRUNCATE, FaultKind.SHORT_BODY, FaultKind.DRIP})
"""Kinds that rewrite a whole answer: never applied to a streaming one."""
STREAMING_OPERATIONS = frozenset({"SubscribeToShard"})
"""Operations whose answer is a long event stream: forwarded as it flows, never buffered whole,
so ``truncate`` skips them and the ``stream_*`` kinds apply to them alone."""
_STREAM_KINDS = frozenset({FaultKind.STREAM_CUT, FaultKind.STREAM_DELAY})
RECORD_KINDS = (FaultKind.PUT_RECORD_THROTTLE, FaultKind.PUT_RECORD_INTERNAL_ERROR)
"""Mutually exclusive per record of a PutRecords call: one draw per record."""
_BODY_KINDS = frozenset(
    {
        FaultKind.THROTTLE,
        FaultKind.LIMIT_EXCEEDED,
        FaultKind.INTERNAL_ERROR,
        FaultKind.SERVICE_UNAVAILABLE,
        FaultKind.EXPIRED_ITERATOR,
        *RECORD_KINDS,
    }
)
"""Kinds that write a JSON body: skipped for requests that are not JSON (CBOR)."""

_THROTTLED_OPERATIONS: Mapping[str, frozenset[str]] = {
    "Kinesis": frozenset({"PutRecord", "PutRecords", "GetRecords", "GetShardIterator"}),
    "DynamoDB": frozenset(
        {
            "GetItem",
            "PutItem",
            "UpdateItem",
            "DeleteItem",
            "Query",
            "Scan",
            "BatchGetItem",
            "BatchWriteItem",
            "ExecuteStatement",
            "BatchExecuteStatement",
        }
    ),
}
"""Data-plane calls, which the services throttle with ProvisionedThroughputExceededException;
their other calls (control plane) throttle with LimitExceededException."""

_DYNAMODB_TYPE_PREFIX = "com.amazonaws.dynamodb.v20120810#"
_INJECTED = " [injected by the kinesis-connectors fault proxy]"


@dataclass(frozen=True)
class FaultRule:
    """Inject `kind` with probability `rate` per request (per record for the put_record kinds).

    `operations` narrows the rule; each entry is an operation name ("PutRecords"), a service
    ("Kinesis", "DynamoDB") or a whole X-Amz-Target ("DynamoDB_20120810.UpdateItem"). Empty
    means the kind's natural operations: throttle hits data-plane calls, limit_exceeded the
    control plane of Kinesis and DynamoDB, expired_iterator GetRecords, put_record_* PutRecords
    (those last two never apply elsewhere), lost_answer PutRecords, every other kind every
    call.
    """

    kind: FaultKind
    rate: float
    operations: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ConfigurationError(
                self.kind.value, f"rate must be a probability in [0, 1], got {self.rate}"
            )

    def applies(self, service: str, operation: str, target: str) -> bool:
        """True if this rule may fire for a request to service.operation."""
        if self.kind is FaultKind.EXPIRED_ITERATOR and operation != "GetRecords":
            return False
        if self.kind in RECORD_KINDS and (service, operation) != ("Kinesis", "PutRecords"):
            return False
        if self.kind is FaultKind.LOST_ANSWER and not self.operations:
            return (service, operation) == ("Kinesis", "PutRecords")
        streaming = operation in STREAMING_OPERATIONS
        if self.kind in _STREAM_KINDS and not streaming:
            return False
        if self.kind in _WHOLE_ANSWER_KINDS and streaming:
            return False
        if self.operations:
            return bool(self.operations & {service, operation, target})
        data_plane = operation in _THROTTLED_OPERATIONS.get(service, frozenset())
        if self.kind is FaultKind.THROTTLE:
            return data_plane
        if self.kind is FaultKind.LIMIT_EXCEEDED:
            return service in _THROTTLED_OPERATIONS and not data_plane
        return True


@dataclass(frozen=True)
class FaultConfig:
    """The rules plus the parameters of latency and stalls. Immutable: swap it to change rates."""

    rules: tuple[FaultRule, ...] = ()
    latency_ms: float = 0.0
    latency_jitter_ms: float = 0.0
    stall_seconds: float = 30.0
    stream_cut_after_events: int = 1
    """Event-stream messages a stream_cut lets through before it closes the connection."""
    stream_cut_after_bytes: int | None = None
    """When set, cut after this many body bytes instead (usually in the middle of an event)."""
    stream_delay_ms: float = 0.0
    shard_limits: ShardLimits | None = None
    """When set, every shard takes at most these writes (PutRecord, PutRecords); the records
    over them are throttled as AWS throttles them."""
    drip_seconds: float = 1.0
    """Seconds between two bytes of a dripped answer."""

    def __post_init__(self) -> None:
        for name in (
            "latency_ms",
            "latency_jitter_ms",
            "stall_seconds",
            "stream_delay_ms",
            "drip_seconds",
        ):
            value = getattr(self, name)
            if not value >= 0.0:
                raise ConfigurationError(name, f"must be >= 0, got {value}")
        if self.stream_cut_after_events < 0:
            raise ConfigurationError(
                "stream_cut_after_events", f"must be >= 0, got {self.stream_cut_after_events}"
            )
        if self.stream_cut_after_bytes is not None and self.stream_cut_after_bytes < 0:
            raise ConfigurationError(
                "stream_cut_after_bytes", f"must be >= 0, got {self.stream_cut_after_bytes}"
            )
        for group, what in ((REQUEST_KINDS, "per request"), (RECORD_KINDS, "per record")):
            total = sum(r.rate for r in self.rules if r.kind in group and not r.operations)
            if total > 1.0:
                raise ConfigurationError(
                    "rules",
                    f"the {what} fault rates without an operation filter add up to {total:g}, "
                    "more than 1",
                )

    @classmethod
    def from_rates(
        cls,
        *,
        throttle: float = 0.0,
        limit_exceeded: float = 0.0,
        internal_error: float = 0.0,
        service_unavailable: float = 0.0,
        expired_iterator: float = 0.0,
        reset: float = 0.0,
        stall: float = 0.0,
        truncate: float = 0.0,
        put_record_throttle: float = 0.0,
        put_record_internal_error: float = 0.0,
        latency_ms: float = 0.0,
        latency_jitter_ms: float = 0.0,
        latency_rate: float = 1.0,
        stall_seconds: float = 30.0,
        stream_cut: float = 0.0,
        stream_cut_after_events: int = 1,
        stream_cut_after_bytes: int | None = None,
        stream_delay_ms: float = 0.0,
        stream_delay_rate: float = 1.0,
        operations: Iterable[str] = (),
        shard_limits: ShardLimits | None = None,
        empty_answer: float = 0.0,
        not_json: float = 0.0,
        html_page: float = 0.0,
        short_body: float = 0.0,
        binary_5xx: float = 0.0,
        drip: float = 0.0,
        drip_seconds: float = 1.0,
        lost_answer: float = 0.0,
    ) -> FaultConfig:
        """One rule per non-zero rate, all narrowed to `operations` when it is given.

        Latency applies to a fraction `latency_rate` of the requests once latency_ms or
        latency_jitter_ms is above zero; likewise stream delays with `stream_delay_rate` once
        stream_delay_ms is above zero.
        """
        ops = frozenset(operations)
        rates = {
            FaultKind.THROTTLE: throttle,
            FaultKind.LIMIT_EXCEEDED: limit_exceeded,
            FaultKind.INTERNAL_ERROR: internal_error,
            FaultKind.SERVICE_UNAVAILABLE: service_unavailable,
            FaultKind.EXPIRED_ITERATOR: expired_iterator,
            FaultKind.RESET: reset,
            FaultKind.STALL: stall,
            FaultKind.TRUNCATE: truncate,
            FaultKind.PUT_RECORD_THROTTLE: put_record_throttle,
            FaultKind.PUT_RECORD_INTERNAL_ERROR: put_record_internal_error,
            FaultKind.LATENCY: latency_rate if latency_ms > 0 or latency_jitter_ms > 0 else 0.0,
            FaultKind.STREAM_CUT: stream_cut,
            FaultKind.STREAM_DELAY: stream_delay_rate if stream_delay_ms > 0 else 0.0,
            FaultKind.EMPTY_ANSWER: empty_answer,
            FaultKind.NOT_JSON: not_json,
            FaultKind.HTML_PAGE: html_page,
            FaultKind.SHORT_BODY: short_body,
            FaultKind.BINARY_5XX: binary_5xx,
            FaultKind.DRIP: drip,
            FaultKind.LOST_ANSWER: lost_answer,
        }
        rules = tuple(FaultRule(kind, rate, ops) for kind, rate in rates.items() if rate > 0)
        return cls(
            rules,
            latency_ms,
            latency_jitter_ms,
            stall_seconds,
            stream_cut_after_events,
            stream_cut_after_bytes,
            stream_delay_ms,
            shard_limits,
            drip_seconds,
        )


class Action(str, enum.Enum):
    """What the driver does with a request."""

    FORWARD = "forward"
    """Send Decision.body upstream, then pass the answer through Plan.finish."""
    RESPOND = "respond"
    """Answer with Decision.response; nothing goes upstream."""
    RESET = "reset"
    STALL = "stall"
    TRUNCATE = "truncate"
    """Forward, then send only Decision.truncate_at(len(body)) bytes of the answer."""
    DRIP = "drip"
    """Forward, then send the answer one body byte every Decision.drip_seconds."""
    LOSE_ANSWER = "lose_answer"
    """Forward, wait for upstream's answer, then reset the connection without sending it."""
    LEARN_SHARDS = "learn_shards"
    """List the shards of Decision.stream through the upstream, give them to
    FaultPlan.learn_shards (or call FaultPlan.listing_failed), then decide again."""


@dataclass(frozen=True)
class Response:
    """An HTTP answer: status, headers (name, value) and body."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


@dataclass(frozen=True)
class RecordFailure:
    """One PutRecords entry failed by the proxy: its index in the request, code and message."""

    index: int
    code: str
    message: str


@dataclass(frozen=True)
class Decision:
    """The plan's verdict on one request. `kind` names the request-level fault, if any."""

    action: Action
    operation: str
    body: bytes
    kind: FaultKind | None = None
    delay: float = 0.0
    """Seconds to wait before acting (latency fault)."""
    response: Response | None = None
    record_failures: tuple[RecordFailure, ...] = ()
    record_count: int = 0
    """Records in the original PutRecords request, when record_failures is not empty."""
    stall_seconds: float = 0.0
    truncate_fraction: float = 0.0
    stream_cut: tuple[int | None, int | None] | None = None
    """(after_events, after_bytes) of a stream_cut: give them to StreamCutter."""
    chunk_delay: float = 0.0
    """Seconds to hold each chunk of a streaming answer (stream_delay fault)."""
    stream: StreamRef | None = None
    """The stream whose shards to list (Action.LEARN_SHARDS)."""
    short_by: int = 0
    """Bytes a truncated answer lacks (short_body); 0: truncate_fraction says where to cut."""
    drip_seconds: float = 0.0
    """Seconds between two bytes of a dripped answer (Action.DRIP)."""

    def truncate_at(self, length: int) -> int:
        """Bytes of a `length`-byte answer to send before closing: always fewer than length."""
        if self.short_by:
            return max(0, length - self.short_by)
        return int(length * self.truncate_fraction)


@dataclass(frozen=True)
class FaultStats:
    """A snapshot of the counters: requests seen and faults injected, per operation."""

    requests: Mapping[str, int]
    injected: Mapping[tuple[FaultKind, str], int]
    """(kind, operation) -> count; requests for request kinds and latency, records for the
    put_record kinds and shard_limit."""
    shard_use: ShardUse = field(default_factory=ShardUse)
    """What the shard limits let through and throttled (zeros without shard limits)."""

    def total(self, kind: FaultKind | None = None) -> int:
        """Faults injected of one kind, or of every kind."""
        return sum(n for (k, _), n in self.injected.items() if kind is None or k is kind)

    def by_kind(self) -> dict[FaultKind, int]:
        """Faults injected per kind, over all operations."""
        out: dict[FaultKind, int] = {}
        for (kind, _), n in self.injected.items():
            out[kind] = out.get(kind, 0) + n
        return out

    def summary(self) -> str:
        """One line for test output: 'faults injected: throttle=3 (GetRecords=2, ...), ...'."""
        parts = []
        for kind, n in sorted(self.by_kind().items(), key=lambda kv: kv[0].value):
            ops = ", ".join(
                f"{op}={c}" for (k, op), c in sorted(self.injected.items()) if k is kind
            )
            parts.append(f"{kind.value}={n} ({ops})")
        seen = sum(self.requests.values())
        line = f"faults injected: {', '.join(parts) or 'none'}; requests seen: {seen}"
        use = self.shard_use
        if use.records or use.throttled_records:
            line += (
                f"; shard limits: {use.records} records ({use.bytes} bytes) written, "
                f"{use.throttled_records} throttled ({use.throttled_share:.1%})"
            )
        return line


def _now(now: float | None) -> float:
    return time.monotonic() if now is None else now


def _limited_request(
    capacity: ShardCapacity | None, service: str, operation: str, body: bytes, is_json: bool
) -> dict[str, Any] | None:
    """The parsed body of a write that the shard limits check, else None."""
    if capacity is None or not is_json or service != "Kinesis":
        return None
    if operation not in ("PutRecords", "PutRecord"):
        return None
    try:
        request = json.loads(body)
    except ValueError:
        return None
    return request if isinstance(request, dict) else None


def split_target(target: str) -> tuple[str, str]:
    """'Kinesis_20131202.PutRecords' -> ('Kinesis', 'PutRecords')."""
    prefix, _, operation = target.partition(".")
    return prefix.split("_", 1)[0], operation


class FaultPlan:
    """Decides the fault of each request, deterministically from the seed.

    Draws happen in a fixed order per request, so the same seed and the same sequence of
    requests give the same faults. A proxy serving concurrent requests sees them in the order
    they arrive, which concurrency can change from run to run.
    """

    def __init__(self, config: FaultConfig | None = None, seed: int = 0) -> None:
        self.config = config if config is not None else FaultConfig()
        self.paused = False
        """While True every request is forwarded untouched, with no draw and no count."""
        self._random = random.Random(seed)  # noqa: S311  # reproducible faults, not secrets
        self._requests: dict[str, int] = {}
        self._injected: dict[tuple[FaultKind, str], int] = {}
        self._request_ids = 0
        self._capacity: ShardCapacity | None = None

    def stats(self) -> FaultStats:
        """A copy of the counters."""
        use = ShardUse() if self._capacity is None else self._capacity.use()
        return FaultStats(dict(self._requests), dict(self._injected), use)

    def reset_stats(self) -> None:
        """Zero the counters (the random sequence goes on)."""
        self._requests = {}
        self._injected = {}
        if self._capacity is not None:
            self._capacity.reset_use()

    def learn_shards(
        self, stream: StreamRef, shards: Iterable[Mapping[str, Any]], now: float | None = None
    ) -> None:
        """The shards of ``stream`` (ListShards' ``Shards``, every page), for the limits."""
        if (capacity := self.capacity) is not None:
            capacity.learn(stream.name, shards, _now(now))

    def listing_failed(self, stream: StreamRef, now: float | None = None) -> None:
        """Listing the shards of ``stream`` failed: its records go unlimited for a second."""
        if (capacity := self.capacity) is not None:
            capacity.listing_failed(stream.name, _now(now))

    def decide(
        self, target: str, body: bytes, content_type: str = "", now: float | None = None
    ) -> Decision:
        """The fault for one request. Requests without an X-Amz-Target pass untouched.

        ``now`` (seconds, monotonic; the default is ``time.monotonic()``) times the shard
        limits. Before anything is drawn or counted, a write to a stream whose shards the
        limits do not know yet gets Action.LEARN_SHARDS: list them, then decide again.
        """
        if self.paused or not target:
            return Decision(Action.FORWARD, "", body)
        service, operation = split_target(target)
        is_json = not content_type or content_type.startswith("application/x-amz-json")
        writes = _limited_request(self.capacity, service, operation, body, is_json)
        stream = None if writes is None else request_stream(writes)
        capacity = self._capacity
        if (
            stream is not None
            and capacity is not None
            and capacity.needs_shards(stream.name, _now(now))
        ):
            return Decision(Action.LEARN_SHARDS, operation, body, stream=stream)
        self._requests[operation] = self._requests.get(operation, 0) + 1
        rules = [
            r
            for r in self.config.rules
            if r.applies(service, operation, target) and (is_json or r.kind not in _BODY_KINDS)
        ]
        kind = self._draw(rules, REQUEST_KINDS)
        delay = self._draw_delay(rules)
        if delay > 0:
            self._count(FaultKind.LATENCY, operation)
        if operation in STREAMING_OPERATIONS:
            return self._stream_faults(rules, kind, service, operation, body, content_type, delay)
        if kind is not None:
            self._count(kind, operation)
            return self._request_fault(kind, service, operation, body, content_type, delay)
        if writes is not None and stream is not None and operation == "PutRecord":
            return self._put_record_limit(writes, stream, body, delay, _now(now))
        if any(r.kind in RECORD_KINDS for r in rules) or writes is not None:
            return self._record_faults(rules, operation, body, delay, writes, stream, _now(now))
        return Decision(Action.FORWARD, operation, body, delay=delay)

    @property
    def capacity(self) -> ShardCapacity | None:
        """The buckets of the configured shard limits (new ones when the limits changed)."""
        limits = self.config.shard_limits
        if limits is None:
            self._capacity = None
        elif self._capacity is None or self._capacity.limits != limits:
            self._capacity = ShardCapacity(limits)
        return self._capacity

    def _put_record_limit(
        self, request: Mapping[str, Any], stream: StreamRef, body: bytes, delay: float, now: float
    ) -> Decision:
        """PutRecord over its shard's limits fails whole, as a 400 with the exception."""
        assert self._capacity is not None
        throttled = self._capacity.admit(stream.name, [request], now)
        if not throttled:
            return Decision(Action.FORWARD, "PutRecord", body, delay=delay)
        self._count(FaultKind.SHARD_LIMIT, "PutRecord")
        response = self._error_response(
            FaultKind.SHARD_LIMIT, "Kinesis", "application/x-amz-json-1.1", throttled[0]
        )
        return Decision(Action.RESPOND, "PutRecord", body, FaultKind.SHARD_LIMIT, delay, response)

    def finish(self, decision: Decision, upstream: Response) -> Response:
        """The answer to send back for a forwarded request, given upstream's answer.

        Merges the records the plan failed into a successful PutRecords answer; anything else
        passes as it is.
        """
        if not decision.record_failures or upstream.status != 200:
            return upstream
        try:
            parsed = json.loads(upstream.body)
            results = parsed["Records"]
        except (ValueError, KeyError, TypeError):
            return upstream
        if len(results) != decision.record_count - len(decision.record_failures):
            return upstream
        body = _merge_put_records(parsed, results, decision)
        headers = tuple(
            (name, str(zlib.crc32(body)) if name.lower() == "x-amz-crc32" else value)
            for name, value in upstream.headers
            if name.lower() != "content-length"
        )
        return Response(200, headers, body)

    def _draw(self, rules: Sequence[FaultRule], kinds: tuple[FaultKind, ...]) -> FaultKind | None:
        """At most one of `kinds`, each with its rate (scaled down if they add up above 1)."""
        rates = [(r.kind, r.rate) for r in rules if r.kind in kinds and r.rate > 0]
        if not rates:
            return None
        total = sum(rate for _, rate in rates)
        u = self._random.random() * max(total, 1.0)
        for kind, rate in rates:
            if u < rate:
                return kind
            u -= rate
        return None

    def _draw_delay(self, rules: Sequence[FaultRule]) -> float:
        rate = min(1.0, sum(r.rate for r in rules if r.kind is FaultKind.LATENCY))
        if rate <= 0 or self._random.random() >= rate:
            return 0.0
        jitter = self.config.latency_jitter_ms * self._random.random()
        return (self.config.latency_ms + jitter) / 1000.0

    def _stream_faults(
        self,
        rules: Sequence[FaultRule],
        kind: FaultKind | None,
        service: str,
        operation: str,
        body: bytes,
        content_type: str,
        delay: float,
    ) -> Decision:
        """A streaming operation: request-level faults as usual, else forward with the stream's
        own faults (a cut, chunk delays)."""
        chunk_delay = 0.0
        delay_rate = min(1.0, sum(r.rate for r in rules if r.kind is FaultKind.STREAM_DELAY))
        if delay_rate > 0 and self._random.random() < delay_rate:
            chunk_delay = self.config.stream_delay_ms / 1000.0
            self._count(FaultKind.STREAM_DELAY, operation)
        if kind is not None:
            self._count(kind, operation)
        if kind is not None and kind is not FaultKind.STREAM_CUT:
            return self._request_fault(kind, service, operation, body, content_type, delay)
        cut = None
        if kind is FaultKind.STREAM_CUT:
            config = self.config
            after_events = (
                None
                if config.stream_cut_after_bytes is not None
                else (config.stream_cut_after_events)
            )
            cut = (after_events, config.stream_cut_after_bytes)
        return Decision(
            Action.FORWARD,
            operation,
            body,
            kind,
            delay,
            stream_cut=cut,
            chunk_delay=chunk_delay,
        )

    def _count(self, kind: FaultKind, operation: str) -> None:
        key = (kind, operation)
        self._injected[key] = self._injected.get(key, 0) + 1

    def _request_fault(
        self,
        kind: FaultKind,
        service: str,
        operation: str,
        body: bytes,
        content_type: str,
        delay: float,
    ) -> Decision:
        if kind is FaultKind.RESET:
            return Decision(Action.RESET, operation, body, kind, delay)
        if kind is FaultKind.STALL:
            return Decision(
                Action.STALL, operation, body, kind, delay, stall_seconds=self.config.stall_seconds
            )
        if kind is FaultKind.TRUNCATE:
            fraction = self._random.random()
            return Decision(
                Action.TRUNCATE, operation, body, kind, delay, truncate_fraction=fraction
            )
        if kind is FaultKind.SHORT_BODY:
            return Decision(Action.TRUNCATE, operation, body, kind, delay, short_by=SHORT_BY)
        if kind is FaultKind.DRIP:
            return Decision(
                Action.DRIP, operation, body, kind, delay, drip_seconds=self.config.drip_seconds
            )
        if kind is FaultKind.LOST_ANSWER:
            return Decision(Action.LOSE_ANSWER, operation, body, kind, delay)
        if kind in MALFORMED_KINDS:
            response = self._malformed_response(kind, operation)
        else:
            response = self._error_response(kind, service, content_type)
        return Decision(Action.RESPOND, operation, body, kind, delay, response)

    def _malformed_response(self, kind: FaultKind, operation: str) -> Response:
        """An answer that is not one (a streaming operation's: an event stream whose one
        event has such a payload)."""
        status, content_type, body = _MALFORMED[kind]
        if operation in STREAMING_OPERATIONS and kind in (
            FaultKind.EMPTY_ANSWER,
            FaultKind.NOT_JSON,
        ):
            content_type = "application/vnd.amazon.eventstream"
            body = event_message(
                {
                    ":message-type": "event",
                    ":event-type": "SubscribeToShardEvent",
                    ":content-type": "application/json",
                },
                body,
            )
        return Response(status, (("Content-Type", content_type), self._request_id()), body)

    def _error_response(
        self, kind: FaultKind, service: str, content_type: str, message: str = ""
    ) -> Response:
        """The error exactly as the JSON protocol carries it, so botocore raises ClientError."""
        dynamodb = service.startswith("DynamoDB")
        code, status, default_message = _ERRORS[kind]
        message = message or default_message
        if dynamodb and kind is FaultKind.INTERNAL_ERROR:
            code = "InternalServerError"
        if dynamodb:
            message = _DYNAMODB_MESSAGES.get(kind, message)
        if not content_type.startswith("application/x-amz-json"):
            content_type = (
                "application/x-amz-json-1.0" if dynamodb else "application/x-amz-json-1.1"
            )
        type_name = _DYNAMODB_TYPE_PREFIX + code if dynamodb else code
        body = json.dumps({"__type": type_name, "message": message + _INJECTED}).encode()
        headers = (
            ("Content-Type", content_type),
            ("x-amzn-ErrorType", code),
            self._request_id(),
        )
        return Response(status, headers, body)

    def _request_id(self) -> tuple[str, str]:
        """A request id header, numbered rather than random so that no draw is spent on it."""
        self._request_ids += 1
        return ("x-amzn-RequestId", f"fa017000-0000-4000-8000-{self._request_ids:012d}")

    def _record_faults(
        self,
        rules: Sequence[FaultRule],
        operation: str,
        body: bytes,
        delay: float,
        request: dict[str, Any] | None,
        stream: StreamRef | None,
        now: float,
    ) -> Decision:
        """Fail drawn records of a PutRecords call, then the records over their shard's limits
        (``request`` and ``stream``: the parsed body, when the limits apply); they are withheld
        from upstream, so a record reported failed was not written (as with the real service)."""
        try:
            if request is None:
                request = json.loads(body)
            assert request is not None
            records = request["Records"]
            count = len(records)
        except (ValueError, KeyError, TypeError):
            return Decision(Action.FORWARD, operation, body, delay=delay)
        failures: list[RecordFailure] = []
        for index in range(count):
            kind = self._draw(rules, RECORD_KINDS)
            if kind is not None:
                code, message = _RECORD_ERRORS[kind]
                failures.append(RecordFailure(index, code, message + _INJECTED))
                self._count(kind, operation)
        if self._capacity is not None and stream is not None and isinstance(records, list):
            drawn = frozenset(f.index for f in failures)
            throttled = self._capacity.admit(stream.name, records, now, drawn)
            for index, message in throttled.items():
                failures.append(RecordFailure(index, THROTTLED, message + _INJECTED))
                self._count(FaultKind.SHARD_LIMIT, operation)
            failures.sort(key=lambda f: f.index)
        if not failures:
            return Decision(Action.FORWARD, operation, body, delay=delay)
        failed = {f.index for f in failures}
        request["Records"] = [r for i, r in enumerate(records) if i not in failed]
        decision = Decision(
            Action.FORWARD,
            operation,
            json.dumps(request).encode(),
            delay=delay,
            record_failures=tuple(failures),
            record_count=count,
        )
        if len(failures) < count:
            return decision
        everything_failed = _merge_put_records({}, [], decision)
        headers = (("Content-Type", "application/x-amz-json-1.1"), self._request_id())
        return Decision(
            Action.RESPOND,
            operation,
            body,
            delay=delay,
            response=Response(200, headers, everything_failed),
            record_failures=decision.record_failures,
            record_count=count,
        )


def _merge_put_records(parsed: dict[str, Any], results: Sequence[Any], decision: Decision) -> bytes:
    """Put the injected failures back at their indices among upstream's results."""
    failures = {f.index: f for f in decision.record_failures}
    upstream = iter(results)
    merged: list[Any] = []
    for index in range(decision.record_count):
        failure = failures.get(index)
        if failure is None:
            merged.append(next(upstream))
        else:
            merged.append({"ErrorCode": failure.code, "ErrorMessage": failure.message})
    failed = sum(1 for r in merged if isinstance(r, dict) and "ErrorCode" in r)
    out = dict(parsed)
    out["FailedRecordCount"] = failed
    out["Records"] = merged
    return json.dumps(out).encode()


_ERRORS: Mapping[FaultKind, tuple[str, int, str]] = {
    FaultKind.THROTTLE: ("ProvisionedThroughputExceededException", 400, "Rate exceeded for shard."),
    FaultKind.LIMIT_EXCEEDED: ("LimitExceededException", 400, "Rate exceeded for stream."),
    FaultKind.INTERNAL_ERROR: ("InternalFailure", 500, "Internal service failure."),
    FaultKind.SERVICE_UNAVAILABLE: ("ServiceUnavailable", 503, "Service unavailable."),
    FaultKind.EXPIRED_ITERATOR: (
        "ExpiredIteratorException",
        400,
        "Iterator expired. The iterator was created more than 300000 milliseconds ago.",
    ),
    FaultKind.SHARD_LIMIT: (THROTTLED, 400, "Rate exceeded for shard."),
}
_MALFORMED: Mapping[FaultKind, tuple[int, str, bytes]] = {
    FaultKind.EMPTY_ANSWER: (200, "application/x-amz-json-1.1", b"{}"),
    FaultKind.NOT_JSON: (
        200,
        "application/x-amz-json-1.1",
        b"not JSON" + _INJECTED.encode(),
    ),
    FaultKind.HTML_PAGE: (
        200,
        "text/html",
        b"<html><head><title>Sign in to the network</title></head>"
        b"<body><form>Accept the terms to continue</form></body></html>",
    ),
    FaultKind.BINARY_5XX: (500, "application/octet-stream", b"\x89\xff\xfe\x00\x80 upstream \xc3"),
}
"""Status, content type and body of each malformed answer the plan writes itself."""


def event_message(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One event-stream message with string headers (as AWS and kinesis-mock write them)."""
    header_bytes = b"".join(
        bytes([len(name)])
        + name.encode()
        + b"\x07"
        + struct.pack(">H", len(value.encode()))
        + value.encode()
        for name, value in headers.items()
    )
    total = 12 + len(header_bytes) + len(payload) + 4
    prelude = struct.pack(">II", total, len(header_bytes))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + header_bytes + payload
    return message + struct.pack(">I", zlib.crc32(message))


_DYNAMODB_MESSAGES: Mapping[FaultKind, str] = {
    FaultKind.THROTTLE: "The level of configured provisioned throughput for the table was "
    "exceeded. Consider increasing your provisioning level with the UpdateTable API.",
    FaultKind.LIMIT_EXCEEDED: "Too many operations for a given subscriber.",
}
_RECORD_ERRORS: Mapping[FaultKind, tuple[str, str]] = {
    FaultKind.PUT_RECORD_THROTTLE: (
        "ProvisionedThroughputExceededException",
        "Rate exceeded for shard.",
    ),
    FaultKind.PUT_RECORD_INTERNAL_ERROR: ("InternalFailure", "Internal service failure."),
}


class StreamCutter:
    """Where to cut a streaming answer: after ``after_events`` complete event-stream messages,
    or after ``after_bytes`` body bytes, whichever comes first.

    Feed it the body as it arrives (HTTP framing removed); each ``feed`` returns the part of
    the chunk to forward and whether to close the connection after it. Message boundaries come
    from each message's prelude (its first four bytes are its total length).
    """

    def __init__(self, after_events: int | None = None, after_bytes: int | None = None) -> None:
        if after_events is None and after_bytes is None:
            raise ValueError("give after_events or after_bytes")
        self._after_events = after_events
        self._after_bytes = after_bytes
        self._seen = 0
        self._events = 0
        self._next_start = 0
        self._length_bytes = bytearray()
        self._current_end: int | None = None
        self.cut = False

    @property
    def events(self) -> int:
        """Complete messages seen so far."""
        return self._events

    def feed(self, chunk: bytes) -> tuple[bytes, bool]:
        if self.cut:
            return b"", True
        start, end = self._seen, self._seen + len(chunk)
        candidates = []
        if self._after_bytes is not None and self._after_bytes <= end:
            candidates.append(max(self._after_bytes, start))
        boundary = self._boundary(chunk, start, end)
        if boundary is not None:
            candidates.append(boundary)
        self._seen = end
        if not candidates:
            return chunk, False
        self.cut = True
        return chunk[: min(candidates) - start], True

    def _boundary(self, chunk: bytes, start: int, end: int) -> int | None:
        """The absolute position just after the last message to let through, if in reach."""
        if self._after_events is None:
            return None
        while True:
            if self._events >= self._after_events:
                return max(self._next_start, start)
            if self._current_end is None:
                offset = self._next_start + len(self._length_bytes) - start
                if offset >= len(chunk):
                    return None
                self._length_bytes += chunk[offset : offset + 4 - len(self._length_bytes)]
                if len(self._length_bytes) < 4:
                    return None
                self._current_end = self._next_start + int.from_bytes(self._length_bytes, "big")
                self._length_bytes.clear()
            if self._current_end > end:
                return None
            self._events += 1
            self._next_start = self._current_end
            self._current_end = None
