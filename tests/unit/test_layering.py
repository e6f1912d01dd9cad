"""The modules of each package import one another one way only, and use no private names of
one another (the layering docs/architecture.md describes).

The checks read the source with ``ast`` (nothing is imported), and count every import: at
module level, under ``if TYPE_CHECKING:`` and inside functions, since each is a dependency a
reader of the code has to follow. They take a package name, so other packages can be checked
the same way (``import_cycles("kinesis_core")``).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
from collections.abc import Collection
from pathlib import Path

import pytest

from tests.helpers.source import imports, make_package, package_modules

PACKAGES = [
    "kinesis_core",
    "beam_kinesis",
    "faust_kinesis",
    "kinesis_schema_registry",
    "spark_kinesis",
]

PRIVATE_ACCESS_ALLOWED = {
    "faust_kinesis": {"faust_kinesis.faust_internals"},
    "kinesis_core": {"kinesis_core.local._moto_child"},
}
"""Modules whose job is to reach into another library's internals (one per package at most)."""

BOTOCORE_PRIVATE = {"kinesis_core": {"kinesis_core.aws.botocore_private"}}
"""The one module of the project that touches botocore's and aiobotocore's private names."""

BOTOCORE_INTERNAL_MODULES = ("botocore.httpsession", "aiobotocore.httpsession")
"""Modules of botocore that are not its documented API, used only where its private names are."""

LOWER_LAYERS = {
    "kinesis_core.aws": ("kinesis_core.shards", "kinesis_core.runtime"),
    "kinesis_core.shards": ("kinesis_core.runtime",),
    "kinesis_core.runtime": (),
}
"""The call path (``aws``), shards and keys (``shards``) and the runtime helpers (``runtime``):
each imports, of the core's folders, only itself and those named here (the top-level modules,
``errors``, ``stream``, ``records`` and the like, are shared by every layer)."""


def import_graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports. ``from a import b`` depends on
    module ``a.b`` if there is one, else on ``a``."""
    modules = package_modules(package)

    def owner(dotted: str) -> str:
        while dotted and dotted not in modules:  # ``a.b.C`` is in module ``a.b``
            dotted = dotted.rpartition(".")[0]
        return dotted

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for base, names in imports(name, path):
            submodules = [f"{base}.{n}" for n in names if f"{base}.{n}" in modules]
            targets.update(submodules)
            if len(submodules) < len(names) or not names:
                targets.add(owner(base))
        graph[name] = targets - {name, ""}
    return graph


def import_cycles(package: str) -> list[list[str]]:
    """The import cycles of ``package``: each strongly connected group of modules, sorted
    (Tarjan's algorithm)."""
    graph = import_graph(package)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(groups)


def private_uses(package: str, allowed: Collection[str] = ()) -> list[str]:
    """``module:line name`` for every private name a module of ``package`` takes from another
    module: ``from x import _y`` (unless ``x._y`` is a private module of the package), and
    ``obj._y`` on anything but ``self``, ``cls`` and ``super()`` unless the module itself
    defines ``_y`` (two classes of one module may share their internals). Dunders and the
    namedtuple API are not private. Modules in ``allowed`` are skipped."""
    modules = package_modules(package)
    found = []
    for name, path in modules.items():
        if name in allowed:
            continue
        tree = ast.parse(path.read_text(), str(path))
        own_names = _defined_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                names = [
                    a.name
                    for a in node.names
                    if _private(a.name) and f"{node.module}.{a.name}" not in modules
                ]
            elif isinstance(node, ast.Attribute) and _private(node.attr):
                own = _own(node.value)
                names = [] if own or node.attr in own_names else [node.attr]
            else:
                continue
            found.extend(f"{name}:{node.lineno} {n}" for n in names)
    return found


@functools.cache
def botocore_private_names() -> frozenset[str]:
    """The private names botocore and aiobotocore define (functions, module globals and
    ``self._x`` attributes), read from their installed source."""
    pattern = re.compile(
        r"\bself\.(_[A-Za-z]\w*)\s*[:=]|\bdef (_[A-Za-z]\w*)|^(_[A-Za-z]\w*)\s*[:=]", re.M
    )
    names: set[str] = set()
    for library in ("botocore", "aiobotocore"):
        spec = importlib.util.find_spec(library)
        assert spec is not None, library
        assert spec.origin is not None, library
        for path in Path(spec.origin).parent.rglob("*.py"):
            for found in pattern.findall(path.read_text(encoding="utf-8", errors="replace")):
                names.update(name for name in found if name and _private(name))
    return frozenset(names)


def _botocore_module(module: str) -> bool:
    parts = module.split(".")
    return parts[0] in ("botocore", "aiobotocore") and (
        any(part.startswith("_") for part in parts) or module in BOTOCORE_INTERNAL_MODULES
    )


def botocore_private_uses(
    package: str, allowed: Collection[str] = (), names: Collection[str] | None = None
) -> list[str]:
    """``module:line name`` for every touch of botocore's private names outside ``allowed``:
    an import of a private or internal module of botocore or aiobotocore
    (:data:`BOTOCORE_INTERNAL_MODULES`) or of a private name from one, and one of ``names``
    (default: :func:`botocore_private_names`) as an attribute of anything but ``self``,
    ``cls`` and ``super()``, written out or as a ``getattr``/``hasattr``/``setattr`` string.
    Unlike :func:`private_uses`, a module that defines such a name itself is no exception."""
    private = botocore_private_names() if names is None else names
    found = []
    for name, path in package_modules(package).items():
        if name in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            touched: list[str] = []
            if isinstance(node, ast.Import):
                touched = [a.name for a in node.names if _botocore_module(a.name)]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if _botocore_module(node.module):
                    touched = [node.module]
                elif node.module.split(".")[0] in ("botocore", "aiobotocore"):
                    touched = [a.name for a in node.names if _private(a.name)]
            elif isinstance(node, ast.Attribute) and node.attr in private:
                touched = [] if _own(node.value) else [node.attr]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in private
                and not _own(node.args[0])
            ):
                touched = [str(node.args[1].value)]
            found.extend(f"{name}:{node.lineno} {n}" for n in touched)
    return found


