"""The process's heap, as the cyclic garbage collector sees it (shared by the consumer and the
producer)."""

from __future__ import annotations

import functools
import gc


@functools.cache
def freeze_start_up_heap() -> None:
    """Once per process, when the first consumer or producer has started: move every object
    alive then (modules, the SDK's service models, the client, the application's own start-up
    objects) to the cyclic garbage collector's permanent generation (``gc.freeze``), where its
    collections no longer walk them. They live as long as the process; without this, each
    full collection that a burst of records sets off walks them all again. Objects frozen
    here that later become cyclic garbage are not collected: start consumers and producers
    after the application's start-up work, not in the middle of it."""
    gc.freeze()
