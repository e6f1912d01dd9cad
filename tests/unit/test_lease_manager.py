"""The lease manager's asyncio side on a memory store: fenced writes, losses, graceful stop."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from kinesis_core.checkpoint import (
    Checkpoint,
    CheckpointTableGoneError,
    MemoryCheckpointStore,
    Sentinel,
)
from kinesis_core.lease import (
    HandOffAsked,
    LeaseAcquired,
    LeaseConfig,
    LeaseLost,
    LeaseManager,
    LeasesFailed,
    TableScanned,
)
from kinesis_core.telemetry import ConsumerRecorder, LeaseChange
from tests.fakes.clock import FakeClock

APP, STREAM = "app", "stream"


class SlowStore(MemoryCheckpointStore):
    """Lease writes take a while (a slow network)."""

    delay = 0.0

    async def update_lease(self, *args: Any, **kwargs: Any) -> Checkpoint:
        await asyncio.sleep(self.delay)
        return await super().update_lease(*args, **kwargs)


class Seen:
    """The events a manager handed out so far, by kind (taking them as they are looked at)."""

    def __init__(self, manager: LeaseManager) -> None:
        self._manager = manager
        self._seen: dict[str, list[Any]] = {
            "acquired": [],
            "lost": [],
            "handoff": [],
            "failed": [],
            "scanned": [],
        }

    def __getitem__(self, kind: str) -> list[Any]:
        for event in self._manager.take_events():
            if isinstance(event, LeaseAcquired):
                self._seen["acquired"].append(event.shard_id)
            elif isinstance(event, LeaseLost):
                self._seen["lost"].append(event.shard_id)
            elif isinstance(event, HandOffAsked):
                self._seen["handoff"].append(event.shard_id)
            elif isinstance(event, LeasesFailed):
                self._seen["failed"].append(event.error)
            else:
                self._seen["scanned"].append(event.rows)
        return self._seen[kind]


def manager(
    store: MemoryCheckpointStore, renew_interval: float = 1.0, **kwargs: Any
) -> LeaseManager:
    config = LeaseConfig(
        worker_id="me", failover_time=5.0, renew_interval=renew_interval, take_interval=10
    )
    m = LeaseManager(store, APP, STREAM, config, eligible=lambda: {"s1", "s2"}, **kwargs)
    m.events = Seen(m)  # type: ignore[attr-defined]
    return m


def test_create_take_checkpoint_release() -> None:
    async def main() -> None:
        store = MemoryCheckpointStore()
        m = manager(store)
        assert await m.create("s1", Sentinel.TRIM_HORIZON, ["p"], (0, 10))
        assert not await m.create("s1", Sentinel.LATEST, [], None)  # exists: left alone
        assert m.has_row("s1")
        assert await m.take_round() == ["s1"]
        assert m.events["acquired"] == ["s1"]  # type: ignore[attr-defined]
        assert m.held() == {"s1": Sentinel.TRIM_HORIZON}
        assert await m.write("s1", (5, 0), ["p"])
        assert await m.write("s1", (4, 0))  # behind: nothing to write
        row = await store.get(APP, STREAM, "s1")
        assert row == Checkpoint("s1", (5, 0), 3, "me", ("p",), (), (0, 10))
        assert not await m.write("s2", (1, 0))  # not held
        await m.close()
        row = await store.get(APP, STREAM, "s1")
        assert row is not None
        assert (row.owner, row.counter, row.value) == (None, 4, (5, 0))

    asyncio.run(main())


def test_a_refused_checkpoint_loses_the_lease_once() -> None:
    async def main() -> None:
        store = MemoryCheckpointStore()
        m = manager(store)
        await m.create("s1", Sentinel.TRIM_HORIZON, [], None)
        await m.take_round()
        row = await store.get(APP, STREAM, "s1")
        assert row is not None
        await store.update_lease(APP, STREAM, "s1", expected=row, owner="thief")
        assert not await m.write("s1", (5, 0))
        assert not await m.write("s1", (6, 0))
        assert m.events["lost"] == ["s1"]  # type: ignore[attr-defined]
        assert m.held() == {}
        await m.close()
        stored = await store.get(APP, STREAM, "s1")
        assert stored is not None
        assert (stored.owner, stored.value) == ("thief", Sentinel.TRIM_HORIZON)

    asyncio.run(main())


def test_release_after_a_write_of_ours_whose_answer_was_lost() -> None:
    async def main() -> None:
        store = MemoryCheckpointStore()
        m = manager(store)
        await m.create("s1", Sentinel.TRIM_HORIZON, [], None)
        await m.take_round()
        row = await store.get(APP, STREAM, "s1")
        assert row is not None
        # A renewal went through but its answer never came: the counter moved, still ours.
        await store.update_lease(APP, STREAM, "s1", expected=row, owner="me")
        await m.close()
        stored = await store.get(APP, STREAM, "s1")
        assert stored is not None
        assert stored.owner is None

    asyncio.run(main())


def test_closing_waits_for_a_take_in_flight_and_releases_it() -> None:
    """A take cut off in flight may be written; it must not stay ours unknown to us."""

    async def main() -> None:
        store = SlowStore()
        m = manager(store, renew_interval=0.1)
        await m.create("s1", Sentinel.TRIM_HORIZON, [], None)
        store.delay = 0.2
        m.start()
        await asyncio.sleep(0.2)  # announced, a renewal interval passed: taking s1 now
        await m.close()
        stored = await store.get(APP, STREAM, "s1")
        assert stored is not None
        assert stored.owner is None
        assert stored.counter >= 3  # taken, then released

    asyncio.run(main())


def test_renewals_keep_the_lease_and_failures_expire_it() -> None:
    clock = FakeClock()

    async def main() -> None:
        store = SlowStore()
        m = manager(store, renew_interval=0.02, clock=clock)
        await m.create("s1", Sentinel.TRIM_HORIZON, [], None)
        await m.take_round()
        m.start()
        await asyncio.sleep(0.1)
        row = await store.get(APP, STREAM, "s1")
        assert row is not None
        assert row.counter > 3  # renewed several times
        store.delay = 60.0  # renewals now hang (no answer)
        await asyncio.sleep(6.0)  # past the failover time (5 s)
        assert m.events["lost"] == ["s1"]  # type: ignore[attr-defined]
        assert m.held() == {}
        store.delay = 0.0
        await m.close()

    clock.run(main())


class GoneStore(MemoryCheckpointStore):
    """Every call raises once ``gone`` is set: the table was deleted."""

    gone = False

    async def update_lease(self, *args: Any, **kwargs: Any) -> Checkpoint:
        if self.gone:
            raise CheckpointTableGoneError("t", "lease table 't' no longer exists")
        return await super().update_lease(*args, **kwargs)


def test_a_table_gone_ends_every_lease_at_the_next_renewal_and_says_so_once() -> None:
    """Not after the failover time, as a store that does not answer: the first renewal that
    meets the missing table drops every lease, stops taking and says so (LeasesFailed), after
    a LeaseLost for each held lease."""
    clock = FakeClock()

    async def main() -> None:
        store = GoneStore()
        m = manager(store, renew_interval=0.02, clock=clock)
        for shard_id in ("s1", "s2"):
            await m.create(shard_id, Sentinel.TRIM_HORIZON, [], None)
        await m.take_round()
        m.start()
        await asyncio.sleep(0.1)
        store.gone = True
        await asyncio.sleep(0.1)  # a few renewal intervals, far below the failover time (5 s)
        assert sorted(m.events["lost"]) == ["s1", "s2"]  # type: ignore[attr-defined]
        assert m.held() == {}
        failures = m.events["failed"]  # type: ignore[attr-defined]
        assert len(failures) == 1
        assert isinstance(failures[0], CheckpointTableGoneError)
        assert m.failure is failures[0]
        assert not await m.write("s1", (5, 0))  # no lease: nothing written
        await m.close()

    clock.run(main())


class Changes(ConsumerRecorder):
    """What the lease manager told its recorder."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def lease(self, change: LeaseChange) -> None:
        self.seen.append(change.value)

    def checkpoint(self, shard_id: str) -> None:
        self.seen.append(f"checkpoint {shard_id}")


