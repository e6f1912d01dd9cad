"""The sans-I/O lease coordinator: expiry by counter, targets, priority takes, steals, and a
simulated table shared by several workers (fake clock, the stores' own compare-and-set rule)."""

from __future__ import annotations

import math
import os
import random

import pytest
from hypothesis import given, settings, strategies as st

from kinesis_core.checkpoint import Checkpoint, CheckpointConflictError, Sentinel
from kinesis_core.checkpoint.base import apply_lease
from kinesis_core.errors import ConfigurationError
from kinesis_core.lease import LeaseConfig, LeaseCoordinator, Take, default_worker_id

FAILOVER = 10.0


def row(shard: str, owner: str | None = None, counter: int = 1) -> Checkpoint:
    return Checkpoint(shard, Sentinel.TRIM_HORIZON, counter, owner)


def coordinator(worker: str = "me", **kwargs: object) -> LeaseCoordinator:
    config = LeaseConfig(worker_id=worker, failover_time=FAILOVER, **kwargs)  # type: ignore[arg-type]
    return LeaseCoordinator(config, rng=random.Random(7))


def shards(n: int) -> list[str]:
    return [f"shardId-{i:012d}" for i in range(n)]


def taken(plan: list[Take]) -> list[str]:
    return sorted(t.row.shard_id for t in plan)


# -- configuration -----------------------------------------------------------------------------


def test_defaults_are_the_kcls() -> None:
    config = LeaseConfig(worker_id="w")
    assert config.failover_time == 10.0
    assert config.renew_every == pytest.approx(10.0 / 3 - 0.025)  # failoverTimeMillis/3 - epsilon
    assert config.take_every == pytest.approx((10.0 + 0.025) * 2)
    assert config.parent_poll_interval == 10.0
    assert config.max_leases_for_worker is None
    assert config.max_leases_to_steal == 1
    assert config.priority_takes is True
    assert config.assignment == "lease_count"
    short = LeaseConfig(worker_id="w", failover_time=3.0, renew_interval=0.5, take_interval=1.0)
    assert (short.renew_every, short.take_every) == (0.5, 1.0)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"worker_id": ""}, "worker_id"),
        ({"failover_time": 0}, "failover_time"),
        ({"renew_interval": 10.0}, "renew_interval"),
        ({"renew_interval": 0}, "renew_interval"),
        ({"take_interval": -1}, "take_interval"),
        ({"parent_poll_interval": 0}, "parent_poll_interval"),
        ({"assignment": "random"}, "assignment"),
        ({"handoff_timeout": 0}, "handoff_timeout"),
        ({"max_leases_for_worker": 0}, "max_leases_for_worker"),
        ({"max_leases_to_steal": 0}, "max_leases_to_steal"),
    ],
)
def test_bad_configuration_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        LeaseConfig(**{"worker_id": "w", **kwargs})  # type: ignore[arg-type]
    assert info.value.field == field


def test_default_worker_ids_are_unique_and_readable() -> None:
    a, b = default_worker_id(), default_worker_id()
    assert a != b
    assert f":{os.getpid()}:" in a


# -- expiry ------------------------------------------------------------------------------------


def test_a_lone_worker_takes_every_new_lease_at_once() -> None:
    c = coordinator()
    c.scan(0.0, [row(s) for s in shards(6)], {"me": 1})
    assert taken(c.plan(0.0, set(shards(6)))) == shards(6)


def test_new_leases_are_taken_up_to_the_share_of_the_workers_announced() -> None:
    """Two workers started together see each other's worker rows before either holds a
    lease: each takes its share of the new leases, never all of them."""
    c = coordinator()
    c.scan(0.0, [row(s) for s in shards(6)], {"me": 1, "other": 1})
    assert len(c.plan(0.0, set(shards(6)))) == 3
    assert c.owners(0.0, set(shards(6))) == {"me": 0, "other": 0}


