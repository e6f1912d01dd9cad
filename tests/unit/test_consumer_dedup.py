"""The dedup window (kinesis_core/consumer/dedup.py): exact, bounded by age, count and bytes,
compressed, serialised, inherited by child shards."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from kinesis_core.consumer.dedup import MAX_WINDOW_BYTES, VERSION, DedupWindow
from kinesis_core.errors import ConfigurationError
from kinesis_core.record_ids import (
    MAX_RECORD_ID_BYTES,
    derived_partition_key,
    derived_record_id,
    split_counter,
)

BIG = {"max_bytes": MAX_WINDOW_BYTES}

ORIGINS = ["s1.0", "s1.1", "s2.0"]
texts = st.text(st.sampled_from("ab:01"), min_size=1, max_size=5)


@st.composite
def steps(draw: st.DrawFn) -> list[tuple[str, int]]:
    """(id, arrival step in ms): mostly each origin's next counter (runs that compress), some
    counters out of order (retries), some other ids (exceptions)."""
    counters = dict.fromkeys(ORIGINS, 0)
    out = []
    for _ in range(draw(st.integers(0, 120))):
        kind = draw(st.sampled_from(["next", "next", "next", "any", "text"]))
        origin = draw(st.sampled_from(ORIGINS))
        if kind == "next":
            record_id = f"{origin}:{counters[origin]}"
            counters[origin] += 1
        elif kind == "any":
            record_id = f"{origin}:{draw(st.integers(0, 60))}"
        else:
            record_id = draw(texts)
        out.append((record_id, draw(st.integers(-500, 3_000))))
    return out


def run_window(window: DedupWindow, ops: list[tuple[str, int]]) -> list[tuple[str, int, bool]]:
    """Feed ``ops`` (id, arrival step in ms after the window's latest) to ``window``; (id,
    arrival ms, answer) each."""
    now = window.latest_ms or 1_700_000_000_000
    out = []
    for record_id, step in ops:
        now += step
        out.append((record_id, now, window.seen(record_id, now / 1000)))
    return out


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(steps(), st.integers(1, 60), st.integers(1, 20))
def test_the_window_is_exact_within_its_bounds(
    ops: list[tuple[str, int]], max_ids: int, max_age_s: int
) -> None:
    window = DedupWindow(max_ids=max_ids, max_age=max_age_s, **BIG)
    taken: list[tuple[str, int]] = []
    latest = None
    for op in ops:
        ((record_id, ms, duplicate),) = run_window(window, [op])
        ever = {i for i, _ in taken}
        # Never a false positive: a duplicate is an id it took before.
        assert not duplicate or record_id in ever
        if not duplicate:
            taken.append((record_id, ms))
        latest = ms if latest is None else max(latest, ms)
        # Never forgets an id that arrived at most max_age before the latest arrival while
        # the count bound never bound; the newest id, always.
        for age_rank, (kept, at) in enumerate(reversed(taken)):
            if age_rank == 0 or (len(taken) <= max_ids and at >= latest - max_age_s * 1000):
                assert kept in window
        assert len(window) <= max_ids
        assert all(i in ever or i == record_id for i in (i for i, _ in ops) if i in window)


@pytest.mark.slow
@settings(max_examples=80, deadline=None)
@given(steps(), st.integers(1, 60))
def test_a_duplicate_within_the_bounds_is_always_caught(
    ops: list[tuple[str, int]], max_ids: int
) -> None:
    window = DedupWindow(max_ids=max_ids, max_age=3600, **BIG)
    for op in ops:
        ((record_id, ms, duplicate),) = run_window(window, [op])
        if not duplicate:
            assert window.seen(record_id, ms / 1000)  # the same id again, at once


@pytest.mark.slow
@settings(max_examples=80, deadline=None)
@given(steps(), st.integers(1, 60), st.integers(1024, 4096))
def test_the_serialised_window_round_trips_and_stays_within_max_bytes(
    ops: list[tuple[str, int]], max_ids: int, max_bytes: int
) -> None:
    bounds = {"max_ids": max_ids, "max_age": 30.0, "max_bytes": max_bytes}
    window = DedupWindow(**bounds)
    run_window(window, ops)
    text = window.dumps()
    assert len(text.encode()) <= window.size <= max_bytes
    again = DedupWindow.loads(text, **bounds)
    assert again.dumps() == text
    assert len(again) == len(window)
    every = {i for i, _ in ops}
    assert {i for i in every if i in again} == {i for i in every if i in window}
    # Both go on the same way.
    more = [(f"s1.0:{n}", 10) for n in range(30, 50)] + list(ops[:10])
    assert run_window(again, more) == run_window(window, more)
    assert again.dumps() == window.dumps()


def test_consecutive_automatic_ids_take_one_entry() -> None:
    window = DedupWindow()
    for n in range(10_000):
        assert not window.seen(f"AbCdEfGhIjKl.3:{n}", 1_700_000_000 + n / 1000)
    assert (len(window), window.entries) == (10_000, 1)
    assert len(window.dumps()) < 100
    assert window.seen("AbCdEfGhIjKl.3:0", 1_700_000_010)


def test_interleaved_producers_take_one_entry_each() -> None:
    window = DedupWindow()
    arrival = 1_700_000_000.0
    for run in range(100):
        for producer in ("p1.0", "p2.0", "p3.0"):
            for n in range(run * 5, (run + 1) * 5):
                window.seen(f"{producer}:{n}", arrival)
        arrival += 0.05
    assert (len(window), window.entries) == (1_500, 3)
    assert len(window.dumps()) <= window.size < 200
    assert all(window.seen(f"p2.0:{n}", arrival) for n in range(500))


def test_a_run_is_taken_in_one_step_and_its_duplicates_are_found() -> None:
    window = DedupWindow()
    assert window.seen_run("p.0", 0, 499, 1.0) is None
    assert window.seen_run("q.0", 0, 9, 1.0) is None
    assert window.seen_run("p.0", 500, 999, 1.0) is None
    assert (len(window), window.entries) == (1_010, 2)
    assert window.seen_run("p.0", 990, 1_001, 2.0) == [True] * 10 + [False, False]
    assert window.seen_run("q.0", 0, 9, 2.0) == [True] * 10
    assert window.seen_run("p.0", 1_002, 1_002, 2.0) is None
    assert "p.0:1002" in window
    assert "p.0:1003" not in window
    # A run that overlaps nothing taken, below the origin's highest counter: new.
    window = DedupWindow()
    window.seen_run("p.0", 100, 199, 1.0)
    assert window.seen_run("p.0", 0, 99, 1.0) is None
    assert all(f"p.0:{n}" in window for n in range(200))


def test_runs_landing_out_of_counter_order_are_taken_whole_as_id_by_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A producer's aggregates land out of counter order (several PutRecords in flight): a run
    below the origin's highest counter that overlaps nothing taken is new, taken in one step,
    and leaves the window its ids one by one leave."""
    runs = [(0, 9), (30, 39), (10, 19), (20, 29), (50, 59), (40, 49)]
    by_id = DedupWindow()
    for k, (low, high) in enumerate(runs):
        assert not any(by_id.seen(f"p.0:{n}", 1.0 + k) for n in range(low, high + 1))
    by_run = DedupWindow()
    with monkeypatch.context() as patched:
        patched.setattr(DedupWindow, "seen", None)  # no id by id
        for k, (low, high) in enumerate(runs):
            assert by_run.seen_run("p.0", low, high, 1.0 + k) is None
    assert by_run.dumps() == by_id.dumps()
    assert by_run.seen_run("p.0", 25, 34, 9.0) == [True] * 10
    assert by_run.seen_run("p.0", 55, 64, 9.0) == [True] * 5 + [False] * 5


