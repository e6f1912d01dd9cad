"""The faust-streaming and mode internals the channel cannot do without, in one place.

Checked against faust-streaming 0.15.3 and mode-streaming 0.7.1. Each one says why there is no
public way; an upgrade that breaks one breaks it here, and the Faust unit tests
(``tests/unit/test_faust_*.py``) and integration tests say so.

Faust behaviour the channel relies on without reading an internal (public attributes, private
rules), for whoever upgrades Faust:

- a stream skips, and acks, an event when ``app.flow_control`` is suspended or the message's
  ``generation_id`` is not ``app.consumer_generation_id`` (``Stream._py_aiter`` and the compiled
  iterator in ``faust/_cython/streams.pyx``); :func:`faust_kinesis.acks.decide` mirrors it;
- a Kafka rebalance suspends flow control and clears every flow-controlled queue, and resuming
  clears them again (``App._on_partitions_revoked``, ``FlowControlEvent.resume``);
- flow control starts suspended and only Kafka table recovery resumes it
  (:func:`kafka_consumer_enabled`).
"""

from __future__ import annotations

import asyncio
from collections.abc import MutableSet
from typing import Any

from faust.types import AppT, ChannelT, Message

ACKED = Message.__dict__["acked"]
"""The slot behind ``Message.acked``. The compiled stream iterator acks by writing
``message.acked`` (and ``refcount``) directly and never calls ``Message.on_final_ack``, so
the only hook on a final ack is a property over the base class's slot; the property needs the
slot's descriptor to store the value."""

REFCOUNT = Message.__dict__["refcount"]
"""The slot behind ``Message.refcount``, for the same reason as :data:`ACKED`."""


def subscribers(channel: ChannelT[Any]) -> MutableSet[ChannelT[Any]]:
    """The live set of a root channel's subscribers (the clones agents iterate).

    Faust exposes only ``subscriber_count``; its own ``Channel.put`` walks ``_subscribers`` and
    awaits each queue's ``put``, which a ``clear()`` cancels. The reader puts into each
    subscriber's queue itself, without blocking, so it needs the set.
    """
    subs: MutableSet[ChannelT[Any]] = channel._subscribers  # type: ignore[attr-defined]
    return subs


def queued_items(queue: asyncio.Queue[Any]) -> list[Any]:
    """What a queue holds, without taking it out.

    mode's ``ThrowableQueue.clear()`` empties the queue's deque without saying what was in it;
    the channel must know which of its events Faust threw away, to deliver them again.
    ``asyncio.Queue`` keeps its items in ``_queue``, the deque its subclass hooks (``_init``,
    ``_put``, ``_get``) work on, and which mode's ``clear()`` empties.
    """
    items: list[Any] = list(queue._queue)  # type: ignore[attr-defined]
    return items


def kafka_consumer_enabled(app: AppT) -> bool:
    """Whether Faust runs its Kafka consumer, whose table recovery resumes flow control.

    Without it nothing ever resumes ``app.flow_control``, and every put into a channel queue
    would wait forever; Faust has no setting that says who resumes it.
    """
    boot = app.boot_strategy
    if boot.enable_kafka_consumer is not None:
        return bool(boot.enable_kafka_consumer)
    return bool(boot.enable_kafka)
