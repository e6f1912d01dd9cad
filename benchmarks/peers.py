"""The peers that benchmarks/ and the interop tests measure against, and why one may be absent.

A peer whose release cannot install on some supported Python has an environment marker in the
bench extra (``async-kinesis==3.0.1; python_version >= '3.11'``; the test and dev extras include
bench). There, the benchmark rows of that peer say so, and tests marked
``@pytest.mark.peer(NAME)`` are deselected with the reason (tests/conftest.py). A peer that
should be installed and is not is an error, never a skip.
"""

from __future__ import annotations

import importlib.metadata
import platform

from packaging.requirements import Requirement

PROJECT = "kinesis-connectors"
EXTRA = "bench"
"""The extra that lists the peers."""


def installed(distribution: str) -> bool:
    try:
        importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def excluded_here(distribution: str) -> str | None:
    """Why the bench extra does not install ``distribution`` on this Python (its marker says so),
    or None if it does (or if the project's metadata is not installed)."""
    try:
        requirements = importlib.metadata.requires(PROJECT) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for text in requirements:
        requirement = Requirement(text)
        if requirement.name.lower() != distribution.lower() or requirement.marker is None:
            continue
        if not requirement.marker.evaluate({"extra": EXTRA}):
            condition = str(requirement.marker).replace(f' and extra == "{EXTRA}"', "")
            return (
                f"{distribution} is not installed on this Python ({platform.python_version()}):"
                f" the {EXTRA} extra installs it where {condition}"
            )
    return None


def why_missing(distribution: str) -> str | None:
    """None if ``distribution`` is installed; else why not, in words for a table or a report."""
    if installed(distribution):
        return None
    return excluded_here(distribution) or (
        f"{distribution} is not installed: pip install -e '.[dev]'"
    )
