"""The modules of each package import one another one way only, and use no private names of
one another (the layering docs/architecture.md describes).

The checks read the source with ``ast`` (nothing is imported), and count every import: at
module level, under ``if TYPE_CHECKING:`` and inside functions, since each is a dependency a
reader of the code has to follow. They take a package name, so other packages can be checked
the same way (``import_cycles("kinesis_core")``).
"""

from __future__ import annotations

import ast
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
                owner = node.value
                own = (isinstance(owner, ast.Name) and owner.id in ("self", "cls")) or (
                    isinstance(owner, ast.Call)
                    and isinstance(owner.func, ast.Name)
                    and owner.func.id == "super"
                )
                names = [] if own or node.attr in own_names else [node.attr]
            else:
                continue
            found.extend(f"{name}:{node.lineno} {n}" for n in names)
    return found


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
