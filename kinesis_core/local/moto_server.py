"""moto in server mode, in a subprocess: Kinesis and DynamoDB on one loopback port.

A subprocess rather than moto's ThreadedMotoServer: with a busy test process (a producer
aggregating records) the threaded server shares the GIL and serves fewer records per second,
it logs every request to our stderr, and its backends would be the same objects as an
in-process ``mock_aws``. moto is fast
and has DynamoDB (lease tables), but its resharding is wrong (records keep landing on closed
parents after a split): test lineage on kinesis-mock.

Not moto's own server, werkzeug's development server, either: that one closes the connection
after every answer, so each call opens a new one. The child (:mod:`._moto_child`) serves moto's
application on aiohttp with connections kept open, as AWS keeps them, one request at a time.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import kinesis_core
from kinesis_core.aws.config import ClientConfig
from kinesis_core.errors import EmulatorError
from kinesis_core.local._server import LOOPBACK, LocalServer

__all__ = ["MotoServer"]

# The child runs kinesis_core.local._moto_child from the package this process uses.
_CHILD = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from kinesis_core.local._moto_child import main; main(sys.argv[1:])"
)
_PACKAGE_ROOT = str(Path(kinesis_core.__file__).resolve().parent.parent)
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
        return [sys.executable, "-c", _CHILD, _PACKAGE_ROOT, LOOPBACK, str(self.port)]

    def client_config(self, **overrides: Any) -> ClientConfig:
        """A ClientConfig with both the Kinesis and the DynamoDB endpoint on this server."""
        overrides.setdefault("dynamodb_endpoint_url", self.endpoint_url)
        return super().client_config(**overrides)

    def client_environment(self) -> dict[str, str]:
        """The AWS variables for this server, DynamoDB's endpoint included."""
        return {**super().client_environment(), "AWS_ENDPOINT_URL_DYNAMODB": self.endpoint_url}