def _own(owner: ast.expr) -> bool:
    """``self``, ``cls`` or ``super()``: an object's own attributes."""
    return (isinstance(owner, ast.Name) and owner.id in ("self", "cls")) or (
        isinstance(owner, ast.Call)
        and isinstance(owner.func, ast.Name)
        and owner.func.id == "super"
    )


def _defined_names(tree: ast.AST) -> set[str]:
    """Names a module defines: functions, classes, ``self.x = ...`` attributes, assignments
    and ``__slots__`` entries."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # __slots__ = ("_n", ...)
    return names


_PUBLIC_UNDERSCORE = {"_asdict", "_field_defaults", "_fields", "_make", "_replace"}
"""The namedtuple API: public, though spelled with an underscore."""


def _private(name: str) -> bool:
    dunder = name.startswith("__") and name.endswith("__")
    return name.startswith("_") and not dunder and name not in _PUBLIC_UNDERSCORE


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycles(package: str) -> None:
    assert import_cycles(package) == []


def upward_imports() -> dict[str, set[str]]:
    """Module of a folder of :data:`LOWER_LAYERS` -> the modules of the core it imports from
    a folder it may not import (one above it: consumer/, producer/, lease/, ...)."""
    graph = import_graph("kinesis_core")
    folders = {
        folder
        for module in graph
        if (folder := module.rpartition(".")[0]) not in ("kinesis_core", "")
    }
    found: dict[str, set[str]] = {}
    for module, targets in graph.items():
        layer = next((f for f in LOWER_LAYERS if module.startswith(f + ".")), None)
        if layer is None:
            continue
        allowed = (layer, *LOWER_LAYERS[layer])
        for target in targets:
            folder = next((f for f in folders if target == f or target.startswith(f + ".")), None)
            if folder is not None and not folder.startswith(allowed):
                found.setdefault(module, set()).add(target)
    return found


def test_the_lower_folders_import_nothing_above_them() -> None:
    """``aws/``, ``shards/`` and ``runtime/`` import no module of consumer/, producer/, lease/,
    checkpoint/, fanout/, the adapters' packages or one another upward (LOWER_LAYERS)."""
    assert upward_imports() == {}


