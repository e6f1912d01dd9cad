"""The consumer: reads every shard of a stream (parents before children), deaggregates, and
checkpoints per shard over the contiguously acked records.

Also what other engines build their own drivers from (the Beam source uses these): the
sans-I/O shard readers behind the read-transport seam (:mod:`.transport`, :mod:`.polling`),
the transports and the step function that execute them (:mod:`.reading`), and the
:class:`Checkpointer`, the one writer of checkpoint rows.
"""

from typing import TYPE_CHECKING

from kinesis_core._lazy import lazy_exports

if TYPE_CHECKING:
    from kinesis_core.consumer.checkpointer import (
        Checkpointer as Checkpointer,
        SharedCheckpointsWarning as SharedCheckpointsWarning,
    )
    from kinesis_core.consumer.config import (
        ConsumerConfig as ConsumerConfig,
        EnhancedFanOut as EnhancedFanOut,
    )
    from kinesis_core.consumer.consumer import (
        Consumer as Consumer,
    )
    from kinesis_core.consumer.frontier import (
        RecordBatch as RecordBatch,
        ShardFrontier as ShardFrontier,
    )
    from kinesis_core.consumer.lineage import (
        Lineage as Lineage,
        ShardNode as ShardNode,
        ShardState as ShardState,
    )
    from kinesis_core.consumer.positions import (
        LATEST as LATEST,
        TRIM_HORIZON as TRIM_HORIZON,
        AtTimestamp as AtTimestamp,
        InitialPosition as InitialPosition,
        parse_initial_position as parse_initial_position,
    )
    from kinesis_core.consumer.reading import ShardReadError as ShardReadError
    from kinesis_core.consumer.status import (
        ShardStatus as ShardStatus,
    )

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