def test_the_count_bound_forgets_the_front_entry_first() -> None:
    window = DedupWindow(max_ids=5)
    window.seen_run("a.0", 0, 1, 1.0)
    window.seen_run("b.0", 0, 1, 2.0)
    window.seen_run("a.0", 2, 2, 3.0)  # a's range grows and moves behind b's
    assert [i in window for i in ("a.0:0", "a.0:2", "b.0:0", "b.0:1")] == [True] * 4
    assert len(window) == 5
    window.seen("c", 4.0)
    assert [i in window for i in ("a.0:0", "a.0:2", "b.0:0", "b.0:1", "c")] == [
        True,
        True,
        False,
        True,
        True,
    ]


def test_the_age_bound_forgets_old_entries() -> None:
    window = DedupWindow(max_age=10)
    window.seen("old", 1000.0)
    window.seen("new", 1010.0)
    assert "old" in window  # exactly max_age old
    window.seen("newer", 1010.001)
    assert "old" not in window
    assert "new" in window


def test_the_count_bound_trims_the_oldest_ids_of_a_range() -> None:
    window = DedupWindow(max_ids=3)
    for n in range(5):
        window.seen(f"o:{n}", 1.0)
    assert [f"o:{n}" in window for n in range(5)] == [False, False, True, True, True]
    assert window.entries == 1


