"""The shard map: ShardInfo (kinesis_core.shards.info), ShardTable and the sans-I/O ShardMap
(kinesis_core.shards.shard_map), paging (kinesis_core.aws.executor), the driver
(kinesis_core.producer.shard_map_driver)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from botocore.exceptions import ClientError
from hypothesis import given, settings, strategies as st

from kinesis_core.aws.executor import list_all_shards
from kinesis_core.errors import KinesisConnectorError, ValidationError
from kinesis_core.producer.shard_map_driver import ShardMapDriver, ShardMapTimeoutError
from kinesis_core.shards.hashing import MAX_HASH_KEY
from kinesis_core.shards.info import ShardInfo, uniform_shards
from kinesis_core.shards.record_size import RecordSizeLimit
from kinesis_core.shards.shard_map import (
    TRANSITIONS,
    Action,
    Event,
    Phase,
    ShardMap,
    ShardMapError,
    ShardMapState,
    ShardTable,
)

HALF = 2**127


def api_shard(
    shard_id: str,
    start: int,
    end: int,
    *,
    parent: str | None = None,
    adjacent: str | None = None,
    ending_seq: int | None = None,
) -> dict[str, Any]:
    shard: dict[str, Any] = {
        "ShardId": shard_id,
        "HashKeyRange": {"StartingHashKey": str(start), "EndingHashKey": str(end)},
        "SequenceNumberRange": {"StartingSequenceNumber": "49591110086254409023548762079802856464"},
    }
    if parent is not None:
        shard["ParentShardId"] = parent
    if adjacent is not None:
        shard["AdjacentParentShardId"] = adjacent
    if ending_seq is not None:
        shard["SequenceNumberRange"]["EndingSequenceNumber"] = str(ending_seq)
    return shard


def shard(shard_id: str, start: int, end: int, *, closed: bool = False) -> ShardInfo:
    return ShardInfo(shard_id, start, end, ending_sequence_number=1 if closed else None)


TWO = [shard("s0", 0, HALF - 1), shard("s1", HALF, MAX_HASH_KEY)]
# s0 split into s2 and s3.
SPLIT = [shard("s2", 0, HALF // 2 - 1), shard("s3", HALF // 2, HALF - 1), TWO[1]]


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def throttled(code: str = "LimitExceededException") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "slow down"}}, "ListShards")


# ShardInfo and ShardTable.


def test_shard_info_from_api() -> None:
    info = ShardInfo.from_api(api_shard("shardId-000000000002", HALF, MAX_HASH_KEY, parent="p"))
    assert info == ShardInfo(
        "shardId-000000000002",
        HALF,
        MAX_HASH_KEY,
        parent_shard_id="p",
        starting_sequence_number=49591110086254409023548762079802856464,
    )
    assert info.is_open
    assert info.parents == ("p",)
    assert info.hash_range == (HALF, MAX_HASH_KEY)


def test_shard_info_from_api_closed_merged_shard() -> None:
    info = ShardInfo.from_api(api_shard("c", 0, 9, parent="a", adjacent="b", ending_seq=7))
    assert not info.is_open
    assert info.ending_sequence_number == 7
    assert info.parents == ("a", "b")
    assert ShardInfo.from_api(api_shard("x", 0, 9)).parents == ()


def test_shard_info_contains_is_inclusive() -> None:
    info = shard("s", 10, 20)
    assert [info.contains(h) for h in (9, 10, 15, 20, 21)] == [False, True, True, True, False]


def test_shard_info_from_api_refuses_bad_ranges() -> None:
    with pytest.raises(ValueError, match="starting hash key 9 > ending 3"):
        ShardInfo.from_api(api_shard("x", 9, 3))
    bad = api_shard("x", 0, 3)
    bad["HashKeyRange"]["EndingHashKey"] = str(2**128)
    with pytest.raises(ValidationError) as info:
        ShardInfo.from_api(bad)
    assert info.value.field == "HashKeyRange.EndingHashKey"


def test_shard_table_keeps_open_shards_sorted_by_end() -> None:
    closed = shard("old", 0, MAX_HASH_KEY, closed=True)
    table = ShardTable([TWO[1], closed, TWO[0]])
    assert table.shards == (TWO[0], TWO[1])
    assert len(table) == 2
    assert "s0" in table
    assert "old" not in table
    assert table.get("s1") == TWO[1]
    assert table.get("old") is None
    assert [table.index(h) for h in (0, HALF - 1, HALF, MAX_HASH_KEY)] == [0, 0, 1, 1]


def test_shard_table_gap_and_tail_have_no_owner() -> None:
    table = ShardTable([shard("a", 0, 9), shard("b", 20, 29)])
    assert table.owner(5) == shard("a", 0, 9)
    assert table.owner(15) is None
    assert table.owner(30) is None
    assert ShardTable([]).owner(0) is None


def test_uniform_shards_match_create_stream() -> None:
    three = uniform_shards(3)
    assert [s.shard_id for s in three] == [f"shardId-00000000000{i}" for i in range(3)]
    assert [(s.start_hash_key, s.end_hash_key) for s in three] == [
        (0, 113427455640312821154458202477256070484),
        (113427455640312821154458202477256070485, 226854911280625642308916404954512140969),
        (226854911280625642308916404954512140970, MAX_HASH_KEY),
    ]
    assert uniform_shards(1) == [ShardInfo("shardId-000000000000", 0, MAX_HASH_KEY)]
    with pytest.raises(ValueError, match=">= 1"):
        uniform_shards(0)


@settings(deadline=None)
@given(st.integers(min_value=1, max_value=5000))
def test_uniform_shards_are_contiguous(count: int) -> None:
    shards = uniform_shards(count)
    assert shards[0].start_hash_key == 0
    assert shards[-1].end_hash_key == MAX_HASH_KEY
    for a, b in itertools.pairwise(shards):
        assert b.start_hash_key == a.end_hash_key + 1
    sizes = {s.end_hash_key - s.start_hash_key for s in shards[:-1]}
    assert len(sizes) <= 1


# The sans-I/O state machine: every (phase, event) pair.

NOW = 1000.0


def map_in(phase: Phase) -> ShardMap:
    m = ShardMap()
    if phase is Phase.IDLE:
        return m
    assert m.start()
    if phase is Phase.FAILED:
        m.refresh_failed()
    elif phase is Phase.READY:
        m.refresh_succeeded(TWO, NOW)
    assert m.phase is phase
    return m


# (phase, event) -> (actions, next phase); None: ShardMapError, phase unchanged.
EXPECTED: dict[tuple[Phase, Event], tuple[tuple[Action, ...], Phase] | None] = {
    (Phase.IDLE, Event.START): ((Action.REFRESH,), Phase.UPDATING),
    (Phase.IDLE, Event.SUCCEEDED): None,
    (Phase.IDLE, Event.FAILED): None,
    (Phase.IDLE, Event.RETRY): None,
    (Phase.IDLE, Event.INVALIDATED): ((), Phase.IDLE),
    (Phase.UPDATING, Event.START): ((), Phase.UPDATING),
    (Phase.UPDATING, Event.SUCCEEDED): ((), Phase.READY),
    (Phase.UPDATING, Event.FAILED): ((), Phase.FAILED),
    (Phase.UPDATING, Event.RETRY): None,
    (Phase.UPDATING, Event.INVALIDATED): ((), Phase.UPDATING),
    (Phase.FAILED, Event.START): ((), Phase.FAILED),
    (Phase.FAILED, Event.SUCCEEDED): None,
    (Phase.FAILED, Event.FAILED): None,
    (Phase.FAILED, Event.RETRY): ((), Phase.UPDATING),
    (Phase.FAILED, Event.INVALIDATED): ((), Phase.FAILED),
    (Phase.READY, Event.START): ((), Phase.READY),
    (Phase.READY, Event.SUCCEEDED): None,
    (Phase.READY, Event.FAILED): None,
    (Phase.READY, Event.RETRY): None,
    (Phase.READY, Event.INVALIDATED): ((Action.REFRESH,), Phase.UPDATING),
}


def test_the_table_covers_every_phase_and_event() -> None:
    every = {(p, e) for p in Phase for e in Event}
    assert set(TRANSITIONS) == every
    assert set(EXPECTED) == every


@pytest.mark.parametrize(("phase", "event"), sorted(EXPECTED, key=str))
def test_transition(phase: Phase, event: Event) -> None:
    m = map_in(phase)
    expected = EXPECTED[phase, event]
    if expected is None:
        with pytest.raises(ShardMapError, match=f"{event.value} is not expected"):
            m.handle(event)
        assert m.phase is phase
    else:
        assert m.handle(event) == expected[0]
        assert m.phase is expected[1]


# The event methods: what each feeds and what it answers, in every phase.

SHOWN = {
    Phase.IDLE: (ShardMapState.INVALID, False),
    Phase.UPDATING: (ShardMapState.UPDATING, False),
    Phase.FAILED: (ShardMapState.INVALID, True),
    Phase.READY: (ShardMapState.READY, False),
}


@pytest.mark.parametrize("phase", list(Phase))
def test_state_and_retry_pending_show_the_phase(phase: Phase) -> None:
    m = map_in(phase)
    assert (m.state, m.retry_pending) == SHOWN[phase]


def fire(m: ShardMap, event: Event) -> object:
    if event is Event.START:
        return m.start()
    if event is Event.SUCCEEDED:
        return m.refresh_succeeded(TWO, NOW + 1)
    if event is Event.FAILED:
        return m.refresh_failed()
    if event is Event.RETRY:
        return m.retry_due()
    return m.invalidate(NOW + 0.5, "s0", NOW + 1)


@pytest.mark.parametrize(("phase", "event"), sorted(EXPECTED, key=str))
def test_event_methods_follow_the_table(phase: Phase, event: Event) -> None:
    m = map_in(phase)
    expected = EXPECTED[phase, event]
    if expected is None:
        with pytest.raises(ShardMapError):
            fire(m, event)
        assert m.phase is phase
        return
    answer = fire(m, event)
    if event in (Event.START, Event.INVALIDATED):
        assert answer is (Action.REFRESH in expected[0])
    else:
        assert answer is None
    assert m.phase is expected[1]


@pytest.mark.parametrize("phase", list(Phase))
def test_predict_answers_only_when_ready(phase: Phase) -> None:
    m = map_in(phase)
    assert (m.predict(0) == "s0") is (phase is Phase.READY)


def test_predict_and_hash_range_while_updating_after_ready() -> None:
    m = map_in(Phase.READY)
    assert m.predict(HALF) == "s1"
    assert m.invalidate(m.updated_at + 1, "s1", NOW)
    assert m.state is ShardMapState.UPDATING
    assert m.predict(HALF) is None
    assert m.hash_range("s1", NOW) == (HALF, MAX_HASH_KEY)
    assert m.open_shards == tuple(TWO)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"min_backoff": 0}, "min_backoff"),
        ({"max_backoff": 0.5}, "min_backoff"),
    ],
)
def test_driver_refuses_bad_backoff(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ShardMapDriver("s", Switchable({"Shards": []}), **kwargs)


def test_shard_map_refuses_a_negative_ttl() -> None:
    with pytest.raises(ValueError, match="closed_shard_ttl"):
        ShardMap(closed_shard_ttl=-1)


def test_updated_at_is_the_clock_at_the_last_success() -> None:
    clock = FakeClock(50.0)
    m = ShardMap()
    assert m.updated_at == float("-inf")
    m.start()
    clock.now = 51.5
    m.refresh_succeeded(TWO, clock.now)
    assert m.updated_at == 51.5
    assert m.refreshes == 1


# The invalidate guard.


def test_invalidate_ignores_what_a_newer_snapshot_already_covers() -> None:
    m = map_in(Phase.READY)
    assert not m.invalidate(m.updated_at, "s0", NOW)
    assert not m.invalidate(m.updated_at - 10, "s0", NOW)
    assert m.state is ShardMapState.READY
    assert m.invalidate(m.updated_at + 0.001, "s0", NOW)


def test_invalidate_ignores_a_predicted_shard_already_gone() -> None:
    clock = FakeClock()
    m = map_in(Phase.READY)
    assert m.invalidate(clock.now + 1, "s0", clock.now)
    clock.now += 2
    m.refresh_succeeded(SPLIT, clock.now)
    # A batch predicted for s0 before the split comes back after the refresh, seen later:
    assert not m.invalidate(clock.now + 5, "s0", clock.now)
    assert not m.invalidate(clock.now + 5, "never-existed", clock.now)
    assert m.state is ShardMapState.READY


def test_invalidate_with_no_prediction_refreshes() -> None:
    m = map_in(Phase.READY)
    assert m.invalidate(m.updated_at + 1, None, NOW)


def test_invalidate_is_idempotent_while_a_refresh_is_in_flight() -> None:
    m = map_in(Phase.READY)
    assert m.invalidate(m.updated_at + 1, "s0", NOW)
    assert [m.invalidate(m.updated_at + 2, s, NOW) for s in ("s0", "s1", None)] == [False] * 3


# Closed-shard TTL.


def test_closed_shards_answer_hash_range_for_the_ttl_then_are_purged() -> None:
    clock = FakeClock(100.0)
    m = ShardMap(closed_shard_ttl=60.0)
    m.start()
    m.refresh_succeeded(TWO, clock.now)
    m.invalidate(clock.now + 1, "s0", clock.now)
    clock.now = 200.0
    m.refresh_succeeded(SPLIT, clock.now)
    assert m.predict(0) == "s2"
    assert m.predict(HALF - 1) == "s3"
    assert m.hash_range("s0", clock.now) == (0, HALF - 1)
    assert m.hash_range("s2", clock.now) == (0, HALF // 2 - 1)
    clock.now = 259.999
    assert m.hash_range("s0", clock.now) == (0, HALF - 1)
    clock.now = 260.0
    assert m.hash_range("s0", clock.now) is None
    assert m.hash_range("s1", clock.now) == (HALF, MAX_HASH_KEY)
    assert m.hash_range("nope", clock.now) is None


def test_closed_shards_are_purged_on_events_too() -> None:
    clock = FakeClock(0.0)
    m = ShardMap(closed_shard_ttl=10.0)
    m.start()
    m.refresh_succeeded(TWO, clock.now)
    m.invalidate(1.0, "s0", clock.now)
    clock.now = 1.0
    m.refresh_succeeded(SPLIT, clock.now)
    clock.now = 11.0
    m.invalidate(0.0, None, clock.now)  # ignored by the guard, but it purges
    assert m._closed == {}


def test_ttl_of_a_shard_runs_from_the_refresh_that_dropped_it() -> None:
    clock = FakeClock(0.0)
    m = ShardMap(closed_shard_ttl=10.0)
    m.start()
    m.refresh_succeeded(TWO, clock.now)
    assert m.invalidate(1.0, "s0", clock.now)
    clock.now = 5.0
    m.refresh_succeeded(SPLIT, clock.now)
    assert m.invalidate(6.0, "s2", clock.now)
    clock.now = 8.0
    m.refresh_succeeded(SPLIT, clock.now)  # s0 is still gone: its TTL is not restarted
    clock.now = 14.9
    assert m.hash_range("s0", clock.now) == (0, HALF - 1)
    clock.now = 15.0
    assert m.hash_range("s0", clock.now) is None


def test_ready_map_with_a_gap_predicts_none() -> None:
    m = ShardMap()
    m.start()
    m.refresh_succeeded([shard("a", 0, 9), shard("b", 20, MAX_HASH_KEY)], NOW)
    assert m.predict(9) == "a"
    assert m.predict(10) is None
    assert m.predict(20) == "b"


def test_ready_map_predicts_open_shards_only_but_knows_closed_ranges_in_the_listing() -> None:
    """moto lists closed shards too: never predicted, but a record that landed there can
    still be checked against its range."""
    m = ShardMap()
    m.start()
    m.refresh_succeeded([shard("parent", 0, MAX_HASH_KEY, closed=True), *TWO], NOW)
    assert m.predict(0) == "s0"
    assert m.hash_range("parent", NOW) == (0, MAX_HASH_KEY)
    assert m.open_shards == tuple(TWO)


def test_learn_remembers_ranges_outside_the_snapshot_for_the_ttl() -> None:
    clock = FakeClock()
    m = ShardMap(closed_shard_ttl=10.0)
    # Any state, even before a refresh:
    m.learn([shard("born-and-closed", 5, 9, closed=True)], clock.now)
    assert m.hash_range("born-and-closed", clock.now) == (5, 9)
    m.start()
    m.refresh_succeeded(TWO, clock.now)
    m.learn([*TWO, shard("newer", 0, 3)], clock.now)  # shards of the snapshot stay as they are
    assert m.hash_range("newer", clock.now) == (0, 3)
    assert m.predict(0) == "s0"
    clock.now += 10.0
    assert m.hash_range("newer", clock.now) is None
    assert m.hash_range("s0", clock.now) == TWO[0].hash_range


@st.composite
def contiguous_shards(draw: st.DrawFn) -> list[ShardInfo]:
    cuts = draw(
        st.lists(st.integers(min_value=1, max_value=MAX_HASH_KEY), max_size=40, unique=True)
    )
    bounds = [0, *sorted(cuts), MAX_HASH_KEY + 1]
    shards = [
        shard(f"shardId-{i:012d}", lo, hi - 1)
        for i, (lo, hi) in enumerate(itertools.pairwise(bounds))
    ]
    closed = draw(st.lists(st.integers(min_value=0, max_value=MAX_HASH_KEY), max_size=3))
    shards += [shard(f"closed-{i}", 0, end, closed=True) for i, end in enumerate(closed)]
    return draw(st.permutations(shards))


@settings(deadline=None)
@given(
    contiguous_shards(),
    st.lists(st.integers(min_value=0, max_value=MAX_HASH_KEY), max_size=30),
    st.data(),
)
def test_predict_matches_brute_force_owner(
    shards: list[ShardInfo], keys: list[int], data: st.DataObject
) -> None:
    m = ShardMap()
    m.start()
    m.refresh_succeeded(shards, NOW)
    open_shards = [s for s in shards if s.is_open]
    edges = [k for s in open_shards for k in (s.start_hash_key, s.end_hash_key)]
    for key in keys + edges:
        owners = [s.shard_id for s in open_shards if s.start_hash_key <= key <= s.end_hash_key]
        assert len(owners) == 1
        assert m.predict(key) == owners[0]
        assert m.hash_range(owners[0], NOW) == next(
            s.hash_range for s in open_shards if s.shard_id == owners[0]
        )


SLOT = 2**116  # predict's slot table cuts the key space by the top 12 bits
near_slot_edges = st.builds(
    lambda slot, delta: slot * SLOT + delta,
    st.integers(min_value=0, max_value=4096),
    st.integers(min_value=-2, max_value=2),
)


@settings(deadline=None)
@given(
    st.lists(st.tuples(near_slot_edges, near_slot_edges).map(sorted), min_size=1, max_size=12),
    st.lists(near_slot_edges | st.integers(min_value=-1, max_value=MAX_HASH_KEY + 1)),
)
def test_predict_agrees_with_the_bisect_lookup_on_any_table(
    ranges: list[list[int]], keys: list[int]
) -> None:
    # Gaps, overlaps and bounds on and next to slot edges: predict's slot table must give
    # what ShardTable.owner's bisect gives for every key, on and off the key space.
    shards = [shard(f"s{i}", max(lo, 0), hi) for i, (lo, hi) in enumerate(ranges)]
    m = ShardMap()
    m.start()
    m.refresh_succeeded(shards, NOW)
    table = ShardTable(shards)
    every = keys + [k + d for s in shards for k in s.hash_range for d in (-1, 0, 1)]
    for key in every:
        owner = table.owner(key)
        assert m.predict(key) == (None if owner is None else owner.shard_id)
    assert m.predict_many(every) == list(map(m.predict, every))
    in_space = [k for k in every if 0 <= k <= MAX_HASH_KEY]
    assert m.predict_many(in_space) == list(map(m.predict, in_space))


def test_predict_many_answers_only_when_ready() -> None:
    m = ShardMap()
    assert m.predict_many([0, MAX_HASH_KEY]) == [None, None]
    m.start()
    m.refresh_succeeded(TWO, NOW)
    assert m.predict_many([0, MAX_HASH_KEY]) == [m.predict(0), m.predict(MAX_HASH_KEY)]
    assert m.predict_many([]) == []


# list_all_shards.


class FakeListShards:
    """Serves ``pages`` in order; each page may be a dict or an exception to raise."""

    def __init__(self, *pages: Mapping[str, Any] | BaseException) -> None:
        self.pages = list(pages)
        self.calls: list[dict[str, Any]] = []

    async def __call__(self, **kwargs: Any) -> Mapping[str, Any]:
        self.calls.append(kwargs)
        page = self.pages.pop(0)
        if isinstance(page, BaseException):
            raise page
        return page


class RecordingSleep:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        await asyncio.sleep(0)


def test_list_all_shards_follows_next_token_without_stream_name() -> None:
    fake = FakeListShards(
        {"Shards": [api_shard("a", 0, 9)], "NextToken": "t1"},
        {"Shards": [api_shard("b", 10, 19)], "NextToken": "t2"},
        {"Shards": [api_shard("c", 20, MAX_HASH_KEY)]},
    )
    shards = asyncio.run(list_all_shards(fake, "s", {"Type": "AT_LATEST"}, page_size=2))
    assert [s.shard_id for s in shards] == ["a", "b", "c"]
    assert fake.calls == [
        {"StreamName": "s", "ShardFilter": {"Type": "AT_LATEST"}, "MaxResults": 2},
        {"NextToken": "t1", "MaxResults": 2},
        {"NextToken": "t2", "MaxResults": 2},
    ]


def test_list_all_shards_takes_a_client_and_an_arn() -> None:
    class Client:
        def __init__(self) -> None:
            self.list_shards = FakeListShards({"Shards": [], "NextToken": ""})

    client = Client()
    arn = "arn:aws:kinesis:us-east-1:123456789012:stream/s"
    assert asyncio.run(list_all_shards(client, arn)) == []
    assert client.list_shards.calls == [{"StreamARN": arn, "MaxResults": 1000}]


def test_list_all_shards_refuses_bad_arguments() -> None:
    with pytest.raises(TypeError, match="list_shards callable"):
        asyncio.run(list_all_shards(42, "s"))
    with pytest.raises(ValueError, match="max_attempts"):
        asyncio.run(list_all_shards(FakeListShards(), "s", max_attempts=0))


def test_list_all_shards_retries_limit_exceeded_on_the_same_page() -> None:
    fake = FakeListShards(
        {"Shards": [api_shard("a", 0, 9)], "NextToken": "t1"},
        throttled(),
        throttled(),
        {"Shards": [api_shard("b", 10, MAX_HASH_KEY)]},
    )
    sleep = RecordingSleep()
    shards = asyncio.run(list_all_shards(fake, "s", sleep=sleep, rng=lambda: 1.0))
    assert [s.shard_id for s in shards] == ["a", "b"]
    assert sleep.delays == [0.2, 0.4]
    assert fake.calls[1:] == [{"NextToken": "t1", "MaxResults": 1000}] * 3


def test_list_all_shards_gives_up_after_max_attempts() -> None:
    fake = FakeListShards(*[throttled() for _ in range(3)])
    sleep = RecordingSleep()
    with pytest.raises(ClientError, match="LimitExceededException"):
        asyncio.run(list_all_shards(fake, "s", max_attempts=3, sleep=sleep, rng=lambda: 1.0))
    assert sleep.delays == [0.2, 0.4]


def test_list_all_shards_does_not_retry_other_errors() -> None:
    fake = FakeListShards(throttled("ResourceNotFoundException"))
    with pytest.raises(ClientError, match="ResourceNotFoundException"):
        asyncio.run(list_all_shards(fake, "s", sleep=RecordingSleep()))
    assert len(fake.calls) == 1


# ShardMapDriver.


def listing(*shards: ShardInfo) -> dict[str, Any]:
    return {
        "Shards": [
            api_shard(
                s.shard_id, s.start_hash_key, s.end_hash_key, ending_seq=s.ending_sequence_number
            )
            for s in shards
        ]
    }


class Switchable:
    """A list_shards fake whose answer the test changes, and can hold until released."""

    def __init__(self, answer: Mapping[str, Any] | BaseException) -> None:
        self.answer = answer
        self.calls = 0
        self.gate: asyncio.Event | None = None

    async def __call__(self, **kwargs: Any) -> Mapping[str, Any]:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def run(coro_fn: Callable[[], Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro_fn(), 10))


def test_driver_start_waits_for_the_first_snapshot() -> None:
    async def main() -> None:
        fake = Switchable(listing(*TWO))
        async with ShardMapDriver("s", fake) as driver:
            assert driver.map.state is ShardMapState.READY
            assert driver.map.predict(HALF) == "s1"
            assert driver.last_error is None

    run(main)


def test_driver_retries_with_backoff_until_listshards_works() -> None:
    async def main() -> None:
        fake = Switchable(throttled("InternalFailure"))
        sleep = RecordingSleep()

        async def flaky_sleep(delay: float) -> None:
            await sleep(delay)
            if len(sleep.delays) == 3:
                fake.answer = listing(*TWO)

        async with ShardMapDriver("s", fake, sleep=flaky_sleep) as driver:
            assert driver.map.predict(0) == "s0"
        assert sleep.delays == [1.0, 2.0, 4.0]
        assert fake.calls == 4

    run(main)


def test_driver_backoff_doubles_to_its_cap_and_starts_again_at_the_next_refresh() -> None:
    async def main() -> None:
        fake = Switchable(throttled("InternalFailure"))
        clock = FakeClock()
        delays: list[float] = []
        seen: list[tuple[ShardMapState, bool]] = []

        async def sleep(delay: float) -> None:
            delays.append(delay)
            seen.append((driver.map.state, driver.map.retry_pending))
            clock.now += delay
            if len(delays) in (5, 7):
                fake.answer = listing(*TWO)
            await asyncio.sleep(0)

        driver = ShardMapDriver("s", fake, clock=clock, sleep=sleep, max_backoff=4.0)
        async with driver:
            assert delays == [1.0, 2.0, 4.0, 4.0, 4.0]
            assert seen == [(ShardMapState.INVALID, True)] * 5
            assert driver.map.updated_at == clock.now
            fake.answer = throttled("InternalFailure")
            assert driver.invalidate(clock.now + 1, None)
            await driver.wait_ready(5)
            assert delays[5:] == [1.0, 2.0]

    run(main)


def test_driver_takes_a_clock_and_waits_on_its_sleep() -> None:
    class Ticking:
        def __init__(self) -> None:
            self.t = 100.0
            self.slept: list[float] = []

        def now(self) -> float:
            return self.t

        async def sleep(self, seconds: float) -> None:
            self.slept.append(seconds)
            self.t += seconds
            fake.answer = listing(*TWO)

    async def main() -> None:
        ticking = Ticking()
        async with ShardMapDriver("s", fake, clock=ticking) as driver:
            assert driver.clock() == 101.0
            assert driver.map.updated_at == 101.0
            assert driver.hash_range("s0") == TWO[0].hash_range
        assert ticking.slept == [1.0]

    fake = Switchable(throttled("InternalFailure"))
    run(main)


def test_driver_start_fails_fast_on_a_missing_stream() -> None:
    async def main() -> None:
        driver = ShardMapDriver("nope", Switchable(throttled("ResourceNotFoundException")))
        with pytest.raises(KinesisConnectorError, match="ResourceNotFoundException") as info:
            await driver.start()
        assert not isinstance(info.value, ShardMapTimeoutError)
        assert isinstance(info.value.__cause__, ClientError)
        assert driver._task is None  # the retry loop was stopped
        with pytest.raises(RuntimeError, match="closed"):
            await driver.start()

    run(main)


def test_driver_start_gives_up_by_its_policy_with_the_history_and_no_retry_announced(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``give_up`` is the start policy's: the executor raises the last failure with the
    history of the attempts before it, and announces the retries that came, not one more."""

    async def main() -> None:
        fake = Switchable(throttled("InternalFailure"))
        driver = ShardMapDriver(
            "s", fake, sleep=RecordingSleep(), give_up=lambda _error, attempts: attempts >= 3
        )
        with pytest.raises(KinesisConnectorError, match="InternalFailure") as info:
            await driver.start()
        assert not isinstance(info.value, ShardMapTimeoutError)
        assert fake.calls == 3
        assert info.value.__cause__ is driver.last_error
        assert getattr(driver.last_error, "__notes__", []) == [
            "retried: 3 failed attempts over 0.0 s (InternalFailure x3); the last: slow down"
        ]

    caplog.set_level("WARNING", logger="kinesis_core.aws.executor")
    run(main)
    assert [r.getMessage().rpartition("; ")[2] for r in caplog.records] == [
        "retrying in 1.0 s",
        "retrying in 2.0 s",
    ]


