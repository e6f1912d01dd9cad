"""The layering the design promises: sans-I/O modules do no I/O and load no AWS SDK or HTTP
stack, the packages export lazily from a static table, and every exported name resolves, also
from an install that has only ``.pyc`` files."""

from __future__ import annotations

import compileall
import importlib
import os
import pkgutil
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.source import (
    imported_modules,
    imports,
    make_package,
    package_modules,
    type_checking_imports,
)

PURE = [
    "kinesis_core",
    "kinesis_core._kpl_messages",
    "kinesis_core._lazy",
    "kinesis_core.aggregation",
    "kinesis_core.aws",
    "kinesis_core.aws.backoff",
    "kinesis_core.aws.calls",
    "kinesis_core.aws.classify",
    "kinesis_core.aws.fastparse",
    "kinesis_core.aws.http1",
    "kinesis_core.aws.noise",
    "kinesis_core.aws.overrides",
    "kinesis_core.aws.retry",
    "kinesis_core.aws.run",
    "kinesis_core.checkpoint",
    "kinesis_core.checkpoint.base",
    "kinesis_core.checkpoint.memory",
    "kinesis_core.consumer",
    "kinesis_core.consumer.config",
    "kinesis_core.consumer.dedup",
    "kinesis_core.consumer.shard_dedup",
    "kinesis_core.consumer.frontier",
    "kinesis_core.consumer.incarnation",
    "kinesis_core.consumer.lineage",
    "kinesis_core.consumer.polling",
    "kinesis_core.consumer.positions",
    "kinesis_core.consumer.rounds",
    "kinesis_core.consumer.shard_consumer",
    "kinesis_core.consumer.status",
    "kinesis_core.consumer.subscription",
    "kinesis_core.consumer.transport",
    "kinesis_core.errors",
    "kinesis_core.fanout",
    "kinesis_core.fanout.errors",
    "kinesis_core.fanout.http11",
    "kinesis_core.fanout.http2",
    "kinesis_core.fanout.registration",
    "kinesis_core.fanout.signing",
    "kinesis_core.lease",
    "kinesis_core.lease.coordinator",
    "kinesis_core.lease.events",
    "kinesis_core.lifecycle",
    "kinesis_core.local",
    "kinesis_core.local.shard_limits",
    "kinesis_core.producer",
    "kinesis_core.producer.admission",
    "kinesis_core.producer.aggregator",
    "kinesis_core.producer.collector",
    "kinesis_core.producer.config",
    "kinesis_core.producer.items",
    "kinesis_core.producer.limiter",
    "kinesis_core.producer.metrics",
    "kinesis_core.producer.pipeline",
    "kinesis_core.producer.result",
    "kinesis_core.producer.retrier",
    "kinesis_core.record_ids",
    "kinesis_core.records",
    "kinesis_core.runtime",
    "kinesis_core.serde",
    "kinesis_core.shards",
    "kinesis_core.shards.allocator",
    "kinesis_core.shards.hashing",
    "kinesis_core.shards.info",
    "kinesis_core.shards.record_size",
    "kinesis_core.shards.shard_map",
    "kinesis_core.shards.skew",
    "kinesis_core.stream",
    "kinesis_core.telemetry",
    "kinesis_core.telemetry.config",
    "kinesis_core.telemetry.figures",
    "kinesis_core.telemetry.names",
    "kinesis_core.telemetry.recorder",
    "kinesis_core.tracing",
]
"""Sans-I/O modules and lazy packages, as they are today: neither they nor anything they import
at run time imports a module of ``NO_IO``."""

NOT_YET_PURE = {
    "kinesis_core.consumer.checkpointer": "the Checkpointer awaits the store (asyncio)",
}
"""Modules the design calls sans-I/O that are not yet, and why: each waits for a split. When one
becomes pure, test_modules_waiting_to_be_pure_still_are says to move it to ``PURE``."""