def test_ids_that_are_not_canonical_counters_are_exceptions() -> None:
    assert split_counter("o:1") == ("o", 1)
    assert split_counter("a:b:12") == ("a:b", 12)
    for record_id in ("o:01", ":1", "o:", "o", "o:\u0661", "o:-1"):
        assert split_counter(record_id) is None
    window = DedupWindow()
    window.seen("o:1", 1.0)
    assert "o:01" not in window
    assert not window.seen("o:01", 1.0)
    assert window.seen("o:01", 1.0)
    assert window.seen("o:1", 1.0)


def test_an_exception_never_extends_into_a_range() -> None:
    window = DedupWindow()
    window.seen("foo", 1.0)
    window.seen("foo:0", 1.0)
    assert "foo" in window
    assert "foo:0" in window
    assert "foo:1" not in window


def test_a_split_child_inherits_its_parents_window() -> None:
    parent = DedupWindow()
    for n in range(50):
        parent.seen(f"p.0:{n}", 100.0 + n)
    parent.seen("caller-id", 200.0)
    left, right = DedupWindow.inherit([parent]), DedupWindow.inherit([parent])
    for child in (left, right):
        assert child.dumps() == parent.dumps()
        assert child.seen("p.0:7", 300.0)
        assert child.seen("caller-id", 300.0)
    assert not left.seen("p.0:50", 300.0)
    assert "p.0:50" not in parent  # a copy: the parent is untouched
    assert "p.0:50" not in right


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(steps(), steps())
def test_a_merged_child_holds_the_union_of_its_parents(
    first: list[tuple[str, int]], second: list[tuple[str, int]]
) -> None:
    a = DedupWindow(max_age=3600, **BIG)
    b = DedupWindow(max_age=3600, **BIG)
    run_window(a, first)
    run_window(b, second)
    child = DedupWindow.inherit([a, b], max_age=3600, **BIG)
    every = {i for i, _ in first + second}
    assert {i for i in every if i in child} == {i for i in every if i in a or i in b}
    assert DedupWindow.loads(child.dumps(), max_age=3600, **BIG).dumps() == child.dumps()


def test_inheriting_from_empty_parents_gives_an_empty_window() -> None:
    child = DedupWindow.inherit([DedupWindow(), DedupWindow()])
    assert len(child) == 0
    assert not child.seen("x", 1.0)


