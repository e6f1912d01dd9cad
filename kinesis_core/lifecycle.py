"""The life cycle every long-lived object of the core shares: a state and a transition table.

The Producer and the Consumer (and the drivers built on them) go through the same states; each
asks this table whether an event is allowed instead of comparing strings or juggling booleans.
A call that comes at the wrong time (``put`` before ``start``, ``start`` twice, iterating a
closed consumer) raises :class:`LifecycleError`, which names the object, its state and what
to do. Modelled on h11's ``_state.py``: explicit states, explicit events, one table.
"""

from __future__ import annotations

import enum

from kinesis_core.errors import KinesisConnectorError


class State(enum.Enum):
    NEW = "new"
    """Made, not started."""
    STARTING = "starting"
    """``start`` is connecting and listing shards."""
    RUNNING = "running"
    CLOSING = "closing"
    """``close`` is flushing (producer) or draining acks (consumer)."""
    CLOSED = "closed"
    """Closed, or never started and closed; terminal."""
    FAILED = "failed"
    """Stopped by an error no retry fixes; ``close`` still releases its resources."""


class Event(enum.Enum):
    START = "start"
    STARTED = "started"
    START_FAILED = "start_failed"
    FAIL = "fail"
    CLOSE = "close"
    CLOSED = "closed"


_TRANSITIONS: dict[tuple[State, Event], State] = {
    (State.NEW, Event.START): State.STARTING,
    (State.NEW, Event.CLOSE): State.CLOSED,
    (State.STARTING, Event.STARTED): State.RUNNING,
    (State.STARTING, Event.START_FAILED): State.CLOSED,
    (State.STARTING, Event.CLOSE): State.CLOSING,
    (State.STARTING, Event.FAIL): State.FAILED,
    (State.RUNNING, Event.FAIL): State.FAILED,
    (State.RUNNING, Event.CLOSE): State.CLOSING,
    (State.FAILED, Event.FAIL): State.FAILED,
    (State.FAILED, Event.CLOSE): State.CLOSING,
    (State.CLOSING, Event.FAIL): State.CLOSING,
    (State.CLOSING, Event.CLOSED): State.CLOSED,
}

_HINTS = {
    State.NEW: "start it first (async with ...)",
    State.STARTING: "wait until start() returns",
    State.CLOSING: "it is closing",
    State.CLOSED: "it is closed; make a new one",
    State.FAILED: "it stopped after an error; close it and make a new one",
}


class LifecycleError(KinesisConnectorError, RuntimeError):
    """A call came in a state that does not allow it."""

    def __init__(self, owner: str, state: State, action: str) -> None:
        hint = _HINTS.get(state, "")
        super().__init__(
            f"{owner} is {state.value}: cannot {action}" + (f"; {hint}" if hint else "")
        )
        self.state = state


class Lifecycle:
    """The state of one object; ``owner`` names it in errors (``"Producer('orders')"``)."""

    __slots__ = ("owner", "state")

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.state = State.NEW

    def handle(self, event: Event, action: str | None = None) -> State:
        """Apply ``event``; raise :class:`LifecycleError` if the table has no such transition."""
        new = _TRANSITIONS.get((self.state, event))
        if new is None:
            raise LifecycleError(self.owner, self.state, action or event.value)
        self.state = new
        return new

    def require(self, action: str, *allowed: State) -> None:
        """Raise :class:`LifecycleError` unless the state is one of ``allowed`` (default
        RUNNING): the guard of ``put``, ``__anext__`` and the like."""
        if self.state not in (allowed or (State.RUNNING,)):
            raise LifecycleError(self.owner, self.state, action)

    @property
    def stopping(self) -> bool:
        """Closing, closed or failed: accepts no new work."""
        return self.state in (State.CLOSING, State.CLOSED, State.FAILED)

    def __repr__(self) -> str:
        return f"Lifecycle({self.owner}, {self.state.name})"
