"""What the local servers share: a child process on 127.0.0.1, readiness, logs, stop and cleanup.

A server never outlives the process that started it: the child reads its stdin, a pipe whose
write end only the parent holds, and exits at once when the pipe closes (``stop()`` closes it;
the kernel closes it when the parent dies, even by SIGKILL). ``atexit`` stops what is left on a
normal interpreter exit.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, ClassVar

from kinesis_core.aws.client import create_botocore_client
from kinesis_core.aws.config import ClientConfig
from kinesis_core.errors import EmulatorError

if TYPE_CHECKING:
    from typing_extensions import Self

    from kinesis_core.local.streams import LocalStream

LOG = logging.getLogger("kinesis_core.local")

LOOPBACK = "127.0.0.1"
LOCAL_REGION = "us-east-1"
DUMMY_ACCESS_KEY_ID = "testing"
DUMMY_SECRET_ACCESS_KEY = "testing"  # noqa: S105 - the emulators accept any credentials

_PORT_IN_USE = ("eaddrinuse", "address already in use", "is in use by another program")
"""What a server that could not bind its port logs (compared in lower case)."""
_PORT_ATTEMPTS = 5
_RUNNING: set[LocalServer] = set()
_RUNNING_LOCK = threading.Lock()


def local_client_config(
    endpoint_url: str,
    *,
    dynamodb_endpoint_url: str | None = None,
    region_name: str = LOCAL_REGION,
    **overrides: Any,
) -> ClientConfig:
    """A ClientConfig for a local server: its endpoint, a fixed region and dummy credentials."""
    return ClientConfig(
        region_name=region_name,
        endpoint_url=endpoint_url,
        dynamodb_endpoint_url=dynamodb_endpoint_url,
        aws_access_key_id=DUMMY_ACCESS_KEY_ID,
        aws_secret_access_key=DUMMY_SECRET_ACCESS_KEY,
        **overrides,
    )


def free_port(port: int = 0) -> int:
    """A TCP port free on 127.0.0.1 right now (the server binds it a moment later).

    With ``port`` given, check that one: a fixed port that another program listens on would
    otherwise answer our readiness probe in place of the server.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError as exc:
            raise EmulatorError(
                f"port {port} on {LOOPBACK} is in use by another program ({exc.strerror})"
            ) from None
        chosen: int = sock.getsockname()[1]
        return chosen