DRIVERS = [
    "kinesis_core.__main__",
    "kinesis_core.aws.botocore_private",
    "kinesis_core.aws.client",
    "kinesis_core.aws.config",
    "kinesis_core.aws.direct_http",
    "kinesis_core.aws.exceptions",
    "kinesis_core.aws.executor",
    "kinesis_core.aws.http1_pool",
    "kinesis_core.aws.lean_get_records",
    "kinesis_core.aws.lean_get_shard_iterator",
    "kinesis_core.aws.lean_requests",
    "kinesis_core.aws.log_filter",
    "kinesis_core.checkpoint.dynamodb",
    "kinesis_core.checkpoint.sqlite",
    "kinesis_core.cli",
    "kinesis_core.consumer.consumer",
    "kinesis_core.consumer.delivery",
    "kinesis_core.consumer.flusher",
    "kinesis_core.consumer.links",
    "kinesis_core.consumer.reading",
    "kinesis_core.consumer.scheduler",
    "kinesis_core.consumer.shard_run",
    "kinesis_core.fanout.client",
    "kinesis_core.fanout.connection",
    "kinesis_core.fanout.consumers",
    "kinesis_core.fanout.eventstream",
    "kinesis_core.fanout.tls",
    "kinesis_core.lease.manager",
    "kinesis_core.local.__main__",
    "kinesis_core.local._moto_child",
    "kinesis_core.local._server",
    "kinesis_core.local.fault_cli",
    "kinesis_core.local.fault_proxy",
    "kinesis_core.local.faults",
    "kinesis_core.local.kinesis_mock",
    "kinesis_core.local.moto_server",
    "kinesis_core.local.pytest_plugin",
    "kinesis_core.local.streams",
    "kinesis_core.producer.blocking",
    "kinesis_core.producer.partitioning",
    "kinesis_core.producer.producer",
    "kinesis_core.producer.sender",
    "kinesis_core.producer.shard_map_driver",
    "kinesis_core.runtime.clock",
    "kinesis_core.runtime.heap",
    "kinesis_core.runtime.loop_thread",
    "kinesis_core.runtime.timeouts",
    "kinesis_core.status",
    "kinesis_core.telemetry.metered",
    "kinesis_core.telemetry.otel",
]
"""Modules that do I/O (the asyncio and thread drivers, the clients, the stores, the local
servers, the command line), or import one that does. With ``PURE`` and ``NOT_YET_PURE`` they
name every module of ``kinesis_core`` once."""

NO_IO = {
    # the clock, the event loop, threads, processes and the operating system
    "asyncio",
    "concurrent",
    "gc",
    "multiprocessing",
    "os",
    "selectors",
    "signal",
    "socket",
    "sqlite3",
    "ssl",
    "subprocess",
    "threading",
    "time",
    # the I/O stacks
    "aiobotocore",
    "aiohttp",
    "apache_beam",
    "boto3",
    "botocore",
    "faust",
    "mode",
    "moto",
    "pyarrow",
    "pyspark",
}
"""Top-level modules a pure module must not import, directly or through another module."""

IO_STACKS = ("botocore", "aiobotocore", "aiohttp", "apache_beam", "faust")

NO_STACK = {"pytest", "hypothesis", "google", "h2", "h11", "hpack", "packaging"}
"""Third-party modules known to load no I/O stack (protobuf is ``google``)."""

PACKAGES = [
    "kinesis_core",
    "kinesis_core.checkpoint",
    "kinesis_core.consumer",
    "kinesis_core.fanout",
    "kinesis_core.lease",
    "kinesis_core.local",
    "kinesis_core.producer",
    "kinesis_core.telemetry",
    "kinesis_schema_registry",
    "spark_kinesis",
]
"""The packages that export lazily (kinesis_core/_lazy.py)."""


# -- purity -----------------------------------------------------------------------------------


def runtime_dependencies(package: str) -> dict[str, tuple[set[str], set[str]]]:
    """Module -> (the ``NO_IO`` modules it imports at run time, the modules of ``package`` it
    imports at run time). A name taken from a lazy package is a dependency on the module its
    export table names."""
    modules = package_modules(package)
    found: dict[str, tuple[set[str], set[str]]] = {}
    for name, path in modules.items():
        forbidden: set[str] = set()
        internal: set[str] = set()
        for base, names in imports(name, path, runtime=True):
            if base.split(".")[0] in NO_IO:
                forbidden.add(base)
            elif base.split(".")[0] == package:
                internal |= imported_modules(base, names, modules.get)
        found[name] = (forbidden, internal - {name})
    return found


def io_imports(module: str, graph: dict[str, tuple[set[str], set[str]]]) -> Iterator[str]:
    """``"asyncio"`` or ``"asyncio (via a -> b)"`` for every ``NO_IO`` module that ``module``
    imports at run time, directly or through other modules of its package."""
    seen = {module}
    paths = [[module]]
    while paths:
        path = paths.pop(0)
        forbidden, internal = graph[path[-1]]
        via = f" (via {' -> '.join(path[1:])})" if len(path) > 1 else ""
        yield from (f"{name}{via}" for name in sorted(forbidden))
        for target in sorted(internal - seen):
            seen.add(target)
            paths.append([*path, target])