@pytest.mark.parametrize("package", PACKAGES)
def test_no_private_names_across_modules(package: str) -> None:
    assert private_uses(package, PRIVATE_ACCESS_ALLOWED.get(package, set())) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_only_one_module_touches_botocores_private_names(package: str) -> None:
    """Every use of botocore's private names is in kinesis_core.aws.botocore_private, which the
    botocore nox sessions test on the lowest and the newest botocore; faust_internals touches
    Faust's ``_queue``, a name botocore has too."""
    allowed = BOTOCORE_PRIVATE.get(package, set()) | {"faust_kinesis.faust_internals"}
    assert botocore_private_uses(package, allowed) == []


def test_the_botocore_check_finds_every_way_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {
        "__init__.py": "",
        "a.py": (
            "import botocore.httpsession\n"
            "from botocore.utils import _private_helper, get_environ_proxies\n"
            "from aiobotocore._helpers import x\n"
        ),
        "b.py": (
            "class B:\n"
            "    def _endpoint(self): ...\n"
            "    def f(self, client):\n"
            "        signer = getattr(client, '_request_signer', None)\n"
            "        return client._endpoint, self._endpoint(), super()._endpoint, signer\n"
        ),
        "allowed.py": "def f(client):\n    return client._endpoint\n",
    }
    make_package(tmp_path, monkeypatch, "botocore_pkg", files)

    names = {"_endpoint", "_request_signer"}
    assert botocore_private_uses("botocore_pkg", {"botocore_pkg.allowed"}, names) == [
        "botocore_pkg.a:1 botocore.httpsession",
        "botocore_pkg.a:2 _private_helper",
        "botocore_pkg.a:3 aiobotocore._helpers",
        "botocore_pkg.b:4 _request_signer",
        "botocore_pkg.b:5 _endpoint",
    ]
    assert {"_endpoint", "_request_signer"} <= botocore_private_names()


def test_the_checks_find_what_they_look_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A package with a cycle through a TYPE_CHECKING import and a relative import, and with
    private names taken from siblings: both checks see them, and ``from pkg import module``
    depends on that module, not on the package's ``__init__``."""
    files = {
        "__init__.py": "from cyclic_pkg.a import A\n",
        "a.py": "from cyclic_pkg.b import B, _helper\nclass A: ...\n",
        "b.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n"
            "    from cyclic_pkg.sub.c import C\n"
            "class B:\n"
            "    def f(self, other):\n"
            "        return other._state, self._own, super()._base, other._mine\n"
            "    def g(self):\n"
            "        self._mine = 1\n"
            "def _helper(): ...\n"
        ),
        "_private_module.py": "",
        "e.py": "from cyclic_pkg import _private_module\n",
        "sub/__init__.py": "",
        "sub/c.py": "from .. import a\nclass C: ...\n",
        "leaf.py": "import cyclic_pkg.sub\nfrom cyclic_pkg import A\n",
        "sub/d.py": "from cyclic_pkg.sub import c\nx = c._ok()._replace()\n",
    }
    make_package(tmp_path, monkeypatch, "cyclic_pkg", files)

    assert import_graph("cyclic_pkg") == {
        "cyclic_pkg": {"cyclic_pkg.a"},
        "cyclic_pkg.a": {"cyclic_pkg.b"},
        "cyclic_pkg.b": {"cyclic_pkg.sub.c"},
        "cyclic_pkg.leaf": {"cyclic_pkg", "cyclic_pkg.sub"},
        "cyclic_pkg.sub": set(),
        "cyclic_pkg.sub.c": {"cyclic_pkg.a"},
        "cyclic_pkg.sub.d": {"cyclic_pkg.sub.c"},
        "cyclic_pkg._private_module": set(),
        "cyclic_pkg.e": {"cyclic_pkg._private_module"},
    }
    assert import_cycles("cyclic_pkg") == [["cyclic_pkg.a", "cyclic_pkg.b", "cyclic_pkg.sub.c"]]
    assert private_uses("cyclic_pkg") == [
        "cyclic_pkg.a:1 _helper",
        "cyclic_pkg.b:6 _state",
        "cyclic_pkg.sub.d:2 _ok",
    ]
    allowed = {"cyclic_pkg.a", "cyclic_pkg.b", "cyclic_pkg.sub.d"}
    assert private_uses("cyclic_pkg", allowed) == []