def test_a_worker_row_counts_while_its_counter_moves() -> None:
    c = coordinator()
    ids = shards(4)
    c.scan(0.0, [row(s) for s in ids], {"other": 5})
    assert c.live_workers(0.0) == {"me", "other"}
    c.scan(FAILOVER, [row(s) for s in ids], {"other": 5})
    assert c.live_workers(FAILOVER) == {"me", "other"}
    c.scan(FAILOVER + 1, [row(s) for s in ids], {"other": 5})  # stood still > failover
    assert c.live_workers(FAILOVER + 1) == {"me"}
    assert len(c.plan(FAILOVER + 1, set(ids))) == 4
    c.scan(FAILOVER + 2, [row(s) for s in ids], {"other": 6})  # moved again
    assert c.live_workers(FAILOVER + 2) == {"me", "other"}


def test_an_owned_lease_expires_only_after_its_counter_stood_still_for_the_failover_time() -> None:
    c = coordinator()
    ids = shards(2)
    c.scan(0.0, [row(s, "other", 5) for s in ids])  # first seen and owned: "just renewed"
    # Both alive: the only way in is a steal (the other holds 2, the target is 1).
    assert [t.steal for t in c.plan(0.0, set(ids))] == [True]
    c.scan(9.0, [row(s, "other", 5) for s in ids])
    assert [t.steal for t in c.plan(9.0, set(ids))] == [True]
    # 10.5 s without a change for ids[1]; ids[0]'s counter moved, so it is alive again.
    c.scan(10.5, [row(ids[0], "other", 6), row(ids[1], "other", 5)])
    plan = c.plan(10.5, set(ids))
    assert [(t.row.shard_id, t.steal) for t in plan] == [(ids[1], False)]


def test_expiry_is_measured_between_scans_of_this_worker_not_by_any_timestamp() -> None:
    c = coordinator(priority_takes=False)
    lease = shards(1)
    c.scan(100.0, [row(lease[0], "other", 3)])
    c.scan(105.0, [row(lease[0], "other", 3)])
    assert c.plan(105.0, set(lease)) == []  # alive, and one lease each is no reason to steal
    c.scan(110.5, [row(lease[0], "other", 3)])
    plan = c.plan(110.5, set(lease))
    assert [(t.row.shard_id, t.steal) for t in plan] == [(lease[0], False)]
    assert plan[0].row.counter == 3  # the take is conditional on the counter scanned


def test_a_released_lease_is_available_at_once_but_not_a_priority() -> None:
    c = coordinator()
    ids = shards(4)
    c.scan(0.0, [row(s, "other", 1) for s in ids])
    # The other worker released two (owner removed, counter bumped); it keeps two.
    c.scan(
        1.0,
        [row(ids[0], None, 2), row(ids[1], None, 2), row(ids[2], "other"), row(ids[3], "other")],
    )
    plan = c.plan(1.0, set(ids))
    assert taken(plan) == ids[:2]  # target ceil(4/2) = 2, both released ones
    assert not any(t.steal for t in plan)


def test_very_old_leases_are_taken_first_regardless_of_the_target() -> None:
    c = coordinator()
    ids = shards(4)
    c.scan(0.0, [row(s, "dead", 1) for s in ids])
    c.acquired("mine-1", 0.0)
    c.acquired("mine-2", 0.0)
    eligible = {*ids, "mine-1", "mine-2"}
    # Expired but not very old: only up to the target (6 leases, 1 live worker: 6).
    c.scan(FAILOVER + 1, [row(s, "dead", 1) for s in ids])
    assert taken(c.plan(FAILOVER + 1, eligible)) == ids
    # Very old (3 x failover): all of them, even with a small target.
    c2 = coordinator(max_leases_for_worker=5)
    c2.scan(0.0, [row(s, "dead", 1) for s in ids])
    for s in ("mine-1", "mine-2"):
        c2.acquired(s, 0.0)
    c2.scan(3 * FAILOVER + 1, [row(s, "dead", 1) for s in ids])
    assert len(c2.plan(3 * FAILOVER + 1, eligible)) == 3  # capped by max_leases_for_worker