def test_the_recorder_hears_of_takes_steals_checkpoints_losses_and_releases() -> None:
    async def main() -> list[str]:
        store = MemoryCheckpointStore()
        changes = Changes()
        m = manager(store, recorder=changes)
        for shard_id in ("s1", "s2"):
            await m.create(shard_id, Sentinel.TRIM_HORIZON, [], None)
            row = await store.get(APP, STREAM, shard_id)
            assert row is not None
            await store.update_lease(APP, STREAM, shard_id, expected=row, owner="other")
        [stolen] = await m.take_round()  # "other" holds both: one is asked for
        left = ({"s1", "s2"} - {stolen}).pop()
        marked = await store.get(APP, STREAM, stolen)
        assert marked is not None
        assert (marked.owner, marked.checkpoint_owner) == ("me", "other")
        assert not await m.write(stolen, (5, 0))  # not ours to read before the hand-off
        await store.put(APP, STREAM, stolen, (4, 0), expected=marked)  # other's last checkpoint
        await m._renew_once(stolen)  # the next renewal round sees the hand-off done
        assert m.events["acquired"] == [stolen]  # type: ignore[attr-defined]
        assert m.held() == {stolen: (4, 0)}
        assert await m.write(stolen, (5, 0))
        assert await m.write(stolen, (5, 0))  # nothing new: nothing written
        row = await store.get(APP, STREAM, stolen)
        assert row is not None
        await store.update_lease(APP, STREAM, stolen, expected=row, owner="thief")
        assert not await m.write(stolen, (6, 0))
        row = await store.get(APP, STREAM, left)
        assert row is not None
        await store.update_lease(APP, STREAM, left, expected=row, owner=None)
        assert await m.take_round() == [left]
        changes.seen = [c.replace(stolen, "S") for c in changes.seen]
        await m.close()
        return changes.seen

    assert asyncio.run(main()) == ["stolen", "checkpoint S", "lost", "taken", "released"]


