"""ReadFromKinesis's shard discovery, backlog estimate and the claims they feed the restriction
tracker. Pure: no Beam pipeline, no network."""

from __future__ import annotations

import json

import pytest

from beam_kinesis.backlog import ByteRate, backlog_bytes
from beam_kinesis.discovery import (
    Discovery,
    DiscoveryCoder,
    DiscoveryDeadlineClaim,
    DiscoveryStopClaim,
    DiscoveryTracker,
    EmitClaim,
    StartClaim,
    new_shards,
    parents_ended,
    shard_restrictions,
    started,
)
from beam_kinesis.plan import (
    KinesisRestriction,
    ShardCursor,
    ShardRef,
    decode_restriction,
    encode_restriction,
    initial_restriction,
    restriction_backlog,
)
from beam_kinesis.restriction import (
    BacklogClaim,
    EndClaim,
    KinesisRestrictionTracker,
    ParentsEndedClaim,
)
from kinesis_core.checkpoint import SHARD_END
from kinesis_core.consumer.lineage import ShardNode
from kinesis_core.shards.hashing import MAX_HASH_KEY

HALF = MAX_HASH_KEY // 2
QUARTER = MAX_HASH_KEY // 4


def node(shard_id: str, lo: int, hi: int, *parents: str, is_open: bool = True) -> ShardNode:
    return ShardNode(shard_id, parents, (lo, hi), is_open)