@pytest.mark.parametrize(("priority", "expected"), [(True, 3), (False, 2)])
def test_priority_takes_can_be_turned_off(priority: bool, expected: int) -> None:
    c = coordinator(priority_takes=priority)
    ids = shards(9)
    later = 3 * FAILOVER + 1
    for s in ids[:3]:
        c.acquired(s, 0.0)
        c.renewed(s, later)
    c.scan(0.0, [row(s, "dead") for s in ids[3:6]] + [row(s, "other") for s in ids[6:]])
    c.scan(later, [row(s, "dead") for s in ids[3:6]] + [row(s, "other", 2) for s in ids[6:]])
    # 9 leases, 2 live workers: target 5, I hold 3. Long-dead leases go first, whatever the
    # target.
    assert len(c.plan(later, set(ids))) == expected


def test_new_leases_are_no_priority() -> None:
    c = coordinator()
    ids = shards(9)
    for s in ids[:3]:
        c.acquired(s, 0.0)
    c.scan(0.0, [row(s) for s in ids[3:6]] + [row(s, "other") for s in ids[6:]])
    assert len(c.plan(0.0, set(ids))) == 2  # target 5, I hold 3


# -- balancing ---------------------------------------------------------------------------------


def test_target_is_ceil_of_leases_over_live_workers() -> None:
    c = coordinator(priority_takes=False)
    ids = shards(7)
    c.scan(0.0, [row(ids[0], "a"), row(ids[1], "b")] + [row(s) for s in ids[2:]])
    # 7 leases, 3 workers (a, b, me): target 3, all five unowned are available.
    assert len(c.plan(0.0, set(ids))) == 3


def test_more_workers_than_leases_means_one_each() -> None:
    c = coordinator(priority_takes=False)
    ids = shards(2)
    c.scan(0.0, [row(ids[0], "a"), row(ids[1])])
    assert [t.row.shard_id for t in c.plan(0.0, set(ids))] == [ids[1]]


def test_steal_one_at_a_time_from_the_most_loaded_worker() -> None:
    c = coordinator()
    ids = shards(6)
    c.scan(0.0, [row(s, "busy") for s in ids[:5]] + [row(ids[5], "calm")])
    plan = c.plan(0.0, set(ids))  # target 2, need 2, busy has 5 > 2
    assert len(plan) == 1
    assert plan[0].steal
    assert plan[0].row.owner == "busy"


def test_max_leases_to_steal_raises_the_pace() -> None:
    c = coordinator(max_leases_to_steal=3)
    ids = shards(6)
    c.scan(0.0, [row(s, "busy") for s in ids])
    assert len(c.plan(0.0, set(ids))) == 3  # need 3, busy is 3 over the target


def test_steals_are_spread_over_the_workers_above_the_target() -> None:
    """Two workers joining two busy ones ask each of them, not both the same one."""
    c = coordinator(max_leases_to_steal=4)
    ids = shards(16)
    c.scan(0.0, [row(s, "a") for s in ids[:8]] + [row(s, "b") for s in ids[8:]], {"late": 1})
    plan = c.plan(0.0, set(ids))  # 4 workers: target 4; a and b are 4 over each
    assert all(t.steal for t in plan)
    assert sorted(t.row.owner or "" for t in plan) == ["a", "a", "b", "b"]


def test_a_lease_being_handed_over_is_never_asked_for_again() -> None:
    c = coordinator(max_leases_to_steal=4)
    ids = shards(4)
    handing = Checkpoint(ids[0], Sentinel.TRIM_HORIZON, 2, "taker", checkpoint_owner="busy")
    c.scan(0.0, [handing] + [row(s, "busy") for s in ids[1:]])
    # 3 workers: target 2; busy holds 3 (1 over), the lease in hand-off counts for the taker.
    plan = c.plan(0.0, set(ids))
    assert [t.steal for t in plan] == [True]
    assert plan[0].row.shard_id != ids[0]


