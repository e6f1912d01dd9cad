"""The shared life cycle: every (state, event) pair, allowed or refused."""

from __future__ import annotations

import itertools

import pytest

from kinesis_core.errors import KinesisConnectorError
from kinesis_core.lifecycle import Event, Lifecycle, LifecycleError, State

ALLOWED = {
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


@pytest.mark.parametrize(("state", "event"), list(itertools.product(State, Event)))
def test_every_transition(state: State, event: Event) -> None:
    life = Lifecycle("Thing('s')")
    life.state = state
    expected = ALLOWED.get((state, event))
    if expected is None:
        with pytest.raises(LifecycleError) as info:
            life.handle(event, "do it")
        assert str(info.value).startswith(f"Thing('s') is {state.value}: cannot do it")
        assert info.value.state is state
        assert life.state is state
        assert isinstance(info.value, KinesisConnectorError)
        assert isinstance(info.value, RuntimeError)
    else:
        assert life.handle(event) is expected
        assert life.state is expected


def test_closed_is_terminal() -> None:
    assert not [event for (state, event) in ALLOWED if state is State.CLOSED]


def test_require_guards_with_a_hint() -> None:
    life = Lifecycle("Producer('orders')")
    with pytest.raises(LifecycleError, match=r"is new: cannot put.*start it first"):
        life.require("put")
    life.handle(Event.START)
    life.require("wait", State.STARTING, State.RUNNING)
    life.handle(Event.STARTED)
    life.require("put")
    assert not life.stopping
    life.handle(Event.CLOSE)
    assert life.stopping
    with pytest.raises(LifecycleError, match="is closing: cannot put"):
        life.require("put")