def test_the_max_config_fits_in_a_dynamodb_item() -> None:
    """The worst ids for the serialised form (as long as allowed, each character escaped in
    JSON) in a window with the largest bounds: still within MAX_WINDOW_BYTES, and a KCL lease
    row carrying it stays under DynamoDB's 400 KB item limit."""
    window = DedupWindow(max_ids=100_000_000, max_age=7 * 86_400, max_bytes=MAX_WINDOW_BYTES)
    worst = "\x01" * (MAX_RECORD_ID_BYTES - 8)
    for n in range(2_000):
        window.seen(f"{worst}{n:08d}", 1_700_000_000 + n)
    text = window.dumps()
    assert len(text.encode()) <= window.size <= MAX_WINDOW_BYTES
    assert window.size > MAX_WINDOW_BYTES - 2_000  # it was full: the bound did the work
    row = {
        "leaseKey": "shardId-000000000000",
        "leaseOwner": "worker-" + "x" * 200,
        "leaseCounter": "18446744073709551615",
        "checkpoint": "9" * 56,
        "checkpointSubSequenceNumber": "4294967295",
        "ownerSwitchesSinceCheckpoint": "0",
        "parentShardId": ["shardId-000000000001", "shardId-000000000002"],
        "pendingCheckpoint": "9" * 56,
        "streamCreatedMs": "1700000000000",
        "dedupWindow": text,
    }

    def size(value: object) -> int:
        if isinstance(value, list):
            return sum(len(v.encode()) for v in value) + 3
        return len(str(value).encode())

    item_bytes = sum(len(name.encode()) + size(value) for name, value in row.items())
    assert item_bytes < 400 * 1024


def test_derived_ids_are_deterministic_and_compress_per_input_aggregate() -> None:
    first = derived_record_id(1_700_000_000_000, "shardId-000000000004", "4959" + "0" * 52, 3, 0)
    assert first == derived_record_id(
        1_700_000_000_000, "shardId-000000000004", int("4959" + "0" * 52), 3, 0
    )
    assert first.startswith("1700000000000.4.")
    assert first.endswith(":3")
    second = derived_record_id(1_700_000_000_000, "shardId-000000000004", "4959" + "0" * 52, 3, 1)
    assert second.endswith(".3:1")
    assert derived_partition_key(first) == derived_partition_key(second) == first[: -len(":3")]
    assert derived_partition_key("order-17") == "order-17"
    other = {
        derived_record_id(1, "shardId-000000000004", 10, 0, 0),
        derived_record_id(2, "shardId-000000000004", 10, 0, 0),
        derived_record_id(1, "shardId-000000000005", 10, 0, 0),
        derived_record_id(1, "shardId-000000000004", 11, 0, 0),
        derived_record_id(1, "shardId-000000000004", 10, 1, 0),
        derived_record_id(1, "shardId-000000000004", 10, 0, 1),
        derived_record_id(1, "my-shard", 10, 0, 0),
    }
    assert len(other) == 7
    # The first outputs of an input aggregate's records: one range; further outputs of one
    # input: one range each.
    window = DedupWindow()
    for sub in range(100):
        window.seen(derived_record_id(1, "shardId-000000000004", 10, sub, 0), 1.0)
    assert window.entries == 1
    for index in range(1, 5):
        window.seen(derived_record_id(1, "shardId-000000000004", 10, 7, index), 1.0)
    assert window.entries == 2
    assert len(derived_record_id(2**63, "shardId-" + "9" * 20, 10**56, 2**32, 2**32)) <= 128


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"incarnation": -1}, "incarnation: must be an int >= 0"),
        ({"sub_sequence_number": -1}, "sub_sequence_number: must be an int >= 0"),
        ({"index": True}, "index: must be an int >= 0"),
        ({"shard_id": "x" * 200}, "record_id: must be 1 to 128 bytes"),
    ],
)
def test_derived_ids_refuse_bad_positions(kwargs: dict[str, object], message: str) -> None:
    from kinesis_core.errors import ValidationError

    args: dict[str, object] = {
        "incarnation": 1,
        "shard_id": "shardId-000000000000",
        "sequence_number": "1",
        "sub_sequence_number": 0,
        "index": 0,
        **kwargs,
    }
    with pytest.raises(ValidationError, match=message):
        derived_record_id(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_ids": 0}, r"max_ids: must lie in \[1, 100000000\], got 0"),
        ({"max_bytes": MAX_WINDOW_BYTES + 1}, r"max_bytes: must lie in \[1024, 300000\]"),
        ({"max_bytes": 1.5}, "max_bytes: must be an int"),
        ({"max_age": 0}, r"max_age: must lie in \(0, 604800\] seconds"),
        ({"max_age": "1"}, "max_age: must be a number of seconds"),
    ],
)
def test_bad_bounds_are_refused_naming_the_field_and_the_limit(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        DedupWindow(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",
        "[2, 0, 0, [], []]",
        '[1, 0, 0, [], [["a"]]]',
        "[1, 0, 0, [], [[5, 0, 0, 0]]]",
        '[1, 0, 0, ["o"], [[-1, 0, 0, 0]]]',
        '[1, 0, 0, ["o"], [[0, -3, 0, 0]]]',
    ],
)
def test_text_that_is_not_a_window_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="dedup window"):
        DedupWindow.loads(text)


