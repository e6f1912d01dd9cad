"""kinesis-mock (npm package ``kinesis-local``): installer and launcher.

kinesis-mock has the best resharding fidelity of the offline emulators (split, merge,
UpdateShardCount with lineage, ChildShards at SHARD_END, ListShards filters). It is a single
``main.js`` run by Node.js; we install the pinned version once into a user cache folder with npm.

Its quirks, handled here: it crashes unless ``KINESIS_MOCK_CERT_PATH`` points at the
``server.json`` of its package; it binds 0.0.0.0 and has no setting for that (the guard below
makes its servers listen on 127.0.0.1 only); it serves TLS and plain HTTP on two ports;
streams stay CREATING/UPDATING for 500 ms unless the ``*_DURATION`` variables say otherwise;
``SHARD_LIMIT`` counts closed shards; on SIGTERM it waits for open connections for up to 30 s,
so we stop it through its stdin guard instead.

With persistence, a write acknowledged after the last snapshot is lost by an exit. So ``stop()``
first has the guard cut every connection and refuse new ones ("drain"): no write can be
acknowledged after that. Then it waits for a snapshot taken after the drain, then exits.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kinesis_core.errors import ConfigurationError, EmulatorError
from kinesis_core.local._server import LOCAL_REGION, LOOPBACK, LocalServer, free_port

__all__ = [
    "KINESIS_LOCAL_VERSION",
    "KinesisMock",
    "find_node",
    "install_kinesis_local",
    "kinesis_local_cache_dir",
]

KINESIS_LOCAL_VERSION = "0.6.2"
NODE_MIN_MAJOR = 18
INSTALL_HINT = (
    "install Node.js >= 18 and npm (Debian/Ubuntu: `apt-get install nodejs npm`; "
    "other systems: https://nodejs.org)"
)
PERSIST_FILE_NAME = "kinesis-data.json"
DRAINED = "kinesis-connectors: draining, every connection closed"
"""What the guard prints once it has closed every connection (``stop()`` waits for it)."""

# Runs main.js inside a node process that exits at once when its stdin closes. cats-effect
# replaces process.exit with a graceful exit that can hang for 30 s, hence the saved original.
# Every server main.js makes (plain and TLS: both net.createServer) is watched: on the line
# "drain" on stdin, every open connection is destroyed and every new one too, so nothing more
# is acknowledged while the last snapshot is written. Every server listens on 127.0.0.1 only
# (kinesis-mock has no host setting and asks for 0.0.0.0).
_NODE_GUARD = (
    "const hardExit = process.exit.bind(process);"
    "const net = require('net');"
    "const sockets = new Set();"
    "let draining = false;"
    "const createServer = net.createServer;"
    "net.createServer = function (...args) {"
    "  const server = createServer.apply(this, args);"
    "  server.on('connection', (socket) => {"
    "    if (draining) { socket.destroy(); return; }"
    "    sockets.add(socket);"
    "    socket.on('close', () => sockets.delete(socket));"
    "  });"
    "  const listen = server.listen;"
    "  server.listen = function (...rest) {"
    "    if (rest[0] !== null && typeof rest[0] === 'object') {"
    f"      rest[0] = Object.assign({{}}, rest[0], {{ host: '{LOOPBACK}' }});"
    "    } else if (typeof rest[1] === 'string') {"
    f"      rest[1] = '{LOOPBACK}';"
    "    } else {"
    f"      rest.splice(1, 0, '{LOOPBACK}');"
    "    }"
    "    return listen.apply(this, rest);"
    "  };"
    "  return server;"
    "};"
    "process.stdin.setEncoding('utf8');"
    "process.stdin.on('data', (chunk) => {"
    "  if (!draining && chunk.includes('drain')) {"
    "    draining = true;"
    "    for (const socket of sockets) socket.destroy();"
    f"    process.stdout.write('{DRAINED}\\n');"
    "  }"
    "});"
    "process.stdin.on('end', () => hardExit(0));"
    "process.stdin.on('error', () => hardExit(0));"
    "process.stdin.resume();"
    "require(process.argv[1]);"
)
_DURATION_VARIABLES = (
    "CREATE_STREAM_DURATION",
    "DELETE_STREAM_DURATION",
    "REGISTER_STREAM_CONSUMER_DURATION",
    "DEREGISTER_STREAM_CONSUMER_DURATION",
    "START_STREAM_ENCRYPTION_DURATION",
    "STOP_STREAM_ENCRYPTION_DURATION",
    "MERGE_SHARDS_DURATION",
    "SPLIT_SHARD_DURATION",
    "UPDATE_SHARD_COUNT_DURATION",
    "UPDATE_STREAM_MODE_DURATION",
)


def kinesis_local_cache_dir() -> Path:
    """``$XDG_CACHE_HOME`` (or ``~/.cache``) ``/kinesis-connectors/kinesis-local-<version>``."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "kinesis-connectors" / f"kinesis-local-{KINESIS_LOCAL_VERSION}"