def test_driver_start_times_out() -> None:
    async def main() -> None:
        fake = Switchable(throttled("InternalFailure"))
        driver = ShardMapDriver("s", fake, start_timeout=0.05, min_backoff=0.01, max_backoff=0.01)
        with pytest.raises(ShardMapTimeoutError, match=r"not ready after 0\.05 s") as info:
            await driver.start()
        assert isinstance(info.value, TimeoutError)
        assert isinstance(info.value.__cause__, ClientError)
        assert fake.calls >= 1

    run(main)


def test_driver_start_without_waiting() -> None:
    async def main() -> None:
        fake = Switchable(listing(*TWO))
        fake.gate = asyncio.Event()
        driver = ShardMapDriver("s", fake, wait_on_start=False)
        await driver.start()
        assert driver.map.state is ShardMapState.UPDATING
        assert driver.map.predict(0) is None
        fake.gate.set()
        await driver.wait_ready(5)
        assert driver.map.predict(0) == "s0"
        await driver.close()

    run(main)


def test_driver_invalidate_learns_the_children_of_a_split() -> None:
    async def main() -> None:
        clock = FakeClock()
        fake = Switchable(listing(*TWO))
        async with ShardMapDriver("s", fake, clock=clock) as driver:
            sent_at = clock.now
            clock.now += 1
            fake.answer = listing(shard("s0", 0, HALF - 1, closed=True), *SPLIT)
            fake.gate = asyncio.Event()
            assert driver.invalidate(sent_at + 0.5, "s0")
            assert not driver.invalidate(sent_at + 0.6, "s0")
            assert fake.calls == 1  # the refresh task has not run yet
            fake.gate.set()
            await driver.wait_ready(5)
            assert fake.calls == 2
            assert driver.map.predict(0) == "s2"
            assert driver.hash_range("s0") == (0, HALF - 1)
            assert not driver.invalidate(sent_at + 0.7, "s0")

    run(main)