class LocalServer:
    """A Kinesis API server in a child process, reached at ``endpoint_url`` on 127.0.0.1.

    ``start()`` returns once the server answers ListStreams; ``stop()`` ends it and waits.
    ``start()`` again after ``stop()`` reuses the same port, so configs made before keep working.
    Usable as a context manager.
    """

    kind: ClassVar[str] = "server"

    def __init__(
        self,
        *,
        port: int | None = None,
        startup_timeout: float = 60.0,
        stop_timeout: float = 5.0,
        log_path: str | Path | None = None,
    ) -> None:
        self._requested_port = port
        self._port: int | None = None
        self._startup_timeout = startup_timeout
        self._stop_timeout = stop_timeout
        self._user_log_path = Path(log_path) if log_path is not None else None
        self._ports_chosen = False
        self._workdir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._lock = threading.RLock()

    # -- subclass hooks ---------------------------------------------------------------------

    def _prepare(self) -> None:
        """Check (or install) what the server needs; raise EmulatorError naming what is missing."""

    def _pick_ports(self) -> None:
        """Choose the ports the next start binds (only called while they may still change)."""
        self._port = free_port(self._requested_port or 0)

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _environment(self) -> dict[str, str]:
        """Variables set for the child on top of this process's environment."""
        return {}

    def _before_stop(self) -> None:
        """Runs while the server still serves, before ``stop()`` ends it."""

    # -- public API -------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise EmulatorError(f"{self.kind} has not been started: call start() first")
        return self._port

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:<port>``: plain HTTP, so no TLS set-up is needed."""
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_path(self) -> Path | None:
        """Where the server's output goes (a temporary file unless ``log_path`` was given)."""
        if self._user_log_path is not None:
            return self._user_log_path
        return self._workdir / "server.log" if self._workdir is not None else None

    def client_config(self, **overrides: Any) -> ClientConfig:
        """A ClientConfig for this server (region us-east-1, dummy credentials)."""
        endpoint_url = overrides.pop("endpoint_url", self.endpoint_url)
        return local_client_config(endpoint_url, **overrides)

    def client_environment(self) -> dict[str, str]:
        """The AWS variables that point a client process at this server (``local up`` prints
        them): its endpoint, the local region and dummy credentials."""
        return {
            "AWS_ENDPOINT_URL_KINESIS": self.endpoint_url,
            "AWS_DEFAULT_REGION": LOCAL_REGION,
            "AWS_ACCESS_KEY_ID": DUMMY_ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": DUMMY_SECRET_ACCESS_KEY,
        }

    def create_stream(
        self, name: str, shards: int = 4, *, max_record_size_kib: int | None = None
    ) -> LocalStream:
        """Create ``name`` with ``shards`` shards (and ``MaxRecordSizeInKiB`` when given), wait
        until it is ACTIVE and return it."""
        from kinesis_core.local.streams import LocalStream

        stream = LocalStream(name, self.client_config())
        try:
            stream.create(shards, max_record_size_kib=max_record_size_kib)
        except BaseException:
            stream.close()
            raise
        return stream

    def start(self) -> Self:
        with self._lock:
            if self.running:
                return self
            self._prepare()
            # Ports are chosen once: a restart keeps them, so configs made before still work.
            retry_ports = not self._ports_chosen
            attempt = 0
            while True:
                attempt += 1
                if retry_ports:
                    self._pick_ports()
                    self._ports_chosen = True
                self._launch()
                try:
                    self._wait_until_ready()
                except _PortInUse as exc:
                    self._cleanup()
                    if retry_ports and attempt < _PORT_ATTEMPTS:
                        continue  # lost a race for a free port: pick others
                    raise EmulatorError(
                        f"{self.kind} could not bind its port on {LOOPBACK}: it is in use by "
                        f"another program; its last log lines:\n{exc}"
                    ) from None
                except BaseException:
                    self._end_process(self._proc)
                    self._cleanup()
                    raise
                with _RUNNING_LOCK:
                    _RUNNING.add(self)
                LOG.info("%s is up at %s (pid %s)", self.kind, self.endpoint_url, self.pid)
                return self

    def stop(self) -> None:
        """End the server and wait for it; a no-op when it is not running."""
        with self._lock:
            proc = self._proc
            if proc is None:
                return
            try:
                if proc.poll() is None:
                    self._before_stop()
            finally:
                self._end_process(proc)
                self._cleanup()

    def kill(self) -> None:
        """End the server abruptly (SIGKILL), as a crash would; ``start()`` brings it back."""
        with self._lock:
            if self._proc is not None:
                self._proc.kill()
                self._proc.wait()
            self._cleanup()

    def ensure_running(self) -> None:
        """Raise EmulatorError, with the last log lines, if the server is not running."""
        if self._proc is None:
            raise EmulatorError(f"{self.kind} is not running: call start() first")
        code = self._proc.poll()
        if code is not None:
            raise EmulatorError(
                f"{self.kind} at {self.endpoint_url} exited with code {code}; its last log "
                f"lines:\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 30) -> str:
        path = self.log_path
        if path is None or not path.exists():
            return "(no log)"
        text = path.read_bytes()[-65536:].decode("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.endpoint_url if self._port is not None else "not started"
        state = "running" if self.running else "stopped"
        return f"<{type(self).__name__} {where} {state}>"

    # -- internals --------------------------------------------------------------------------

    def _launch(self) -> None:
        self._workdir = Path(tempfile.mkdtemp(prefix=f"{self.kind}-"))
        log_path = self.log_path
        assert log_path is not None
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = log_path.open("ab")
        LOG.debug("starting %s: %s", self.kind, self._command())
        self._proc = subprocess.Popen(  # noqa: S603 - fixed argument list, no shell
            self._command(),
            env={**os.environ, **self._environment()},
            cwd=self._workdir,
            stdin=subprocess.PIPE,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            # Out of the terminal's process group: Ctrl-C goes to us, and we stop the server.
            start_new_session=True,
        )

    def _wait_until_ready(self) -> None:
        """Poll ListStreams until the server answers; fail with its log if it dies or hangs."""
        from botocore.exceptions import BotoCoreError, ClientError

        assert self._proc is not None
        deadline = time.monotonic() + self._startup_timeout
        config = self.client_config(connect_timeout=0.5, read_timeout=2.0)
        probe = create_botocore_client(config, "kinesis", max_attempts=1)
        try:
            while True:
                code = self._proc.poll()
                if code is not None:
                    tail = self.log_tail()
                    if any(marker in tail.lower() for marker in _PORT_IN_USE):
                        raise _PortInUse(tail)
                    raise EmulatorError(
                        f"{self.kind} exited with code {code} while starting; its last log "
                        f"lines:\n{tail}"
                    )
                try:
                    probe.list_streams(Limit=1)
                    return
                except ClientError:
                    return  # it answered: ready, even if it did not like the request
                except BotoCoreError:
                    pass
                if time.monotonic() > deadline:
                    raise EmulatorError(
                        f"{self.kind} did not answer on {self.endpoint_url} within "
                        f"{self._startup_timeout:g} s; its last log lines:\n{self.log_tail()}"
                    )
                time.sleep(0.05)
        finally:
            probe.close()

    def _end_process(self, proc: subprocess.Popen[bytes] | None) -> None:
        """Close the child's stdin (its guard exits at once), wait, then SIGKILL if needed."""
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(self._stop_timeout)
        except subprocess.TimeoutExpired:
            LOG.warning("%s (pid %s) did not exit in time: killing it", self.kind, proc.pid)
            proc.kill()
            proc.wait()

    def _cleanup(self) -> None:
        with _RUNNING_LOCK:
            _RUNNING.discard(self)
        if self._proc is not None and self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None


class _PortInUse(Exception):
    """The server exited because its port was taken (a race with another program)."""


@atexit.register
def _stop_all() -> None:
    """Stop the servers still running when the interpreter exits."""
    with _RUNNING_LOCK:
        servers = list(_RUNNING)
    for server in servers:
        try:
            server.stop()
        except Exception:
            LOG.exception("could not stop %r at exit", server)