def test_a_lease_asked_for_is_handed_over_at_the_owners_final_checkpoint() -> None:
    """The taker marks the lease; the owner hears of it at its next renewal, stops, writes its
    final checkpoint (which clears the marker), and the taker starts from exactly there."""
    clock = FakeClock()

    async def main() -> None:
        store = MemoryCheckpointStore()
        owner_changes = Changes()
        owner = manager(
            store, renew_interval=0.05, recorder=owner_changes, clock=clock, graceful_handoff=True
        )
        owner.worker_id = owner.coordinator.worker_id = "owner"
        handoffs = owner.events["handoff"]  # type: ignore[attr-defined]
        taker = manager(store, renew_interval=0.05, clock=clock)
        for shard_id in ("s1", "s2"):
            await owner.create(shard_id, Sentinel.TRIM_HORIZON, [], None)
        assert sorted(await owner.take_round()) == ["s1", "s2"]
        await owner.write("s1", (3, 0))
        await owner.write("s2", (3, 0))
        owner.start()
        taker.start()
        await taker.take_round()  # target 1 each: one is asked for
        [asked] = [s for s in ("s1", "s2") if taker.coordinator.holds(s)]
        assert taker.held() == {}  # not started before the hand-off
        while not owner.events["handoff"]:  # type: ignore[attr-defined]
            await clock.sleep(0.01)
        assert handoffs == [asked]
        assert owner.handing(asked)
        assert asked not in owner.held()
        # The owner's application acked up to (7, 0) meanwhile: its final checkpoint.
        assert await owner.hand_over(asked, (7, 0))
        while asked not in taker.held():
            await clock.sleep(0.01)
        assert taker.held() == {asked: (7, 0)}
        assert taker.events["acquired"] == [asked]  # type: ignore[attr-defined]
        row = await store.get(APP, STREAM, asked)
        assert row is not None
        assert (row.owner, row.checkpoint_owner, row.value) == ("me", None, (7, 0))
        assert "handed_over" in owner_changes.seen
        assert owner.events["lost"] == []  # type: ignore[attr-defined]
        await owner.close()
        await taker.close()

    clock.run(main())