def test_driver_close_cancels_a_refresh_in_flight() -> None:
    async def main() -> None:
        fake = Switchable(listing(*TWO))
        fake.gate = asyncio.Event()
        driver = ShardMapDriver("s", fake, wait_on_start=False)
        await driver.start()
        await asyncio.sleep(0)
        await driver.close()
        assert driver.map.state is ShardMapState.UPDATING
        assert not driver.invalidate(1e9, None)

    run(main)


def test_driver_wait_ready_times_out() -> None:
    async def main() -> None:
        fake = Switchable(listing(*TWO))
        fake.gate = asyncio.Event()
        driver = ShardMapDriver("s", fake, wait_on_start=False)
        await driver.start()
        with pytest.raises(ShardMapTimeoutError):
            await driver.wait_ready(0.01)
        await driver.close()

    run(main)


# The stream's maximum record size (RecordSizeLimit, and the driver's DescribeStreamSummary).

MIB = 1024 * 1024


def summary(kib: int | None = None) -> dict[str, Any]:
    described: dict[str, Any] = {"StreamStatus": "ACTIVE"}
    if kib is not None:
        described["MaxRecordSizeInKiB"] = kib
    return {"StreamDescriptionSummary": described}


def test_record_limit_is_1_mib_until_the_stream_reports_one() -> None:
    limit = RecordSizeLimit()
    assert (limit.bytes, limit.reported, limit.error) == (MIB, False, None)
    assert limit.answered(summary(10240)["StreamDescriptionSummary"], 0.0)
    assert (limit.bytes, limit.reported) == (10 * MIB, True)
    assert not limit.answered(summary(10240)["StreamDescriptionSummary"], 1.0)  # unchanged
    assert limit.answered(summary()["StreamDescriptionSummary"], 2.0)  # no field: the default
    assert (limit.bytes, limit.reported) == (MIB, False)
    for odd in ("2048", True, 0, -5, None):
        limit.answered({"MaxRecordSizeInKiB": odd}, 3.0)
        assert limit.bytes == MIB
    limit.answered({"MaxRecordSizeInKiB": 99_999}, 4.0)
    assert limit.bytes == 10 * MIB  # never above what any stream takes


