"""The ReadFromKinesis restriction: claims, checkpoints, adoption of children, the initial
split, resuming from stored rows, and the coder. Pure: no Beam pipeline, no network."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from beam_kinesis.plan import (
    KinesisRestriction,
    ShardCursor,
    ShardRef,
    checkpoint_key,
    commit_values,
    decode_restriction,
    encode_restriction,
    initial_restriction,
    narrow,
    parent_refs,
    parse_checkpoint_key,
    partition,
    restriction_watermark,
    resume_value,
)
from beam_kinesis.restriction import (
    DeadlineClaim,
    EndClaim,
    IdleClaim,
    KinesisRestrictionCoder,
    KinesisRestrictionTracker,
    RecordClaim,
    SkipClaim,
    StopClaim,
)
from kinesis_core.checkpoint import SHARD_END, Sentinel
from kinesis_core.consumer.lineage import ShardNode
from kinesis_core.shards.hashing import MAX_HASH_KEY

HALF = MAX_HASH_KEY // 2
BIG_SEQ = 49680447560144433685280866154685739284850410090676617218


def cursor(
    shard_id: str,
    lo: int = 0,
    hi: int = MAX_HASH_KEY,
    *,
    parents: tuple[str, ...] = (),
    waiting: tuple[ShardRef, ...] = (),
    position: tuple[int, int] | None = None,
    start: int | None = None,
    watermark: int | None = None,
) -> ShardCursor:
    return ShardCursor(shard_id, lo, hi, parents, waiting, position, start, watermark)


def restriction(
    *cursors: ShardCursor, lo: int = 0, hi: int = MAX_HASH_KEY, **kw: object
) -> KinesisRestriction:
    return KinesisRestriction(lo, hi, tuple(sorted(cursors)), None, **kw)  # type: ignore[arg-type]


def node(shard_id: str, lo: int, hi: int, *parents: str, is_open: bool = True) -> ShardNode:
    return ShardNode(shard_id, parents, (lo, hi), is_open)


# -- the coder ---------------------------------------------------------------------------------


def test_coder_round_trip_keeps_every_field_exactly() -> None:
    r = KinesisRestriction(
        12,
        MAX_HASH_KEY,
        (
            cursor(
                "shardId-1",
                12,
                HALF,
                parents=("shardId-0",),
                position=(BIG_SEQ, 7),
                start=1_700_000_000_123_456,
                watermark=1_700_000_000_000_001,
            ),
            cursor(
                "shardId-2",
                HALF + 1,
                MAX_HASH_KEY,
                parents=("shardId-1", "shardId-9"),
                waiting=(ShardRef("shardId-9", 0, HALF),),
            ),
        ),
        1_600_000_000_000_000,
        records_left=5,
        deadline=1_800_000_000_000_000,
        done=True,
    )
    coder = KinesisRestrictionCoder()
    decoded = coder.decode(coder.encode(r))
    assert decoded == r
    assert decoded.cursors[0].position == (BIG_SEQ, 7)
    assert type(decoded.cursors[0].position[0]) is int
    assert coder.is_deterministic()


def test_coder_is_deterministic_whatever_the_cursor_order() -> None:
    a = cursor("b", position=(3, 0))
    b = cursor("a", waiting=(ShardRef("z", 1, 2), ShardRef("y", 3, 4)))
    b_reversed = b._replace(waiting_for=tuple(reversed(b.waiting_for)))
    one = KinesisRestriction(0, 9, (a, b), None)
    two = KinesisRestriction(0, 9, (b_reversed, a), None)
    assert encode_restriction(one) == encode_restriction(two)


def test_coder_writes_big_numbers_as_decimal_strings_never_floats() -> None:
    encoded = encode_restriction(restriction(cursor("s", position=(BIG_SEQ, 0))))
    assert f'"{BIG_SEQ}"' in encoded.decode()
    assert f'"{MAX_HASH_KEY}"' in encoded.decode()
    assert b"e+" not in encoded
    assert b"." not in encoded


def test_coder_refuses_an_unknown_version() -> None:
    encoded = encode_restriction(restriction(cursor("s"))).replace(b'"v":2', b'"v":99')
    with pytest.raises(ValueError, match="version 99"):
        decode_restriction(encoded)


def test_coders_compare_equal() -> None:
    assert KinesisRestrictionCoder() == KinesisRestrictionCoder()
    assert hash(KinesisRestrictionCoder()) == hash(KinesisRestrictionCoder())


# -- claims --------------------------------------------------------------------------------------


def test_record_claims_move_the_position_and_the_watermark() -> None:
    tracker = KinesisRestrictionTracker(restriction(cursor("s")))
    assert tracker.try_claim(RecordClaim("s", 10, 0, 500))
    assert tracker.try_claim(RecordClaim("s", 10, 1, 400))
    (c,) = tracker.current_restriction().cursors
    assert c.position == (10, 1)
    assert c.watermark == 500


def test_a_record_claim_covers_a_response_of_several_records() -> None:
    tracker = KinesisRestrictionTracker(restriction(cursor("s"), records_left=5))
    assert tracker.try_claim(RecordClaim("s", 10, 2, 700, records=3))
    (c,) = tracker.current_restriction().cursors
    assert (c.position, c.watermark) == ((10, 2), 700)
    assert tracker.current_restriction().records_left == 2
    with pytest.raises(ValueError, match="claimed 3 records with 2 left of max_records"):
        tracker.try_claim(RecordClaim("s", 11, 0, 800, records=3))
    assert tracker.try_claim(RecordClaim("s", 11, 0, 800, records=2))
    assert not tracker.try_claim(RecordClaim("s", 12, 0, 900))
    tracker.check_done()


def test_claims_must_move_forward() -> None:
    tracker = KinesisRestrictionTracker(restriction(cursor("s", position=(10, 3))))
    with pytest.raises(ValueError, match="at or before"):
        tracker.try_claim(RecordClaim("s", 10, 3, 0))
    with pytest.raises(ValueError, match="at or before"):
        tracker.try_claim(SkipClaim("s", 9, 9))
    assert tracker.try_claim(RecordClaim("s", 10, 4, 0))


def test_claims_on_unknown_or_waiting_shards_are_errors() -> None:
    waiting = cursor("child", parents=("p",), waiting=(ShardRef("p", 0, 5),))
    tracker = KinesisRestrictionTracker(restriction(cursor("p"), waiting))
    with pytest.raises(ValueError, match="not a shard"):
        tracker.try_claim(RecordClaim("nope", 1, 0, 0))
    with pytest.raises(ValueError, match="waiting for its parents"):
        tracker.try_claim(RecordClaim("child", 1, 0, 0))
    with pytest.raises(ValueError, match="not a Kinesis restriction claim"):
        tracker.try_claim(("s", 1))  # type: ignore[arg-type]


def test_skip_claims_move_without_output_or_watermark() -> None:
    tracker = KinesisRestrictionTracker(restriction(cursor("s"), records_left=1))
    assert tracker.try_claim(SkipClaim("s", 5, 2))
    (c,) = tracker.current_restriction().cursors
    assert (c.position, c.watermark) == ((5, 2), None)
    assert tracker.current_restriction().records_left == 1


def test_idle_claims_only_raise_the_watermark() -> None:
    tracker = KinesisRestrictionTracker(restriction(cursor("s", watermark=100)))
    tracker.try_claim(IdleClaim("s", 50))
    assert tracker.current_restriction().cursors[0].watermark == 100
    tracker.try_claim(IdleClaim("s", 150))
    assert tracker.current_restriction().cursors[0].watermark == 150


def test_deadline_claim_is_kept_in_the_restriction() -> None:
    tracker = KinesisRestrictionTracker(restriction(cursor("s")))
    tracker.try_claim(DeadlineClaim(123))
    assert tracker.current_restriction().deadline == 123


# -- checkpoints and stops -----------------------------------------------------------------------


def test_split_at_zero_is_a_checkpoint_after_the_last_claim() -> None:
    tracker = KinesisRestrictionTracker(restriction(cursor("s"), records_left=10))
    tracker.try_claim(RecordClaim("s", 7, 0, 1))
    split = tracker.try_split(0)
    assert split is not None
    primary, residual = split
    assert primary.done
    assert not residual.done
    assert primary.cursors == residual.cursors
    assert residual.cursors[0].position == (7, 0)
    assert residual.records_left == 9
    assert bool(residual)  # the SDK tests a residual's truthiness
    assert not tracker.try_claim(RecordClaim("s", 8, 0, 1))
    assert not tracker.try_claim(SkipClaim("s", 8, 0))
    assert tracker.current_restriction() == primary
    tracker.check_done()
    assert tracker.try_split(0) is None


def test_split_at_zero_before_any_claim_hands_everything_over() -> None:
    original = restriction(cursor("s", position=(3, 1)))
    tracker = KinesisRestrictionTracker(original)
    primary, residual = tracker.try_split(0)  # type: ignore[misc]
    assert residual == original
    assert primary == original._replace(done=True)


@pytest.mark.parametrize("fraction", [0.5, 0.01, 1.0])
def test_splits_at_other_fractions_are_refused(fraction: float) -> None:
    tracker = KinesisRestrictionTracker(restriction(cursor("s")))
    assert tracker.try_split(fraction) is None
    assert tracker.try_claim(RecordClaim("s", 1, 0, 0))


def test_check_done_fails_while_shards_are_left() -> None:
    tracker = KinesisRestrictionTracker(restriction(cursor("a"), cursor("b")))
    with pytest.raises(ValueError, match="a, b"):
        tracker.check_done()


def test_a_stop_ends_the_restriction_without_residual() -> None:
    tracker = KinesisRestrictionTracker(restriction(cursor("a")), bounded=True)
    assert tracker.try_claim(StopClaim())
    tracker.check_done()
    assert tracker.current_restriction().done
    assert tracker.try_split(0) is None
    assert tracker.is_bounded()
    assert tracker.current_progress().remaining_work == 0


def test_max_records_ends_the_restriction() -> None:
    tracker = KinesisRestrictionTracker(restriction(cursor("a"), records_left=2))
    assert tracker.try_claim(RecordClaim("a", 1, 0, 0))
    assert tracker.try_claim(RecordClaim("a", 2, 0, 0))
    assert not tracker.try_claim(RecordClaim("a", 3, 0, 0))
    tracker.check_done()
    assert tracker.try_split(0) is None
    assert tracker.current_restriction().cursors[0].position == (2, 0)


def test_a_restriction_without_shards_is_done() -> None:
    tracker = KinesisRestrictionTracker(restriction())
    tracker.check_done()
    assert not tracker.is_bounded()


# -- shard ends and children ---------------------------------------------------------------------


def test_a_split_parent_hands_over_to_both_children() -> None:
    tracker = KinesisRestrictionTracker(restriction(cursor("p", watermark=42)))
    tracker.try_claim(RecordClaim("p", 1, 0, 42))
    tracker.try_claim(
        EndClaim("p", (node("c1", 0, HALF, "p"), node("c2", HALF + 1, MAX_HASH_KEY, "p")))
    )
    cursors = tracker.current_restriction().cursors
    assert [c.shard_id for c in cursors] == ["c1", "c2"]
    assert all(c.readable and c.position is None and c.watermark == 42 for c in cursors)
    assert cursors[0].parents == ("p",)


def test_children_outside_the_range_are_not_adopted() -> None:
    r = restriction(cursor("p", 0, HALF), lo=0, hi=HALF)
    tracker = KinesisRestrictionTracker(r)
    tracker.try_claim(EndClaim("p", (node("c1", 0, 10, "p"), node("c2", 11, HALF, "p"))))
    tracker.try_claim(EndClaim("c1", (node("far", HALF + 1, MAX_HASH_KEY, "c1"),)))
    assert [c.shard_id for c in tracker.current_restriction().cursors] == ["c2"]


def test_a_merge_inside_one_restriction_waits_for_both_parents() -> None:
    a = cursor("a", 0, HALF, watermark=10)
    b = cursor("b", HALF + 1, MAX_HASH_KEY, watermark=20)
    tracker = KinesisRestrictionTracker(restriction(a, b))
    merged = node("m", 0, MAX_HASH_KEY, "a", "b")
    tracker.try_claim(EndClaim("a", (merged,)))
    (b_now, m) = tracker.current_restriction().cursors
    assert b_now.shard_id == "b"
    assert b_now.readable
    assert m.waiting_for == (ShardRef("b", HALF + 1, MAX_HASH_KEY),)
    with pytest.raises(ValueError, match="waiting"):
        tracker.try_claim(RecordClaim("m", 1, 0, 0))
    tracker.try_claim(EndClaim("b", (merged,)))
    (m,) = tracker.current_restriction().cursors
    assert m.readable
    assert m.watermark == 20


def test_a_straddling_merge_is_read_by_both_restrictions_each_after_its_own_parent() -> None:
    left = KinesisRestrictionTracker(restriction(cursor("a", 0, HALF), lo=0, hi=HALF))
    right = KinesisRestrictionTracker(
        restriction(cursor("b", HALF + 1, MAX_HASH_KEY), lo=HALF + 1, hi=MAX_HASH_KEY)
    )
    merged = node("m", 0, MAX_HASH_KEY, "a", "b")
    left.try_claim(EndClaim("a", (merged,)))
    (m,) = left.current_restriction().cursors
    assert m.readable  # b is outside the left range: not waited for
    assert right.current_restriction().cursors[0].shard_id == "b"
    right.try_claim(EndClaim("b", (merged,)))
    assert right.current_restriction().cursors[0].readable


def test_a_child_waits_for_a_parent_this_restriction_has_not_reached_yet() -> None:
    # pa and pb both in range; pb splits into b1/b2; pa ends first, announcing the merge of
    # pa and b1, while b1 is still unknown (its parent pb is being read).
    pa = cursor("pa", 0, 99)
    pb = cursor("pb", 100, 299)
    tracker = KinesisRestrictionTracker(restriction(pa, pb, lo=0, hi=299))
    tracker.try_claim(EndClaim("pa", (node("m", 0, 199, "pa", "b1"),)))
    m = {c.shard_id: c for c in tracker.current_restriction().cursors}["m"]
    assert m.waiting_for == (ShardRef("b1", 100, 199),)
    tracker.try_claim(EndClaim("pb", (node("b1", 100, 199, "pb"), node("b2", 200, 299, "pb"))))
    states = {c.shard_id: c.readable for c in tracker.current_restriction().cursors}
    assert states == {"b1": True, "b2": True, "m": False}
    tracker.try_claim(EndClaim("b1", (node("m", 0, 199, "pa", "b1"),)))
    states = {c.shard_id: c.readable for c in tracker.current_restriction().cursors}
    assert states == {"b2": True, "m": True}


def test_parent_ranges_of_a_merge_are_derived_from_the_child() -> None:
    ended_low = ShardRef("a", 0, 9)
    assert parent_refs(node("m", 0, 19, "a", "b"), ended_low, {}) == [
        ended_low,
        ShardRef("b", 10, 19),
    ]
    ended_high = ShardRef("b", 10, 19)
    assert parent_refs(node("m", 0, 19, "a", "b"), ended_high, {}) == [
        ShardRef("a", 0, 9),
        ended_high,
    ]
    known = {"b": ShardRef("b", 10, 15)}
    assert parent_refs(node("m", 0, 19, "a", "b"), ended_low, known)[1] == ShardRef("b", 10, 15)
    assert parent_refs(node("c", 0, 5, "x"), ShardRef("y", 0, 9), {}) == [ShardRef("x", 0, 5)]


def test_claims_after_a_checkpoint_do_not_adopt() -> None:
    tracker = KinesisRestrictionTracker(restriction(cursor("p")))
    tracker.try_split(0)
    assert not tracker.try_claim(EndClaim("p", (node("c", 0, 1, "p"),)))
    assert not tracker.try_claim(IdleClaim("p", 1))
    assert not tracker.try_claim(StopClaim())


# -- watermarks -----------------------------------------------------------------------------------


def test_watermark_is_the_minimum_over_readable_shards() -> None:
    r = restriction(
        cursor("a", watermark=30),
        cursor("b", watermark=10),
        cursor("w", waiting=(ShardRef("a", 0, 1),), watermark=1),
    )
    assert restriction_watermark(r) == 10
    assert restriction_watermark(restriction(cursor("a", watermark=30), cursor("b"))) is None
    assert restriction_watermark(restriction()) is None


# -- checkpoint keys and resuming -----------------------------------------------------------------


def test_checkpoint_keys_name_the_part_of_a_straddling_shard() -> None:
    whole = cursor("s", 10, 20)
    assert checkpoint_key(whole, 0, 100) == "s"
    assert checkpoint_key(whole, 15, 100) == "s@15-20"
    assert parse_checkpoint_key("s@15-20") == ("s", (15, 20))
    assert parse_checkpoint_key("shardId-000000000001") == ("shardId-000000000001", None)


def test_resume_value_takes_the_furthest_row_per_key_and_the_least_over_keys() -> None:
    assert resume_value(0, 99, []) is None
    assert resume_value(0, 99, [(0, 99, (5, 0))]) == (5, 0)
    assert resume_value(0, 99, [(0, 49, (5, 0)), (50, 99, (3, 2))]) == (3, 2)
    assert resume_value(0, 99, [(0, 49, (5, 0))]) is None  # keys 50..99 never committed
    assert resume_value(0, 99, [(0, 99, (1, 0)), (0, 49, (5, 0)), (50, 99, (7, 0))]) == (5, 0)
    assert resume_value(0, 99, [(0, 49, SHARD_END), (50, 99, SHARD_END)]) is SHARD_END
    assert resume_value(0, 99, [(0, 49, SHARD_END), (50, 99, (9, 9))]) == (9, 9)
    assert resume_value(0, 99, [(0, 99, Sentinel.TRIM_HORIZON)]) is Sentinel.TRIM_HORIZON


def test_commit_values_write_moved_positions_and_ended_shards() -> None:
    r = restriction(
        cursor("same", 0, 10, position=(1, 0)),
        cursor("moved", 0, 10, position=(5, 1), parents=("p",)),
        cursor("new", 50, 200, position=(2, 0)),
        cursor("unread", 0, 10),
        lo=0,
        hi=100,
    )
    before = {"same": (1, 0), "moved": (4, 0), "unread": None}
    ended = [cursor("gone", 0, 10, parents=("g",))]
    assert commit_values(r, before, ended) == [
        ("moved", (5, 1), ("p",)),
        ("new@50-100", (2, 0), ()),
        ("gone", SHARD_END, ("g",)),
    ]


# -- the initial restriction and split ------------------------------------------------------------


def test_initial_split_gives_one_restriction_per_open_shard() -> None:
    shards = [node("s0", 0, 99), node("s1", 100, 199), node("s2", 200, MAX_HASH_KEY)]
    whole = initial_restriction(shards, {}, start=None, child_start=None, records_left=None)
    parts = partition(whole)
    assert [(p.lo, p.hi, [c.shard_id for c in p.cursors]) for p in parts] == [
        (0, 99, ["s0"]),
        (100, 199, ["s1"]),
        (200, MAX_HASH_KEY, ["s2"]),
    ]


def test_initial_restriction_starts_at_the_roots_of_the_listing() -> None:
    shards = [
        node("p", 0, 99, is_open=False),
        node("c1", 0, 49, "p"),
        node("c2", 50, 99, "p"),
        node("q", 100, MAX_HASH_KEY),
    ]
    whole = initial_restriction(shards, {}, start=7, child_start=None, records_left=3)
    assert [(c.shard_id, c.start) for c in whole.cursors] == [("p", 7), ("q", 7)]
    assert whole.records_left == 3
    assert whole.child_start is None


def test_initial_restriction_resumes_from_stored_rows() -> None:
    shards = [
        node("a", 0, 99, is_open=False),
        node("b", 100, MAX_HASH_KEY, is_open=False),
        node("a1", 0, 49, "a", is_open=False),
        node("a2", 50, 99, "a"),
        node("m", 0, 49, "a1"),
        node("b1", 100, MAX_HASH_KEY, "b"),
    ]
    rows = {
        "a": SHARD_END,
        "a1": SHARD_END,
        "a2": (77, 3),
        "b": (12, 0),
        "m@0-20": (5, 0),  # a part row with no partner: m restarts from its beginning
    }
    whole = initial_restriction(shards, rows, start=1, child_start=2)
    got = {c.shard_id: (c.position, c.start, c.waiting_for) for c in whole.cursors}
    assert got == {
        "a2": ((77, 3), 2, ()),
        "b": ((12, 0), 1, ()),
        "m": (None, 2, ()),
    }


def test_initial_restriction_keeps_a_merge_child_waiting_for_an_unfinished_parent() -> None:
    shards = [
        node("a", 0, 99, is_open=False),
        node("b", 100, MAX_HASH_KEY, is_open=False),
        node("m", 0, MAX_HASH_KEY, "a", "b"),
    ]
    whole = initial_restriction(shards, {"a": SHARD_END, "b": (3, 0)}, start=None, child_start=None)
    by_id = {c.shard_id: c for c in whole.cursors}
    assert by_id["m"].waiting_for == (ShardRef("b", 100, MAX_HASH_KEY),)
    parts = partition(whole)
    # The keys of a are done: m's part there has nothing to wait for.
    assert [(p.lo, p.hi) for p in parts] == [(0, 99), (100, MAX_HASH_KEY)]
    low, high = parts
    assert [(c.shard_id, c.readable) for c in low.cursors] == [("m", True)]
    assert [(c.shard_id, c.readable) for c in high.cursors] == [("b", True), ("m", False)]


def test_partition_refuses_overlapping_readable_shards() -> None:
    r = restriction(cursor("a", 0, 60), cursor("b", 50, MAX_HASH_KEY))
    assert partition(r) == [r]


def test_narrow_keeps_cursors_meeting_the_range_and_their_relevant_parents() -> None:
    r = restriction(
        cursor("a", 0, 9),
        cursor("b", 10, 19),
        cursor("m", 0, 19, waiting=(ShardRef("a", 0, 9), ShardRef("b", 10, 19))),
    )
    part = narrow(r, 10, 19)
    assert [c.shard_id for c in part.cursors] == ["b", "m"]
    assert part.cursors[1].waiting_for == (ShardRef("b", 10, 19),)


# -- a simulated stream: every record once, in key order, parents first ----------------------------

KEYS = 64
SPACE = 4096  # a small hash space keeps splits and merges dense


@st.composite
def lineages(draw: st.DrawFn) -> tuple[list[ShardNode], dict[str, list[tuple[int, int]]]]:
    """A stream of SPACE hash keys that starts with 1-3 shards, then goes through random splits
    and merges with records written between them: (every shard, records per shard)."""
    n0 = draw(st.integers(1, 3))
    bounds = sorted(draw(st.sets(st.integers(1, SPACE - 1), min_size=n0 - 1, max_size=n0 - 1)))
    edges = [0, *bounds, SPACE]
    open_shards = [node(f"s{i}", edges[i], edges[i + 1] - 1) for i in range(n0)]
    shards = list(open_shards)
    records: dict[str, list[tuple[int, int]]] = {s.shard_id: [] for s in shards}
    keys = [(SPACE * k) // KEYS + draw(st.integers(0, SPACE // KEYS - 1)) for k in range(KEYS)]
    counter = 0
    for _ in range(draw(st.integers(0, 6))):
        for _ in range(draw(st.integers(0, 8))):
            key = draw(st.sampled_from(keys))
            owner = next(s for s in open_shards if s.hash_range[0] <= key <= s.hash_range[1])
            records[owner.shard_id].append((key, counter))
            counter += 1
        open_shards.sort(key=lambda s: s.hash_range)
        i = draw(st.integers(0, len(open_shards) - 1))
        target = open_shards[i]
        lo, hi = target.hash_range
        new_id = f"s{len(shards)}"
        if draw(st.booleans()) and hi > lo:
            cut = draw(st.integers(lo + 1, hi))
            children = [
                node(new_id, lo, cut - 1, target.shard_id),
                node(f"s{len(shards) + 1}", cut, hi, target.shard_id),
            ]
            open_shards[i : i + 1] = children
        elif i + 1 < len(open_shards):
            other = open_shards[i + 1]
            children = [node(new_id, lo, other.hash_range[1], target.shard_id, other.shard_id)]
            open_shards[i : i + 2] = children
        else:
            continue
        shards.extend(children)
        for child in children:
            records[child.shard_id] = []
    for _ in range(draw(st.integers(0, 8))):
        key = draw(st.sampled_from(keys))
        owner = next(s for s in open_shards if s.hash_range[0] <= key <= s.hash_range[1])
        records[owner.shard_id].append((key, counter))
        counter += 1
    return shards, records


@settings(max_examples=150, deadline=None)
@given(lineages(), st.randoms(use_true_random=False))
def test_simulated_restrictions_emit_every_record_once_in_key_order(
    lineage: tuple[list[ShardNode], dict[str, list[tuple[int, int]]]], rng: random.Random
) -> None:
    """Restrictions read in a random interleaving, checkpointing at random through the coder:
    no record is lost or repeated, per key the records come in write order, and no record of a
    child comes before the last one of its parents (for keys in the reader's range)."""
    shards, records = lineage
    children_of: dict[str, list[ShardNode]] = {s.shard_id: [] for s in shards}
    for s in shards:
        for p in s.parents:
            children_of[p].append(s)
    open_ids = {s.shard_id for s in shards if not children_of[s.shard_id]}
    roots = [s for s in shards if not s.parents]
    pending = partition(initial_restriction(roots, {}, start=None, child_start=None))
    coder = KinesisRestrictionCoder()
    emitted: list[tuple[int, int]] = []

    def consumed(c: ShardCursor) -> int:
        return 0 if c.position is None else c.position[0] + 1

    def has_work(c: ShardCursor) -> bool:
        return c.readable and (consumed(c) < len(records[c.shard_id]) or c.shard_id not in open_ids)

    while pending:
        r = pending.pop(rng.randrange(len(pending)))
        tracker = KinesisRestrictionTracker(r)
        for _ in range(rng.randint(1, 4)):
            ready = [c for c in tracker.current_restriction().cursors if has_work(c)]
            if not ready:
                break
            c = rng.choice(ready)
            done = consumed(c)
            batch = records[c.shard_id][done : done + rng.randint(1, 3)]
            for i, (key, n) in enumerate(batch, start=done):
                if r.lo <= key <= r.hi:
                    assert tracker.try_claim(RecordClaim(c.shard_id, i, 0, n))
                    emitted.append((key, n))
                else:
                    assert tracker.try_claim(SkipClaim(c.shard_id, i, 0))
            if done + len(batch) == len(records[c.shard_id]) and c.shard_id not in open_ids:
                assert tracker.try_claim(EndClaim(c.shard_id, tuple(children_of[c.shard_id])))
        current = tracker.current_restriction()
        if not any(has_work(c) for c in current.cursors):
            assert all(c.readable for c in current.cursors)
            continue
        split = tracker.try_split(0)
        assert split is not None
        pending.append(coder.decode(coder.encode(split[1])))
    written = sorted((key, n) for recs in records.values() for key, n in recs)
    assert sorted(emitted) == written
    last: dict[int, int] = {}
    for key, n in emitted:
        assert n > last.get(key, -1), f"key {key}: record {n} after {last[key]}"
        last[key] = n
