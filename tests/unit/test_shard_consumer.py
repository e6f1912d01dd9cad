"""The ShardConsumer machine: every state x event, and the paths a shard takes through them."""

from __future__ import annotations

import itertools

import pytest

from kinesis_core.consumer.shard_consumer import (
    TRANSITIONS,
    Action,
    Event,
    ShardConsumer,
    ShardConsumerError,
    State,
)

LIVE = (State.WAITING_FOR_PARENTS, State.READING, State.DRAINING, State.HANDING_OVER, State.ENDING)
TERMINAL = (State.ENDED, State.REVOKED)
WAITING_FOR_ACKS = (State.DRAINING, State.HANDING_OVER, State.ENDING)
WRITES = {Action.WRITE_SHARD_END, Action.WRITE_CHECKPOINT, Action.HAND_OVER}


def machine(state: State) -> ShardConsumer:
    m = ShardConsumer("shardId-000000000000")
    m.state = state
    return m


def test_the_table_covers_every_state_and_event() -> None:
    assert set(TRANSITIONS) == set(itertools.product(State, Event))


@pytest.mark.parametrize(("state", "event"), list(itertools.product(State, Event)))
def test_every_state_and_event(state: State, event: Event) -> None:
    m = machine(state)
    expected = TRANSITIONS[state, event]
    if expected is None:
        with pytest.raises(ShardConsumerError, match=f"{event.value} is not expected"):
            m.handle(event)
        assert m.state is state  # a refused event changes nothing
        return
    actions = m.handle(event)
    after = m.state
    assert (after, actions) == expected
    assert len(set(actions)) == len(actions)
    # Terminal states stay terminal, and a late event there at most hands a lease over.
    if state in TERMINAL:
        assert after is state
        assert set(actions) <= {Action.HAND_OVER}
    # Only a shard whose parents finished starts reading, and only once.
    assert (Action.START_READER in actions) == (
        (state, event) == (State.WAITING_FOR_PARENTS, Event.PARENTS_FINISHED)
    )
    # Leaving READING for a state that delivers nothing stops the reader, unless the reader
    # itself ended.
    if state is State.READING and after is not State.READING and event is not Event.READ_TO_END:
        assert Action.STOP_READER in actions
    # A lost lease ends every live state at once, and says so.
    if event is Event.LEASE_LOST:
        assert after in TERMINAL
        assert (Action.NOTIFY_LOST in actions) == (state in LIVE)
        assert not set(actions) & WRITES  # never a write to a lease that is gone
    # The acks (all in, or given up on) lead to exactly one write in the states that wait.
    if event in (Event.DRAINED, Event.ACK_TIMEOUT) and state in WAITING_FOR_ACKS:
        assert len(set(actions) & WRITES) == 1
    # The write done ends the waiting states, each with its own notice.
    if event is Event.CHECKPOINTED and state in WAITING_FOR_ACKS:
        notices = {
            State.ENDING: (State.ENDED, (Action.NOTIFY_ENDED,)),
            State.HANDING_OVER: (State.REVOKED, (Action.NOTIFY_HANDED_OVER,)),
            State.DRAINING: (State.REVOKED, ()),
        }
        assert (after, actions) == notices[state]
    # Only a hand-off request writes the hand-over; SHARD_END only after the acks of an end.
    if Action.HAND_OVER in actions:
        assert event in (Event.HANDOFF_ASKED, Event.DRAINED, Event.ACK_TIMEOUT)
    if Action.WRITE_SHARD_END in actions:
        assert (state, event) == (State.ENDING, Event.DRAINED)
    assert m.finished == (after in TERMINAL)
    assert m.waits_for_acks == (after in WAITING_FOR_ACKS)


def run(*events: Event) -> tuple[State, list[Action]]:
    m = ShardConsumer("s")
    actions: list[Action] = []
    for event in events:
        actions.extend(m.handle(event))
    return m.state, actions


def test_a_shard_read_to_its_end() -> None:
    E, A = Event, Action
    state, actions = run(E.PARENTS_FINISHED, E.READ_TO_END, E.DRAINED, E.CHECKPOINTED)
    assert state is State.ENDED
    assert actions == [A.START_READER, A.WRITE_SHARD_END, A.NOTIFY_ENDED]


def test_a_shard_handed_over_after_its_acks() -> None:
    E, A = Event, Action
    state, actions = run(E.PARENTS_FINISHED, E.HANDOFF_ASKED, E.DRAINED, E.CHECKPOINTED)
    assert state is State.REVOKED
    assert actions == [A.START_READER, A.STOP_READER, A.HAND_OVER, A.NOTIFY_HANDED_OVER]


def test_a_shard_handed_over_when_the_acks_do_not_come() -> None:
    E, A = Event, Action
    state, actions = run(E.PARENTS_FINISHED, E.HANDOFF_ASKED, E.ACK_TIMEOUT, E.CHECKPOINTED)
    assert state is State.REVOKED
    assert actions == [A.START_READER, A.STOP_READER, A.HAND_OVER, A.NOTIFY_HANDED_OVER]


def test_a_shard_not_read_yet_is_handed_over_at_once() -> None:
    state, actions = run(Event.HANDOFF_ASKED, Event.CHECKPOINTED)
    assert state is State.REVOKED
    assert actions == [Action.HAND_OVER, Action.NOTIFY_HANDED_OVER]


def test_close_drains_then_checkpoints() -> None:
    E, A = Event, Action
    state, actions = run(E.PARENTS_FINISHED, E.CLOSE, E.DRAINED, E.CHECKPOINTED)
    assert state is State.REVOKED
    assert actions == [A.START_READER, A.STOP_READER, A.WRITE_CHECKPOINT]


def test_a_lease_lost_while_handing_over_writes_nothing_more() -> None:
    E, A = Event, Action
    state, actions = run(E.PARENTS_FINISHED, E.HANDOFF_ASKED, E.LEASE_LOST, E.DRAINED)
    assert state is State.REVOKED
    assert actions == [A.START_READER, A.STOP_READER, A.NOTIFY_LOST]