def test_record_limit_keeps_its_value_when_a_check_fails_and_says_why() -> None:
    limit = RecordSizeLimit()
    limit.answered({"MaxRecordSizeInKiB": 2048}, 0.0)
    limit.failed("DescribeStreamSummary failed: AccessDeniedException: no", 1.0)
    assert limit.bytes == 2 * MIB
    assert limit.error is not None
    limit.answered({"MaxRecordSizeInKiB": 2048}, 2.0)
    assert limit.error is None


def test_record_limit_paces_checks_and_knows_which_came_after_a_time() -> None:
    limit = RecordSizeLimit(min_interval=1.0)
    assert limit.next_check(0.0) == 0.0
    assert not limit.checked_since(0.0)
    limit.started(5.0)
    assert limit.next_check(5.2) == pytest.approx(0.8)
    assert limit.next_check(6.0) == 0.0
    assert not limit.checked_since(5.0)  # started, not finished
    limit.answered({}, 5.0)
    assert limit.checked_since(5.0)
    assert limit.checked_since(4.0)
    assert not limit.checked_since(5.1)  # a record that came after it started needs another
    limit.failed("boom", 7.0)
    assert limit.checked_since(7.0)
    with pytest.raises(ValueError, match="min_interval"):
        RecordSizeLimit(min_interval=-1)