def test_the_version_is_the_first_element() -> None:
    window = DedupWindow()
    window.seen("o:0", 1.0)
    assert window.dumps().startswith(f"[{VERSION},")


def test_ids_taken_together_are_chunks_taken_and_found_as_others() -> None:
    window = DedupWindow()
    batch = [f"order-{n}" for n in range(600)]
    assert window.seen_ids(batch, 1.0) is None
    assert (len(window), window.entries) == (600, 3)  # chunks of CHUNK_IDS
    assert all(i in window for i in batch)
    again = ["order-599", "new-1", "order-0", "new-1"]
    assert window.seen_ids(again, 2.0) == [True, False, True, True]
    assert window.seen("order-17", 3.0)
    text = window.dumps()
    assert len(text.encode()) <= window.size
    loaded = DedupWindow.loads(text)
    assert loaded.dumps() == text
    assert (len(loaded), loaded.entries) == (601, 4)


def test_chunks_leave_whole_by_bytes_and_from_their_front_by_count() -> None:
    by_bytes = DedupWindow(max_bytes=2048)
    for k in range(10):
        by_bytes.seen_ids([f"k{k}-{n:03d}" for n in range(100)], float(k))
        assert len(by_bytes.dumps().encode()) <= by_bytes.size <= 2048
    assert all(f"k9-{n:03d}" in by_bytes for n in range(100))
    assert len(by_bytes) % 100 == 0  # whole chunks
    by_count = DedupWindow(max_ids=150)
    by_count.seen_ids([f"a{n}" for n in range(100)], 1.0)
    by_count.seen_ids([f"b{n}" for n in range(100)], 2.0)
    assert len(by_count) == 150
    assert [f"a{n}" in by_count for n in (49, 50, 99)] == [False, True, True]


def test_a_merge_takes_each_chunked_id_once() -> None:
    left, right = DedupWindow(), DedupWindow()
    left.seen_ids(["x", "y"], 1.0)
    right.seen_ids(["y", "z"], 2.0)
    merged = DedupWindow.inherit([left, right])
    assert len(merged) == 3
    assert all(i in merged for i in "xyz")
    assert len(merged.dumps().encode()) <= merged.size


@pytest.mark.slow
@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.lists(st.text("abc", min_size=1, max_size=3), max_size=40), max_size=30),
    st.integers(1, 60),
    st.integers(1024, 2048),
)
def test_chunks_are_exact_and_round_trip(
    batches: list[list[str]], max_ids: int, max_bytes: int
) -> None:
    bounds = {"max_ids": max_ids, "max_age": 30.0, "max_bytes": max_bytes}
    window = DedupWindow(**bounds)
    taken: set[str] = set()
    for k, batch in enumerate(batches):
        answers = window.seen_ids(batch, 1_700_000_000 + k / 10)
        for n, record_id in enumerate(batch):
            duplicate = answers is not None and answers[n]
            assert not duplicate or record_id in taken or record_id in batch[:n]
            taken.add(record_id)
        assert batch == [] or batch[-1] in window
        assert len(window) <= max_ids
        assert len(window.dumps().encode()) <= window.size <= max_bytes
    text = window.dumps()
    again = DedupWindow.loads(text, **bounds)
    assert again.dumps() == text
    assert {i for i in taken if i in again} == {i for i in taken if i in window}