def find_node() -> str:
    """The path of a Node.js >= 18 executable, or EmulatorError saying what to install."""
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        raise EmulatorError(
            f"kinesis-mock needs Node.js, which was not found on PATH: {INSTALL_HINT}"
        )
    try:
        version = subprocess.run(  # noqa: S603 - fixed argument list
            [node, "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        raise EmulatorError(f"`{node} --version` failed ({exc}): {INSTALL_HINT}") from exc
    match = re.match(r"v?(\d+)\.", version)
    if match is None or int(match.group(1)) < NODE_MIN_MAJOR:
        raise EmulatorError(f"kinesis-mock needs Node.js >= 18, found {version!r}: {INSTALL_HINT}")
    return node


def _package_dir(cache_dir: Path) -> Path:
    return cache_dir / "node_modules" / "kinesis-local"


def _is_complete(cache_dir: Path) -> bool:
    package = _package_dir(cache_dir)
    try:
        manifest = json.loads((package / "package.json").read_text())
    except (OSError, ValueError):
        return False
    return (
        manifest.get("version") == KINESIS_LOCAL_VERSION
        and (package / "main.js").is_file()
        and (package / "server.json").is_file()
    )


def install_kinesis_local(cache_dir: Path | None = None, *, timeout: float = 300.0) -> Path:
    """Install kinesis-local into ``cache_dir`` unless it is there; return its package folder.

    npm installs into a temporary sibling folder that is then renamed into place, so concurrent
    installers (pytest-xdist workers) never see half an install.
    """
    cache_dir = cache_dir or kinesis_local_cache_dir()
    if _is_complete(cache_dir):
        return _package_dir(cache_dir)
    find_node()
    npm = shutil.which("npm")
    if npm is None:
        raise EmulatorError(
            f"npm is needed to install kinesis-local {KINESIS_LOCAL_VERSION} (kinesis-mock) "
            f"and was not found on PATH: {INSTALL_HINT}"
        )
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{cache_dir.name}-", dir=cache_dir.parent))
    try:
        command = [
            npm, "install", "--prefix", str(staging), "--no-audit", "--no-fund",
            "--ignore-scripts", "--loglevel=error", f"kinesis-local@{KINESIS_LOCAL_VERSION}",
        ]  # fmt: skip
        try:
            result = subprocess.run(  # noqa: S603 - fixed argument list
                command, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise EmulatorError(f"`npm install` did not finish within {timeout:g} s") from exc
        if result.returncode != 0 or not _is_complete(staging):
            raise EmulatorError(
                f"`{' '.join(command[1:])}` failed (exit code {result.returncode}):\n"
                f"{(result.stderr or result.stdout).strip()[-2000:]}"
            )
        if cache_dir.exists() and not _is_complete(cache_dir):
            shutil.rmtree(cache_dir)
        try:
            staging.rename(cache_dir)
        except OSError:
            if not _is_complete(cache_dir):  # someone else won the race only if theirs is whole
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return _package_dir(cache_dir)


class KinesisMock(LocalServer):
    """kinesis-mock on a free loopback port (``port`` = its plain-HTTP port).

    ``status_delay``: seconds a stream stays CREATING/UPDATING/DELETING (0: ACTIVE at once).
    ``persist_path``: keep the streams and their records in ``<persist_path>/kinesis-data.json``,
    written every ``persist_interval`` seconds and loaded on start; ``stop()`` then closes every
    connection (clients see the server go away) and waits for a snapshot taken after that, so a
    stop/start keeps every acknowledged write, while ``kill()`` loses what came after the last
    periodic snapshot. ``env``: extra kinesis-mock variables, applied last.
    """

    kind = "kinesis-mock"

    def __init__(
        self,
        *,
        port: int | None = None,
        tls_port: int | None = None,
        status_delay: float = 0.0,
        shard_limit: int = 10_000,
        persist_path: str | Path | None = None,
        persist_interval: float = 0.5,
        env: Mapping[str, str] | None = None,
        cache_dir: Path | None = None,
        startup_timeout: float = 60.0,
        stop_timeout: float = 5.0,
        log_path: str | Path | None = None,
    ) -> None:
        super().__init__(
            port=port,
            startup_timeout=startup_timeout,
            stop_timeout=stop_timeout,
            log_path=log_path,
        )
        if status_delay < 0:
            raise ConfigurationError("status_delay", f"must be >= 0 seconds, got {status_delay!r}")
        if shard_limit < 1:
            raise ConfigurationError("shard_limit", f"must be >= 1, got {shard_limit!r}")
        if persist_interval < 0.05:
            raise ConfigurationError(
                "persist_interval", f"must be >= 0.05 seconds, got {persist_interval!r}"
            )
        self._requested_tls_port = tls_port
        self._tls_port: int | None = None
        self._status_delay = status_delay
        self._shard_limit = shard_limit
        self._persist_path = Path(persist_path).resolve() if persist_path is not None else None
        self._persist_interval = persist_interval
        self._extra_env = dict(env or {})
        self._cache_dir = cache_dir
        self._node: str | None = None
        self._package: Path | None = None

    @property
    def tls_endpoint_url(self) -> str:
        """The TLS port (self-signed certificate: clients need ``verify=False``)."""
        if self._tls_port is None:
            raise EmulatorError("kinesis-mock has not been started: call start() first")
        return f"https://{LOOPBACK}:{self._tls_port}"

    @property
    def persist_file(self) -> Path | None:
        return self._persist_path / PERSIST_FILE_NAME if self._persist_path is not None else None

    def _prepare(self) -> None:
        if self._package is None:
            self._package = install_kinesis_local(self._cache_dir)
        self._node = find_node()

    def _pick_ports(self) -> None:
        super()._pick_ports()
        self._tls_port = free_port(self._requested_tls_port or 0)
        while self._tls_port == self._port:
            self._tls_port = free_port()

    def _command(self) -> list[str]:
        assert self._node is not None
        assert self._package is not None
        return [self._node, "-e", _NODE_GUARD, str(self._package / "main.js")]

    def _environment(self) -> dict[str, str]:
        assert self._package is not None
        delay = f"{round(self._status_delay * 1000)}ms"
        env = dict.fromkeys(_DURATION_VARIABLES, delay)
        env.update(
            KINESIS_MOCK_CERT_PATH=str(self._package / "server.json"),
            KINESIS_MOCK_PLAIN_PORT=str(self.port),
            KINESIS_MOCK_TLS_PORT=str(self._tls_port),
            SHARD_LIMIT=str(self._shard_limit),
            ON_DEMAND_STREAM_COUNT_LIMIT=str(self._shard_limit),
            AWS_REGION=LOCAL_REGION,
            LOG_LEVEL="WARN",
            ROOT_LOG_LEVEL="ERROR",
            SHOULD_PERSIST_DATA="false",
        )
        if self._persist_path is not None:
            env.update(
                SHOULD_PERSIST_DATA="true",
                LOAD_DATA_IF_EXISTS="true",
                PERSIST_PATH=str(self._persist_path),
                PERSIST_FILE_NAME=PERSIST_FILE_NAME,
                PERSIST_INTERVAL=f"{round(self._persist_interval * 1000)}ms",
            )
        env.update(self._extra_env)
        return env

    def _before_stop(self) -> None:
        if self.persist_file is not None:
            self._drain()
            self._wait_for_fresh_snapshot(self.persist_file)

    def _drain(self) -> None:
        """Have the guard close every connection and refuse new ones; wait until it has."""
        proc = self._proc
        log_path = self.log_path
        assert proc is not None
        assert proc.stdin is not None
        assert log_path is not None
        offset = log_path.stat().st_size if log_path.exists() else 0
        proc.stdin.write(b"drain\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 30
        while True:
            self.ensure_running()
            with log_path.open("rb") as log:
                log.seek(offset)
                if DRAINED.encode() in log.read():
                    return
            if time.monotonic() > deadline:
                raise EmulatorError(
                    f"kinesis-mock did not close its connections within 30 s; its last log "
                    f"lines:\n{self.log_tail()}"
                )
            time.sleep(0.01)

    def _wait_for_fresh_snapshot(self, path: Path) -> None:
        """Wait for the second complete snapshot written from now on.

        The first one may have been read from memory before we were called; the second was
        read after the first was written, so it holds every write acknowledged before now.
        """
        deadline = time.monotonic() + 2 * self._persist_interval + 30
        seen = _stamp(path)
        snapshots = 0
        while snapshots < 2:
            self.ensure_running()
            stamp = _stamp(path)
            if stamp != seen and _is_whole_json(path):
                snapshots += 1
                seen = stamp
            elif time.monotonic() > deadline:
                raise EmulatorError(
                    f"kinesis-mock wrote no snapshot to {path} within "
                    f"{2 * self._persist_interval + 30:g} s; its last log lines:\n"
                    f"{self.log_tail()}"
                )
            else:
                time.sleep(min(0.02, self._persist_interval / 4))


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_mtime_ns, stat.st_size


def _is_whole_json(path: Path) -> bool:
    """True when the snapshot is completely written (kinesis-mock truncates, then writes)."""
    try:
        data: Any = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict)