def test_a_lease_not_handed_over_in_time_is_taken_as_it_is() -> None:
    """An owner that never hands over (it hangs, or died between renewals) delays the taker by
    ``handoff_timeout`` at most; the owner's next write then fails: the lease is lost."""
    clock = FakeClock()

    async def main() -> None:
        store = MemoryCheckpointStore()
        # Told of the request, the owner never calls hand_over.
        owner = manager(store, renew_interval=0.05, clock=clock, graceful_handoff=True)
        owner.worker_id = owner.coordinator.worker_id = "owner"
        taker = manager(store, renew_interval=0.05, clock=clock)
        for shard_id in ("s1", "s2"):
            await owner.create(shard_id, Sentinel.TRIM_HORIZON, [], None)
        await owner.take_round()
        owner.start()
        taker.start()
        await taker.take_round()
        [asked] = [s for s in ("s1", "s2") if taker.coordinator.holds(s)]
        started = clock.now()
        while asked not in taker.held():
            await clock.sleep(0.01)
        waited = clock.now() - started
        assert taker.config.handoff_every <= waited <= taker.config.handoff_every + 0.2
        while asked not in owner.events["lost"]:  # type: ignore[attr-defined]
            await clock.sleep(0.01)
        assert not owner.handing(asked)
        await owner.close()
        await taker.close()

    clock.run(main())


def test_an_owner_that_never_saw_the_request_gets_the_failover_time() -> None:
    """An owner cut off from the table goes on delivering until its failover time ran out:
    the taker does not start before that (no shard read by two workers at once)."""
    clock = FakeClock()

    async def main() -> None:
        store = MemoryCheckpointStore()
        owner = manager(store, renew_interval=0.05, clock=clock)
        owner.worker_id = owner.coordinator.worker_id = "owner"
        taker = manager(store, renew_interval=0.05, clock=clock)
        for shard_id in ("s1", "s2"):
            await owner.create(shard_id, Sentinel.TRIM_HORIZON, [], None)
        await owner.take_round()  # the owner never renews from now on
        taker.start()
        await taker.take_round()
        [asked] = [s for s in ("s1", "s2") if taker.coordinator.holds(s)]
        started = clock.now()
        while asked not in taker.held():
            await clock.sleep(0.01)
        assert clock.now() - started >= taker.config.failover_time
        await taker.close()

    clock.run(main())


class SlowReadStore(MemoryCheckpointStore):
    """Reads of one row take ``delay`` seconds of ``clock`` (an overloaded table)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.delay = 0.0

    async def get(self, *args: Any, **kwargs: Any) -> Checkpoint | None:
        await self.clock.sleep(self.delay)
        return await super().get(*args, **kwargs)


def test_a_lease_that_expires_while_its_hand_off_is_looked_at_is_lost_once(
    caplog: Any,
) -> None:
    """The taker's look at a lease it asked for outlasts its failover time: the lease expires
    meanwhile (lost, said once), and the look's answer finds nothing left to finish."""
    clock = FakeClock()

    async def main() -> None:
        store = SlowReadStore(clock)
        owner = manager(store, renew_interval=0.05, clock=clock)
        owner.worker_id = owner.coordinator.worker_id = "owner"
        taker = manager(store, renew_interval=0.05, clock=clock)
        for shard_id in ("s1", "s2"):
            await owner.create(shard_id, Sentinel.TRIM_HORIZON, [], None)
        await owner.take_round()
        taker.start()
        await taker.take_round()
        [asked] = [s for s in ("s1", "s2") if taker.coordinator.holds(s)]
        store.delay = taker.config.failover_time + 1
        while asked not in taker.events["lost"]:  # type: ignore[attr-defined]
            await clock.sleep(0.05)
        await clock.sleep(store.delay)
        assert taker.events["lost"] == [asked]  # type: ignore[attr-defined]
        store.delay = 0.0
        await taker.close()

    clock.run(main())
    assert not [r for r in caplog.records if "renewing the lease" in r.getMessage()]


