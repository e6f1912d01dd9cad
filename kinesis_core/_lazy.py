"""Lazy package exports: ``from kinesis_core import hash_key`` must not load botocore.

A package writes its exports once, as ordinary imports under ``if TYPE_CHECKING:`` (so type
checkers and editors see them; ``name as name`` marks a re-export), and ends with
``__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)``.
Those imports are read from the package's source with :mod:`ast` (scientific Python's
``lazy_loader`` reads stubs the same way), and each name is imported on first use. Importing
the package itself then costs nothing, and a pure module such as :mod:`kinesis_core.hashing`
loads without the AWS SDK.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from typing import Any


def _exports(source_path: str) -> dict[str, str]:
    """Name -> module of every ``from module import name`` under ``if TYPE_CHECKING:``."""
    with open(source_path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), source_path)
    exports: dict[str, str] = {}
    for node in tree.body:
        if not (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
        ):
            continue
        for statement in node.body:
            if isinstance(statement, ast.ImportFrom) and statement.module and not statement.level:
                for alias in statement.names:
                    exports[alias.asname or alias.name] = statement.module
    return exports


def lazy_exports(
    package: str, source_path: str
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """The module-level ``__getattr__``, ``__dir__`` and ``__all__`` of ``package`` (its
    ``__name__``), whose ``__init__.py`` is ``source_path`` (its ``__file__``)."""
    exports = _exports(source_path)

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(exports) | set(vars(sys.modules[package])))

    return __getattr__, __dir__, sorted(exports)
