"""Every refused setting names its field: ``ConfigurationError.field`` is always set, and is
the field that was given a bad value (or, for two settings that disagree, one of them)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from kinesis_core.aws.config import ClientConfig
from kinesis_core.consumer.config import ConsumerConfig, EnhancedFanOut
from kinesis_core.consumer.polling import PollingOptions
from kinesis_core.consumer.subscription import SubscriptionOptions
from kinesis_core.errors import ConfigurationError
from kinesis_core.lease.coordinator import LeaseConfig
from kinesis_core.producer.config import ProducerConfig

CONFIGS: list[type[Any]] = [
    ClientConfig,
    ConsumerConfig,
    EnhancedFanOut,
    LeaseConfig,
    PollingOptions,
    ProducerConfig,
    SubscriptionOptions,
]

NUMBERS: list[object] = [-1, 0, -0.5, 10**30, math.nan]
TEXTS: list[object] = ["", "no such value", "x" * 1000]


def bad_values(field: dataclasses.Field[Any]) -> list[object]:
    """Values of the field's own type that most settings of that type refuse (a setting that
    takes one of them is simply not refused for it)."""
    kind = str(field.type)
    if "bool" in kind:
        return ["yes"]
    if "float" in kind or "int" in kind:
        return NUMBERS
    if kind.startswith("str"):
        return TEXTS
    return []


def refusals(config: type[Any]) -> list[tuple[str, object, ConfigurationError]]:
    out = []
    for field in dataclasses.fields(config):
        for value in bad_values(field):
            try:
                config(**{field.name: value})
            except ConfigurationError as error:
                out.append((field.name, value, error))
    return out


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.__name__)
def test_every_refused_value_names_its_field(config: type[Any]) -> None:
    names = {f.name for f in dataclasses.fields(config)}
    seen = refusals(config)
    assert seen, f"{config.__name__} refused none of the bad values"
    for name, value, error in seen:
        assert error.field in names, (name, value, str(error))
        assert str(error).startswith(f"{error.field}: "), str(error)
    # A bad value alone is blamed on its own field, except where another default now
    # disagrees with it (the message then names both).
    for name, value, error in seen:
        assert error.field == name or name in str(error), (name, value, str(error))


def test_most_fields_of_every_config_are_checked() -> None:
    """The walk above covers the settings: each config refuses bad values in most fields."""
    for config in CONFIGS:
        fields = [f.name for f in dataclasses.fields(config)]
        checked = {name for name, _, _ in refusals(config)}
        assert len(checked) * 2 >= len(fields), (config.__name__, sorted(set(fields) - checked))


def test_configuration_error_needs_a_field() -> None:
    error = ConfigurationError("record_ttl", "must lie in [0.1, 86400.0] seconds, got 0")
    assert (error.field, error.reason) == (
        "record_ttl",
        "must lie in [0.1, 86400.0] seconds, got 0",
    )
    assert str(error) == "record_ttl: must lie in [0.1, 86400.0] seconds, got 0"
    with pytest.raises(TypeError):
        ConfigurationError("a message without a field")  # type: ignore[call-arg]