def test_workers_announce_themselves_and_leave() -> None:
    async def main() -> None:
        store = MemoryCheckpointStore()
        m = manager(store, renew_interval=0.01)
        m.start()
        while not await store.workers(APP, STREAM):  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        assert list(await store.workers(APP, STREAM)) == ["me"]
        await m.close()
        assert await store.workers(APP, STREAM) == {}

    asyncio.run(main())


class SlowScanStore(MemoryCheckpointStore):
    """A table scan that takes ``delay`` and answers with the table as it was when it began."""

    delay = 0.0
    scans = 0

    async def list(self, application: str, stream: str) -> list[Checkpoint]:
        rows = await super().list(application, stream)
        self.scans += 1
        await asyncio.sleep(self.delay)
        return rows


def test_a_slow_scan_does_not_stretch_the_take_interval() -> None:
    """Rounds start every take interval, however long each takes: balance is bounded in take
    intervals (a scan of 0.8 s made them 1.8 s apart)."""
    clock = FakeClock()

    async def main() -> int:
        store = SlowScanStore()
        store.delay = 0.8
        m = manager(store, renew_interval=0.1, clock=clock)
        m.config = dataclasses.replace(m.config, take_interval=1.0)
        m.start()
        await clock.sleep(10.05)
        await m.close()
        return store.scans

    assert clock.run(main()) >= 10


def test_a_take_lost_to_another_worker_scans_again_at_once() -> None:
    """Another worker took two of the leases this one chose between its scan and its takes:
    its view is stale, so it scans again at once, not a take interval (60 s) later."""
    clock = FakeClock()

    class ThiefMeanwhile(SlowScanStore):
        async def list(self, application: str, stream: str) -> list[Checkpoint]:
            rows = await super().list(application, stream)
            if self.scans == 1:
                for row in rows[:2]:
                    await self.update_lease(APP, STREAM, row.shard_id, expected=row, owner="thief")
            return rows

    async def main() -> int:
        store = ThiefMeanwhile()
        m = manager(store, renew_interval=0.1, clock=clock)
        m.config = dataclasses.replace(m.config, take_interval=60.0)
        m._eligible = lambda: {"s1", "s2", "s3", "s4"}
        for shard_id in ("s1", "s2", "s3", "s4"):
            await m.create(shard_id, Sentinel.TRIM_HORIZON, [], None)
        m.start()
        await clock.sleep(5.0)
        assert sorted(m.held()) == ["s3", "s4"]
        await m.close()
        return store.scans

    assert clock.run(main()) >= 2


def test_events_come_in_order_and_scans_do_not_pile_up() -> None:
    """The manager calls nothing back: a take is a LeaseAcquired; a scan nobody took yet is
    replaced by the newer one; a table gone is a LeaseLost per held lease, then one
    LeasesFailed."""
    clock = FakeClock()

    async def main() -> None:
        store = GoneStore()
        m = LeaseManager(
            store,
            APP,
            STREAM,
            LeaseConfig(worker_id="me", failover_time=5.0, renew_interval=0.02),
            eligible=lambda: {"s1"},
            clock=clock,
        )
        await m.create("s1", Sentinel.TRIM_HORIZON, [], None)
        assert not m.has_events
        assert await m.take_round() == ["s1"]
        await m.take_round()
        await m.take_round()
        events = m.take_events()
        assert [type(e) for e in events] == [LeaseAcquired, TableScanned]
        assert events[0] == LeaseAcquired("s1")
        assert isinstance(events[1], TableScanned)
        assert [row.shard_id for row in events[1].rows] == ["s1"]
        assert m.take_events() == []
        m.start()
        store.gone = True
        events = await m.next_events()
        while not any(isinstance(e, LeasesFailed) for e in events):
            events += await m.next_events()
        kinds = [type(e) for e in events if not isinstance(e, TableScanned)]
        assert kinds == [LeaseLost, LeasesFailed]
        assert isinstance(events[-1], LeasesFailed)
        assert isinstance(events[-1].error, CheckpointTableGoneError)
        await m.close()

    clock.run(main())
