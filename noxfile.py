"""The Python version matrix: ``nox`` (from ``.venv/bin``) installs the project with its test extra
in a fresh virtualenv per interpreter and runs the unit tests, on the lowest and the newest
supported Python found on this machine.

The supported versions are the ``Programming Language :: Python :: 3.X`` classifiers of
pyproject.toml. An interpreter is found as ``python3.X`` on PATH or, for pyenv users whose
global version is another one, under ``$PYENV_ROOT/versions/3.X.*/bin`` (the newest patch).
``nox -s tests-3.10`` runs one of them; arguments after ``--`` go to pytest.

The ``botocore`` sessions run the tests of :mod:`kinesis_core.aws.botocore_private`, the one
module that uses botocore's private names (the lean requests' signer and HTTP session,
DirectHttp's proxy and TLS helpers), and of the lean paths built on it, against the lowest
aiobotocore the project declares with the lowest botocore it allows (``botocore-lowest``) and
against the newest of both (``botocore-newest``), so a botocore release that moves a private
name or an event hook fails a test, not a user. ``scripts/test`` runs both after the suite.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from importlib.metadata import Distribution
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


BOTOCORE_TESTS = [
    "tests/unit/test_botocore_private.py",
    "tests/unit/test_lean_first_call.py",
    "tests/unit/test_lean_get_records.py",
    "tests/unit/test_lean_put_records.py",
    "tests/unit/test_direct_http.py",
    "tests/unit/test_fanout_signing.py",
    "tests/integration/test_lean_get_records_servers.py",
    "tests/integration/test_lean_get_shard_iterator_servers.py",
    "tests/integration/test_lean_direct_http.py",
]
"""The tests of kinesis_core.aws.botocore_private, the one module that uses botocore's private
names (tests/unit/test_layering.py keeps it the one), and of the paths that rest on it and on
botocore's event hooks (the lean requests, DirectHttp, the fan-out signer), on real calls."""

BOTOCORE_TOOLS = ["pytest", "pytest-timeout", "hypothesis", "cryptography", "h11", "moto[server]"]
"""What those tests need beside the ``efo`` extra (h11: the fan-out signing test's server)."""


def declared_lower_bound(distribution: str) -> str:
    """The ``>=`` bound pyproject.toml declares for ``distribution``."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    found = re.search(rf'"{re.escape(distribution)}>=([0-9][^",;]*)', text)
    if found is None:
        raise SystemExit(f"noxfile: pyproject.toml declares no lower bound for {distribution}")
    return found.group(1)


def _installed_requirement(session: nox.Session, distribution: str, dependency: str) -> str:
    """``distribution``'s requirement on ``dependency`` in the session's virtualenv."""
    site = session.run(
        "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", silent=True
    )
    assert isinstance(site, str)
    for info in Path(site.strip()).glob(f"{distribution}-*.dist-info"):
        for requirement in Distribution.at(info).requires or []:
            if re.match(rf"{re.escape(dependency)}\b", requirement):
                return requirement
    raise SystemExit(f"noxfile: {distribution} in the session declares no {dependency}")


def _botocore_tests(session: nox.Session, bound: str) -> None:
    session.install(".[efo]", *BOTOCORE_TOOLS)
    if bound == "lowest":
        session.install(f"aiobotocore=={declared_lower_bound('aiobotocore')}")
        requirement = _installed_requirement(session, "aiobotocore", "botocore")
        lowest = re.search(r">=\s*([0-9][^,;\s]*)", requirement)
        if lowest is None:
            raise SystemExit(f"noxfile: no lower bound in aiobotocore's {requirement!r}")
        session.install(f"botocore=={lowest.group(1)}")
    else:
        session.install("--upgrade", "--upgrade-strategy", "eager", "aiobotocore", "botocore")
    session.run(
        "python",
        "-c",
        "import aiobotocore, botocore; "
        "print('aiobotocore', aiobotocore.__version__, 'botocore', botocore.__version__)",
    )
    session.run(
        "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *BOTOCORE_TESTS, *session.posargs
    )


@nox.session(name="botocore-lowest", python=None)
def botocore_lowest(session: nox.Session) -> None:
    """The tests of botocore's private names on the lowest declared aiobotocore and botocore."""
    _botocore_tests(session, "lowest")


@nox.session(name="botocore-newest", python=None)
def botocore_newest(session: nox.Session) -> None:
    """The tests of botocore's private names on the newest aiobotocore and botocore."""
    _botocore_tests(session, "newest")
