"""What a package's modules import, read from their source with ``ast`` (nothing is imported):
the layering test and the purity test both walk it."""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest


def make_package(
    root: Path, monkeypatch: pytest.MonkeyPatch, name: str, files: Mapping[str, str]
) -> None:
    """Write package ``name`` under ``root`` (``files``: relative path -> source) and make it
    importable for the test, so the checks can be shown what they find."""
    for relative, text in files.items():
        path = root / name / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.syspath_prepend(str(root))
    sys.modules.pop(name, None)


def package_modules(package: str) -> dict[str, Path]:
    """Every module of ``package``, by dotted name (a package is its ``__init__``)."""
    spec = importlib.util.find_spec(package)
    assert spec is not None, f"no package {package}"
    assert spec.origin is not None, f"{package} is a namespace package"
    root = Path(spec.origin).parent
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def imports(name: str, path: Path, *, runtime: bool = False) -> Iterator[tuple[str, list[str]]]:
    """What module ``name`` (at ``path``) imports: ``(module, [])`` for ``import module``,
    ``(module, names)`` for ``from module import names`` (relative imports resolved). Every
    import counts, at module level and inside functions; those under ``if TYPE_CHECKING:``
    too unless ``runtime`` (they never run)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    skipped: set[int] = set()
    if runtime:
        for node in ast.walk(tree):
            if _is_type_checking(node):
                assert isinstance(node, ast.If)
                skipped.update(id(inner) for child in node.body for inner in ast.walk(child))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            yield from ((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, node.module] if node.module else here)
            else:
                base = node.module or ""
            yield base, [alias.name for alias in node.names]


def imported_modules(base: str, names: list[str], source: Callable[[str], Path | None]) -> set[str]:
    """The modules that ``from base import names`` (``import base`` if no names) runs: each
    name's submodule if it is one, else the module a lazy package's export table names for it,
    else ``base`` itself (``a.b.C`` is in module ``a.b``). ``source`` gives a module's file, or
    None if there is no such module."""
    while base and source(base) is None:
        base = base.rpartition(".")[0]
    path = source(base)
    assert path is not None, f"no module for {base}"
    exports = export_table(path)
    found = set()
    for name in names or [""]:
        if source(f"{base}.{name}") is not None:
            found.add(f"{base}.{name}")
        elif name in exports:
            found.add(exports[name])
        else:
            found.add(base)
    return found


def type_checking_imports(path: Path) -> dict[str, str]:
    """Name -> module of every ``from module import name`` under a module-level
    ``if TYPE_CHECKING:`` (how a lazy package shows its exports to type checkers)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: dict[str, str] = {}
    for node in tree.body:
        if _is_type_checking(node):
            assert isinstance(node, ast.If)
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.module:
                    for alias in statement.names:
                        found[alias.asname or alias.name] = statement.module
    return found


def export_table(path: Path) -> dict[str, str]:
    """A lazy package's static export table (``_EXPORTS``, kinesis_core/_lazy.py), read from
    its ``__init__.py``; empty for any other module."""
    if path.name != "__init__.py":
        return {}
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "_EXPORTS" for target in node.targets
        ):
            table = ast.literal_eval(node.value)
            assert isinstance(table, dict), path
            return table
    return {}


def _is_type_checking(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
    )