@pytest.mark.parametrize(
    ("state", "size", "says"),
    [
        ("default", 2 * MIB, ["2097152 bytes", "1024 KiB", "'orders'", "reports none"]),
        ("reported", 3 * MIB, ["2048 KiB", "MaxRecordSizeInKiB", "max-record-size-in-ki-b 3072"]),
        ("denied", 2 * MIB, ["AccessDenied", "kinesis:DescribeStreamSummary", "1024 KiB"]),
        ("reported", 11 * MIB, ["10 MiB", "the most any Kinesis stream takes", "S3"]),
    ],
)
def test_a_refusal_names_the_streams_limit_and_how_to_raise_it(
    state: str, size: int, says: list[str]
) -> None:
    limit = RecordSizeLimit()
    if state == "reported":
        limit.answered({"MaxRecordSizeInKiB": 2048}, 0.0)
    elif state == "denied":
        limit.failed("DescribeStreamSummary failed: AccessDeniedException: no", 0.0)
    message = limit.explain(size, "orders")
    for part in says:
        assert part in message
    if size <= 10 * MIB:
        assert "UpdateMaxRecordSize" in message
        assert "S3" in message


class FakeDescribe:
    """DescribeStreamSummary reporting ``kib`` (None: no field); may raise ``error``."""

    def __init__(self, kib: int | None = None) -> None:
        self.kib = kib
        self.error: BaseException | None = None
        self.calls: list[dict[str, Any]] = []
        self.gate: asyncio.Event | None = None

    async def __call__(self, **kwargs: Any) -> Mapping[str, Any]:
        self.calls.append(kwargs)
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error
        return summary(self.kib)