TWO = [node("a", 0, HALF), node("b", HALF + 1, MAX_HASH_KEY)]
SPLIT = [
    *TWO,
    node("a1", 0, QUARTER, "a"),
    node("a2", QUARTER + 1, HALF, "a"),
    node("a11", 0, QUARTER // 2, "a1"),
]


# -- the backlog ----------------------------------------------------------------------------------


def test_the_backlog_is_the_lag_times_the_learnt_rate() -> None:
    rate = ByteRate()
    assert rate.bytes_per_ms is None
    assert backlog_bytes(5_000, rate) == 0  # nothing learnt yet: nothing known behind
    rate.observe(1_000, first_ms=10_000, last_ms=10_100)  # 10 bytes per ms
    assert rate.bytes_per_ms == pytest.approx(10.0)
    assert backlog_bytes(2_000, rate) == 20_000
    assert backlog_bytes(0, rate) == 0  # caught up
    assert backlog_bytes(None, rate) == 0  # no lag reported


def test_the_rate_counts_the_gap_since_the_previous_response() -> None:
    rate = ByteRate()
    rate.observe(100, first_ms=0, last_ms=0)
    assert rate.bytes_per_ms == pytest.approx(100.0)  # one millisecond at least
    rate.observe(100, first_ms=1_000, last_ms=1_000)  # a second later
    assert (rate.bytes_per_ms or 0.0) < 1.0


# -- the claims of the restriction tracker ----------------------------------------------------


def cursor(shard_id: str, *waiting: ShardRef, backlog: int | None = None) -> ShardCursor:
    return ShardCursor(shard_id, 0, HALF, (), tuple(waiting), None, None, None, backlog)


def test_backlog_claims_size_the_restriction_and_its_progress_in_bytes() -> None:
    tracker = KinesisRestrictionTracker(
        KinesisRestriction(0, MAX_HASH_KEY, (cursor("a"), cursor("b")), None)
    )
    assert tracker.current_progress().remaining_work == 1  # unknown, not done
    assert tracker.try_claim(BacklogClaim("a", 4_000, 300))
    assert tracker.try_claim(BacklogClaim("b", 1_000, 200))
    progress = tracker.current_progress()
    assert (progress.completed_work, progress.remaining_work) == (500, 5_000)
    assert restriction_backlog(tracker.current_restriction()) == 5_000
    assert tracker.try_claim(BacklogClaim("a", 0, 4_000))
    assert tracker.current_progress().remaining_work == 1_000
    tracker.try_split(0)
    assert tracker.current_progress().remaining_work == 0


def test_an_ended_shard_takes_its_backlog_with_it() -> None:
    tracker = KinesisRestrictionTracker(
        KinesisRestriction(0, MAX_HASH_KEY, (cursor("a", backlog=50), cursor("b")), None)
    )
    tracker.try_claim(EndClaim("a", ()))
    assert restriction_backlog(tracker.current_restriction()) == 0


def test_parents_ended_makes_a_waiting_shard_readable_from_its_stored_position() -> None:
    waiting = cursor("c", ShardRef("a", 0, HALF))
    tracker = KinesisRestrictionTracker(KinesisRestriction(0, HALF, (waiting,), None))
    assert tracker.try_claim(ParentsEndedClaim("c", (42, 0)))
    (c,) = tracker.current_restriction().cursors
    assert c.readable
    assert c.position == (42, 0)
    with pytest.raises(ValueError, match="not a shard"):
        tracker.try_claim(ParentsEndedClaim("x", None))


def test_the_coder_keeps_the_backlog_and_reads_version_1() -> None:
    r = KinesisRestriction(0, HALF, (cursor("a", backlog=123),), None)
    assert decode_restriction(encode_restriction(r)) == r
    document = json.loads(encode_restriction(r))
    document["v"] = 1
    document["cursors"] = [c[:8] for c in document["cursors"]]
    old = decode_restriction(json.dumps(document).encode())
    assert old.cursors[0].backlog is None
    assert old.cursors[0]._replace(backlog=123) == r.cursors[0]


# -- discovery ----------------------------------------------------------------------------------


def test_the_start_gives_one_restriction_per_shard_owning_its_range() -> None:
    whole = initial_restriction(SPLIT, {}, start=None, child_start=None, created_ms=7)
    parts = shard_restrictions(whole)
    assert [(r.lo, r.hi, [c.shard_id for c in r.cursors]) for r in parts] == [
        (0, HALF, ["a"]),
        (HALF + 1, MAX_HASH_KEY, ["b"]),
    ]
    assert all(r.created_ms == 7 for r in parts)
    assert started(whole, SPLIT) == {"a", "b"}


def test_new_shards_are_the_descendants_of_what_was_output_once_each() -> None:
    found = new_shards(SPLIT, frozenset({"a", "b"}), child_start=None, created_ms=7)
    assert [r.cursors[0].shard_id for r in found] == ["a1", "a11", "a2"]
    a11 = found[1]
    assert (a11.lo, a11.hi) == (0, QUARTER // 2)
    assert a11.cursors[0].waiting_for == (ShardRef("a1", 0, QUARTER),)
    assert all(r.created_ms == 7 for r in found)
    emitted = frozenset({"a", "b", "a1", "a2", "a11"})
    assert new_shards(SPLIT, emitted, child_start=None, created_ms=7) == []


def test_shards_that_descend_from_nothing_read_are_never_output() -> None:
    # A LATEST start read only the open shards a1 and a2: the closed a and its other
    # descendants are not theirs.
    listing = [*SPLIT, node("z", 0, 5, "q", is_open=False)]
    found = new_shards(listing, frozenset({"a2", "b"}), child_start=None, created_ms=None)
    assert found == []


def test_a_merged_child_waits_for_both_parents() -> None:
    listing = [*TWO, node("m", 0, MAX_HASH_KEY, "a", "b")]
    (merged,) = new_shards(listing, frozenset({"a", "b"}), child_start=5, created_ms=None)
    c = merged.cursors[0]
    assert c.waiting_for == (ShardRef("a", 0, HALF), ShardRef("b", HALF + 1, MAX_HASH_KEY))
    assert c.start == 5
    both = {"a": SHARD_END, "b": SHARD_END}
    assert parents_ended(c, both) == (True, None)
    assert parents_ended(c, {"a": SHARD_END, "b": (9, 0)}) == (False, None)
    assert parents_ended(c, {**both, "m": (3, 1)}) == (True, (3, 1))
    # Part rows of a parent (read by two restrictions before) count when they cover it.
    parts = {"a": SHARD_END, f"b@{HALF + 1}-{HALF + 9}": SHARD_END}
    assert parents_ended(c, parts) == (False, None)
    parts[f"b@{HALF + 10}-{MAX_HASH_KEY}"] = SHARD_END
    assert parents_ended(c, parts) == (True, None)


def test_the_discovery_tracker_remembers_what_it_output_and_self_checkpoints() -> None:
    tracker = DiscoveryTracker(Discovery(None))
    assert tracker.try_claim(StartClaim(frozenset({"a", "b"}), 5, 7))
    assert tracker.try_claim(EmitClaim(frozenset({"c"}), listed=frozenset({"b", "c"})))
    assert tracker.current_restriction().emitted == frozenset({"b", "c"})  # a: past retention
    assert tracker.try_split(0.5) is None
    primary, residual = tracker.try_split(0)  # type: ignore[misc]
    assert primary.done
    assert not residual.done
    assert residual == Discovery(frozenset({"b", "c"}), None, False, 5, 7)
    tracker.check_done()
    assert not tracker.try_claim(EmitClaim(frozenset({"d"})))


def test_a_bounded_discovery_stops() -> None:
    tracker = DiscoveryTracker(Discovery(frozenset()), bounded=True)
    assert tracker.try_claim(DiscoveryDeadlineClaim(99))
    with pytest.raises(ValueError, match="neither"):
        tracker.check_done()
    assert tracker.try_claim(DiscoveryStopClaim())
    tracker.check_done()
    assert tracker.current_restriction() == Discovery(frozenset(), 99, True)
    assert tracker.current_progress().remaining_work == 0
    with pytest.raises(ValueError, match="not a discovery claim"):
        DiscoveryTracker(Discovery(None)).try_claim("x")  # type: ignore[arg-type]


def test_the_discovery_coder_is_deterministic() -> None:
    coder = DiscoveryCoder()
    one = Discovery(frozenset({"b", "a"}), 5, False, 3, 4)
    assert coder.decode(coder.encode(one)) == one
    assert coder.encode(one) == coder.encode(Discovery(frozenset({"a", "b"}), 5, False, 3, 4))
    assert coder.decode(coder.encode(Discovery(None))) == Discovery(None)
    assert coder.is_deterministic()
    assert coder == DiscoveryCoder()
    assert hash(coder) == hash(DiscoveryCoder())
    with pytest.raises(ValueError, match="version 3"):
        coder.decode(b'{"v":3}')
