"""The life of one shard in a consumer, as one sans-I/O machine (h11 style).

A :class:`ShardConsumer` is told what happened (:class:`Event`) and answers with what to do
(:class:`Action`); the consumer, its scheduler, does it. One table, :data:`TRANSITIONS`, says
for every state and event the next state and the actions; an event a state does not expect is
a :class:`ShardConsumerError`, never silently ignored.

::

    WAITING_FOR_PARENTS --PARENTS_FINISHED--> READING
    READING --READ_TO_END--> ENDING --DRAINED--> (WRITE_SHARD_END) --CHECKPOINTED--> ENDED
    READING --HANDOFF_ASKED--> HANDING_OVER --DRAINED or ACK_TIMEOUT--> (HAND_OVER)
            --CHECKPOINTED--> REVOKED
    READING --CLOSE--> DRAINING --DRAINED or ACK_TIMEOUT--> (WRITE_CHECKPOINT)
            --CHECKPOINTED--> REVOKED
    any live state --LEASE_LOST--> REVOKED

Acks are events: the consumer feeds ``DRAINED`` when the shard's last delivered record is
acked (the frontier tells it), ``ACK_TIMEOUT`` when it gave up waiting.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from kinesis_core.errors import KinesisConnectorError


class State(str, enum.Enum):
    WAITING_FOR_PARENTS = "waiting_for_parents"
    READING = "reading"
    DRAINING = "draining"
    """Closing: not delivering any more; waiting for the acks, then the final checkpoint."""
    HANDING_OVER = "handing_over"
    """Asked for by another worker: not delivering; the acks, then the final checkpoint."""
    ENDING = "ending"
    """Read to its end: waiting for the acks, then SHARD_END."""
    ENDED = "ended"
    """SHARD_END written: the children may start."""
    REVOKED = "revoked"
    """No longer this worker's: lost, handed over, or closed."""


class Event(str, enum.Enum):
    PARENTS_FINISHED = "parents_finished"
    """Every parent is finished and this worker holds the lease (or reads without leases)."""
    READ_TO_END = "read_to_end"
    DRAINED = "drained"
    """Every delivered record is acked."""
    ACK_TIMEOUT = "ack_timeout"
    """The time allowed for the acks ran out."""
    CHECKPOINTED = "checkpointed"
    """The write the machine asked for (SHARD_END, the final checkpoint) is done."""
    HANDOFF_ASKED = "handoff_asked"
    LEASE_LOST = "lease_lost"
    CLOSE = "close"


class Action(str, enum.Enum):
    START_READER = "start_reader"
    STOP_READER = "stop_reader"
    """Stop reading; drop what was read and not delivered."""
    WRITE_SHARD_END = "write_shard_end"
    WRITE_CHECKPOINT = "write_checkpoint"
    """The acked prefix, as the last checkpoint of this worker."""
    HAND_OVER = "hand_over"
    """The acked prefix as the final checkpoint of a hand-off (it clears the marker)."""
    NOTIFY_LOST = "notify_lost"
    NOTIFY_HANDED_OVER = "notify_handed_over"
    NOTIFY_ENDED = "notify_ended"


class ShardConsumerError(KinesisConnectorError):
    """An event the shard's state does not allow (a bug in the scheduler)."""


S, E, A = State, Event, Action

