"""The Python version matrix: ``nox`` (from ``.venv/bin``) installs the project with its test extra
in a fresh virtualenv per interpreter and runs the unit tests, on the lowest and the newest
supported Python found on this machine.

The supported versions are the ``Programming Language :: Python :: 3.X`` classifiers of
pyproject.toml. An interpreter is found as ``python3.X`` on PATH or, for pyenv users whose
global version is another one, under ``$PYENV_ROOT/versions/3.X.*/bin`` (the newest patch).
``nox -s tests-3.10`` runs one of them; arguments after ``--`` go to pytest.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent

nox.options.sessions = ["tests"]
nox.options.error_on_missing_interpreters = True


def supported_versions() -> list[str]:
    """``["3.10", ...]`` from the classifiers of pyproject.toml, oldest first."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    found = set(re.findall(r'"Programming Language :: Python :: (3\.\d+)"', text))
    return sorted(found, key=lambda v: tuple(map(int, v.split("."))))


def _runs(executable: str, version: str) -> bool:
    """True if ``executable`` starts and is Python ``version`` (a pyenv shim may refuse to)."""
    try:
        done = subprocess.run(  # noqa: S603 - an interpreter we found, fixed arguments
            [executable, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except OSError:
        return False
    return done.returncode == 0 and done.stdout.strip() == version


def _patch_level(path: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", path.name))


def interpreter_dir(version: str) -> Path | None:
    """The folder of a working ``python<version>``: on PATH, else the newest pyenv build."""
    on_path = shutil.which(f"python{version}")
    if on_path is not None and _runs(on_path, version):
        return Path(on_path).parent
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    builds = sorted((pyenv_root / "versions").glob(f"{version}.*"), key=_patch_level)
    for build in reversed(builds):
        candidate = build / "bin" / f"python{version}"
        if _runs(str(candidate), version):
            return candidate.parent
    return None


def matrix() -> list[str]:
    """The lowest and the newest supported version that this machine has.

    Their folders go to the front of PATH, so nox's own lookup of ``python3.X`` finds them.
    """
    found = {}
    for version in supported_versions():
        where = interpreter_dir(version)
        if where is not None:
            found[version] = where
    if not found:
        raise SystemExit(
            f"noxfile: none of the supported Pythons {', '.join(supported_versions())} is "
            "installed (looked on PATH and under $PYENV_ROOT/versions)"
        )
    versions = sorted(found, key=lambda v: tuple(map(int, v.split("."))))
    chosen = sorted({versions[0], versions[-1]}, key=versions.index)
    dirs = [str(found[version]) for version in chosen]
    os.environ["PATH"] = os.pathsep.join([*dirs, os.environ.get("PATH", "")])
    return chosen


@nox.session(python=matrix())
def tests(session: nox.Session) -> None:
    """Install the project with its test extra and run the unit tests."""
    session.install(".[test]")
    session.run(
        "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit", *session.posargs
    )