def test_driver_learns_the_record_limit_at_start_and_at_every_refresh() -> None:
    async def main() -> None:
        clock = FakeClock()
        describe = FakeDescribe(2048)
        listed = Switchable(listing(*TWO))
        arn = "arn:aws:kinesis:us-east-1:123456789012:stream/s"
        async with ShardMapDriver(arn, listed, describe_fn=describe, clock=clock) as driver:
            assert driver.record_limit.bytes == 2 * MIB
            assert describe.calls == [{"StreamARN": arn}]
            describe.kib = 10240
            clock.now += 1
            listed.answer = listing(shard("s0", 0, HALF - 1, closed=True), *SPLIT)
            assert driver.invalidate(clock.now, "s0")
            await driver.wait_ready(5)
            assert driver.record_limit.bytes == 10 * MIB
            assert len(describe.calls) == 2

    run(main)


def test_driver_starts_with_the_default_when_describe_is_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        describe = FakeDescribe(10240)
        describe.error = throttled("AccessDeniedException")
        async with ShardMapDriver("s", Switchable(listing(*TWO)), describe_fn=describe) as driver:
            assert driver.map.state is ShardMapState.READY  # the map does not depend on it
            assert driver.record_limit.bytes == MIB
            assert "AccessDeniedException" in (driver.record_limit.error or "")

    run(main)
    assert "DescribeStreamSummary failed" in caplog.text