BEAM_PURE = ["beam_kinesis.plan", "spark_kinesis.offsets"]
"""Modules of the adapter packages that must stay sans-I/O and free of their engine: Beam's
read plan (restrictions as values, their planning, checkpoint keys, the wire form) and the
Spark source's offset rules."""


@pytest.mark.parametrize("module", BEAM_PURE)
def test_the_beam_read_plan_is_pure(
    module: str, core_graph: dict[str, tuple[set[str], set[str]]]
) -> None:
    package = module.split(".")[0]
    adapter = runtime_dependencies(package)
    assert list(io_imports(module, adapter)) == []
    path = package_modules(package)[module]
    core = package_modules("kinesis_core")
    used = set()
    for base, names in imports(module, path, runtime=True):
        if base.split(".")[0] == "kinesis_core":
            used |= imported_modules(base, names, core.get)
    assert used, f"{module} imports nothing of kinesis_core: is this test still looking?"
    assert sorted(used - set(PURE)) == []


@pytest.fixture(scope="module")
def core_graph() -> dict[str, tuple[set[str], set[str]]]:
    return runtime_dependencies("kinesis_core")


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_do_no_io(
    module: str, core_graph: dict[str, tuple[set[str], set[str]]]
) -> None:
    assert list(io_imports(module, core_graph)) == []


@pytest.mark.parametrize("module", sorted(NOT_YET_PURE))
def test_modules_waiting_to_be_pure_still_are(
    module: str, core_graph: dict[str, tuple[set[str], set[str]]]
) -> None:
    assert list(io_imports(module, core_graph)), f"{module} is pure now: move it to PURE"


def test_every_module_is_pure_or_a_driver_once() -> None:
    modules = package_modules("kinesis_core")
    listed = [*PURE, *NOT_YET_PURE, *DRIVERS]
    assert sorted(listed) == sorted(set(listed)), "a module is in two lists"
    assert sorted(set(modules) - set(listed)) == [], "classify it: PURE or DRIVERS"
    assert sorted(set(listed) - set(modules)) == [], "gone: take it off the lists"


@pytest.mark.parametrize("module", DRIVERS)
def test_drivers_do_io(module: str, core_graph: dict[str, tuple[set[str], set[str]]]) -> None:
    assert list(io_imports(module, core_graph)), f"{module} is pure: move it to PURE"


def test_the_purity_check_follows_imports_but_not_type_checking_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {
        "__init__.py": "_EXPORTS = {'Clock': 'purity_pkg.clock'}\n",
        "clock.py": "def now():\n    import time\n    return time.time()\nclass Clock: ...\n",
        "values.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import asyncio\n",
        "lazy_user.py": "from purity_pkg import Clock\n",
        "user.py": "from . import values\nfrom purity_pkg.lazy_user import Clock\n",
    }
    make_package(tmp_path, monkeypatch, "purity_pkg", files)

    graph = runtime_dependencies("purity_pkg")
    assert list(io_imports("purity_pkg.values", graph)) == []
    assert list(io_imports("purity_pkg.user", graph)) == [
        "time (via purity_pkg.lazy_user -> purity_pkg.clock)"
    ]


@pytest.mark.slow
@pytest.mark.parametrize("module", PURE)
def test_pure_modules_load_no_io_stack(module: str) -> None:
    """The same promise, checked by importing: a fresh interpreter, one module."""
    code = f"import sys, {module}\nprint(','.join(m for m in {IO_STACKS!r} if m in sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "", f"importing {module} loaded {loaded}"


# -- the export tables ------------------------------------------------------------------------