def test_steal_from_a_worker_at_target_only_when_more_than_one_is_needed() -> None:
    ids = shards(7)
    # 7 leases, 3 workers: target 3. a and b hold 3 each and I hold 1: I need 2, so steal 1.
    c = coordinator()
    c.acquired(ids[6], 0.0)
    c.scan(0.0, [row(s, "a") for s in ids[:3]] + [row(s, "b") for s in ids[3:6]])
    assert [t.steal for t in c.plan(0.0, set(ids))] == [True]
    # I hold 2 and need 1 only: no steal from a worker at target (no ping-pong).
    c.acquired(ids[5], 0.0)
    c.scan(1.0, [row(s, "a") for s in ids[:3]] + [row(s, "b") for s in ids[3:5]])
    assert c.plan(1.0, set(ids)) == []


def test_available_leases_are_taken_before_anything_is_stolen() -> None:
    c = coordinator(priority_takes=False)
    ids = shards(6)
    c.scan(0.0, [row(s, "busy") for s in ids[:5]] + [row(ids[5])])
    plan = c.plan(0.0, set(ids))
    assert [(t.row.shard_id, t.steal) for t in plan] == [(ids[5], False)]


def test_held_leases_count_as_mine_and_are_never_planned_again() -> None:
    c = coordinator()
    ids = shards(4)
    for s in ids[:2]:
        c.acquired(s, 0.0)
    # The scan still shows the old owner of a lease just taken: it is mine all the same.
    c.scan(0.0, [row(ids[0], "previous"), row(ids[1], None), row(ids[2], "a"), row(ids[3], "a")])
    assert c.owners(0.0, set(ids)) == {"me": 2, "a": 2}
    assert c.plan(0.0, set(ids)) == []


def test_leases_not_eligible_are_ignored() -> None:
    c = coordinator()
    ids = shards(4)
    c.scan(0.0, [row(s) for s in ids])
    assert taken(c.plan(0.0, set(ids[:2]))) == ids[:2]
    assert c.plan(0.0, set()) == []


def test_a_lease_still_in_my_name_but_not_held_counts_for_nobody_until_it_expires() -> None:
    c = coordinator(priority_takes=False)
    ids = shards(2)
    c.scan(0.0, [row(ids[0], "me"), row(ids[1], "other")])
    assert c.owners(0.0, set(ids)) == {"me": 0, "other": 1}
    assert c.plan(0.0, set(ids)) == []  # target 1 each; mine is not available yet
    c.scan(FAILOVER + 1, [row(ids[0], "me"), row(ids[1], "other", 2)])
    assert taken(c.plan(FAILOVER + 1, set(ids))) == [ids[0]]


# -- throughput assignment ---------------------------------------------------------------------


def weighed(shard: str, owner: str | None, kbps: float | None, counter: int = 1) -> Checkpoint:
    return Checkpoint(shard, Sentinel.TRIM_HORIZON, counter, owner, throughput_kbps=kbps)


def test_throughput_assignment_balances_the_load_not_the_count() -> None:
    """A busy worker holds one hot shard and three cold ones: a worker joining asks for the
    cold ones, not the hot one, and ends with fewer KiB/s than the busy one, never more."""
    c = coordinator(assignment="throughput", max_leases_to_steal=4)
    ids = shards(4)
    rows = [weighed(ids[0], "busy", 100.0)] + [weighed(s, "busy", 10.0) for s in ids[1:]]
    c.scan(0.0, rows, {"busy": 1})
    plan = c.plan(0.0, set(ids))
    assert all(t.steal for t in plan)
    # Mean 65 KiB/s: the three cold shards (30) go, the hot one stays.
    assert taken(plan) == ids[1:]
    # The lease count strategy would ask for two, the hot one among the candidates.
    counted = coordinator(max_leases_to_steal=4)
    counted.scan(0.0, rows, {"busy": 1})
    assert len(counted.plan(0.0, set(ids))) == 2


def test_throughput_assignment_leaves_a_balanced_pair_alone() -> None:
    c = coordinator(assignment="throughput", max_leases_to_steal=4)
    ids = shards(3)
    c.acquired(ids[0], 0.0)
    rows = [weighed(ids[0], "me", 50.0), weighed(ids[1], "other", 30.0)]
    rows.append(weighed(ids[2], "other", 25.0))
    c.scan(0.0, rows, {"other": 1})
    # other 55, me 50, mean 52.5: within 10%; and no lease fits half the gap.
    assert c.plan(0.0, set(ids)) == []