TRANSITIONS: Mapping[tuple[State, Event], tuple[State, tuple[Action, ...]] | None] = {
    # waiting for parents (or for the lease)
    (S.WAITING_FOR_PARENTS, E.PARENTS_FINISHED): (S.READING, (A.START_READER,)),
    (S.WAITING_FOR_PARENTS, E.READ_TO_END): None,
    (S.WAITING_FOR_PARENTS, E.DRAINED): (S.WAITING_FOR_PARENTS, ()),
    (S.WAITING_FOR_PARENTS, E.ACK_TIMEOUT): None,
    (S.WAITING_FOR_PARENTS, E.CHECKPOINTED): None,
    (S.WAITING_FOR_PARENTS, E.HANDOFF_ASKED): (S.HANDING_OVER, (A.HAND_OVER,)),
    (S.WAITING_FOR_PARENTS, E.LEASE_LOST): (S.REVOKED, (A.NOTIFY_LOST,)),
    (S.WAITING_FOR_PARENTS, E.CLOSE): (S.REVOKED, ()),
    # reading
    (S.READING, E.PARENTS_FINISHED): None,
    (S.READING, E.READ_TO_END): (S.ENDING, ()),
    (S.READING, E.DRAINED): (S.READING, ()),
    (S.READING, E.ACK_TIMEOUT): None,
    (S.READING, E.CHECKPOINTED): None,
    (S.READING, E.HANDOFF_ASKED): (S.HANDING_OVER, (A.STOP_READER,)),
    (S.READING, E.LEASE_LOST): (S.REVOKED, (A.STOP_READER, A.NOTIFY_LOST)),
    (S.READING, E.CLOSE): (S.DRAINING, (A.STOP_READER,)),
    # closing
    (S.DRAINING, E.PARENTS_FINISHED): None,
    (S.DRAINING, E.READ_TO_END): None,
    (S.DRAINING, E.DRAINED): (S.DRAINING, (A.WRITE_CHECKPOINT,)),
    (S.DRAINING, E.ACK_TIMEOUT): (S.DRAINING, (A.WRITE_CHECKPOINT,)),
    (S.DRAINING, E.CHECKPOINTED): (S.REVOKED, ()),
    (S.DRAINING, E.HANDOFF_ASKED): (S.HANDING_OVER, ()),
    (S.DRAINING, E.LEASE_LOST): (S.REVOKED, (A.NOTIFY_LOST,)),
    (S.DRAINING, E.CLOSE): (S.DRAINING, ()),
    # handing over
    (S.HANDING_OVER, E.PARENTS_FINISHED): None,
    (S.HANDING_OVER, E.READ_TO_END): None,
    (S.HANDING_OVER, E.DRAINED): (S.HANDING_OVER, (A.HAND_OVER,)),
    (S.HANDING_OVER, E.ACK_TIMEOUT): (S.HANDING_OVER, (A.HAND_OVER,)),
    (S.HANDING_OVER, E.CHECKPOINTED): (S.REVOKED, (A.NOTIFY_HANDED_OVER,)),
    (S.HANDING_OVER, E.HANDOFF_ASKED): (S.HANDING_OVER, ()),
    (S.HANDING_OVER, E.LEASE_LOST): (S.REVOKED, (A.NOTIFY_LOST,)),
    (S.HANDING_OVER, E.CLOSE): (S.HANDING_OVER, ()),
    # read to the end
    (S.ENDING, E.PARENTS_FINISHED): None,
    (S.ENDING, E.READ_TO_END): None,
    (S.ENDING, E.DRAINED): (S.ENDING, (A.WRITE_SHARD_END,)),
    (S.ENDING, E.ACK_TIMEOUT): (S.DRAINING, (A.WRITE_CHECKPOINT,)),
    (S.ENDING, E.CHECKPOINTED): (S.ENDED, (A.NOTIFY_ENDED,)),
    (S.ENDING, E.HANDOFF_ASKED): (S.HANDING_OVER, ()),
    (S.ENDING, E.LEASE_LOST): (S.REVOKED, (A.NOTIFY_LOST,)),
    (S.ENDING, E.CLOSE): (S.ENDING, ()),
    # terminal states: late news changes nothing
    (S.ENDED, E.PARENTS_FINISHED): None,
    (S.ENDED, E.READ_TO_END): None,
    (S.ENDED, E.DRAINED): (S.ENDED, ()),
    (S.ENDED, E.ACK_TIMEOUT): (S.ENDED, ()),
    (S.ENDED, E.CHECKPOINTED): None,
    (S.ENDED, E.HANDOFF_ASKED): (S.ENDED, (A.HAND_OVER,)),
    (S.ENDED, E.LEASE_LOST): (S.ENDED, ()),
    (S.ENDED, E.CLOSE): (S.ENDED, ()),
    (S.REVOKED, E.PARENTS_FINISHED): None,
    (S.REVOKED, E.READ_TO_END): None,
    (S.REVOKED, E.DRAINED): (S.REVOKED, ()),
    (S.REVOKED, E.ACK_TIMEOUT): (S.REVOKED, ()),
    (S.REVOKED, E.CHECKPOINTED): (S.REVOKED, ()),
    (S.REVOKED, E.HANDOFF_ASKED): None,
    (S.REVOKED, E.LEASE_LOST): (S.REVOKED, ()),
    (S.REVOKED, E.CLOSE): (S.REVOKED, ()),
}
"""(state, event) -> (next state, actions), or None: the event is an error in that state."""

del S, E, A

_WAITS_FOR_ACKS = frozenset({State.DRAINING, State.HANDING_OVER, State.ENDING})


class ShardConsumer:
    """One shard's state in one consumer; :meth:`handle` is the only way it changes."""

    __slots__ = ("shard_id", "state")

    def __init__(self, shard_id: str) -> None:
        self.shard_id = shard_id
        self.state = State.WAITING_FOR_PARENTS

    def handle(self, event: Event) -> tuple[Action, ...]:
        """Feed one event; return what the scheduler must do now."""
        result = TRANSITIONS[self.state, event]
        if result is None:
            raise ShardConsumerError(
                f"shard {self.shard_id}: {event.value} is not expected while {self.state.value}"
            )
        self.state, actions = result
        return actions

    @property
    def waits_for_acks(self) -> bool:
        """Not delivering, and waiting for the acks of what was delivered."""
        return self.state in _WAITS_FOR_ACKS

    @property
    def finished(self) -> bool:
        return self.state in (State.ENDED, State.REVOKED)