def test_check_record_limit_asks_after_the_call_shares_calls_and_paces_them() -> None:
    async def main() -> None:
        clock = FakeClock()
        sleep = RecordingSleep()
        describe = FakeDescribe()
        async with ShardMapDriver(
            "s",
            Switchable(listing(*TWO)),
            describe_fn=describe,
            clock=clock,
            sleep=sleep,
            limit_check_interval=1.0,
        ) as driver:
            assert driver.record_limit.bytes == MIB
            describe.kib = 10240  # UpdateMaxRecordSize meanwhile
            clock.now += 0.25
            first, second = await asyncio.gather(
                driver.check_record_limit(), driver.check_record_limit()
            )
            assert first is second is driver.record_limit
            assert driver.record_limit.bytes == 10 * MIB
            assert len(describe.calls) == 2  # one at start, one shared by both callers
            assert sleep.delays == []  # the start's check does not count for the pacing
            clock.now += 0.25
            await driver.check_record_limit()
            assert len(describe.calls) == 3
            assert sleep.delays == [0.75]  # a second after the previous one
            clock.now += 5
            await driver.check_record_limit()
            assert len(describe.calls) == 4
            assert sleep.delays == [0.75]  # long enough since the last one: at once

    run(main)


def test_check_record_limit_waits_for_a_check_that_started_after_it() -> None:
    async def main() -> None:
        clock = FakeClock()
        describe = FakeDescribe()
        async with ShardMapDriver(
            "s", Switchable(listing(*TWO)), describe_fn=describe, clock=clock
        ) as driver:
            clock.now += 2
            describe.gate = asyncio.Event()
            early = asyncio.ensure_future(driver.check_record_limit())
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            assert len(describe.calls) == 2  # in flight, started before the next caller
            clock.now += 2
            describe.kib = 4096
            late = asyncio.ensure_future(driver.check_record_limit())
            await asyncio.sleep(0)
            describe.gate.set()
            await early
            await late
            assert len(describe.calls) == 3  # the late caller did not take the early answer
            assert driver.record_limit.bytes == 4 * MIB

    run(main)


def test_check_record_limit_without_describe_is_the_default_and_close_stops_a_check() -> None:
    async def main() -> None:
        async with ShardMapDriver("s", Switchable(listing(*TWO))) as plain:
            assert (await plain.check_record_limit()).bytes == MIB
        describe = FakeDescribe()
        driver = ShardMapDriver("s", Switchable(listing(*TWO)), describe_fn=describe)
        await driver.start()
        describe.gate = asyncio.Event()
        waiting = asyncio.ensure_future(driver.check_record_limit())
        await asyncio.sleep(0.01)
        await driver.close()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    run(main)