def test_throughput_assignment_takes_new_leases_up_to_the_mean() -> None:
    """Never measured: each counts as the mean of the measured ones (1.0 when none is), so
    two workers started together split new leases as by count."""
    c = coordinator(assignment="throughput")
    ids = shards(6)
    c.scan(0.0, [weighed(s, None, None) for s in ids], {"me": 1, "other": 1})
    assert len(c.plan(0.0, set(ids))) == 3


# -- held leases -------------------------------------------------------------------------------


def test_held_leases_not_renewed_within_the_failover_time_are_dropped() -> None:
    c = coordinator()
    c.acquired("a", 0.0)
    c.acquired("b", 0.0)
    c.renewed("b", 5.0)
    c.renewed("zzz", 5.0)  # not held: ignored
    assert c.expired_held(FAILOVER) == []
    assert c.expired_held(FAILOVER + 0.1) == ["a"]
    assert c.held == ["b"]
    assert not c.holds("a")
    assert not c.holds("zzz")
    c.renewed("b", 4.0)  # an older success never moves the time back
    assert c.expired_held(FAILOVER + 5.0) == []
    c.dropped("b")
    assert c.held == []


def test_a_request_that_lost_only_to_the_owners_renewal_is_made_again_on_the_new_row() -> None:
    """The 12 s stall of issue 21: a worker that joined asked for leases from owners that renew
    every half second and checkpoint every second; a scan slow enough saw every request lose
    to those writes, and the worker took nothing, round after round."""
    c = coordinator()
    asked = Take(row("s", "owner", 4), steal=True)
    renewed = row("s", "owner", 6)
    assert c.retake(asked, renewed) == Take(renewed, steal=True)
    # Another worker asked first (the marker is set), or took it: the request is dropped.
    marked = Checkpoint("s", Sentinel.TRIM_HORIZON, 5, "other", checkpoint_owner="owner")
    assert c.retake(asked, marked) is None
    assert c.retake(asked, row("s", "other", 5)) is None
    assert c.retake(asked, row("s", None, 5)) is None  # released: the next scan sees it free
    assert c.retake(asked, row("s", "me", 5)) is None
    assert c.retake(asked, None) is None


def test_a_free_lease_is_taken_again_only_while_it_has_no_owner() -> None:
    c = coordinator()
    free = Take(row("s", None, 2), steal=False)
    assert c.retake(free, row("s", None, 3)) == Take(row("s", None, 3), steal=False)
    assert c.retake(free, row("s", "other", 3)) is None  # another worker won it
    # A lease that looked expired whose counter moved: its owner is alive.
    expired = Take(row("s", "dead", 2), steal=False)
    assert c.retake(expired, row("s", "dead", 3)) is None
    assert c.retake(expired, row("s", None, 3)) == Take(row("s", None, 3), steal=False)


@pytest.mark.parametrize(
    ("n", "owned", "workers", "each"),
    [
        (16, {}, ["a", "b"], 8),  # started together
        (16, {"a": 5, "b": 5}, ["a", "b"], 3),  # a third worker stopped and released its 6
        (15, {}, ["a", "b", "c"], 5),
    ],
)
def test_workers_taking_from_the_same_scan_take_different_leases(
    n: int, owned: dict[str, int], workers: list[str], each: int
) -> None:
    """Each deals the available leases among the workers below the target as the others do,
    and takes its own deal first: before, each took a random choice (the same one here, from
    the same seed), and the losers had to take their share in a later round."""
    ids = shards(n)
    rows, owners = [], iter(w for w, n in owned.items() for _ in range(n))
    for shard in ids:
        rows.append(row(shard, next(owners, None)))
    plans = []
    for name in workers:
        c = coordinator(name)
        for held in rows:
            if held.owner == name:
                c.acquired(held.shard_id, 0.0)
        c.scan(0.0, rows, dict.fromkeys(workers, 1))
        plans.append(taken(c.plan(1.0, set(ids))))
    assert [len(p) for p in plans] == [each] * len(workers)
    everything = [s for p in plans for s in p]
    assert len(everything) == len(set(everything))


