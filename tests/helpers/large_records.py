"""Records for the large-record tests: small ones with a 3 MiB and a 9.5 MiB one among them."""

from __future__ import annotations

import random

MIB = 1024 * 1024


def large_records(tag: str, seed: int = 0) -> list[tuple[bytes, str]]:
    """Small records with a 3 MiB and a 9.5 MiB one among them, random bytes (a corruption or
    a truncation shows), keys spread over the stream."""
    rng = random.Random(f"{tag}-{seed}")
    small = [(f"{tag}-small-{i}".encode(), f"{tag}-{i}") for i in range(9)]
    three = (tag.encode() + rng.randbytes(3 * MIB - len(tag)), f"{tag}-three")
    nine = (tag.encode() + rng.randbytes(int(9.5 * MIB) - len(tag)), f"{tag}-nine")
    return [*small[:3], three, *small[3:6], nine, *small[6:]]
