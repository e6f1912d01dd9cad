"""moto in server mode, in a subprocess: Kinesis and DynamoDB on one loopback port.

A subprocess rather than moto's ThreadedMotoServer: with a busy test process (a producer
aggregating records) the threaded server shares the GIL and served about a third fewer records
per second (measured: 2,000 vs 3,000 records/s in PutRecords), it logs every request to our
stderr, and its backends would be the same objects as an in-process ``mock_aws``. moto is fast
and has DynamoDB (lease tables), but its resharding is wrong (records keep landing on closed
parents after a split): test lineage on kinesis-mock.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

from kinesis_core.client import ClientConfig
from kinesis_core.errors import EmulatorError
from kinesis_core.local._server import LOOPBACK, LocalServer

__all__ = ["MotoServer"]

# Exits at once when stdin closes (the parent stopped us or died); quiets werkzeug's
# one-line-per-request log, which costs time in volume tests; and serves one request at a
# time: moto's Kinesis backend is not thread-safe (two concurrent PutRecords on a shard can
# get the same sequence number and one record is lost), and its server is threaded. moto is
# CPU-bound under one GIL anyway, so the lock costs next to nothing.
_MOTO_GUARD = """\
import logging, os, sys, threading
def _guard():
    sys.stdin.buffer.read()
    os._exit(0)
threading.Thread(target=_guard, daemon=True).start()
logging.getLogger("werkzeug").setLevel(logging.WARNING)
import moto.server
_lock = threading.Lock()
_run_simple = moto.server.run_simple
def _one_at_a_time(app):
    def serve(environ, start_response):
        with _lock:
            return list(app(environ, start_response))
    return serve
def _run_locked(hostname, port, application, *args, **kwargs):
    return _run_simple(hostname, port, _one_at_a_time(application), *args, **kwargs)
moto.server.run_simple = _run_locked
moto.server.main(sys.argv[1:])
"""
_NEEDED = ("moto", "werkzeug", "flask", "flask_cors")


class MotoServer(LocalServer):
    """moto's server on a free loopback port, serving Kinesis and DynamoDB (no persistence)."""

    kind = "moto"

    def _prepare(self) -> None:
        missing = [name for name in _NEEDED if importlib.util.find_spec(name) is None]
        if missing:
            raise EmulatorError(
                f"moto's server mode needs {', '.join(missing)}, which "
                f"{'is' if len(missing) == 1 else 'are'} not installed: "
                'pip install "moto[server]"'
            )

    def _command(self) -> list[str]:
        return [sys.executable, "-c", _MOTO_GUARD, "-H", LOOPBACK, "-p", str(self.port)]

    def client_config(self, **overrides: Any) -> ClientConfig:
        """A ClientConfig with both the Kinesis and the DynamoDB endpoint on this server."""
        overrides.setdefault("dynamodb_endpoint_url", self.endpoint_url)
        return super().client_config(**overrides)

    def client_environment(self) -> dict[str, str]:
        """The AWS variables for this server, DynamoDB's endpoint included."""
        return {**super().client_environment(), "AWS_ENDPOINT_URL_DYNAMODB": self.endpoint_url}
