"""Lazy package exports: ``from kinesis_core import hash_key`` must not load botocore.

A package lists its exports once as a static table, ``_EXPORTS = {name: defining module}``,
repeats them as ordinary imports under ``if TYPE_CHECKING:`` (so type checkers and editors see
them; ``name as name`` marks a re-export), and ends with
``__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)``. Each name is imported on
first use, so importing the package itself costs nothing, and a pure module such as
:mod:`kinesis_core.shards.hashing` loads without the AWS SDK. Nothing is read from source files
at run time: a package installed without them (a zipapp, ``.pyc`` files only) works the same.
tests/unit/test_imports.py checks that each table and its ``TYPE_CHECKING`` imports agree.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """The module-level ``__getattr__``, ``__dir__`` and ``__all__`` of ``package`` (its
    ``__name__``), whose exports are ``exports`` (name -> the module defining it)."""

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
