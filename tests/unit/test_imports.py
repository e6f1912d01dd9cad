"""The layering the design promises: pure modules load no AWS SDK or HTTP stack, the packages
export lazily, and every exported name resolves."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

PURE = [
    "kinesis_core",
    "kinesis_core.aggregation",
    "kinesis_core.allocator",
    "kinesis_core.classify",
    "kinesis_core.errors",
    "kinesis_core.hashing",
    "kinesis_core.lifecycle",
    "kinesis_core.overrides",
    "kinesis_core.records",
    "kinesis_core.shard_map",
    "kinesis_core.skew",
    "kinesis_core.stream",
    "kinesis_core.checkpoint",
    "kinesis_core.checkpoint.base",
    "kinesis_core.consumer",
    "kinesis_core.consumer.config",
    "kinesis_core.consumer.frontier",
    "kinesis_core.consumer.incarnation",
    "kinesis_core.consumer.lineage",
    "kinesis_core.consumer.polling",
    "kinesis_core.consumer.positions",
    "kinesis_core.consumer.subscription",
    "kinesis_core.consumer.transport",
    "kinesis_core.lease",
    "kinesis_core.lease.coordinator",
    "kinesis_core.backoff",
    "kinesis_core.consumer.checkpointer",
    "kinesis_core.fanout",
    "kinesis_core.fanout.consumers",
    "kinesis_core.fanout.registration",
    "kinesis_core.producer",
    "kinesis_core.producer.aggregator",
    "kinesis_core.producer.collector",
    "kinesis_core.producer.config",
    "kinesis_core.producer.limiter",
    "kinesis_core.producer.pipeline",
    "kinesis_core.producer.result",
    "kinesis_core.producer.retrier",
]
"""Sans-I/O modules and lazy packages: importing them must not load an I/O stack."""

IO_STACKS = ("botocore", "aiobotocore", "aiohttp", "apache_beam", "faust")

PACKAGES = [
    "kinesis_core",
    "kinesis_core.checkpoint",
    "kinesis_core.consumer",
    "kinesis_core.fanout",
    "kinesis_core.lease",
    "kinesis_core.producer",
]


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_load_no_io_stack(module: str) -> None:
    code = f"import sys, {module}\nprint(','.join(m for m in {IO_STACKS!r} if m in sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "", f"importing {module} loaded {loaded}"


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__all__, package
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{package}.{name}"
    assert set(module.__all__) <= set(dir(module))


def test_an_unknown_name_is_an_attribute_error() -> None:
    import kinesis_core

    with pytest.raises(AttributeError, match="module 'kinesis_core' has no attribute 'nope'"):
        kinesis_core.nope  # noqa: B018
    assert not hasattr(kinesis_core, "also_nope")
