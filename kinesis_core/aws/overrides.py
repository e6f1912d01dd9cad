"""Keyword overrides of a frozen configuration dataclass, with the error users need.

``Consumer("s", consumer_config=base, checkpoint_interval=1)`` and
``WriteToKinesis("s", record_ttl=60)`` both take a configuration object plus keyword
overrides of its fields; a misspelled keyword must say which keywords exist.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from kinesis_core.errors import ConfigurationError

C = TypeVar("C")


def with_overrides(config: C, overrides: Mapping[str, Any], owner: str) -> C:
    """``config`` with the fields in ``overrides`` replaced (validated again by the
    dataclass); an unknown name raises :class:`ConfigurationError` listing the known ones."""
    if not overrides:
        return config
    known = {f.name for f in dataclasses.fields(config)}  # type: ignore[arg-type]
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigurationError(
            ", ".join(unknown),
            f"{owner} got unknown option(s) {', '.join(unknown)}; "
            f"the options of {type(config).__name__} are: {', '.join(sorted(known))}",
        )
    return dataclasses.replace(config, **overrides)  # type: ignore[type-var]