# -- several workers on one simulated table ------------------------------------------------------


class Table:
    """A lease table with the stores' compare-and-set rule, and worker rows."""

    def __init__(self, ids: list[str]) -> None:
        self.rows = {s: row(s, None, 1) for s in ids}
        self.workers: dict[str, int] = {}

    def update(
        self, expected: Checkpoint, owner: str | None, checkpoint_owner: str | None = None
    ) -> Checkpoint:
        new = apply_lease(
            self.rows.get(expected.shard_id), expected.shard_id, expected, owner, checkpoint_owner
        )
        self.rows[expected.shard_id] = new
        return new


class Worker:
    """The manager's moves, in steps: renewals (and the worker row), hand-offs, takes."""

    def __init__(self, name: str, table: Table, rng: random.Random) -> None:
        config = LeaseConfig(worker_id=name, failover_time=FAILOVER)
        self.c = LeaseCoordinator(config, rng=rng)
        self.table = table
        self.rows: dict[str, Checkpoint] = {}
        self.pending: set[str] = set()
        self.alive = True
        self.steals = 0

    def renew(self, now: float) -> None:
        me = self.c.worker_id
        self.table.workers[me] = self.table.workers.get(me, 0) + 1
        self.c.expired_held(now)
        for shard in self.c.held:
            current = self.table.rows[shard]
            if shard in self.pending:
                # Waiting for the owner's final checkpoint (or taken by another).
                if current.owner != me:
                    self.c.dropped(shard)
                    self.pending.discard(shard)
                elif current.checkpoint_owner is None:
                    self.pending.discard(shard)
                    self.rows[shard] = current
                    self.c.renewed(shard, now)
                continue
            try:
                self.rows[shard] = self.table.update(self.rows[shard], me)
                self.c.renewed(shard, now)
            except CheckpointConflictError as exc:
                self.c.dropped(shard)
                handed = exc.current
                if handed is not None and handed.checkpoint_owner == me:
                    # The final checkpoint clears the marker: the taker's now.
                    self.table.update(handed, handed.owner)

    def take(self, now: float) -> None:
        self.c.scan(now, list(self.table.rows.values()), dict(self.table.workers))
        for decision in self.c.plan(now, set(self.table.rows)):
            marker = decision.row.owner if decision.steal else None
            try:
                new = self.table.update(decision.row, self.c.worker_id, marker)
            except CheckpointConflictError:
                continue
            self.rows[new.shard_id] = new
            self.c.acquired(new.shard_id, now)
            if decision.steal:
                self.pending.add(new.shard_id)
                self.steals += 1


def run(workers: list[Worker], start: float, seconds: float, step: float = 1.0) -> float:
    """Renew every ~3 s and take every ~20 s (the KCL's cadence), in 1 s steps."""
    now = start
    while now < start + seconds:
        now += step
        for w in workers:
            if not w.alive:
                continue
            if round(now) % 3 == 0:
                w.renew(now)
            if round(now) % 20 == 0:
                w.take(now)
    return now