@pytest.mark.parametrize("package", PACKAGES)
def test_the_export_table_is_what_type_checkers_see(package: str) -> None:
    module = importlib.import_module(package)
    path = Path(module.__file__ or "")
    assert type_checking_imports(path) == module._EXPORTS


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_resolves_to_its_module(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__all__ == sorted(module._EXPORTS)
    for name, defined_in in module._EXPORTS.items():
        value = getattr(module, name)
        assert value is getattr(importlib.import_module(defined_in), name), f"{package}.{name}"
    assert set(module.__all__) <= set(dir(module))


@pytest.mark.parametrize("package", PACKAGES)
def test_no_export_is_named_like_a_submodule(package: str) -> None:
    """Importing a submodule sets the package's attribute of that name to the module, so an
    export of the same name would be a function or a module depending on what ran first."""
    module = importlib.import_module(package)
    submodules = {info.name for info in pkgutil.iter_modules(module.__path__)}
    assert set(module._EXPORTS) & submodules == set()


def test_an_unknown_name_is_an_attribute_error() -> None:
    import kinesis_core

    with pytest.raises(AttributeError, match="module 'kinesis_core' has no attribute 'nope'"):
        kinesis_core.nope  # noqa: B018
    assert not hasattr(kinesis_core, "also_nope")


@pytest.mark.slow
def test_the_packages_work_from_bytecode_alone(tmp_path: Path) -> None:
    """An install without source files (a zipapp, ``.pyc`` only): every export resolves."""
    installed = tmp_path / "site"
    shutil.copytree(
        Path(importlib.import_module("kinesis_core").__file__ or "").parent,
        installed / "kinesis_core",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    assert compileall.compile_dir(installed, quiet=1, legacy=True)
    for source in installed.rglob("*.py"):
        source.unlink()
    code = "\n".join(
        [
            "import importlib, sys",
            f"sys.path.insert(0, {str(installed)!r})",
            f"for package in {PACKAGES!r}:",
            "    module = importlib.import_module(package)",
            "    for name in module.__all__:",
            "        getattr(module, name)",
            "print(sorted({m.__file__[-4:] for k, m in sys.modules.items()",
            "              if k.split('.')[0] == 'kinesis_core'}))",
            "print(all(m.__file__.startswith(sys.path[0]) for k, m in sys.modules.items()",
            "          if k.split('.')[0] == 'kinesis_core'))",
        ]
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=False
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.split("\n") == ["['.pyc']", "True", ""]


# -- the test suite itself --------------------------------------------------------------------

BLOCKER = """
import sys


class NoIOStacks:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {stacks!r}:
            raise ModuleNotFoundError(f"{{name}} is not installed (blocked by the test)")
        return None


sys.meta_path.insert(0, NoIOStacks())
"""


def unit_tests_without_io_stack() -> list[Path]:
    """The unit test modules that import no I/O stack at run time: not themselves, not through
    the project's packages, nor through the shared test helpers. Importing by name
    (``importlib``) or a third-party module not known to be free of one counts as one."""
    root = Path(__file__).parents[2]
    here = Path(__file__).parent
    first_party = {"kinesis_core", "beam_kinesis", "faust_kinesis", "tests", "benchmarks"}
    reached: dict[str, set[str]] = {}

    def source(module: str) -> Path | None:
        folder = here if module.startswith("test_") else root
        path = folder.joinpath(*module.split("."))
        for candidate in (path / "__init__.py", path.with_suffix(".py")):
            if candidate.is_file():
                return candidate
        return None

    def stacks(module: str) -> set[str]:
        if module in reached:
            return reached[module]
        reached[module] = set()  # an import cycle adds nothing new
        path = source(module)
        assert path is not None, module
        found: set[str] = set()
        for base, names in imports(module, path, runtime=True):
            top = base.split(".")[0]
            if top in IO_STACKS:
                found.add(top)
            elif base in ("importlib", "importlib.util"):
                found.add("importlib (imports modules by name)")
            elif not (top in sys.stdlib_module_names or top in first_party or top in NO_STACK):
                found.add(f"{top} (not known to be free of one)")
            if top in first_party or (top.startswith("test_") and source(top)):
                for target in imported_modules(base, names, source):
                    found |= stacks(target)
        reached[module] = found
        return found

    return [path for path in sorted(here.glob("test_*.py")) if not stacks(path.stem)]


@pytest.mark.slow
def test_unit_tests_of_pure_code_run_without_the_io_stacks(tmp_path: Path) -> None:
    """The test modules that need no I/O stack run where none can be imported: neither the
    suite's set-up (conftest, the local emulator's pytest plugin) nor they pull one in."""
    chosen = unit_tests_without_io_stack()
    assert len(chosen) >= 10, chosen
    (tmp_path / "no_io_stacks.py").write_text(BLOCKER.format(stacks=set(IO_STACKS)))
    root = Path(__file__).parents[2]
    pytest_command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [
            *pytest_command,
            *("-p", "no_io_stacks", "-m", "not slow"),
            *(str(path.relative_to(root)) for path in chosen),
        ],
        capture_output=True,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
