"""Enhanced fan-out (SubscribeToShard): the transport below the consumer's read seam.

Design note (wire facts established for this package; docs/efo.md has the user's view).

- SubscribeToShard is a JSON 1.1 call (``X-Amz-Target: Kinesis_20131202.SubscribeToShard``,
  ``Content-Type: application/x-amz-json-1.1``, body ``{"ConsumerARN", "ShardId",
  "StartingPosition": {"Type", "SequenceNumber" | "Timestamp"}}``), signed with SigV4 for the
  service ``kinesis``. On AWS, botocore's endpoint rules send it, as any call naming a
  ConsumerARN, to ``https://<account>.data-kinesis.<region>.amazonaws.com``; AWS serves it only
  over HTTP/2 (ALPN ``h2``). ``signing`` lets botocore build, resolve and sign the request and
  takes it before botocore's HTTP/1.1 sender would send it.
- The answer is ``200`` with ``Content-Type: application/vnd.amazon.eventstream``: AWS sends an
  ``initial-response`` event, then ``SubscribeToShardEvent`` events (Records,
  ContinuationSequenceNumber, MillisBehindLatest, ChildShards at the shard's end). Errors come
  as a non-200 JSON answer (``__type``/``message``) or as ``:message-type: exception`` events.
  A subscription lasts at most 5 minutes. ``eventstream`` decodes both kinds of stream with
  botocore's ``EventStreamBuffer`` and the consumer's fast record decoder.
- Renewal: AFTER_SEQUENCE_NUMBER of the last ContinuationSequenceNumber, as the KCL does
  (``IteratorBuilder.reconnectRequest`` in FanOutRecordsPublisher; AT_SEQUENCE_NUMBER is only
  for the first subscription from a checkpoint). kinesis-mock agrees: its continuation is the
  last delivered record's sequence number.
- kinesis-mock 0.6.2 (probed): answers on its plain port over HTTP/1.1 chunked *and* h2c with
  prior knowledge, and over h2 (ALPN) on its TLS port; sends no ``initial-response``; pushes one
  event per second (up to 10,000 records), ``ChildShards`` always ``null`` and a continuation
  that never ends, even on a closed shard (no shard end over EFO: watch ListShards instead); a
  second subscription for the same consumer and shard gets a 200 with one
  ``ResourceInUseException`` exception event, and so does a new one within 1-3 s of closing the
  previous (it holds the lease until its next 1 s write fails; AWS documents ResourceInUse
  within 5 s too); an unknown consumer ARN gets a ``ResourceNotFoundException`` event, an unknown
  shard id an endless stream of empty events with continuation ``"0"``; a malformed request a
  400 JSON ``SerializationException``; it ends the stream itself after 5 minutes. Consumers go
  CREATING -> ACTIVE after REGISTER_STREAM_CONSUMER_DURATION (our launcher: 0 s); registering
  an existing name gives ResourceInUseException.

Modules: ``http2`` / ``http11`` (sans-I/O protocols on h2 / on the lean calls' parser,
:mod:`kinesis_core.aws.http1`), ``connection`` (asyncio
drivers and the connection pool), ``tls``, ``signing``, ``eventstream`` (decoder and
``SubscribeEvent``), ``client`` (``FanOutClient``, ``ShardSubscription``), ``registration``
(sans-I/O consumer life cycle and ARN rules) and ``consumers`` (its async driver, and the
fan-out start every reader shares).
"""

from typing import TYPE_CHECKING

from kinesis_core._lazy import lazy_exports

# name -> the module defining it, imported on first use (kinesis_core/_lazy.py)
_EXPORTS = {
    "SubscribeEvent": "kinesis_core.consumer.subscription",
    "renewal_position": "kinesis_core.consumer.subscription",
    "FanOutClient": "kinesis_core.fanout.client",
    "ShardSubscription": "kinesis_core.fanout.client",
    "RegisteredConsumer": "kinesis_core.fanout.consumers",
    "consumer_check": "kinesis_core.fanout.consumers",
    "deregister_consumer": "kinesis_core.fanout.consumers",
    "describe_stream_arn": "kinesis_core.fanout.consumers",
    "register_consumer": "kinesis_core.fanout.consumers",
    "wait_for_consumer": "kinesis_core.fanout.consumers",
    "FanOutTimeoutError": "kinesis_core.fanout.errors",
    "FanOutTransportError": "kinesis_core.fanout.errors",
    "ConsumerArn": "kinesis_core.fanout.registration",
    "ConsumerRegistrationError": "kinesis_core.fanout.registration",
    "StreamConsumer": "kinesis_core.fanout.registration",
    "check_consumer_of_stream": "kinesis_core.fanout.registration",
    "parse_consumer_arn": "kinesis_core.fanout.registration",
}

if TYPE_CHECKING:
    from kinesis_core.consumer.subscription import (
        SubscribeEvent as SubscribeEvent,
        renewal_position as renewal_position,
    )
    from kinesis_core.fanout.client import (
        FanOutClient as FanOutClient,
        ShardSubscription as ShardSubscription,
    )
    from kinesis_core.fanout.consumers import (
        RegisteredConsumer as RegisteredConsumer,
        consumer_check as consumer_check,
        deregister_consumer as deregister_consumer,
        describe_stream_arn as describe_stream_arn,
        register_consumer as register_consumer,
        wait_for_consumer as wait_for_consumer,
    )
    from kinesis_core.fanout.errors import (
        FanOutTimeoutError as FanOutTimeoutError,
        FanOutTransportError as FanOutTransportError,
    )
    from kinesis_core.fanout.registration import (
        ConsumerArn as ConsumerArn,
        ConsumerRegistrationError as ConsumerRegistrationError,
        StreamConsumer as StreamConsumer,
        check_consumer_of_stream as check_consumer_of_stream,
        parse_consumer_arn as parse_consumer_arn,
    )

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