def holders(workers: list[Worker]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for w in workers:
        if w.alive:
            for shard in w.c.held:
                out.setdefault(shard, []).append(w.c.worker_id)
    return out


@given(st.integers(1, 12), st.integers(1, 5), st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None)
def test_workers_converge_to_a_balanced_split_with_one_holder_per_lease(
    n_shards: int, n_workers: int, seed: int
) -> None:
    rng = random.Random(seed)
    table = Table(shards(n_shards))
    workers = [Worker(f"w{i}", table, rng) for i in range(n_workers)]
    now = run(workers, 0.0, 600.0)
    held = holders(workers)
    assert all(len(h) == 1 for h in held.values())
    assert sorted(held) == sorted(table.rows)  # every lease held
    target = math.ceil(n_shards / n_workers)
    counts = sorted(len(w.c.held) for w in workers)
    assert counts[-1] <= target
    assert sum(counts) == n_shards
    # The table agrees with what the workers believe.
    for shard, (owner,) in held.items():
        assert table.rows[shard].owner == owner

    # A worker dies: within the failover time plus a scan its leases are taken by the others.
    if n_workers > 1:
        dead = workers[0]
        dead.alive = False
        lost = set(dead.c.held)
        run(workers, now, FAILOVER + 2 * 20.05 + 6)
        held = holders(workers)
        assert all(len(h) == 1 for h in held.values())
        assert lost <= set(held)
        assert all(r.owner != dead.c.worker_id for r in table.rows.values())


@given(st.integers(2, 32), st.integers(2, 4), st.integers(0, 2**32 - 1))
@settings(max_examples=40, deadline=None)
def test_workers_started_together_never_steal(n_shards: int, n_workers: int, seed: int) -> None:
    """Each announces itself (its worker row) and lets a renewal interval pass before its
    first scan; then they split the new leases, and nobody asks anybody for one."""
    rng = random.Random(seed)
    table = Table(shards(n_shards))
    workers = [Worker(f"w{i}", table, rng) for i in range(n_workers)]
    for w in workers:
        w.renew(0.0)
    now = 3.0
    for w in rng.sample(workers, len(workers)):
        w.take(now)
    run(workers, now, 300.0)
    assert sum(w.steals for w in workers) == 0
    assert max(len(w.c.held) for w in workers) == math.ceil(n_shards / n_workers)
    assert sorted(holders(workers)) == sorted(table.rows)


def test_two_workers_taking_the_same_lease_at_once_one_wins() -> None:
    table = Table(shards(1))
    a, b = (Worker(name, table, random.Random(1)) for name in ("a", "b"))
    a.c.scan(0.0, list(table.rows.values()))
    b.c.scan(0.0, list(table.rows.values()))
    (plan_a,), (plan_b,) = a.c.plan(0.0, set(table.rows)), b.c.plan(0.0, set(table.rows))
    won = table.update(plan_a.row, "a")
    with pytest.raises(CheckpointConflictError) as lost:
        table.update(plan_b.row, "b")
    assert lost.value.current == won
    assert won.owner == "a"
    assert won.counter == 2


# -- the leader's assignments --------------------------------------------------------------------


def test_the_leader_assigns_free_leases_and_asks_for_the_busiest_ones() -> None:
    """The leader takes its share and decides each other worker's as that worker would:
    free leases dealt so that nobody gets one twice, or, with none free, hand-off requests to
    the busiest worker; a worker younger than two take intervals (its worker row's counter)
    gets nothing: it takes for itself."""
    ids = shards(12)
    leader = coordinator("lead", max_leases_to_steal=2)
    old = math.ceil(3 * leader.config.take_every / leader.config.renew_every) + 1
    workers = {"lead": old, "busy": old, "idle": old, "new": 1}
    leader.scan(0.0, [row(s, "busy" if i < 6 else None) for i, s in enumerate(ids)], workers)
    mine = leader.plan(0.0, set(ids))
    got: dict[str, set[str]] = {"lead": {t.row.shard_id for t in mine}}
    for worker, take in leader.assign(0.0, set(ids), mine):
        assert not take.steal
        got.setdefault(worker, set()).add(take.row.shard_id)
    assert set(got) == {"lead", "idle"}  # "new" is too young to be assigned anything
    assert got["lead"] | got["idle"] == set(ids[6:])
    assert not got["lead"] & got["idle"]
    assert len(got["lead"]) == len(got["idle"]) == 3

    leader = coordinator("lead", max_leases_to_steal=2)
    leader.scan(0.0, [row(s, "busy") for s in ids], workers)
    mine = leader.plan(0.0, set(ids))
    assigned = leader.assign(0.0, set(ids), mine)
    assert [t.steal for t in mine] == [True, True]
    assert [w for w, _ in assigned] == ["idle", "idle"]
    asked = [t.row.shard_id for t in mine] + [t.row.shard_id for _, t in assigned]
    assert all(t.steal and t.row.owner == "busy" for _, t in assigned)
    assert len(set(asked)) == 4  # never the same lease twice
