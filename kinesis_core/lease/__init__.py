"""Leases: several consumer workers (processes, hosts) share the shards of one stream.

The KCL's scheme, on the rows of any :class:`~kinesis_core.checkpoint.LeaseStore`: a worker
renews its leases by bumping their counters, takes expired ones, balances towards
``ceil(shards / workers)`` by stealing one at a time, and stops a shard the moment a write to
its lease loses the counter condition. The decisions are sans-I/O
(:class:`LeaseCoordinator`); :class:`LeaseManager` runs them.
"""

from typing import TYPE_CHECKING

from kinesis_core._lazy import lazy_exports

# name -> the module defining it, imported on first use (kinesis_core/_lazy.py)
_EXPORTS = {
    "LeaseConfig": "kinesis_core.lease.coordinator",
    "LeaseCoordinator": "kinesis_core.lease.coordinator",
    "Take": "kinesis_core.lease.coordinator",
    "LeaseManager": "kinesis_core.lease.manager",
    "LeaseEvent": "kinesis_core.lease.events",
    "LeaseAcquired": "kinesis_core.lease.events",
    "LeaseLost": "kinesis_core.lease.events",
    "HandOffAsked": "kinesis_core.lease.events",
    "TableScanned": "kinesis_core.lease.events",
    "LeasesFailed": "kinesis_core.lease.events",
    "default_worker_id": "kinesis_core.lease.manager",
}

if TYPE_CHECKING:
    from kinesis_core.lease.coordinator import (
        LeaseConfig as LeaseConfig,
        LeaseCoordinator as LeaseCoordinator,
        Take as Take,
    )
    from kinesis_core.lease.events import (
        HandOffAsked as HandOffAsked,
        LeaseAcquired as LeaseAcquired,
        LeaseEvent as LeaseEvent,
        LeaseLost as LeaseLost,
        LeasesFailed as LeasesFailed,
        TableScanned as TableScanned,
    )
    from kinesis_core.lease.manager import (
        LeaseManager as LeaseManager,
        default_worker_id as default_worker_id,
    )

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
